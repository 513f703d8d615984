"""ASAM's vectorised local step: one step on a quadratic in closed form, and whole local rounds
against a per-client autograd loop (the released code's two-pass step)."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from conftest import make_data
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.custom_step import train_with_gradient
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.sam_step import asam_gradient, asam_step
from fedbench.engine.weights import broadcast, model_weights
from fedbench.models import build_model


def test_one_asam_step_on_a_quadratic():
    """f(w, b) = 1/2 sum_j a_j w_j^2 - c.w + 1/2 (b - 1)^2 per client: g = (a w - c, b - 1);
    T = |w| on "weight", 1 on "bias"; eps = rho T^2 g / ||T g||; w' = w - lr grad f(w + eps)."""
    a, c = np.array([2.0, 0.5, 1.0]), np.array([1.0, -1.0, 0.0])
    w0 = np.array([[1.0, -2.0, 0.5], [0.3, 0.1, -1.0]])
    b0 = np.array([3.0, -1.0])
    rho, eta, lr = 0.1, 0.01, 0.2

    def grad_fn(params):
        w, b = params["layer.weight"], params["layer.bias"]
        grads = {"layer.weight": torch.tensor(a) * w - torch.tensor(c), "layer.bias": b - 1}
        loss = 0.5 * (torch.tensor(a) * w**2).sum(1) - (torch.tensor(c) * w).sum(1) + 0.5 * (b - 1) ** 2
        return grads, loss

    params = {"layer.weight": torch.tensor(w0), "layer.bias": torch.tensor(b0)}
    grads, _ = asam_gradient(grad_fn, rho, eta)(params)
    for i in range(2):
        g_w, g_b = a * w0[i] - c, b0[i] - 1
        t = np.abs(w0[i]) + eta
        norm = np.sqrt(np.sum((t * g_w) ** 2) + g_b**2)
        eps_w, eps_b = rho * t**2 * g_w / norm, rho * g_b / norm
        np.testing.assert_allclose(grads["layer.weight"][i].numpy(), a * (w0[i] + eps_w) - c)
        np.testing.assert_allclose(grads["layer.bias"][i].numpy(), (b0[i] + eps_b) - 1)
        w1 = w0[i] - lr * (a * (w0[i] + eps_w) - c)
        np.testing.assert_allclose(w0[i] - lr * grads["layer.weight"][i].numpy(), w1)


def reference_asam(model, data, start, clients, plan, hp, rho, eta):
    """Client by client: loss.backward, ascend by eps (T_w = |w| + eta on 'weight'), backward again,
    descend from w with SGD (momentum, weight decay)."""
    out = {k: [] for k in start}
    losses = []
    for i, client in enumerate(clients.tolist()):
        model.load_state_dict({k: v[i] for k, v in start.items()})
        opt = torch.optim.SGD(model.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
        own = data.train.index[client]
        batch_losses = []
        for local in plan.client_batches(i):
            rows = own[local]
            opt.zero_grad()
            loss = F.cross_entropy(model(data.x[rows]), data.y[rows])
            loss.backward()
            batch_losses.append(loss.detach())
            named = dict(model.named_parameters())
            with torch.no_grad():
                scaled = {n: (p.abs() + eta) * p.grad if "weight" in n else p.grad for n, p in named.items()}
                norm = torch.sqrt(sum((s**2).sum() for s in scaled.values()))
                eps = {n: rho * ((p.abs() + eta) * scaled[n] if "weight" in n else scaled[n]) / (norm + 1e-16) for n, p in named.items()}
                for n, p in named.items():
                    p.add_(eps[n])
            opt.zero_grad()
            F.cross_entropy(model(data.x[rows]), data.y[rows]).backward()
            with torch.no_grad():
                for n, p in named.items():
                    p.sub_(eps[n])
            opt.step()
        losses.append(torch.stack(batch_losses).mean())
        for k, v in model.state_dict().items():
            out[k].append(v.detach().clone())
    return {k: torch.stack(v) for k, v in out.items()}, torch.stack(losses)


def test_vectorised_asam_matches_a_per_client_loop():
    """Unequal clients (short last batches, different step counts), momentum and weight decay."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    data = make_data([13, 4, 22, 9])
    hp = LocalSGD(epochs=2, batch_size=5, lr=0.1, momentum=0.9, weight_decay=1e-3)
    clients = torch.tensor([2, 0, 3, 1])
    start = broadcast(model_weights(model), 4)
    start = {k: v + 0.05 * torch.randn_like(v) for k, v in start.items()}
    plan = make_batch_plan(data.train.counts[clients], hp.epochs, hp.batch_size, torch.Generator().manual_seed(5))
    got_w, got_loss = train_with_gradient(model, data, start, clients, plan, hp, asam_step(model, 0.1, 0.01))
    want_w, want_loss = reference_asam(model, data, start, clients, plan, hp, 0.1, 0.01)
    for k in want_w:
        torch.testing.assert_close(got_w[k], want_w[k], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_loss, want_loss, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(got_w["1.weight"], start["1.weight"])


def test_asam_ascends_along_a_tiny_gradient():
    """ASAM's ascent eps = rho T^2 g / ||T g|| takes the released code's guard against a zero norm,
    rho T^2 g / (||T g|| + 1e-16) (``utils/sam_minimizers.py``: ``wgrad_norm + 1.e-16``): a zero
    gradient gives eps = 0 (no NaN), and a gradient of norm 2^-52 ~ 2.2e-16 (a client at a minimum
    up to rounding) is still ascended, uphill, by rho 2^-52 / (2^-52 + 1e-16) ~ 0.69 rho.  On f of
    the quadratic test: client 0 at w = c / a, b = 1 (g = 0); client 1 at w = c / a, b = 1 + 2^-52
    (g = (0, 2^-52)); client 2 an ordinary point."""
    a, c = np.array([2.0, 0.5, 1.0]), np.array([1.0, -1.0, 0.0])
    w0 = np.array([c / a, c / a, [1.0, -2.0, 0.5]])
    b0 = np.array([1.0, 1.0 + 2.0**-52, 3.0])
    rho, eta = 0.1, 0.0

    def grad_fn(params):
        w, b = params["layer.weight"], params["layer.bias"]
        return {"layer.weight": torch.tensor(a) * w - torch.tensor(c), "layer.bias": b - 1}, b

    grads, _ = asam_gradient(grad_fn, rho, eta)({"layer.weight": torch.tensor(w0), "layer.bias": torch.tensor(b0)})
    for i in range(3):
        g_w, g_b = a * w0[i] - c, b0[i] - 1
        t = np.abs(w0[i]) + eta
        norm = np.sqrt(np.sum((t * g_w) ** 2) + g_b**2)
        eps_w, eps_b = rho * t**2 * g_w / (norm + 1e-16), rho * g_b / (norm + 1e-16)
        np.testing.assert_allclose(grads["layer.weight"][i].numpy(), a * (w0[i] + eps_w) - c, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(grads["layer.bias"][i].numpy(), b0[i] + eps_b - 1, rtol=1e-12, atol=1e-15)
    assert float(grads["layer.bias"][0]) == 0.0 and not grads["layer.weight"][0].any()
    assert 0.06 < float(grads["layer.bias"][1]) < 0.07  # uphill (the sign of g_b > 0), 2^-52 / (2^-52 + 1e-16) of rho


def test_asam_draws_each_clients_own_dropout_masks():
    """FedASAM's local step is vmapped over the clients, and each client draws its own dropout masks
    (as the engine's plain local step does) on a model with dropout, the registry's ``mlp_dropout``
    (FLT Table 11, dropout 0.5): two clients at the same weights on the same minibatch get different
    gradients and losses (finite, of the parameters' shapes)."""
    data = make_data([6, 6])
    model = build_model({"arch": "mlp_dropout", "hidden": 16}, (5,), 3).train()
    params = broadcast({n: p.detach() for n, p in model.named_parameters()}, 2)
    rows = data.train.index[0][:4]
    x, y = data.x[rows].expand(2, 4, 5), data.y[rows].expand(2, 4)
    torch.manual_seed(0)
    grads, loss = asam_step(model, 0.1, 0.0)(params, {}, x, y, torch.ones(2, 4))
    for n, p in model.named_parameters():
        assert grads[n].shape == (2, *p.shape) and torch.isfinite(grads[n]).all()
    assert not torch.allclose(grads["1.weight"][0], grads["1.weight"][1])
    assert loss.shape == (2,) and float(loss[0]) != float(loss[1])
