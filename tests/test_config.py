"""Config checks name the problem and list the valid choices."""

import copy
from pathlib import Path

import pytest
import yaml

from fedbench.config.cells import Cell, ConfigError, expand_cells, expand_partitions
from fedbench.planning.validate import check_config

with open(Path(__file__).parents[1] / "config" / "config.yaml") as f:
    DEFAULT = yaml.safe_load(f)


def broken(path: list, value):
    config = copy.deepcopy(DEFAULT)
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return config


def test_default_config_passes():
    check_config(DEFAULT)


@pytest.mark.parametrize("path, value, expected", [
    (["algorithms", "fedavg", "method"], "fedsgd", r"unknown algorithm 'fedsgd'; valid choices: .*fedavg"),
    (["datasets", "digits", "source"], "mnistt", r"unknown dataset source 'mnistt'; valid choices: .*digits"),
    (["partitions", "iid", "kind"], "stripes", r"unknown partition kind 'stripes'; valid choices: .*dirichlet"),
    (["models", "mlp", "arch"], "resnet", r"unknown model architecture 'resnet'"),
    (["experiments", "default", "protocol"], "best", r"unknown evaluation protocol 'best'"),
    (["algorithms", "fedprox", "lambda"], 0.1, r"algorithm 'fedprox' has no parameter 'lambda'; valid parameters: mu"),
    (["partitions", "dir0.3", "beta"], 0.1, r"has no parameter 'beta'; valid parameters: alpha"),
])
def test_bad_names_are_reported_with_choices(path, value, expected):
    with pytest.raises(ConfigError, match=expected):
        check_config(broken(path, value))


def test_grid_must_name_declared_entries():
    config = copy.deepcopy(DEFAULT)
    config["experiments"]["default"]["grid"][0]["algorithms"].append("scaffold")
    with pytest.raises(ConfigError, match=r"grid\[0\].algorithms: 'scaffold' is not declared under 'algorithms'"):
        check_config(config)


def test_cells_expand_the_grid_times_seeds():
    cells = expand_cells(DEFAULT)
    per_seed = sum(
        len(b["datasets"]) * len(b["partitions"]) * len(b["models"]) * len(b["algorithms"])
        for b in DEFAULT["experiments"]["default"]["grid"]
    )
    assert len(cells) == per_seed * len(DEFAULT["seeds"])
    cell = Cell("default", "digits", "dir0.3", "mlp", "fedavg", 2)
    assert cell in cells
    assert cell.run_dir("results") == "results/runs/default/digits/dir0.3/mlp/fedavg/seed2"
    assert cell.partition_stem("results") == "results/partitions/digits/dir0.3/seed2"


def test_partition_grid_adds_partitions_without_cells():
    config = copy.deepcopy(DEFAULT)
    config["partitions"]["iid5"] = {"kind": "iid", "num_clients": 5}
    config["partition_grid"] = [{"datasets": ["digits"], "partitions": ["iid5"]}]
    check_config(config)
    wanted = expand_partitions(config)
    assert {("digits", "iid5", s) for s in config["seeds"]} <= set(wanted)
    assert ("digits", "dir0.3", 0) in wanted  # still every partition the cells need
    config["partition_grid"][0]["partitions"] = ["iid9"]
    with pytest.raises(ConfigError, match=r"partition_grid\[0\].partitions: 'iid9' is not declared"):
        check_config(config)
