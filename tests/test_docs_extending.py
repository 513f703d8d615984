"""docs/extending.md cannot rot: its Python blocks run, in order, as one module (the method, a dataset
source, a partitioner, a model, then the contract over all four); its method is the worked example's
module, verbatim; its full config validates with the page's builders registered; its tables of packages and
of moved modules are the package's own (each package's docstring layer, ``fedbench.util.moved.MOVED``)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import ast

import yaml

from fedbench.planning.validate import validate_config
from fedbench.util.moved import MOVED
from fedbench.registry.plugins import scratch_registries

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "extending.md"
EXAMPLE_MODULE = REPO / "examples" / "fedbench_fedavgm" / "src" / "fedbench_fedavgm" / "fedavgm.py"


def section_table(heading: str) -> list[list[str]]:
    """The rows (cells stripped of backticks) of the first table under ``## heading``."""
    section = PAGE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows[2:]]


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


def test_the_pages_package_layout_is_every_package_at_its_docstrings_layer():
    layers = {}
    for init in sorted((REPO / "fedbench").glob("*/__init__.py")):
        layer = re.match(r"Layer (\d+),", ast.get_docstring(ast.parse(init.read_text())) or "")
        assert layer, f"{init}: the docstring names no layer"
        layers[f"fedbench.{init.parent.name}"] = int(layer.group(1))
    assert {row[0]: int(row[1]) for row in section_table("Package layout")} == layers


def test_the_pages_moved_modules_are_the_import_hooks_table():
    assert dict(section_table("Moved modules")) == MOVED
