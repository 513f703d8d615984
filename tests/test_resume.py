"""Resumable cells and faults: a run killed after a checkpoint and restarted ends with the same
metrics.json numbers and history as an uninterrupted run; unreadable checkpoints and partition
files are named in one message; a diverging run is recorded, not crashed."""

import json

import numpy as np
import pandas as pd
import pytest

import fedbench.run.stages as pipeline
from fedbench.algorithms import ALGORITHMS
from fedbench.run.checkpoint import CHECKPOINT_NAME, CheckpointError
from fedbench.config.cells import Cell
from fedbench.planning.validate import check_config
from fedbench.data.partition_file import PartitionFileError
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell
from fedbench.results.tables import load_metrics, summarise, to_markdown

TRAINING = {"rounds": 6, "batch_size": 16, "lr": 0.1, "participation": 0.6, "eval_every": 2,
            "checkpoint_every": 2}
CONFIG = {
    "results": "unused",
    "device": "cpu",
    "seeds": [0],
    "datasets": {"digits": {"source": "digits"}},
    "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 6, "test_fraction": 0.25}},
    "models": {"mlp": {"arch": "mlp", "hidden": [16]}, "mlp_dropout": {"arch": "mlp_dropout", "hidden": 16, "dropout": 0.3}},
    "algorithms": {
        "fedavg": {"method": "fedavg"},
        "ifca": {"method": "ifca", "num_clusters": 2},
        "pfedmt": {"method": "pfedmt"},
        "ditto": {"method": "ditto"},
        "fedgen": {"method": "fedgen", "generator_epochs": 1, "teacher_iterations": 2},
    },
    "experiments": {
        "sgd": {"training": {**TRAINING, "momentum": 0.5},
                "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["fedavg", "ifca", "ditto", "fedgen"]}]},
        "plain": {"training": TRAINING,
                  "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["pfedmt"]}]},
        "blowup": {"training": {**TRAINING, "lr": 1e30},
                   "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["fedavg"]}]},
    },
}
RUN_ONLY = ("wall_time_s", "peak_memory")  # how long and how much memory, never a result


class Killed(Exception):
    """Stands in for SIGKILL / a wall-time limit: raised inside the round loop."""


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition")
    check_config(CONFIG)
    build_partition(CONFIG, "digits", "dir", 0, root / "p.npz", root / "p.json")
    return root / "p.npz"


def kill_after_round(monkeypatch, algorithm_round_count: int):
    """The run 'dies' right after the checkpoint of round ``algorithm_round_count`` is on disk."""
    real = pipeline.save_checkpoint

    def save_then_die(path, payload):
        real(path, payload)
        if payload["round"] == algorithm_round_count:
            raise Killed

    monkeypatch.setattr(pipeline, "save_checkpoint", save_then_die)


def results_of(out_dir) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    metrics = json.loads((out_dir / "metrics.json").read_text())
    return ({k: v for k, v in metrics.items() if k not in RUN_ONLY},
            pd.read_csv(out_dir / "history.csv"), pd.read_csv(out_dir / "clients.csv"))


@pytest.mark.parametrize("experiment, algorithm, model", [
    ("sgd", "fedavg", "mlp"),          # momentum SGD, client sampling
    ("sgd", "ifca", "mlp"),            # clustered: cluster identities and K models in the state
    ("sgd", "ditto", "mlp_dropout"),   # per-client personal models; dropout draws torch's global stream
    ("plain", "pfedmt", "mlp"),        # pFedMT: global + every client's theta, minibatch oracle stream
    ("sgd", "fedgen", "mlp"),          # a server-side generator network and its Adam optimiser in the state
])
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path, partition, monkeypatch, experiment, algorithm, model):
    cell = Cell(experiment, "digits", "dir", model, algorithm, 0)
    run_cell(cell_job(CONFIG, cell), partition, tmp_path / "whole")
    assert not (tmp_path / "whole" / CHECKPOINT_NAME).exists()  # removed once the cell completed

    with monkeypatch.context() as m:
        kill_after_round(m, 4)
        with pytest.raises(Killed):
            run_cell(cell_job(CONFIG, cell), partition, tmp_path / "resumed")
    assert (tmp_path / "resumed" / CHECKPOINT_NAME).exists()
    assert not (tmp_path / "resumed" / "metrics.json").exists()  # no partial output left behind
    logged = []
    monkeypatch.setattr(pipeline.log, "info", lambda msg, *args: logged.append(msg % args))
    run_cell(cell_job(CONFIG, cell), partition, tmp_path / "resumed")
    assert any("after round 4" in line for line in logged)  # it continued, it did not start over

    whole, resumed = results_of(tmp_path / "whole"), results_of(tmp_path / "resumed")
    assert whole[0] == resumed[0]
    assert whole[0]["status"] == "completed" and list(whole[1]["round"]) == [2, 4, 6]
    pd.testing.assert_frame_equal(whole[1], resumed[1])
    pd.testing.assert_frame_equal(whole[2], resumed[2])
    assert not (tmp_path / "resumed" / CHECKPOINT_NAME).exists()


def test_keep_checkpoint_and_settings_that_change_no_number(tmp_path, partition):
    """keep_checkpoint leaves the last checkpoint; checkpoint settings are not recorded
    hyperparameters, so runs that differ only in them write identical metrics."""
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["sgd"]["training"].update(keep_checkpoint=True)
    cell = Cell("sgd", "digits", "dir", "mlp", "fedavg", 0)
    run_cell(cell_job(config, cell), partition, tmp_path / "kept")
    assert (tmp_path / "kept" / CHECKPOINT_NAME).exists()
    config["experiments"]["sgd"]["training"].update(checkpoint_every=0, keep_checkpoint=False)
    run_cell(cell_job(config, cell), partition, tmp_path / "never")
    assert not (tmp_path / "never" / CHECKPOINT_NAME).exists()
    assert results_of(tmp_path / "kept")[0] == results_of(tmp_path / "never")[0]
    assert "checkpoint_every" not in results_of(tmp_path / "never")[0]["hyperparameters"]["training"]


def test_checkpoint_of_other_settings_is_set_aside(tmp_path, partition, monkeypatch):
    cell = Cell("sgd", "digits", "dir", "mlp", "fedavg", 0)
    with monkeypatch.context() as m:
        kill_after_round(m, 2)
        with pytest.raises(Killed):
            run_cell(cell_job(CONFIG, cell), partition, tmp_path / "run")
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["sgd"]["training"]["lr"] = 0.05  # another run: must not continue the old one
    run_cell(cell_job(config, cell), partition, tmp_path / "run")
    run_cell(cell_job(config, cell), partition, tmp_path / "fresh")
    assert (tmp_path / "run" / (CHECKPOINT_NAME + ".stale")).exists()
    assert results_of(tmp_path / "run")[0] == results_of(tmp_path / "fresh")[0]


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_unreadable_checkpoint_is_named(tmp_path, partition, monkeypatch, damage):
    cell = Cell("sgd", "digits", "dir", "mlp", "fedavg", 0)
    with monkeypatch.context() as m:
        kill_after_round(m, 2)
        with pytest.raises(Killed):
            run_cell(cell_job(CONFIG, cell), partition, tmp_path)
    path = tmp_path / CHECKPOINT_NAME
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=str(path).replace(".", r"\.") + " cannot be read"):
        run_cell(cell_job(CONFIG, cell), partition, tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing_key"])
def test_unreadable_partition_is_named(tmp_path, partition, damage):
    path = tmp_path / "p.npz"
    data = partition.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00" * 100)
    else:
        with np.load(partition) as f:
            np.savez(path, **{k: f[k] for k in f.files if k != "test_offsets"})
    with pytest.raises(PartitionFileError, match=f"partition file {str(path)}"):
        run_cell(cell_job(CONFIG, Cell("sgd", "digits", "dir", "mlp", "fedavg", 0)), path, tmp_path / "out")


def test_divergence_is_recorded(tmp_path, partition):
    """lr = 1e30 makes the MLP's weights and then its loss overflow: the run stops at that round with status diverged."""
    metrics = run_cell(cell_job(CONFIG, Cell("blowup", "digits", "dir", "mlp", "fedavg", 0)), partition, tmp_path)
    history = pd.read_csv(tmp_path / "history.csv")
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["status"] == metrics["status"] == "diverged"
    round_ = on_disk["diverged_round"]
    assert 1 <= round_ < 6 and history["round"].iloc[-1] == round_
    assert not np.isfinite(history["train_loss"].iloc[-1])
    assert np.isfinite(history["train_loss"].iloc[:-1]).all()  # the rows before were normal
    assert on_disk["final"]["accuracy"] is None and on_disk["final"]["round"] == round_
    assert not (tmp_path / CHECKPOINT_NAME).exists()


def test_tables_show_diverged_cells(tmp_path, partition):
    """A diverged run is a table entry 'diverged', not a number and not a blank; next to a
    completed seed the mean is over the completed one and the count of diverged seeds is shown."""
    run_cell(cell_job(CONFIG, Cell("blowup", "digits", "dir", "mlp", "fedavg", 0)), partition, tmp_path / "seed0")
    diverged = json.loads((tmp_path / "seed0" / "metrics.json").read_text())
    completed = {**diverged, "status": "completed", "cell": {**diverged["cell"], "seed": 1},
                 "final": {**diverged["final"], "accuracy": 0.5}}
    (tmp_path / "seed1.json").write_text(json.dumps(completed))
    alone = summarise(load_metrics([tmp_path / "seed0" / "metrics.json"]))
    assert alone["accuracy"].tolist() == ["diverged"] and alone["diverged"].tolist() == [1]
    assert "| diverged |" in to_markdown(alone)
    both = summarise(load_metrics([tmp_path / "seed0" / "metrics.json", tmp_path / "seed1.json"]))
    assert both["accuracy"].tolist() == ["50.00 ± 0.00 (1/2 diverged)"]


def test_curves_draw_around_a_diverged_run(tmp_path, partition, saved_figures):
    """The curve figure of an experiment with a diverged seed is drawn from the other runs: seed 0
    diverges at round 1 (its only history row is NaN), so both panels draw seed 1's history, and
    mark seed 0's divergence with a dotted line at round 1 (the label says "1/2 diverged")."""
    from fedbench.results.figures import Curve, load_histories, plot_training_curves

    config = json.loads(json.dumps(CONFIG))
    config["seeds"] = [0, 1]
    run_cell(cell_job(config, Cell("blowup", "digits", "dir", "mlp", "fedavg", 0)), partition, tmp_path / "seed0")
    config["experiments"]["blowup"]["training"]["lr"] = 0.1
    run_cell(cell_job(config, Cell("blowup", "digits", "dir", "mlp", "fedavg", 1)), partition, tmp_path / "seed1")
    histories = load_histories([tmp_path / "seed0", tmp_path / "seed1"])
    plot_training_curves(histories, tmp_path / "curves.png", [Curve("fedavg", "FedAvg", "acc_mean", "train_loss_pooled")])
    assert (tmp_path / "curves.png").stat().st_size > 0
    survivor = pd.read_csv(tmp_path / "seed1" / "history.csv")
    loss_ax, accuracy_ax = saved_figures[-1].axes
    (loss_line, loss_mark), (accuracy_line, accuracy_mark) = loss_ax.lines, accuracy_ax.lines
    for line, expected in ((loss_line, survivor["train_loss_pooled"]), (accuracy_line, 100 * survivor["acc_mean"])):
        assert line.get_xdata().tolist() == survivor["round"].tolist() == [2, 4, 6]
        np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-12)
    assert list(loss_mark.get_xdata()) == list(accuracy_mark.get_xdata()) == [1, 1]
    assert [t.get_text() for t in saved_figures[-1].legends[0].get_texts()] == ["FedAvg (1/2 diverged)"]


@pytest.mark.parametrize("name", [n for n in ALGORITHMS.names() if n != "flt"])  # flt: needs a pretrained encoder file
def test_every_algorithm_state_can_be_checkpointed(name):
    """A cell checkpoints its algorithm's state with torch.save every ``checkpoint_every`` rounds, so
    the state after a round must hold only picklable data (a closure kept in it once crashed
    FedASAM cells at their first checkpoint)."""
    import dataclasses
    import io

    import torch
    from torch import nn

    from conftest import make_data, make_federation
    from fedbench.engine.local_sgd import LocalSGD
    from fedbench.engine.weights import model_weights

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    data = make_data([12, 10, 14, 11], test=4)
    if name == "femam":  # FeMAM selects and prunes on validation rows
        data = dataclasses.replace(data, val=data.test)
    participation = 1.0 if name == "femam" else 0.5  # FeMAM trains every client every round
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=4, lr=0.1), participation=participation)
    small = {"fesem_flt": {"num_clusters": 2}, "fedgen": {"generator_epochs": 1, "teacher_iterations": 2}}
    algorithm = ALGORITHMS[name](**small.get(name, {}))
    state, _ = algorithm.round(fed, algorithm.init(fed, model_weights(model)), 1)
    torch.save(state, io.BytesIO())
