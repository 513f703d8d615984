"""A ``batch_size`` larger than every client's data is a full batch: the same numbers as the explicit
full batch, and memory, steps and BatchNorm sub-steps sized by the batch a client can form."""

import json

import pandas as pd
import pytest
import torch
from torch import nn

from conftest import make_data, tiny_digits_config
from fedbench.config.cells import Cell
from fedbench.planning.validate import check_config
from fedbench.engine.batches import effective_batch, make_batch_plan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell

HUGE = 10**9


def test_effective_batch_is_the_largest_batch_a_client_can_form():
    assert effective_batch(HUGE, [21, 16, 0]) == 21
    assert effective_batch(8, [21, 16, 0]) == 8
    assert effective_batch(8, []) == 1 and effective_batch(8, [0, 0]) == 1
    plan = make_batch_plan(torch.tensor([21, 16, 0, 5]), 2, HUGE, torch.Generator().manual_seed(0))
    assert plan.batch_size == 21 and plan.steps_per_epoch.tolist() == [1, 1, 0, 1]


def test_huge_batch_trains_a_batchnorm_model_as_the_explicit_full_batch():
    """Clients of 21, 16, 13, 13 and 5 samples: one step per epoch each, the shorter ones as
    BatchNorm sub-steps of their own; a 1 MB budget holds it (the configured 10^9 rows would not)."""
    counts = [21, 16, 13, 13, 5]
    data = make_data(counts)
    model = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    start = broadcast(model_weights(model), len(counts))
    runs = []
    for batch in (HUGE, max(counts)):
        plan = make_batch_plan(data.train.counts, 2, batch, torch.Generator().manual_seed(3))
        trainer = VectorisedTrainer(model, data, memory_mb=1)
        runs.append(trainer.train(start, torch.arange(len(counts)), plan, LocalSGD(epochs=2, batch_size=batch, lr=0.1, momentum=0.5)))
    (huge, huge_loss), (full, full_loss) = runs
    for name in full:
        assert torch.equal(huge[name], full[name]), name
    assert torch.equal(huge_loss, full_loss)
    assert huge["1.num_batches_tracked"].tolist() == [2] * len(counts)  # 2 epochs x one batch


CONFIG = tiny_digits_config(rounds=2, local_epochs=2, batch_size=HUGE, lr=0.1, eval_every=1, memory_mb=4)


def test_huge_batch_size_runs_a_cell_as_the_explicit_full_batch(tmp_path):
    check_config(CONFIG)
    build_partition(CONFIG, "digits", "dir", 0, tmp_path / "p.npz", tmp_path / "p.json")
    largest = max(json.loads((tmp_path / "p.json").read_text())["train_client_sizes"])
    explicit = json.loads(json.dumps(CONFIG))
    explicit["experiments"]["tiny"]["training"]["batch_size"] = largest
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
    huge = run_cell(cell_job(CONFIG, cell), tmp_path / "p.npz", tmp_path / "huge")
    full = run_cell(cell_job(explicit, cell), tmp_path / "p.npz", tmp_path / "full")
    assert huge["final"] == full["final"] and huge["global"] == full["global"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "huge" / "history.csv"), pd.read_csv(tmp_path / "full" / "history.csv"))
    assert huge["final"]["accuracy"] == pytest.approx(full["final"]["accuracy"]) and huge["final"]["accuracy"] > 0
