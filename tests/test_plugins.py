"""Plugins (:mod:`fedbench.registry.plugins`): an algorithm from another package, named in the config or found
by its installed entry point, is checked like a built-in, runs, is tabled and hashed into its runs'
provenance; a broken plugin stops planning with one line naming it.  The worked example
(``examples/fedbench_fedavgm``) is loaded from its source tree and run."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import tiny_digits_config

from fedbench.algorithms import ALGORITHMS
from fedbench.config.cells import Cell, ConfigError, expand_cells
from fedbench.extension.contract import Case, check_algorithm
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell
from fedbench.planning.validate import validate_config
from fedbench.registry.plugins import installed, load_plugins, scratch_registries
from fedbench.results.tables import load_metrics, summarise
from fedbench.planning.stale import stale_outputs
from fedbench.config.files import load_yaml_strict

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedbench_fedavgm"

METHOD = '''
from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS
from fedbench.algorithms.fedavg import FedAvg
from {package}.helper import DEFAULT_PULL


@dataclass(frozen=True)
class Pulled(FedAvg):
    """FedProx under another name: a throw-away plugin."""


@ALGORITHMS.register("{name}", bounds={{"pull": ">= 0"}})
def pulled(*, pull: float = DEFAULT_PULL) -> Pulled:
    return Pulled(prox_mu=pull)
'''


def write_plugin(root: Path, package: str, name: str, method: str = METHOD) -> str:
    """A plugin package ``package`` under ``root`` whose module ``method`` registers algorithm ``name``."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "helper.py").write_text("DEFAULT_PULL = 0.1\n")
    (root / package / "method.py").write_text(method.format(package=package, name=name))
    return f"{package}.method"


def plugin_config(results: Path, plugins: list[str], algorithm: dict, **training) -> dict:
    config = tiny_digits_config(rounds=1, batch_size=16, lr=0.1, **training)
    config["results"] = str(results)
    config["plugins"] = plugins
    config["algorithms"]["mine"] = algorithm
    config["experiments"]["tiny"]["grid"][0]["algorithms"] = ["fedavg", "mine"]
    return config


def run_every_cell(config: dict) -> list[Path]:
    """Every cell of ``config`` trained in this process, written where the workflow writes it."""
    results, written = config["results"], []
    for cell in expand_cells(config):
        stem = cell.partition_stem(results)
        if not Path(f"{stem}.npz").exists():
            Path(stem).parent.mkdir(parents=True, exist_ok=True)
            build_partition(config, cell.dataset, cell.partition, cell.seed, f"{stem}.npz", f"{stem}.json")
        run_cell(cell_job(config, cell), f"{stem}.npz", cell.run_dir(results))
        written.append(Path(cell.run_dir(results)) / "metrics.json")
    return written


def test_a_plugin_named_in_the_config_is_checked_runs_is_tabled_and_goes_stale(tmp_path, monkeypatch):
    """The config's ``plugins`` imports the module before the entries are checked: its parameter's bound
    is enforced like a built-in's; its cell runs and sits in the table beside FedAvg; its run's provenance
    hashes the plugin's module and the helper module of its own package, so editing the helper makes
    exactly the plugin's cell stale."""
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    module = write_plugin(tmp_path / "src", "plugin_alpha", "pulled_alpha")
    with scratch_registries():
        config = plugin_config(tmp_path / "results", [module], {"method": "pulled_alpha", "pull": 0.5})
        validate_config(config)
        bad = plugin_config(tmp_path / "results", [module], {"method": "pulled_alpha", "pull": -1.0})
        with pytest.raises(ConfigError, match=r"^algorithms\.mine\.pull: float -1\.0 is not valid for algorithm "
                                              r"'pulled_alpha': must be >= 0$"):
            validate_config(bad)

        fedavg_run, mine_run = run_every_cell(config)
        table = summarise(load_metrics([fedavg_run, mine_run]))
        assert sorted(table["algorithm"]) == ["fedavg", "mine"]
        files = json.loads(mine_run.read_text())["provenance"]["code_files"]
        assert {"plugin:plugin_alpha/method.py", "plugin:plugin_alpha/helper.py"} <= set(files)
        assert not any("plugin_alpha" in f for f in json.loads(fedavg_run.read_text())["provenance"]["code_files"])

        assert stale_outputs(config) == []
        (tmp_path / "src" / "plugin_alpha" / "helper.py").write_text("DEFAULT_PULL = 0.2\n")
        assert stale_outputs(config) == [(str(mine_run), ["plugin:plugin_alpha/helper.py"])]
    assert "pulled_alpha" not in ALGORITHMS


BROKEN = {
    "misspelt_hook": (METHOD.replace('    """FedProx under another name: a throw-away plugin."""',
                                     "    def cluster(self, fed, state):  # meant: clusters\n        return None"),
                      r"TypeError: algorithm 'pulled_\w+' \(Pulled\) defines 'cluster', which is not a hook; "
                      r"did you mean 'clusters'\?"),
    "bad_bound": (METHOD.replace('"pull": ">= 0"', '"pul": ">= 0"'),
                  r"ValueError: algorithm 'pulled_\w+': bounds for unknown parameters \['pul'\]"),
    "failing_import": ("import a_module_that_is_not_there\n" + METHOD,
                       r"ModuleNotFoundError: No module named 'a_module_that_is_not_there'"),
    "registers_nothing": ("X = 1\n", r"registers nothing: its import must register a builder"),
    "source_without_facts": ('from fedbench.data.sources import DATASETS\n\n\n@DATASETS.register("{name}")\n'
                             "def load(root):\n    return None\n",
                             r"ValueError: dataset source 'pulled_\w+': register it with facts=\.\.\.$"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_plugin_stops_planning_with_one_line_naming_it(kind, tmp_path, monkeypatch):
    """A misspelt hook (left in place, the hook would be switched off silently), a bound on a parameter
    the builder does not have, an import that fails, a module that registers nothing and a dataset
    source without the facts planning sizes cells with: each stops
    validation with one line naming the plugin and the problem, and leaves no half-registered entry."""
    source, problem = BROKEN[kind]
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    module = write_plugin(tmp_path / "src", f"plugin_{kind}", f"pulled_{kind}", source)
    names = ALGORITHMS.names()
    with scratch_registries():
        with pytest.raises(ConfigError) as error:
            validate_config(plugin_config(tmp_path, [module], {"method": "fedavg"}))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"plugins: plugin '{module}' (named in the config's plugins) ")
    assert re.search(problem, message), message
    assert ALGORITHMS.names() == names


def test_an_installed_plugin_is_found_by_its_entry_point(tmp_path, monkeypatch):
    """A package installed with an entry point in the group ``fedbench.plugins`` (here its
    ``.dist-info`` as pip writes it, on sys.path) needs no ``plugins`` key: validation imports it."""
    site = tmp_path / "site"
    module = write_plugin(site, "plugin_beta", "pulled_beta")
    info = site / "plugin_beta-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-beta\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fedbench.plugins]\nbeta = {module}\n")
    monkeypatch.syspath_prepend(str(site))
    assert ("beta", module, "plugin-beta") in installed()
    with scratch_registries():
        validate_config(plugin_config(tmp_path, [], {"method": "pulled_beta"}))
        assert "pulled_beta" in ALGORITHMS
    assert "pulled_beta" not in ALGORITHMS


def test_the_example_plugin_passes_the_contract_and_runs_in_its_grid(tmp_path, monkeypatch):
    """examples/fedbench_fedavgm from its source tree, through the config's ``plugins`` key: its two
    configs validate, it passes the contract, and one round of its tiny grid's dir0.3 cells runs (its
    module hashed by its name in its package, though it lies in this repository)."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    with scratch_registries():
        analogue = load_yaml_strict(EXAMPLE / "config" / "fedmr_analogue.yaml")
        validate_config(analogue)
        config = load_yaml_strict(EXAMPLE / "config" / "tiny.yaml")
        validate_config(config)
        check_algorithm(Case("fedavgm", {"server_momentum": 0.9, "server_lr": 0.1}, plugins=tuple(config["plugins"])),
                        tmp_path / "contract").raise_for_failures()
        config.update(results=str(tmp_path / "results"), seeds=[0], device="cpu")
        config["partitions"] = {"dir0.3": {**config["partitions"]["dir0.3"], "num_clients": 4}}
        config["experiments"]["default"]["training"].update(rounds=1, eval_every=1)
        config["experiments"]["default"]["grid"][0]["partitions"] = ["dir0.3"]
        config.pop("claims")
        runs = run_every_cell(config)
        table = summarise(load_metrics(runs))
        assert sorted(table["algorithm"]) == ["fedavg", "fedavg_plus", "fedavgm"]
        hashed = [set(json.loads(run.read_text())["provenance"]["code_files"]) for run in runs]
        assert ["plugin:fedbench_fedavgm/fedavgm.py" in files for files in hashed] == [False, False, True]  # in the repo too
        assert "fedbench_fedavgm.fedavgm" in load_plugins()
    assert "fedbench_fedavgm.fedavgm" not in sys.modules


def test_the_scaffold_writes_a_plugin_that_imports_registers_and_passes_its_contract(tmp_path, monkeypatch, capsys):
    """``python -m fedbench new algorithm NAME``: the package's entry point names its module, its config
    validates with the plugin loaded, and its own contract test (called as pytest would) passes; the
    contract's command line passes it too.  A name already registered is refused."""
    from fedbench.__main__ import main

    assert main(["new", "algorithm", "scaffolded", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "fedbench_scaffolded"
    assert '[project.entry-points."fedbench.plugins"]\nscaffolded = "fedbench_scaffolded.scaffolded"' in (
        root / "pyproject.toml").read_text()
    monkeypatch.syspath_prepend(str(root / "src"))
    with scratch_registries():
        validate_config(load_yaml_strict(root / "config" / "tiny.yaml"))
        spec = importlib.util.spec_from_file_location("test_scaffolded", root / "tests" / "test_scaffolded.py")
        generated = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(generated)
        generated.test_scaffolded_passes_the_contract(tmp_path / "contract")
        assert main(["contract", "fedbench_scaffolded.scaffolded", "--param", "server_lr=0.5",
                     "--property", "resume"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["scaffolded: resume: pass", "contract: passed (scaffolded)"]
    assert main(["new", "algorithm", "fedavg", "--dir", str(tmp_path)]) == 2
    assert "algorithm 'fedavg' is already registered" in capsys.readouterr().err


@pytest.mark.slow
def test_the_example_plugin_runs_in_the_workflow(tmp_path, monkeypatch):
    """The workflow with the example named in ``plugins`` and importable through PYTHONPATH (as
    docs/extending.md says): planning checks it, the training jobs import it, the table has its row,
    and ``make stale``'s listing sees nothing out of date (about 40 s on 2 cores)."""
    from test_workflow import TINY_CONFIG, snakemake, write_config

    config = load_yaml_strict(TINY_CONFIG)
    config["plugins"] = ["fedbench_fedavgm.fedavgm"]
    config["algorithms"] = {"fedavg": {"method": "fedavg"}, "fedavgm": {"method": "fedavgm", "server_lr": 0.5}}
    config["partitions"] = {"dir0.5": config["partitions"]["dir0.5"]}
    config["experiments"]["tiny"]["training"]["rounds"] = 2
    config["experiments"]["tiny"]["grid"][0].update(partitions=["dir0.5"], algorithms=["fedavg", "fedavgm"])
    config["claims"] = {"fedavgm_beats_fedavg": {"source": "the example's claim (Hsu et al. 2019, Fig. 3)",
                                                 "experiment": "tiny", "better": "fedavgm", "than": "fedavg"}}
    configfile = write_config(tmp_path / "config.yaml", config)
    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLE / 'src'}:{Path(__file__).resolve().parents[1]}")
    snakemake(tmp_path, "--cores", "2", "results/tables/results.csv", "results/tables/default/claims.csv",
              configfile=configfile)
    table = (tmp_path / "results" / "tables" / "results.csv").read_text()
    assert "fedavgm" in table
    claims = pd.read_csv(tmp_path / "results" / "tables" / "default" / "claims.csv")  # the plugin in a claim, read
    assert claims[["claim", "comparison", "n"]].values.tolist() == [["fedavgm_beats_fedavg", "fedavgm − fedavg", 1]]
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    with scratch_registries():
        assert stale_outputs({**config, "results": str(tmp_path / "results")}) == []
