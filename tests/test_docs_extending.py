"""docs/extending.md cannot rot: its Python blocks run, in order, as one module (the method, a dataset
source, a partitioner, a model, then the contract over all four); its method is the worked example's
module, verbatim; its full config validates with the page's builders registered."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import yaml

from fedbench.planning.validate import validate_config
from fedbench.registry.plugins import scratch_registries

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "extending.md"
EXAMPLE_MODULE = REPO / "examples" / "fedbench_fedavgm" / "src" / "fedbench_fedavgm" / "fedavgm.py"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(), flags=re.M | re.S)


def test_the_pages_method_is_the_worked_examples_module():
    assert blocks("python")[0] == EXAMPLE_MODULE.read_text()


def test_the_pages_python_runs_and_its_config_validates(capsys):
    module = types.ModuleType("extending_page")
    with scratch_registries():
        sys.modules[module.__name__] = module  # dataclasses and type hints resolve through sys.modules
        try:
            for block in blocks("python"):
                exec(compile(block, str(PAGE), "exec"), module.__dict__)
            full = [yaml.safe_load(b) for b in blocks("yaml") if "experiments:" in b]
            assert len(full) == 1
            validate_config({k: v for k, v in full[0].items() if k != "plugins"})
        finally:
            del sys.modules[module.__name__]
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"fedavgm: {p}: pass" for p in ("deterministic", "resume", "checkpoint", "test_rows")] + [
        "fedavgm: ignored_training: pass (declares none)", "fedavgm: scoring: pass", "fedavgm: workload: pass"]
