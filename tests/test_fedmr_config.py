"""The authors' index-file partitions, the FedMR protocols, and FedMR's bad input stopped before any job."""

import json

import numpy as np
import pytest

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import check_config
from fedbench.data import partition_dataset
from fedbench.data.partitions_index_file import read_index_file
from fedbench.data.sources import ArrayDataset
from fedbench.registry.protocols import PROTOCOLS

import pandas as pd


def image_dataset(train: int = 30, test: int = 10) -> ArrayDataset:
    """Train rows first, then test rows (as the image sources pool them); label = row % 3."""
    n = train + test
    mask = np.zeros(n, dtype=bool)
    mask[train:] = True
    return ArrayDataset(x=np.arange(n, dtype=np.float32)[:, None], y=np.arange(n) % 3, num_classes=3, test_mask=mask)


def write_index(path, clients: dict) -> str:
    path.write_text(json.dumps({"train_data": clients, "test_data": {}}))
    return str(path)


def test_index_file_partition_gives_the_authors_clients(tmp_path):
    """Client keys in numeric order ("10" after "2"); indices into the training pool; global test set."""
    clients = {"0": [5, 1, 7], "2": [0, 29], "10": [3, 4, 6, 2]}
    path = write_index(tmp_path / "split.json", clients)
    part = partition_dataset(image_dataset(), {"kind": "index_file", "path": path, "test_set": "global"}, seed=0)
    assert [c.tolist() for c in part.train] == [[1, 5, 7], [0, 29], [2, 3, 4, 6]]
    assert all(t.tolist() == list(range(30, 40)) for t in part.test)
    # a generated file of 5 clients x 6 disjoint indices covers the pool exactly once
    perm = np.random.default_rng(0).permutation(30)
    full = {str(k): perm[6 * k : 6 * k + 6].tolist() for k in range(5)}
    part = partition_dataset(image_dataset(), {"kind": "index_file", "path": write_index(tmp_path / "full.json", full), "test_set": "global"}, 1)
    assert sorted(np.concatenate(part.train).tolist()) == list(range(30))


@pytest.mark.parametrize(
    "clients, message",
    [
        ({"0": [1, 2], "1": [30]}, "client 1: index 30 out of range (must lie in [0, 30))"),
        ({"0": [1, -1]}, "client 0: index -1 out of range"),
        ({"0": [1, 2], "1": [3, 2]}, "client 1: index 2 duplicated (also in client 0)"),
        ({"0": [4, 4]}, "client 0: index 4 duplicated (twice in its list)"),
        ({"0": [1.5]}, "indices must be a list of integers"),
    ],
)
def test_bad_index_files_are_refused(tmp_path, clients, message):
    path = write_index(tmp_path / "bad.json", clients)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        partition_dataset(image_dataset(), {"kind": "index_file", "path": path, "test_set": "global"}, seed=0)


def test_missing_key_and_file_are_named(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"users": {}}))
    with pytest.raises(ValueError, match="has no key 'train_data'"):
        read_index_file(tmp_path / "x.json")
    with pytest.raises(ValueError, match="does not exist"):
        read_index_file(tmp_path / "nope.json")


def fedmr_config(tmp_path, **changes) -> dict:
    config = {
        "results": "results", "device": "cpu", "seeds": [0],
        "datasets": {"digits": {"source": "digits", "test_fraction": 0.25}},
        "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 6, "test_set": "global"}},
        "models": {"mlr": {"arch": "mlr"}},
        "algorithms": {"fedmr": {"method": "fedmr", "first_stage_rounds": 2}},
        "experiments": {"t": {"protocol": "fedmr", "training": {"rounds": 4, "participation": 0.5, "eval_every": 2},
                              "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlr"], "algorithms": ["fedmr"]}]}},
    }
    for key, value in changes.items():
        section, name, field = key.split("__")
        config[section][name][field] = value
    return config


def test_fedmr_limits_are_checked_in_the_config(tmp_path):
    check_config(fedmr_config(tmp_path))
    with pytest.raises(ConfigError, match=r"algorithms.fedmr.first_stage_rounds = 5 exceeds the experiment's rounds \(4\)"):
        check_config(fedmr_config(tmp_path, algorithms__fedmr__first_stage_rounds=5))
    with pytest.raises(ConfigError, match=r"algorithms.fedmr.models = 7 intermediate models exceed the 6 clients of partitions.dir"):
        check_config(fedmr_config(tmp_path, algorithms__fedmr__models=7))
    bad = write_index(tmp_path / "dup.json", {"0": [1, 2], "1": [2]})
    config = fedmr_config(tmp_path)
    config["partitions"]["dir"] = {"kind": "index_file", "path": bad, "test_set": "global"}
    with pytest.raises(ConfigError, match="partitions.dir: index_file: .* index 2 duplicated"):
        check_config(config)
    config["partitions"]["dir"]["path"] = write_index(tmp_path / "two.json", {"0": [1], "1": [2]})
    config["algorithms"]["fedmr"]["models"] = 3
    with pytest.raises(ConfigError, match="exceed the 2 clients of partitions.dir"):
        check_config(config)


def test_bad_fedmr_config_stops_snakemake_before_any_job(tmp_path):
    from test_workflow import snakemake, write_config

    config = fedmr_config(tmp_path, algorithms__fedmr__first_stage_rounds=9)
    process = snakemake(tmp_path, "-n", configfile=write_config(tmp_path / "bad.yaml", config), check=False)
    assert process.returncode != 0
    assert "first_stage_rounds = 9 exceeds" in process.stdout, process.stdout[-3000:]
    assert not (tmp_path / "results").exists()


def test_fedmr_protocols_report_the_global_model_last_or_best():
    history = pd.DataFrame({"round": [10, 20, 30], "global_acc": [0.5, 0.7, 0.6], "global_f1": [0.4, 0.6, 0.5],
                            "global_loss": [1.0, 0.8, 0.9], "acc_mean": [0.1, 0.1, 0.1]})
    assert PROTOCOLS["fedmr"].final(history)["round"] == 30 and PROTOCOLS["fedmr"].final(history)["accuracy"] == 0.6
    assert PROTOCOLS["fedmr_best"].final(history)["round"] == 20 and PROTOCOLS["fedmr_best"].final(history)["accuracy"] == 0.7
