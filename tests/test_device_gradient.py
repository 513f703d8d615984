"""The per-client minibatch gradient oracle of the Moreau-envelope family."""

import copy

import pytest
import torch
from conftest import make_data
from torch import nn

from fedbench.engine.device_gradient import MinibatchGradients

MODELS = {
    "mlr": lambda: nn.Sequential(nn.Flatten(), nn.Linear(5, 3)),
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
    "tanh (wide path)": lambda: nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)),
    "layernorm (vmap path)": lambda: nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 3)),
}
# the paths an oracle may take, most specialised first: the flags that leave it the first one
PATHS = {"hand": {}, "wide": {"hand_written": False}, "vmap": {"hand_written": False, "wide": False}}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(MODELS))
def test_gradient_matches_each_clients_autograd(name, path):
    """Every client's gradient (on every code path the model can take) equals its own autograd
    gradient of the mean cross-entropy + wd/2 ||theta||^2 on the drawn rows, which all belong to
    that client."""
    torch.manual_seed(0)
    data = make_data([6, 3, 9])
    model = MODELS[name]()
    names = [n for n, _ in model.named_parameters()]
    g = torch.Generator().manual_seed(0)
    theta = {n: torch.randn(3, *p.shape, generator=g) for n, p in model.named_parameters()}
    oracle = MinibatchGradients(model, data, data.train, batch_size=5, weight_decay=0.1, **PATHS[path])
    if oracle.path != path:
        assert list(PATHS).index(oracle.path) > list(PATHS).index(path)  # falls to a more general path
        pytest.skip(f"{name} cannot take the {path} path")
    clients = torch.arange(3)
    batches = oracle.draw(2, clients, g)
    rows = batches.rows
    assert rows.shape == (2, 3, 5) and batches.x.shape == (2, 3, 5, 5) and len(batches) == 2
    assert torch.equal(batches.x[1, 2], data.x[rows[1, 2]]) and torch.equal(batches.y[1, 2], data.y[rows[1, 2]])
    grads, loss = oracle(theta, batches[1], clients)
    for j in range(3):
        own = set(data.train.index[j, : data.train.counts[j]].tolist())
        assert set(rows[:, j].flatten().tolist()) <= own
        params = {n: theta[n][j].clone().requires_grad_() for n in names}
        out = torch.func.functional_call(model, params, (data.x[rows[1, j]],))
        ce = nn.functional.cross_entropy(out, data.y[rows[1, j]])
        (ce + 0.05 * sum((p**2).sum() for p in params.values())).backward()
        torch.testing.assert_close(loss[j], ce.detach())
        for n in names:
            torch.testing.assert_close(grads[n][j], params[n].grad)


def test_client_without_rows_gets_only_the_weight_decay():
    data = make_data([4, 0, 5])
    model = MODELS["mlr"]()
    theta = {n: torch.ones(3, *p.shape) for n, p in model.named_parameters()}
    oracle = MinibatchGradients(model, data, data.train, batch_size=2, weight_decay=0.5)
    clients = torch.arange(3)
    grads, loss = oracle(theta, oracle.draw(1, clients, torch.Generator().manual_seed(1))[0], clients)
    assert loss[1] == 0
    for g in grads.values():
        torch.testing.assert_close(g[1], torch.full_like(g[1], 0.5))


def test_draws_are_deterministic_per_generator_and_cover_subsets_of_clients():
    data = make_data([6, 3, 9, 2])
    oracle = MinibatchGradients(MODELS["mlr"](), data, data.test, batch_size=3)
    clients = torch.tensor([1, 3])
    a = oracle.draw(4, clients, torch.Generator().manual_seed(7)).rows
    b = oracle.draw(4, clients, torch.Generator().manual_seed(7)).rows
    assert torch.equal(a, b)
    for c, client in enumerate(clients.tolist()):
        own = set(data.test.index[client, : data.test.counts[client]].tolist())
        assert set(a[:, c].flatten().tolist()) <= own


def test_softmax_is_shifted_per_row_so_clients_with_logits_far_apart_stay_finite():
    """grad f_ij of pFedMT's Eq. (10) (and pFedMe's/Per-FedAvg's minibatch gradients) on the hand-written
    path: the mean cross-entropy is log-sum-exp minus the target logit, with each row shifted by its own
    largest logit.  Client 0's logits sit about 300 above client 1's (a bias of 300 on one class); a
    shift shared by all rows would underflow client 1's exp to 0 in float32 (log 0).  Both clients'
    losses and gradients equal a float64 autograd of ``F.cross_entropy`` per client."""
    torch.manual_seed(0)
    data = make_data([4, 5])
    model = MODELS["mlr"]()
    g = torch.Generator().manual_seed(2)
    theta = {n: torch.randn(2, *p.shape, generator=g) * 0.1 for n, p in model.named_parameters()}
    theta["1.bias"][0, 0] = 300.0
    oracle = MinibatchGradients(model, data, data.train, batch_size=3)
    clients = torch.arange(2)
    batch = oracle.draw(1, clients, g)
    grads, loss = oracle(theta, batch[0], clients)
    for j in range(2):
        params = {n: theta[n][j].double().requires_grad_() for n in theta}
        x, y = batch.x[0, j].double(), batch.y[0, j]
        ce = nn.functional.cross_entropy(torch.func.functional_call(model, params, (x,)), y)
        ce.backward()
        assert torch.isfinite(loss[j])
        torch.testing.assert_close(loss[j].double(), ce.detach(), rtol=1e-5, atol=1e-4)
        for n in theta:
            torch.testing.assert_close(grads[n][j].double(), params[n].grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", ["wide", "vmap"])
def test_batchnorm_clients_train_on_batch_statistics_and_move_their_own_running_statistics(path):
    """A model with BatchNorm (FeMAM's ResNet-9 grid runs pFedMe on one): every client's gradient is
    its own model's, in training mode on its minibatch's statistics, and its own row of the running
    statistics moves as ``nn.BatchNorm1d``'s forward moves them: each client is checked against a
    copy of the model holding that client's parameters and buffers, run by plain autograd.  Without
    the clients' buffers the oracle refuses, naming them."""
    torch.manual_seed(0)
    data = make_data([6, 3, 9])
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    g = torch.Generator().manual_seed(3)
    theta = {n: torch.randn(3, *p.shape, generator=g) for n, p in model.named_parameters()}
    start = {"1.running_mean": torch.randn(3, 4, generator=g), "1.running_var": torch.rand(3, 4, generator=g) + 0.5,
             "1.num_batches_tracked": torch.tensor([0, 4, 9])}
    buffers = {k: v.clone() for k, v in start.items()}
    oracle = MinibatchGradients(model, data, data.train, batch_size=3, **PATHS[path])
    assert oracle.path == path
    clients = torch.arange(3)
    batch = oracle.draw(1, clients, g)
    grads, loss = oracle(theta, batch[0], clients, buffers)
    for j in range(3):
        own = copy.deepcopy(model).train()
        own.load_state_dict({**{n: v[j] for n, v in theta.items()}, **{k: v[j] for k, v in start.items()}})
        ce = nn.functional.cross_entropy(own(batch.x[0, j]), batch.y[0, j])
        ce.backward()
        torch.testing.assert_close(loss[j], ce.detach())
        for n, p in own.named_parameters():
            torch.testing.assert_close(grads[n][j], p.grad)
        for k, v in own.state_dict().items():
            if k in buffers:
                torch.testing.assert_close(buffers[k][j], v, msg=lambda m: f"client {j}, {k}: {m}")
    with pytest.raises(ValueError, match="buffers .*1.running_mean"):
        oracle(theta, batch[0], clients)


LINEAR_RELU_STACKS = {
    "mlr": MODELS["mlr"],
    "mlp": MODELS["mlp"],
    "relu stack on 1-D samples, no Flatten": lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
}


@pytest.mark.parametrize("name", [*LINEAR_RELU_STACKS, "tanh (wide path)", "layernorm (vmap path)"])
def test_linear_relu_stacks_take_the_hand_written_path_unless_told_not_to(name, monkeypatch):
    """The dispatch the module docstring promises: a plain ``[Flatten,] Linear, ReLU, ..., Linear`` stack
    (MLR and the DNNs of the pFedMe/pFedMT grids; samples with one input dimension need no Flatten)
    takes the hand-written batched forward/backward by default, which is several times faster on the
    CPU than ``vmap``; a model the wide model folds (here a Tanh MLP; the CNNs and ResNet-9) takes the
    wide path, also a ReLU stack with ``hand_written=False``; any other model (a LayerNorm), and every
    model with ``hand_written=False, wide=False``, goes through ``vmap`` of ``functional_call``.  All
    give the same gradients (test_gradient_matches_each_clients_autograd checks each path against
    autograd)."""
    import fedbench.engine.device_gradient as module

    used = []
    by_hand, functional, wide = module.linear_stack_gradient, module.functional_call, MinibatchGradients._wide_gradient
    monkeypatch.setattr(module, "linear_stack_gradient", lambda *a: used.append("hand") or by_hand(*a))
    monkeypatch.setattr(module, "functional_call", lambda *a, **k: used.append("vmap") or functional(*a, **k))
    monkeypatch.setattr(MinibatchGradients, "_wide_gradient", lambda *a: used.append("wide") or wide(*a))
    data = make_data([4, 3])
    model = {**MODELS, **LINEAR_RELU_STACKS}[name]()
    theta = {n: p.detach().expand(2, *p.shape).clone() for n, p in model.named_parameters()}
    clients = torch.arange(2)
    default = "hand" if name in LINEAR_RELU_STACKS else "vmap" if "layernorm" in name else "wide"
    for kwargs, expected in (({}, default), (PATHS["wide"], "vmap" if "layernorm" in name else "wide"), (PATHS["vmap"], "vmap")):
        used.clear()
        oracle = MinibatchGradients(model, data, data.train, batch_size=3, **kwargs)
        oracle(theta, oracle.draw(1, clients, torch.Generator().manual_seed(0))[0], clients)
        assert set(used) == {expected} and oracle.path == expected, kwargs


@pytest.mark.parametrize("path", ["wide", "vmap"])
def test_dropout_is_active_and_every_client_draws_its_own_masks(path):
    """The wide and the vmap path run the model in training mode (vmap with ``randomness="different"``),
    as each client's own model trains in the authors' loops: dropout is active (a client's gradient is
    not the dropout-free one, autograd in eval mode) and every client draws its own masks (two clients
    with the same parameters on the same minibatch get different gradients)."""
    torch.manual_seed(0)
    data = make_data([4, 4])
    model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
    theta = {n: p.detach().expand(2, *p.shape).clone() for n, p in model.named_parameters()}
    x, y = data.x[:4], data.y[:4]
    oracle = MinibatchGradients(model, data, data.train, batch_size=4, **PATHS[path])
    assert oracle.path == path
    grads, loss = oracle(theta, (x.expand(2, 4, 5), y.expand(2, 4)), torch.arange(2))
    assert torch.isfinite(loss).all()
    eval_grad, _ = _eval_mode_gradient(model, x, y)
    for n in theta:
        assert not torch.allclose(grads[n][0], grads[n][1]), n  # own masks per client
    assert not all(torch.allclose(grads[n][0], eval_grad[n]) for n in theta)  # dropout on


def _eval_mode_gradient(model, x, y):
    own = copy.deepcopy(model).eval()
    ce = nn.functional.cross_entropy(own(x), y)
    ce.backward()
    return {n: p.grad for n, p in own.named_parameters()}, ce.detach()


@pytest.mark.parametrize("at", [False, True], ids=["at params", "at another point"])
@pytest.mark.parametrize("name", ["mlr", "mlp", "tanh (wide path)"])
def test_step_is_the_proximal_gradient_step(name, at):
    """``oracle.step`` -- fused on the hand path (the weight gradient accumulated straight into the
    update), a gradient and ``_foreach`` updates elsewhere -- is, for every client row,
    params <- (1 - decay) params - lr grad F(at) + pull anchor, F = mean cross-entropy + wd/2 ||.||^2
    at ``at`` (default: params itself, the weights before the step), with the losses at ``at`` added to
    ``loss_sum``; a client without training rows (client 1) takes only the decay, the weight decay
    and the pull.  Checked against the oracle's own gradients with the same arithmetic in float64
    (the step runs in float32: agreement within float32 rounding of a few operations)."""
    torch.manual_seed(0)
    data = make_data([6, 0, 9])
    model = MODELS[name]()
    g = torch.Generator().manual_seed(4)
    theta = {n: torch.randn(3, *p.shape, generator=g) for n, p in model.named_parameters()}
    point = {n: v + 0.3 * torch.randn(v.shape, generator=g) for n, v in theta.items()} if at else None
    anchor = {n: torch.randn(v.shape, generator=g) for n, v in theta.items()}
    oracle = MinibatchGradients(model, data, data.train, batch_size=4, weight_decay=0.05)
    assert oracle.path == ("wide" if "tanh" in name else "hand")
    clients = torch.arange(3)
    batch = oracle.draw(1, clients, g)[0]
    grads, loss = oracle(point or theta, batch, clients)
    lr, decay, pull = 0.1, 0.2, 0.15
    want = {n: (1 - decay) * v.double() - lr * grads[n].double() + pull * anchor[n].double() for n, v in theta.items()}
    loss_sum = torch.ones(3)
    got = oracle.step(theta, batch, clients, lr=lr, at=point, decay=decay, anchor=anchor, pull=pull, loss_sum=loss_sum)
    torch.testing.assert_close(got, loss)
    torch.testing.assert_close(loss_sum, 1 + loss)
    assert got[1] == 0
    for n in theta:
        torch.testing.assert_close(theta[n].double(), want[n], rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # torch.compile's first use (~30 s); .ci/run runs it
def test_numerics_pick_the_path_bf16_off_the_hand_path_and_compile_unfused():
    """``bf16``: the hand-written stack has no autocast, so an MLP takes the wide model (``path``
    says so), its gradients FP32 and near the FP32 ones; ``compile``: the hand path stays but runs
    unfused (the compiled gradient, then the ``_foreach`` updates); FP32 keeps the fused hand path."""
    from fedbench.engine.numerics import Numerics  # noqa: PLC0415

    torch.manual_seed(0)
    data = make_data([6, 3, 9])
    model = MODELS["mlp"]()
    g = torch.Generator().manual_seed(0)
    theta = {n: torch.randn(3, *p.shape, generator=g) for n, p in model.named_parameters()}
    clients = torch.arange(3)
    oracles = {p: MinibatchGradients(model, data, data.train, batch_size=4, numerics=Numerics(precision=p))
               for p in ("fp32", "bf16")}
    assert (oracles["fp32"].path, oracles["fp32"].fused) == ("hand", True)
    assert oracles["bf16"].path == "wide"
    batch = oracles["fp32"].draw(1, clients, torch.Generator().manual_seed(1))[0]
    (g32, l32), (g16, l16) = (oracles[p](theta, batch, clients) for p in ("fp32", "bf16"))
    for n in g32:
        assert g16[n].dtype == torch.float32
        scale = float(g32[n].norm())
        assert 0 < float((g16[n] - g32[n]).norm()) < 0.1 * scale, n
    assert torch.allclose(l16, l32, rtol=0.05)
    compiled = MinibatchGradients(model, data, data.train, batch_size=4, numerics=Numerics(compile=True))
    assert (compiled.path, compiled.fused) == ("hand", False)
