"""One cell end to end through the library: outputs, protocol, determinism."""

import json

import pandas as pd
import pytest
import torch

from fedbench.config.cells import Cell
from fedbench.planning.validate import check_config
from fedbench.run.partition_job import build_partition
from fedbench.run.cell import choose_device, run_cell

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
    assert metrics["device_reason"] == "device: cpu (the config's)"
    assert metrics["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert metrics["peak_memory"]["peak_host_rss_mb"] > 0
    assert len(clients) == 5 and clients["test_samples"].sum() > 0


# a stub throughput table: the GPU fast on FLOPs, slow per round (launches, bookkeeping)
GPU_LOSES_SMALL = {"job_overhead_s": 60, "safety_factor": 2.0,
                   "cpu": {"assumed": 1e9, "round_overhead_s": 0.0, "families": {"mlp": {"train": 1e9, "eval": 1e9}}},
                   "cuda": {"assumed": 1e13, "round_overhead_s": 5.0, "families": {"resnet9": {"train": 1e13, "eval": 1e13}}}}


def test_device_auto_trains_where_the_cost_model_says_faster(tmp_path, partition, monkeypatch):
    """``device: auto`` with CUDA: a tiny MLP cell goes to the CPU (4 rounds x 5 s on the GPU), a big
    ResNet-9 cell to the GPU; the choice and its reason go into metrics.json."""
    import fedbench.cost.rates as rates

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(rates, "throughputs", lambda path=None: GPU_LOSES_SMALL)
    config = {**CONFIG, "device": "auto"}
    metrics = run_cell(config, Cell("tiny", "digits", "dir", "mlp", "local", 0), partition, tmp_path)
    assert metrics["device"] == "cpu" and json.loads((tmp_path / "metrics.json").read_text())["device"] == "cpu"
    reason = metrics["device_reason"]
    assert reason.startswith("device auto: the CPU is estimated faster: cpu ") and "vs cuda 80 s (uncalibrated" in reason
    big = {"dataset": {"source": "cifar10"}, "partition": {"kind": "iid", "num_clients": 50, "test_fraction": 0.2},
           "model": {"arch": "resnet9"}, "algorithm": {"method": "fedavg"},
           "training": {**CONFIG["experiments"]["tiny"]["training"], "train_eval_every": None, "rounds": 100}}
    device, reason = choose_device("auto", big, tmp_path / "no_partition_yet.npz")  # shape from the dataset's facts
    assert device.type == "cuda" and "the GPU is estimated faster" in reason and "(calibrated: cuda resnet9" in reason
    assert choose_device("cpu", big, tmp_path / "x.npz")[0].type == "cpu"  # an explicit device as named
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto", big, tmp_path / "x.npz") == (torch.device("cpu"), "device auto: no CUDA available")


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


def test_adjacency_scores_by_hand():
    """Clients 0, 1 | 2, 3; links 0-1, 1-2 (both directions) out of 4 * 3 ordered pairs:
    density 4/12, cross-group 2/4 (the 1-2 link)."""
    import numpy as np

    from fedbench.run.cell import adjacency_scores

    a = np.eye(4, dtype=int)
    a[0, 1] = a[1, 0] = a[1, 2] = a[2, 1] = 1
    scores = adjacency_scores(a, np.array([0, 0, 1, 1]))
    assert scores == {"adj_density": 4 / 12, "adj_cross_group": 2 / 4}
    assert adjacency_scores(np.eye(3), [0, 1, 2])["adj_density"] == 0 and np.isnan(adjacency_scores(np.eye(3), [0, 1, 2])["adj_cross_group"])
    assert adjacency_scores(None, [0]) == {}


def test_cfl_end_to_end_splits_two_planted_groups_with_conflicting_gradients(tmp_path, caplog):
    """Digits 0-3 in two planted groups of three clients with disjoint label pairs (FLT Scenario 1):
    the groups' updates pull the output layer apart, so once the criterion is allowed to fire
    (eps1 above any mean norm, eps2 = 0, from round 2) CFL splits exactly into the planted groups;
    the history carries the norms and the split count, metrics.json the split round.  With the
    notebook's eps (0.4, 1.6) the same run never splits, and says so."""
    import logging

    import numpy as np

    config = {
        "results": "unused", "device": "cpu", "seeds": [0],
        "datasets": {"d": {"source": "digits", "classes": [0, 1, 2, 3], "test_fraction": 0.25}},
        "partitions": {"two": {"kind": "flt_scenario1", "num_clients": 6, "num_clusters": 2, "labels_per_cluster": 2}},
        "models": {"lin": {"arch": "mlr"}},
        "algorithms": {"cfl_fires": {"method": "cfl", "eps1": 100.0, "eps2": 0.0, "warmup_rounds": 1},
                       "cfl": {"method": "cfl"}},
        "experiments": {"e": {
            "protocol": "mean_client_last",
            "training": {"rounds": 2, "local_epochs": 1, "batch_size": 16, "lr": 0.1, "participation": 1.0, "eval_every": 1},
            "grid": [{"datasets": ["d"], "partitions": ["two"], "models": ["lin"], "algorithms": ["cfl_fires", "cfl"]}],
        }},
    }
    check_config(config)
    build_partition(config, "d", "two", 0, tmp_path / "p.npz", tmp_path / "p.json")
    metrics = run_cell(config, Cell("e", "d", "two", "lin", "cfl_fires", 0), tmp_path / "p.npz", tmp_path / "fires")
    history = pd.read_csv(tmp_path / "fires" / "history.csv")
    assert list(history["cfl_splits"]) == [0, 1] and metrics["summary"]["split_rounds"] == [2]
    assert history["ari"].iloc[-1] == 1.0 and (history[["cfl_mean_norm", "cfl_max_norm"]] > 0).all().all()
    with caplog.at_level(logging.WARNING):
        quiet = run_cell(config, Cell("e", "d", "two", "lin", "cfl", 0), tmp_path / "p.npz", tmp_path / "quiet")
    assert quiet["summary"]["split_rounds"] == [] and "never split" in caplog.text
    assert np.isfinite(pd.read_csv(tmp_path / "quiet" / "history.csv")["cfl_mean_norm"]).all()
