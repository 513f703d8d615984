"""The Moreau family's oracle on the fast path (issue 39): pFedMe, Per-FedAvg and pFedMT (and FedAvg in
minibatch steps, which shares the oracle) take their
steps through ``oracle.step`` -- fused into the gradient on the hand-written path of Linear/ReLU stacks,
through the wide model for convolutional and BatchNorm models (which ran on ``vmap`` before) -- and
recurring steps through ``oracle.recurring`` (CUDA graphs on CUDA).  Two rounds on a tiny federation
equal the path they replace: the round loops as they stood before (commit deb7334), copied below,
with the oracle those models took then (unfused hand path for the MLP, ``vmap`` for the CNN).

Tolerance.  Both sides compute the same arithmetic in float32 in another order: the fused step
accumulates the weight gradient into the update (``baddbmm_``) and folds pFedMe's lerp and mu term into
one scale, the wide model sums a grouped convolution's and BatchNorm's reductions in another order
than vmap's per-client ones.  Each such difference is a few roundings of at most u = 2^-24 relative to
the magnitudes involved, per reduction term at most the reduction length (here <= 2 * 36 terms) --
a bound of 64 u per step relative to the largest magnitude -- and the steps add them up: tolerance
= (number of gradient steps) * 64 u * max(1, |value|), in absolute terms, with no amplification
factor (the step sizes keep the maps contractive or close to it over so few steps).  The same runs in
float64 (u = 2^-53) show that the two are one computation: what differs in float32 is rounding.
(Deep BatchNorm networks do amplify it: ResNet-9, 3 rounds of pFedMe, differs by up to 6.6e-4 in a
running variance in float32 and by 4e-16 in float64 -- benchmarks/moreau_round.py prints the
difference for any model.)
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_data, make_federation
from torch import nn

import fedbench.algorithms.pfedmt as pfedmt_module
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import moreau_before as before  # noqa: E402  (the loops of deb7334, benchmarks/moreau_before.py)

U = 2.0**-24
ROUNDS = 2
HP = {
    "pfedme": {"lam": 3.0, "personal_lr": 0.05, "inner_steps": 2, "local_steps": 3, "beta": 0.7, "mu": 0.01},
    "perfedavg": {"beta": 0.05, "local_steps": 3},
    "pfedmt": {"team_iterations": 2, "local_iterations": 2, "alpha": 0.05, "eta": 0.1, "lam": 2.0, "gamma": 0.5, "beta": 0.8},
    "fedavg": {"local_steps": 4},  # FedAvg in minibatch steps (the pFedMe/PerMFL code's): the same oracle
}
GRADIENT_STEPS = {"pfedme": ROUNDS * 2 * 3, "perfedavg": ROUNDS * 2 * 3, "pfedmt": ROUNDS * 2 * 2, "fedavg": ROUNDS * 4}
METHODS = list(HP)


def mlp_federation():
    data = make_data([6, 2, 5, 3], test=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    return data, model


def cnn_federation():
    """1x6x6 images (make_data's 36 features), a conv with BatchNorm: the wide path, running statistics included."""
    flat = make_data([6, 2, 5, 3], dim=36, test=2)
    data = FederatedData(flat.x.view(-1, 1, 6, 6), flat.y, flat.train, flat.test, flat.num_classes)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 3))
    return data, model


FEDERATIONS = {"mlp": (mlp_federation, "hand"), "cnn": (cnn_federation, "wide")}


def run(method, make, old, monkeypatch, dtype=torch.float32):
    """Two rounds of ``method`` from the same start: the new path, or (``old``) the loops above with the
    oracle the model took before (unfused hand path, or vmap instead of the wide model)."""
    data, model = make()
    data = FederatedData(data.x.to(dtype), data.y, data.train, data.test, data.num_classes)
    model.to(dtype)
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=3, lr=0.1), participation=0.75, seed=5)
    fed.teams = np.array([0, 0, 1, 1])
    algo = ALGORITHMS[method](**HP[method])
    paths = []
    factory = fed.minibatch_gradients

    def oracle(split="train"):
        made = factory(split)
        if old:
            index = getattr(fed.data, split)
            made = MinibatchGradients(fed.model, fed.data, index, fed.local.batch_size, fed.local.weight_decay,
                                      wide=False, fused=False)
        paths.append(made.path)
        return made

    fed.minibatch_gradients = oracle
    if old and method == "pfedmt":
        monkeypatch.setattr(pfedmt_module, "minibatch_device_step", before.pfedmt_device_step)
    if old and method == "fedavg":
        fed.sgd_steps = lambda start, clients, steps: before.sgd_steps(fed, start, clients, steps)
    state = algo.init(fed, model_weights(model))
    for t in range(1, ROUNDS + 1):
        if old and method in ("pfedme", "perfedavg"):
            state, loss = (before.pfedme_round if method == "pfedme" else before.perfedavg_round)(algo, fed, state)
        else:
            state, loss = algo.round(fed, state, t)
    monkeypatch.undo()
    return state, loss, set(paths)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model", list(FEDERATIONS))
def test_two_rounds_equal_the_path_they_replace(method, model, dtype, monkeypatch):
    """Global model, personalised models (where the method keeps them), running statistics and the
    round's loss after two rounds equal those of the loops as they were, within the tolerance derived
    in the module docstring (u = 2^-24 in float32, the paper's precision; in float64, u = 2^-53, the
    two are the same computation to within a few of its roundings); the new path is the one expected
    (hand, fused, for the MLP; wide for the CNN, which took vmap before)."""
    make, expected = FEDERATIONS[model]
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # widen's fold check draws its inputs in the default dtype
    try:
        new_state, new_loss, new_paths = run(method, make, False, monkeypatch, dtype)
        old_state, old_loss, old_paths = run(method, make, True, monkeypatch, dtype)
    finally:
        torch.set_default_dtype(default)
    assert new_paths == {expected} and old_paths == {"hand" if model == "mlp" else "vmap"}
    steps = GRADIENT_STEPS[method]
    u = U if dtype == torch.float32 else 2.0**-53

    def close(got, want, what):
        if not got.is_floating_point():
            assert torch.equal(got, want), what
            return
        tol = steps * 64 * u * max(1.0, float(want.abs().max()))
        torch.testing.assert_close(got, want, rtol=0, atol=tol, msg=lambda m: f"{what}: {m}")

    for part in old_state:
        if old_state[part] is None:  # FedAvg's local state where nothing stays local
            assert new_state[part] is None
            continue
        assert set(new_state[part]) == set(old_state[part])
        for k in old_state[part]:
            close(new_state[part][k], old_state[part][k], f"{part} {k}")
    close(new_loss, old_loss, "loss")


@pytest.mark.parametrize("model", list(FEDERATIONS))
def test_the_steps_recur_eagerly_off_cuda(model):
    """On the CPU a recurring step is simply called (no graph, no side stream)."""
    data, net = FEDERATIONS[model][0]()
    oracle = MinibatchGradients(net, data, data.train, batch_size=3)
    calls = []
    step = oracle.recurring(lambda *a: calls.append(len(a)), 100)
    for _ in range(5):
        step(torch.zeros(1), torch.zeros(1))
    assert step.eager and step.graph is None and calls == [2] * 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model", list(FEDERATIONS))
def test_cuda_graph_rounds_equal_eager_rounds_on_cuda(method, model, monkeypatch):
    """On CUDA the recurring steps are captured and replayed as CUDA graphs: two rounds equal the same
    rounds run eagerly (``cuda_graphs=False``), in FP32 (TF32 convolutions off), within the tolerance
    of the module docstring; and graphs were captured."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    from fedbench.engine import recurring

    captured = []
    original = recurring.Recurring._capture
    monkeypatch.setattr(recurring.Recurring, "_capture", lambda self, inputs: captured.append(1) or original(self, inputs))

    def rounds(graphs: bool):
        data, net = FEDERATIONS[model][0]()
        on_cuda = lambda i: ClientIndex(i.index.cuda(), i.counts.cuda())  # noqa: E731
        data = FederatedData(data.x.cuda(), data.y.cuda(), on_cuda(data.train), on_cuda(data.test), data.num_classes)
        fed = make_federation(data, net.cuda(), LocalSGD(epochs=1, batch_size=3, lr=0.1), participation=0.75, seed=5)
        fed.teams = np.array([0, 0, 1, 1])
        hp = dict(HP[method], **({"local_steps": 6} if method != "pfedmt" else {"local_iterations": 3}))  # >= 4 uses
        algo = ALGORITHMS[method](**hp)
        factory = fed.minibatch_gradients

        def oracle(split="train"):
            made = factory(split)
            made.cuda_graphs = graphs
            return made

        fed.minibatch_gradients = oracle
        state = algo.init(fed, model_weights(net))
        for t in range(1, ROUNDS + 1):
            state, loss = algo.round(fed, state, t)
        return state, loss

    eager, eager_loss = rounds(False)
    assert not captured
    graphed, graphed_loss = rounds(True)
    assert captured
    for part in eager:
        for k in eager[part] or {}:
            want, got = eager[part][k], graphed[part][k]
            tol = 64 * 64 * U * max(1.0, float(want.abs().max())) if want.is_floating_point() else 0
            torch.testing.assert_close(got, want, rtol=0, atol=tol)
    torch.testing.assert_close(graphed_loss, eager_loss, rtol=0, atol=64 * 64 * U * 10)


class _FakeCuda:
    """Stands in for torch.cuda's streams and graphs on the CPU, to check :class:`Recurring`'s
    bookkeeping: ``capture_begin``/``capture_end`` mark a capture, during which the step under test
    records itself instead of running (as a CUDA graph records kernels); ``replay`` runs the record."""

    recording = None

    class Stream:
        def wait_stream(self, other):
            pass

    class CUDAGraph:
        def capture_begin(self, *args, **kwargs):
            _FakeCuda.recording = self
            self.record = None

        def capture_end(self):
            _FakeCuda.recording = None

        def replay(self):
            self.record()

    @staticmethod
    def stream(_):
        import contextlib

        return contextlib.nullcontext()

    @staticmethod
    def current_stream():
        return _FakeCuda.Stream()


@pytest.mark.parametrize("fails", [False, True], ids=["captures", "capture fails"])
def test_recurring_warms_up_captures_once_and_replays_on_the_latest_inputs(fails, monkeypatch):
    """:class:`Recurring` on "CUDA" (faked): the first call runs eagerly (the warm-up), the second is
    captured against static copies of its inputs and replayed, every later call copies its inputs into
    those copies and replays, so each call's step sees its own inputs, exactly once; below
    MIN_GRAPH_USES uses it stays eager; a capture that fails warns and runs that call and all later
    ones eagerly."""
    from fedbench.engine import recurring

    for name in ("Stream", "CUDAGraph", "stream", "current_stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(_FakeCuda, name))
    seen = []
    total = torch.zeros(())

    def step(x, y):
        graph = _FakeCuda.recording
        if graph is not None:  # being captured: record what would run
            if fails:
                raise RuntimeError("operation not permitted when stream is capturing")
            graph.record = lambda: step(x, y)
            return
        seen.append((float(x), float(y)))
        total.add_(x * y)

    calls = [(torch.tensor(float(i)), torch.tensor(10.0 + i)) for i in range(6)]
    run = recurring.Recurring(step, uses=len(calls))
    if fails:
        with pytest.warns(UserWarning, match="capture .* failed"):
            for x, y in calls:
                run(x, y)
        assert run.eager and run.graph is None
    else:
        for x, y in calls:
            run(x, y)
        assert run.graph is not None and not run.eager
    assert seen == [(float(x), float(y)) for x, y in calls]
    assert float(total) == sum(float(x * y) for x, y in calls)
    few = recurring.Recurring(step, uses=recurring.MIN_GRAPH_USES - 1)
    few(*calls[0])
    assert few.eager and few.graph is None
