"""Bad configs stop at planning time (``validate_config``, what the Snakefile runs before any
job) with one line naming the offending entry; values are checked from builders' signatures."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Annotated, Literal

import pytest
import yaml

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import validate_config
from fedbench.registry.core import Range, Registry
from fedbench.config.files import ConfigFileError, load_yaml_strict

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "tests" / "data" / "tiny_config.yaml").read_text())

# the tiny config plus entries of other builders (declared, not in the grid: still checked)
BASE = copy.deepcopy(TINY)
BASE["models"]["mlp"] = {"arch": "mlp", "hidden": [8]}
BASE["algorithms"].update(
    fedprox={"method": "fedprox", "mu": 0.01},
    perfedavg={"method": "perfedavg"},
    pfedme={"method": "pfedme"},
)
LINK = {"method": "FedAvg", "setting": "M=100; C=5; rho=0.2; E=1; T=100"}
PUBLISHED = {"paper": "flt", "table": "Table 1", "dataset": "MNIST", "partition": "scenario1", "rows": {"fedavg": LINK}}


def edited(changes: dict) -> dict:
    """BASE with ``{"a.b.c": value}`` set (a value of ``DELETE`` removes the key)."""
    config = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("/")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return config


DELETE = object()


def test_base_config_passes():
    validate_config(BASE)
    validate_config(edited({"experiments/tiny/published": PUBLISHED}))


def assert_stops(config: dict, entry: str, pattern: str, error=ValueError):
    """validate_config raises one line that names ``entry`` and matches ``pattern``."""
    with pytest.raises(error) as caught:
        validate_config(config)
    message = str(caught.value)
    assert "\n" not in message, message
    assert entry in message, message
    assert __import__("re").search(pattern, message), message


# ---- 1. values, not only names ---------------------------------------------------------------

VALUE_CASES = [
    ({"algorithms/fedprox/mu": "big"}, "algorithms.fedprox.mu", r"string 'big'.*expected a number"),
    ({"algorithms/fedprox/mu": -1}, "algorithms.fedprox.mu", r"must be >= 0"),
    ({"algorithms/fedprox/mu": math.inf}, "algorithms.fedprox.mu", r"not a finite number"),
    ({"models/mlp/hidden": "64"}, "models.mlp.hidden", r"expected a list"),
    ({"models/mlp/hidden": [0]}, "models.mlp.hidden", r"must be >= 1"),
    ({"datasets/digits/size": "8"}, "datasets.digits.size", r"expected an integer"),
    ({"algorithms/fedavg/local_steps": 2.5}, "algorithms.fedavg.local_steps", r"expected an integer or null"),
    ({"algorithms/perfedavg/adaptation": "codes"}, "algorithms.perfedavg.adaptation", r"one of 'paper', 'code'"),
    ({"partitions/dir0.5/alpha": DELETE}, "partitions.dir0.5", r"needs 'alpha'"),
    ({"partitions/dir0.5/alpha": 0}, "partitions.dir0.5.alpha", r"less than or equal to the minimum of 0"),
    ({"partitions/iid/num_clients": "4"}, "partitions.iid.num_clients", r"not of type 'integer'"),
    ({"experiments/tiny/training/lr": 0}, "experiments.tiny.training.lr", r"minimum of 0"),
    ({"experiments/tiny/training/lr": "1e-3"}, "experiments.tiny.training.lr", r"not of type 'number'"),
    ({"experiments/tiny/training/lr": math.nan}, "experiments.tiny.training.lr", r"not a finite number"),
    ({"experiments/tiny/training/participation": 1.5}, "experiments.tiny.training.participation", r"maximum of 1"),
    ({"experiments/tiny/training/rounds": -3}, "experiments.tiny.training.rounds", r"minimum of 1"),
    ({"seeds": [0.5]}, "seeds[0]", r"not of type 'integer'"),
    # a training setting an algorithm of the grid never reads (local_epochs is replaced by the
    # entry's own local_steps; momentum 0.5 is silently dropped)
    ({"algorithms/fedavg/local_steps": 5}, "experiments.tiny.training.momentum",
     r"'fedavg'.*local_steps=5 runs that many plain SGD minibatch steps, without momentum"),
    ({"experiments/tiny/grid/0/algorithms": ["pfedme"]}, "experiments.tiny.training.local_epochs",
     r"'pfedme'.*not epochs"),
    ({"experiments/tiny/grid/0/algorithms": ["perfedavg"], "experiments/tiny/training/local_epochs": DELETE},
     "experiments.tiny.training.momentum", r"'perfedavg'.*without momentum"),
]


@pytest.mark.parametrize("changes, entry, pattern", VALUE_CASES, ids=[c[1] + ":" + c[2][:20] for c in VALUE_CASES])
def test_bad_values_stop_before_any_job(changes, entry, pattern):
    assert_stops(edited(changes), entry, pattern)


def test_builder_without_bounds_is_still_type_checked():
    """A builder added with plain hints and defaults gets type checks; Annotated ranges apply too."""
    registry = Registry("thing")

    @registry.register("plain")
    def plain(*, rate: float = 0.1, steps: int | None = None, mode: Literal["a", "b"] = "a", flag: bool = False):
        return None

    @registry.register("ranged", bounds={"steps": ">= 1", "kind": ("x", "y")})
    def ranged(*, share: Annotated[float, Range(min=0, max=1, min_inclusive=False)] = 0.5, steps: int = 1, kind: str = "x"):
        return None

    registry.check_params("plain", {"rate": 3, "steps": None, "mode": "b", "flag": True}, "things.p")
    for params, problem in [
        ({"rate": "3"}, "expected a number"),
        ({"steps": 1.5}, "expected an integer or null"),
        ({"mode": "c"}, "expected one of 'a', 'b'"),
        ({"flag": 1}, "expected true or false"),
    ]:
        with pytest.raises(ValueError, match=f"things.p.{next(iter(params))}: .*{problem}"):
            registry.check_params("plain", params, "things.p")
    registry.check_params("ranged", {"share": 1.0, "steps": 3, "kind": "y"}, "things.r")
    for params, problem in [({"share": 0}, "must be > 0 and <= 1"), ({"steps": 0}, "must be >= 1"), ({"kind": "z"}, "one of 'x', 'y'")]:
        with pytest.raises(ValueError, match=problem):
            registry.check_params("ranged", params, "things.r")
    assert Range.parse("(0, 1]") == Range(min=0, max=1, min_inclusive=False)
    assert Range.parse("[1, inf)") == Range(min=1)


# ---- 2. feasibility before jobs ----------------------------------------------------------------

FEASIBILITY_CASES = [
    ({"partitions/iid/num_clients": 5000}, "partitions.iid (kind 'iid') on datasets.digits", r"5000 clients for the dataset's 1797 samples"),
    ({"partitions/iid/kind": "natural", "partitions/iid/num_clients": DELETE, "partitions/iid/test_fraction": DELETE},
     "partitions.iid (kind 'natural') on datasets.digits", r"needs a dataset whose samples have users"),
    ({"partitions/iid/teams": {"count": 9}}, "partitions.iid", r"teams.count 9 exceeds the 4 clients"),
    ({"partitions/iid/test_set": "global"}, "partitions.iid", r"test_set: global needs a dataset with an official test set"),
    ({"partitions/iid": {"kind": "flt_scenario1", "num_clients": 10, "num_clusters": 3, "labels_per_cluster": 2},
      "datasets/digits/test_fraction": 0.25}, "partitions.iid (kind 'flt_scenario1')", r"need exactly 6 classes; the dataset has 10"),
    ({"partitions/iid": {"kind": "flt_scenario2", "num_clients": 10, "num_clusters": 5}},
     "partitions.iid (kind 'flt_scenario2')", r"official test set"),
    ({"partitions/iid": {"kind": "flt_structured_femnist", "num_clients": 10, "num_clusters": 3, "classes_per_cluster": 2},
      "datasets/digits/test_fraction": 0.25}, "partitions.iid", r"num_clients \(10\) must be a multiple of num_clusters \(3\)"),
    ({"partitions/iid": {"kind": "femam_cluster", "classes_per_cluster": 11, "num_clusters": 2, "num_clients": 4}},
     "partitions.iid (kind 'femam_cluster')", r"classes_per_cluster <= 10"),
    ({"partitions/iid": {"kind": "pfedme_mnist_labels", "num_users": 4, "num_labels": 12}}, "partitions.iid", r"num_labels 12 exceeds the dataset's 10"),
    ({"datasets/digits/classes": [0, 1, 12]}, "datasets.digits.classes", r"\[12\] not among the dataset's 10 classes"),
    # an encoder named by an algorithm but not declared
    ({"algorithms/flt": {"method": "flt", "encoder": "enc9"}}, "algorithms.flt.encoder", r"'enc9' is not declared under 'encoders'"),
]


@pytest.mark.parametrize("changes, entry, pattern", FEASIBILITY_CASES, ids=[c[2][:30] for c in FEASIBILITY_CASES])
def test_infeasible_partitions_stop_before_any_job(changes, entry, pattern):
    assert_stops(edited(changes), entry, pattern, ConfigError)


# ---- 3. published links resolved first --------------------------------------------------------

PUBLISHED_CASES = [
    ("paper", "flt2", "experiments.tiny.published.paper", r"'flt2' matches no row.*valid choices: .*femam.*flt"),
    ("table", "Table 99", "experiments.tiny.published.table", r"valid choices: Table 1, .*Table 2"),
    ("partition", "scenario9", "experiments.tiny.published.partition", r"valid choices: .*scenario1"),
    ("method", "FedAvgg", "experiments.tiny.published.rows.fedavg.method", r"valid choices: .*FedAvg"),
    ("setting", "T=1", "experiments.tiny.published.rows.fedavg.setting", r"'T=1' matches no row"),
]


@pytest.mark.parametrize("key, value, entry, pattern", PUBLISHED_CASES, ids=[c[0] for c in PUBLISHED_CASES])
def test_published_links_are_resolved_before_any_job(key, value, entry, pattern):
    block = copy.deepcopy(PUBLISHED)
    if key in ("method", "setting"):
        block["rows"]["fedavg"][key] = value
    else:
        block[key] = value
    assert_stops(edited({"experiments/tiny/published": block}), entry, pattern, ConfigError)


# ---- 4. no silent duplicates --------------------------------------------------------------------


def test_repeated_yaml_key_names_the_key_and_both_lines(tmp_path):
    text = (REPO / "tests" / "data" / "tiny_config.yaml").read_text()
    text = text.replace("  fedavg:\n    method: fedavg\n", "  fedavg:\n    method: fedavg\n  fedavg:\n    method: fedprox\n")
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if line == "  fedavg:"]
    with pytest.raises(ConfigFileError, match=rf"key 'fedavg' appears twice in one mapping \(lines {lines[0]} and {lines[1]}\)"):
        validate_config(yaml.safe_load(text), [path])


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {rounds: 5, lr: 0.1}\nother:\n  <<: *b\n  lr: 0.2\n")
    assert load_yaml_strict(path)["other"] == {"rounds": 5, "lr": 0.2}


def test_two_grid_blocks_with_the_same_cell_are_rejected():
    config = copy.deepcopy(BASE)
    block = config["experiments"]["tiny"]["grid"][0]
    config["experiments"]["tiny"]["grid"].append({**block, "partitions": ["dir0.5"], "algorithms": ["fedavg"]})
    assert_stops(config, "experiments.tiny.grid[0] and grid[1]", r"both produce the cell digits/dir0.5/mlr/fedavg")


# ---- 5. short messages ----------------------------------------------------------------------------

TYPO_CASES = [
    ({"experiment": "experiments"}, None, r"unknown key 'experiment' at top level; did you mean 'experiments'\?"),
    ({"trainng": "training"}, "experiments/tiny", r"unknown key 'trainng' at 'experiments.tiny'; did you mean 'training'\?"),
    ({"eval_evry": "eval_every"}, "experiments/tiny/training", r"unknown key 'eval_evry' .*did you mean 'eval_every'\?"),
]


@pytest.mark.parametrize("rename, under, pattern", TYPO_CASES, ids=[next(iter(c[0])) for c in TYPO_CASES])
def test_typo_gives_one_line_with_a_suggestion(rename, under, pattern):
    config = copy.deepcopy(BASE)
    node = config
    for key in (under.split("/") if under else []):
        node = node[key]
    (wrong, right), = rename.items()
    node[wrong] = node.pop(right)
    with pytest.raises(ConfigFileError) as caught:
        validate_config(config)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    assert __import__("re").search(pattern, str(caught.value)), str(caught.value)
    assert "Failed validating" in caught.value.detail  # the schema's full report, for the log
