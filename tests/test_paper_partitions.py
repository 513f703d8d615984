"""The papers' partitions as workflow artifacts: the declared config is valid, and a paper
split is built by Snakemake from data in the real on-disk format (MNIST IDX files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from snakemake.utils import validate

from fedbench.config.cells import expand_partitions
from fedbench.planning.validate import check_config
from conftest import coloured_pixels
from test_loaders import MNIST_NAMES, write_mnist
from test_workflow import REPO, snakemake, write_config

PAPERS = REPO / "config" / "partitions" / "papers.yaml"


def merged_config(*files: Path) -> dict:
    """The config Snakemake sees: config/config.yaml updated by ``files`` (top-level keys replace)."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for path in files:
        for key, value in yaml.safe_load(path.read_text()).items():
            config[key] = {**config[key], **value} if isinstance(value, dict) and key in config else value
    return config


def test_paper_partitions_config_is_valid_and_complete():
    config = merged_config(PAPERS)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    check_config(config)
    built = {(d, p) for d, p, _ in expand_partitions(config)}
    for pair in [("cifar100", "femam_ml3.6.11"), ("tiny_imagenet", "femam_cluster140"), ("cifar10", "fedmr_dir0.1"),
                 ("mnist", "pfedmt_mnist"), ("mnist_flt", "flt_s1"), ("emnist_balanced", "flt_s4_m2400")]:
        assert pair in built


def flt_config(data_root: Path) -> dict:
    return {
        "data_root": str(data_root),
        "seeds": [0],
        "datasets": {"mnist_flt": {"source": "mnist", "normalize": "none"}},
        "partitions": {
            "flt_s1_small": {"kind": "flt_scenario1", "num_clients": 10, "teams": {"count": 2}},
        },
        "partition_grid": [{"datasets": ["mnist_flt"], "partitions": ["flt_s1_small"]}],
    }


def test_flt_scenario1_built_from_idx_files_by_the_workflow(tmp_path):
    labels = write_mnist(tmp_path / "data" / "MNIST" / "raw", MNIST_NAMES, 200, 50, compress=True)
    test_labels = labels[MNIST_NAMES[3]]
    configfile = write_config(tmp_path / "flt.yaml", flt_config(tmp_path / "data"))
    relative = "results/partitions/mnist_flt/flt_s1_small/seed0"
    snakemake(tmp_path, "--cores", "1", f"{relative}.npz", f"{relative}.png", configfile=configfile)
    stem = tmp_path / relative

    summary = json.loads(stem.with_suffix(".json").read_text())
    assert summary["num_clients"] == 10 and summary["shared_parts"] == ["test"]
    assert len(summary["content_hash"]) == 64
    clusters = np.array(summary["groups"]["cluster"])
    assert sorted(np.bincount(clusters)) == [2] * 5 and summary["groups"]["team"] == [0] * 5 + [1] * 5
    train_counts = np.array(summary["train_class_counts"])
    test_counts = np.array(summary["test_class_counts"])
    assert train_counts.sum() == 200  # 'even' sampling uses every training image once
    assert summary["train_client_sizes"] == [20] * 10
    for c in range(5):
        members = np.flatnonzero(clusters == c)
        labels_of_cluster = np.flatnonzero(train_counts[members].sum(0))
        assert len(labels_of_cluster) == 2
        # every client of the cluster is tested on all test images of the cluster's two labels
        expected = np.bincount(test_labels, minlength=10) * np.isin(np.arange(10), labels_of_cluster)
        assert all((test_counts[k] == expected).all() for k in members)
    assert coloured_pixels(stem.with_suffix(".png")) > 1000  # the heatmap's cells are painted


def test_missing_dataset_stops_planning_and_with_check_data_false_fails_the_job(tmp_path):
    """Planning names what to put where, in one line, and writes nothing; on a cluster whose compute
    nodes see other disks (``check_data: false``) it plans, and the job fails with the same message."""
    configfile = write_config(tmp_path / "flt.yaml", flt_config(tmp_path / "empty"))
    target = "results/partitions/mnist_flt/flt_s1_small/seed0.npz"
    before = sorted(p for p in tmp_path.rglob("*") if ".snakemake" not in p.parts)
    process = snakemake(tmp_path, "-n", target, configfile=configfile, check=False)
    assert process.returncode != 0
    refused = [line for line in process.stdout.splitlines() if "Invalid fedbench config" in line]
    assert len(refused) == 1 and refused[0].startswith("Invalid fedbench config: datasets.mnist_flt: dataset 'mnist' not found"), \
        process.stdout[-3000:]
    message = refused[0].removeprefix("Invalid fedbench config: datasets.mnist_flt: ").split("; to run only the cells")[0]
    assert str(tmp_path / "empty" / "MNIST" / "raw") in message and "train-images-idx3-ubyte" in message
    assert sorted(p for p in tmp_path.rglob("*") if ".snakemake" not in p.parts) == before

    process = snakemake(tmp_path, "--cores", "1", target, "--config", "check_data=False", configfile=configfile, check=False)
    assert process.returncode != 0
    log = (tmp_path / "results" / "logs" / "partitions" / "mnist_flt" / "flt_s1_small" / "seed0.log").read_text()
    assert message in log
    assert not (tmp_path / target).exists()
