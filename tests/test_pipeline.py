"""One cell end to end through the library: outputs, protocol, determinism."""

import json

import pandas as pd
import pytest

from fedbench.config import Cell, check_config
from fedbench.pipeline import build_partition, run_cell

CONFIG = {
    "results": "unused",
    "device": "cpu",
    "seeds": [0],
    "datasets": {"digits": {"source": "digits"}},
    "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 5, "test_fraction": 0.25}},
    "models": {"mlp": {"arch": "mlp", "hidden": [16]}},
    "algorithms": {"fedavg_plus": {"method": "fedavg_plus", "finetune_epochs": 1}, "local": {"method": "local"}},
    "experiments": {
        "tiny": {
            "protocol": "mean_client_last",
            "training": {"rounds": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.1, "momentum": 0.5,
                         "participation": 0.6, "eval_every": 2},
            "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["fedavg_plus", "local"]}],
        }
    },
}


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition")
    check_config(CONFIG)
    build_partition(CONFIG, "digits", "dir", 0, root / "p.npz", root / "p.json")
    return root / "p.npz"


def numbers(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("final", "global", "hyperparameters", "num_clients", "seed")}


@pytest.mark.parametrize("algorithm", ["fedavg_plus", "local"])
def test_same_seed_same_numbers(tmp_path, partition, algorithm):
    cell = Cell("tiny", "digits", "dir", "mlp", algorithm, 0)
    first = run_cell(CONFIG, cell, partition, tmp_path / "a")
    second = run_cell(CONFIG, cell, partition, tmp_path / "b")
    assert numbers(first) == numbers(second)
    for name in ("history.csv", "clients.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / name), pd.read_csv(tmp_path / "b" / name))


def test_outputs_describe_the_run(tmp_path, partition):
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg_plus", 0)
    run_cell(CONFIG, cell, partition, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    history = pd.read_csv(tmp_path / "history.csv")
    clients = pd.read_csv(tmp_path / "clients.csv")
    assert list(history["round"]) == [2, 4]
    assert metrics["final"]["round"] == 4
    assert metrics["final"]["accuracy"] == pytest.approx(history["acc_mean"].iloc[-1])
    assert metrics["final"]["accuracy"] == pytest.approx(clients["accuracy"].mean())
    assert metrics["final"]["variance"] == pytest.approx(clients["accuracy"].var(ddof=0))
    assert 0.3 < metrics["final"]["accuracy"] <= 1.0
    assert metrics["final"]["train_accuracy"] == pytest.approx(history["train_acc_mean"].iloc[-1])
    assert metrics["hyperparameters"]["training"]["participation"] == 0.6
    assert metrics["device"] == "cpu" and metrics["wall_time_s"] > 0
    assert metrics["peak_memory"]["peak_host_rss_mb"] > 0
    assert len(clients) == 5 and clients["test_samples"].sum() > 0


def test_train_scores_only_where_asked(tmp_path, partition):
    """train_eval_every: training-data scores at its multiples and the last round, NaN elsewhere;
    the pooled training losses are the per-row mean over all clients' training rows."""
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["tiny"]["training"].update(rounds=5, eval_every=1, train_eval_every=2)
    run_cell(config, Cell("tiny", "digits", "dir", "mlp", "fedavg_plus", 0), partition, tmp_path)
    history = pd.read_csv(tmp_path / "history.csv").set_index("round")
    scored = history["train_loss_pooled"].notna()
    assert list(history.index[scored]) == [2, 4, 5]
    assert history["global_train_loss"].notna().tolist() == scored.tolist()
    assert history["acc_pooled"].notna().all()
