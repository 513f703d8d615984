"""The vectorised local-training engine against the per-client reference loop, one SGD step
against a hand computation, and the batch plan's properties.

CUDA variants run where a GPU is present (CUDA graphs are then in play) and skip elsewhere.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import fedbench.engine.vectorised as vectorised
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
FEATURES, CLASSES = 6, 4


def make_data(counts: list[int], device="cpu", seed: int = 0) -> FederatedData:
    """Random features and labels; client k owns ``counts[k]`` rows scattered over the data."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(counts) + 3  # a few rows nobody owns
    x = torch.randn(total, FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (total,), generator=gen)
    perm = np.random.default_rng(seed).permutation(total)
    lists = np.split(perm[: sum(counts)], np.cumsum(counts)[:-1])
    index = ClientIndex.from_lists(lists, device)
    return FederatedData(x.to(device), y.to(device), index, index, CLASSES)


def mlp() -> nn.Module:  # eligible for the hand-written step
    return nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, CLASSES))


def perturbed_start(model: nn.Module, n: int, seed: int) -> dict[str, torch.Tensor]:
    """Stacked weights whose rows differ, so that a row mix-up would show."""
    gen = torch.Generator().manual_seed(seed)
    return {
        k: v + 0.1 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
        for k, v in broadcast(model_weights(model), n).items()
    }


def run_both(model, data, hp: LocalSGD, seed: int = 1, center=None, **trainer_kw):
    device = data.x.device
    torch.manual_seed(seed)
    n = data.num_clients
    start = {k: v.to(device) for k, v in perturbed_start(model, n, seed).items()}
    center = None if center is None else {k: v.to(device) for k, v in center.items()}
    clients = torch.arange(n, device=device)
    plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, torch.Generator().manual_seed(seed))
    got = VectorisedTrainer(model, data, **trainer_kw).train(start, clients, plan, hp, center)
    want = ReferenceTrainer(model, data).train(start, clients, plan, hp, center)
    return got, want, start


def assert_same(got, want, atol=1e-5):
    (w_got, loss_got), (w_want, loss_want) = got, want
    assert w_got.keys() == w_want.keys()
    for k in w_want:
        assert w_got[k].shape == w_want[k].shape, k
        torch.testing.assert_close(w_got[k], w_want[k], atol=atol, rtol=1e-4, msg=k)
    torch.testing.assert_close(loss_got, loss_want, atol=atol, rtol=1e-4)


PLAIN = LocalSGD(epochs=2, batch_size=8, lr=0.1)
ALL_TERMS = LocalSGD(epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-2, prox_mu=0.5)
NO_MOMENTUM = LocalSGD(epochs=2, batch_size=8, lr=0.1, weight_decay=1e-2, prox_mu=0.5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused_mlp", [True, False], ids=["fused", "vmap"])
@pytest.mark.parametrize("chunk_size", [None, 3])
@pytest.mark.parametrize("hp", [PLAIN, NO_MOMENTUM, ALL_TERMS], ids=["sgd", "wd-prox", "momentum-wd-prox"])
def test_matches_reference(device, fused_mlp, chunk_size, hp):
    """Unequal clients (a zero-sample one, short last batches, 1 to 9 steps per epoch), 2 epochs,
    chunks that cut the step-sorted order, weight decay + prox about a separate center, with and
    without momentum."""
    counts = [37, 5, 20, 0, 64, 13, 24, 70]
    model = mlp()
    data = make_data(counts, device)
    center = perturbed_start(model, len(counts), seed=7)
    got, want, start = run_both(model, data, hp, center=center, chunk_size=chunk_size, fused_mlp=fused_mlp)
    assert_same(got, want)
    for k in start:  # training moved every client with data, and only those
        moved = (got[0][k] - start[k]).flatten(1).abs().amax(1) > 0
        assert moved.tolist() == [c > 0 for c in counts], k
    assert got[1][3] == 0 and torch.all(got[1][[0, 1, 2, 4]] > 0)


def test_generic_model_matches_reference():
    """A model the hand-written step does not cover (Tanh) takes the vmap path."""
    model = nn.Sequential(nn.Linear(FEATURES, 12), nn.Tanh(), nn.Linear(12, CLASSES))
    assert not VectorisedTrainer(model, make_data([4])).fused
    got, want, _ = run_both(model, make_data([17, 9, 30]), ALL_TERMS)
    assert_same(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_batchnorm_matches_reference(device):
    """BatchNorm buffers too (running stats, num_batches_tracked), with unequal clients whose
    sample counts are multiples of the batch size, so no batch is padded."""
    model = nn.Sequential(nn.Linear(FEATURES, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, CLASSES))
    counts = [40, 16, 24, 8]
    got, want, start = run_both(model, make_data(counts, device), ALL_TERMS)
    assert_same(got, want)
    steps = [ALL_TERMS.epochs * c // ALL_TERMS.batch_size for c in counts]
    assert got[0]["1.num_batches_tracked"].tolist() == steps
    assert not torch.allclose(got[0]["1.running_mean"], start["1.running_mean"].to(device))


def test_small_cpu_chunks_match_reference(monkeypatch):
    """The CPU default chunking of the hand-written step (forced down to 2 clients per chunk)."""
    model = mlp()
    per_client = sum(p.nbytes for p in model.parameters())
    monkeypatch.setattr(vectorised, "_CPU_CHUNK_BYTES", 2 * per_client)
    data = make_data([11, 30, 3, 25, 8])
    assert VectorisedTrainer(model, data)._default_chunk(perturbed_start(model, 5, 0), 5) == 2
    got, want, _ = run_both(model, data, ALL_TERMS)
    assert_same(got, want)


@pytest.mark.parametrize("fused_mlp", [True, False], ids=["fused", "vmap"])
@pytest.mark.parametrize("trainer", [VectorisedTrainer, ReferenceTrainer])
def test_one_step_by_hand(trainer, fused_mlp):
    """MLR from zero, one client, one batch of two samples, 3 classes: softmax(0) = 1/3, so
    grad_b = mean_i (1/3 - onehot(y_i)) and grad_W = mean_i (1/3 - onehot(y_i)) x_i^T.

    x = [[1, 2], [3, 0]], y = [0, 1]:
      grad_b = [-1/6, -1/6, 1/3]
      grad_W = [[1/6, -2/3], [-5/6, 1/3], [2/3, 1/3]]
    one step with lr 0.3 from zero gives -0.3 * grad; the loss is ln 3.
    """
    index = ClientIndex.from_lists([np.array([0, 1])], "cpu")
    data = FederatedData(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([0, 1]), index, index, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 3))
    start = {k: torch.zeros(1, *v.shape) for k, v in model.state_dict().items()}
    hp = LocalSGD(epochs=1, batch_size=2, lr=0.3, momentum=0.9)  # momentum: the first step is plain SGD
    plan = make_batch_plan(data.train.counts, 1, 2, torch.Generator().manual_seed(0))
    kw = {"fused_mlp": fused_mlp} if trainer is VectorisedTrainer else {}
    weights, loss = trainer(model, data, **kw).train(start, torch.tensor([0]), plan, hp)
    expected_w = torch.tensor([[[-0.05, 0.2], [0.25, -0.1], [-0.2, -0.1]]])
    torch.testing.assert_close(weights["1.weight"], expected_w, atol=1e-7, rtol=0)
    torch.testing.assert_close(weights["1.bias"], torch.tensor([[0.05, 0.05, -0.1]]), atol=1e-7, rtol=0)
    assert loss.item() == pytest.approx(math.log(3), abs=1e-6)


def test_compile_failure_falls_back_to_eager(monkeypatch):
    """``compile=True`` whose compilation fails warns once and then trains eagerly, still exactly."""

    def broken_compile(fn, *args, **kwargs):
        def compiled(*a, **k):
            raise RuntimeError("no compiler here")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    model = nn.Sequential(nn.Linear(FEATURES, 12), nn.Tanh(), nn.Linear(12, CLASSES))
    with pytest.warns(UserWarning, match="running eagerly"):
        got, want, _ = run_both(model, make_data([17, 9]), ALL_TERMS, compile=True)
    assert_same(got, want)


def test_batch_plan_properties():
    counts = torch.tensor([50, 7, 0, 23])
    plan = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(5))
    again = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(5))
    other = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(6))
    assert torch.equal(plan.order, again.order)  # reproducible from the seed
    assert not torch.equal(plan.order[0], other.order[0])
    assert plan.epochs == 3 and plan.steps_per_epoch.tolist() == [5, 1, 0, 3]
    for c, n in enumerate(counts.tolist()):
        for e in range(3):
            assert torch.equal(plan.order[c, e, :n].sort().values, torch.arange(n))  # a permutation
        if n > 1:  # fresh order every epoch
            assert not torch.equal(plan.order[c, 0, :n], plan.order[c, 1, :n])
            assert not torch.equal(plan.order[c, 1, :n], plan.order[c, 2, :n])
        batches = plan.client_batches(c)
        sizes = [len(b) for b in batches]
        per_epoch = [10] * (n // 10) + ([n % 10] if n % 10 else [])
        assert sizes == per_epoch * 3  # DataLoader(shuffle=True, drop_last=False) batches
        if n:
            assert torch.equal(torch.cat(batches[: len(per_epoch)]), plan.order[c, 0, :n])
