"""The stages of ``run_cell`` called one by one: the evaluated round's history row by hand, where
``resume`` continues from, and ``write`` leaving no partial file when a write fails."""

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from fedbench.algorithms import ALGORITHMS, Federation
from fedbench.run.checkpoint import CHECKPOINT_NAME
from fedbench.config.cells import Cell
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.outputs import write
from fedbench.run.scoring import score_round
from fedbench.run.stages import checkpoint, due, evaluate, prepare, resume, run_cell, train_round
from conftest import tiny_digits_config

CONFIG = tiny_digits_config(rounds=4, batch_size=16, lr=0.1, participation=0.5, eval_every=2, checkpoint_every=2)
CELL = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
RUN_ONLY = ("wall_time_s", "peak_memory")


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition")
    build_partition(CONFIG, "digits", "dir", 0, root / "p.npz", root / "p.json")
    return root / "p.npz"


def with_training(**changes) -> dict:
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["tiny"]["training"].update(changes)
    return config


def one_client_federation() -> Federation:
    """One client, MLR from zero weights on 2 features and 3 classes: every logit is 0, so every
    sample's loss is ln 3 and every prediction is class 0 (the first of equal logits).  Train rows
    0-2 (labels 1, 1, 0), test rows 3-6 (labels 0, 1, 0, 2)."""
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0], [1.0, 1.0], [-2.0, 0.5], [0.0, 4.0], [2.0, -3.0]])
    y = torch.tensor([1, 1, 0, 0, 1, 0, 2])
    data = FederatedData(x, y, ClientIndex.from_lists([np.arange(3)], "cpu"), ClientIndex.from_lists([np.arange(3, 7)], "cpu"), 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 3))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    return Federation(model=model, data=data, trainer=None, local=LocalSGD(epochs=1, batch_size=2, lr=0.1),
                      participation=1.0, generator=torch.Generator().manual_seed(0), seed=0)


def test_the_history_row_of_a_one_client_federation_by_hand():
    """Test labels 0, 1, 0, 2, all predicted 0: accuracy 2/4; macro-F1 over labels 0, 1, 2 is
    (F1 of class 0 = 2 * 1/2 * 1 / (1/2 + 1) = 2/3, then 0, 0) / 3 = 2/9; loss ln 3.  One client:
    variance 0 and the pooled accuracy is the client's.  FedAvg's global model is the same zero
    model, on the same (pooled) test rows.  Train labels 1, 1, 0: train accuracy 1/3, pooled
    training losses ln 3.  The training loss of the row is the one given."""
    fed = one_client_federation()
    algorithm = ALGORITHMS["fedavg"]()
    state = algorithm.init(fed, model_weights(fed.model))
    row, personal = score_round(fed, algorithm, state, 7, 0.25)
    ln3 = math.log(3)
    expected = {
        "round": 7, "train_loss": 0.25, "acc_mean": 0.5, "acc_var": 0.0, "f1_mean": 2 / 9, "loss_mean": ln3, "acc_pooled": 0.5,
        "global_acc": 0.5, "global_f1": 2 / 9, "global_loss": ln3,
        "train_acc_mean": 1 / 3, "train_acc_var": 0.0, "train_loss_pooled": ln3, "global_train_loss": ln3,
    }
    assert list(row) == list(expected)
    assert row == pytest.approx(expected, abs=1e-6)
    assert personal.samples.tolist() == [4] and personal.correct.tolist() == [2]
    without_train, _ = score_round(fed, algorithm, state, 7, 0.25, train_scores=False)
    assert list(without_train) == list(expected)[:10]


def test_resume_starts_at_round_one_without_a_checkpoint_and_after_the_saved_round_with_one(tmp_path, partition):
    """No checkpoint: round 1 with the state given.  After a run that kept its last checkpoint
    (round 4): round 5, its history (rounds 2 and 4) and per-client scores, its wall time, and the
    federation's random stream as saved.  With checkpoints off the same file is not read."""
    run = prepare(cell_job(CONFIG, CELL), partition, tmp_path)
    initial = run.algorithm.init(run.fed, model_weights(run.fed.model))
    fresh = resume(run, initial)
    assert (fresh.first, fresh.history, fresh.per_client, fresh.losses, fresh.spent_before) == (1, [], {}, [], 0.0)
    assert fresh.state is initial

    run_cell(cell_job(with_training(keep_checkpoint=True), CELL), partition, tmp_path)
    saved = torch.load(tmp_path / CHECKPOINT_NAME, weights_only=False)
    run = prepare(cell_job(CONFIG, CELL), partition, tmp_path)
    resumed = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    assert resumed.first == 5 and [row["round"] for row in resumed.history] == [2, 4] and list(resumed.per_client) == [2, 4]
    assert resumed.spent_before == saved["wall_time_s"] > 0
    assert torch.equal(run.fed.generator.get_state(), saved["rng"]["federation"])
    assert all(torch.equal(resumed.state["global"][k], v) for k, v in saved["state"]["global"].items())

    off = prepare(cell_job(with_training(checkpoint_every=0), CELL), partition, tmp_path)
    assert resume(off, {}).first == 1


def stages_until_write(config, partition, out):
    """``run_cell`` up to its write stage: the run and its progress after the last round."""
    run = prepare(cell_job(config, CELL), partition, out)
    progress = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    for t in range(progress.first, run.training["rounds"] + 1):
        assert train_round(run, progress, t)
        if due(t, run.training["eval_every"], run.training["rounds"]):
            evaluate(run, progress, t)
        checkpoint(run, progress, t)
    return run, progress


def assert_same_outputs(out, reference) -> None:
    """The three output files of ``out`` and ``reference`` agree (metrics but for time and memory)."""
    got, want = ({k: v for k, v in json.loads((d / "metrics.json").read_text()).items() if k not in RUN_ONLY}
                 for d in (out, reference))
    assert got == want
    for name in ("history.csv", "clients.csv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_a_failed_write_leaves_no_partial_file_and_the_rerun_only_writes(tmp_path, partition, monkeypatch):
    """The write stage run by hand equals ``run_cell``.  A write that dies half-way (disk full after
    a partial CSV) leaves only the checkpoint of the last round: no output, no temporary file.  The
    rerun resumes after the last round, so it trains nothing, and writes the same outputs."""
    run_cell(cell_job(CONFIG, CELL), partition, tmp_path / "whole")
    run, progress = stages_until_write(CONFIG, partition, tmp_path / "staged")
    write(run, progress)
    assert_same_outputs(tmp_path / "staged", tmp_path / "whole")

    run, progress = stages_until_write(CONFIG, partition, tmp_path / "failed")

    def half_then_fail(self, path, **kwargs):
        with open(path, "w") as f:
            f.write("round,train_loss\n2,")
        raise OSError("No space left on device")

    with monkeypatch.context() as m:
        m.setattr(pd.DataFrame, "to_csv", half_then_fail)
        with pytest.raises(OSError, match="No space left"):
            write(run, progress)
    assert os.listdir(tmp_path / "failed") == [CHECKPOINT_NAME]

    rerun = prepare(cell_job(CONFIG, CELL), partition, tmp_path / "failed")
    resumed = resume(rerun, rerun.algorithm.init(rerun.fed, model_weights(rerun.fed.model)))
    assert resumed.first == rerun.training["rounds"] + 1
    write(rerun, resumed)
    assert_same_outputs(tmp_path / "failed", tmp_path / "whole")
    assert sorted(os.listdir(tmp_path / "failed")) == ["clients.csv", "history.csv", "metrics.json"]
