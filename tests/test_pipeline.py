"""One cell end to end through the library: outputs, protocol, determinism."""

import json

import pandas as pd
import pytest
import torch

from fedbench.config.cells import Cell
from fedbench.planning.validate import check_config
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell

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
    first = run_cell(cell_job(CONFIG, cell), partition, tmp_path / "a")
    second = run_cell(cell_job(CONFIG, cell), partition, tmp_path / "b")
    assert numbers(first) == numbers(second)
    for name in ("history.csv", "clients.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a" / name), pd.read_csv(tmp_path / "b" / name))


def test_outputs_describe_the_run(tmp_path, partition):
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg_plus", 0)
    run_cell(cell_job(CONFIG, cell), partition, tmp_path)
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


def test_the_run_trains_on_the_jobs_device_and_records_why(tmp_path, partition):
    """The device and its reason come from the job (the plan's choice under ``device: auto``); the run
    re-derives neither and records both in metrics.json."""
    reason = "device auto: the CPU is estimated faster: cpu 3 s vs cuda 80 s"
    job = cell_job(CONFIG, Cell("tiny", "digits", "dir", "mlp", "local", 0), "cpu", reason)
    metrics = run_cell(job, partition, tmp_path)
    assert metrics["device"] == "cpu" and json.loads((tmp_path / "metrics.json").read_text())["device_reason"] == reason


def test_train_scores_only_where_asked(tmp_path, partition):
    """train_eval_every: training-data scores at its multiples and the last round, NaN elsewhere;
    the pooled training losses are the per-row mean over all clients' training rows."""
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["tiny"]["training"].update(rounds=5, eval_every=1, train_eval_every=2)
    run_cell(cell_job(config, Cell("tiny", "digits", "dir", "mlp", "fedavg_plus", 0)), partition, tmp_path)
    history = pd.read_csv(tmp_path / "history.csv").set_index("round")
    scored = history["train_loss_pooled"].notna()
    assert list(history.index[scored]) == [2, 4, 5]
    assert history["global_train_loss"].notna().tolist() == scored.tolist()
    assert history["acc_pooled"].notna().all()


def test_adjacency_scores_by_hand():
    """Clients 0, 1 | 2, 3; links 0-1, 1-2 (both directions) out of 4 * 3 ordered pairs:
    density 4/12, cross-group 2/4 (the 1-2 link)."""
    import numpy as np

    from fedbench.run.scoring import adjacency_scores

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
    metrics = run_cell(cell_job(config, Cell("e", "d", "two", "lin", "cfl_fires", 0)), tmp_path / "p.npz", tmp_path / "fires")
    history = pd.read_csv(tmp_path / "fires" / "history.csv")
    assert list(history["cfl_splits"]) == [0, 1] and metrics["summary"]["split_rounds"] == [2]
    assert history["ari"].iloc[-1] == 1.0 and (history[["cfl_mean_norm", "cfl_max_norm"]] > 0).all().all()
    with caplog.at_level(logging.WARNING):
        quiet = run_cell(cell_job(config, Cell("e", "d", "two", "lin", "cfl", 0)), tmp_path / "p.npz", tmp_path / "quiet")
    assert quiet["summary"]["split_rounds"] == [] and "never split" in caplog.text
    assert np.isfinite(pd.read_csv(tmp_path / "quiet" / "history.csv")["cfl_mean_norm"]).all()
