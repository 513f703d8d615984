"""Server algorithms against numbers derived by hand."""

import numpy as np
import torch
from torch import nn

from conftest import make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights, weighted_average


def zero_mlr(dim=5, classes=3) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(dim, classes))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    return model


def mlr_gradient(w, b, x, y, classes):
    """d/dW, d/db of the mean cross-entropy of softmax(x W^T + b): ((p - onehot)^T x, sum(p - onehot)) / n."""
    logits = x @ w.T + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    residual = p - np.eye(classes)[y]
    return residual.T @ x / len(y), residual.mean(0)


def run(algorithm, fed, rounds):
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
    return state


def test_fedavg_with_one_client_is_plain_sgd():
    data = make_data([13], test=2)
    hp = LocalSGD(epochs=2, batch_size=4, lr=0.5)
    fed = make_federation(data, zero_mlr(), hp, seed=7)
    state = run(ALGORITHMS["fedavg"](), fed, rounds=3)

    # replay the same random stream: per round, client sampling then the batch plan
    g = torch.Generator().manual_seed(7)
    x, y = data.x.numpy().astype(np.float64), data.y.numpy()
    w, b = np.zeros((3, 5)), np.zeros(3)
    for _ in range(3):
        torch.randperm(1, generator=g)
        plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, g)
        for batch in plan.client_batches(0):
            rows = data.train.index[0][batch].numpy()
            gw, gb = mlr_gradient(w, b, x[rows], y[rows], 3)
            w, b = w - hp.lr * gw, b - hp.lr * gb
    np.testing.assert_allclose(state["global"]["1.weight"].numpy(), w, atol=1e-5)
    np.testing.assert_allclose(state["global"]["1.bias"].numpy(), b, atol=1e-5)


def test_fedprox_with_mu_zero_is_fedavg():
    data = make_data([12, 30, 9, 17])
    hp = LocalSGD(epochs=1, batch_size=5, lr=0.1, momentum=0.5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    a = run(ALGORITHMS["fedavg"](), make_federation(data, model, hp, participation=0.5, seed=1), 4)
    b = run(ALGORITHMS["fedprox"](mu=0.0), make_federation(data, model, hp, participation=0.5, seed=1), 4)
    c = run(ALGORITHMS["fedprox"](mu=1.0), make_federation(data, model, hp, participation=0.5, seed=1), 4)
    for k in a["global"]:
        assert torch.equal(a["global"][k], b["global"][k])
    assert any(not torch.allclose(a["global"][k], c["global"][k]) for k in a["global"])


def test_fedprox_proximal_term_shrinks_the_local_update():
    data = make_data([40, 40])
    hp = LocalSGD(epochs=3, batch_size=5, lr=0.2)
    start = model_weights(zero_mlr())
    drift = {}
    for mu in (0.0, 5.0):
        fed = make_federation(data, zero_mlr(), hp, seed=0)
        state = run(ALGORITHMS["fedprox"](mu=mu), fed, 1)
        drift[mu] = sum(float((state["global"][k] - start[k]).norm()) for k in start)
    assert drift[5.0] < 0.6 * drift[0.0]


def test_local_is_full_batch_gradient_descent_per_client():
    data = make_data([6, 9, 4])
    hp = LocalSGD(epochs=1, batch_size=16, lr=0.3)  # one batch holds all of a client's samples
    fed = make_federation(data, zero_mlr(), hp)
    state = run(ALGORITHMS["local"](), fed, rounds=5)
    x, y = data.x.numpy().astype(np.float64), data.y.numpy()
    for k in range(3):
        rows = data.train.index[k, : data.train.counts[k]].numpy()
        w, b = np.zeros((3, 5)), np.zeros(3)
        for _ in range(5):
            gw, gb = mlr_gradient(w, b, x[rows], y[rows], 3)
            w, b = w - hp.lr * gw, b - hp.lr * gb
        np.testing.assert_allclose(state["clients"]["1.weight"][k].numpy(), w, atol=1e-5)


def test_participation_samples_round_rho_k_distinct_clients():
    fed = make_federation(make_data([5] * 10), zero_mlr(), LocalSGD(1, 5, 0.1), participation=0.3)
    for _ in range(20):
        chosen = fed.sample_clients()
        assert len(chosen) == 3 and len(set(chosen.tolist())) == 3


def test_weighted_average_by_hand():
    stacked = {"w": torch.tensor([[1.0, 0.0], [4.0, 3.0]]), "steps": torch.tensor([2, 5])}
    avg = weighted_average(stacked, torch.tensor([1, 3]))
    assert torch.allclose(avg["w"], torch.tensor([(1 + 12) / 4, 9 / 4]))
    assert avg["steps"] == 5  # integer buffers: max


def test_fedavg_plus_finetunes_each_client_without_touching_the_global_model():
    data = make_data([20, 20, 20])
    hp = LocalSGD(epochs=1, batch_size=5, lr=0.1)
    plus = ALGORITHMS["fedavg_plus"](finetune_epochs=2)
    fed = make_federation(data, zero_mlr(), hp)
    state = run(plus, fed, 2)
    plain = run(ALGORITHMS["fedavg"](), make_federation(data, zero_mlr(), hp), 2)
    assert torch.equal(state["global"]["1.weight"], plain["global"]["1.weight"])
    tuned = plus.client_models(fed, state, 2)["1.weight"]
    assert not torch.allclose(tuned[0], tuned[1])
    again = plus.client_models(fed, state, 2)["1.weight"]
    assert torch.equal(tuned, again)  # evaluation-time randomness is a function of (seed, round)
