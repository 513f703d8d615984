"""Server algorithms against numbers derived by hand."""

import numpy as np
import pytest
import torch
from torch import nn

from conftest import make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.streams import client_streams, stream
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


def sgd_by_hand(w, b, x, y, batches, lr, *, mu=0.0, momentum=0.0, center=None):
    """``torch.optim.SGD`` (dampening 0; the first step's buffer is the gradient) over ``batches`` (lists
    of data rows) on mean cross-entropy + mu/2 ||(W, b) - (W0, b0)||^2, from (w, b); the anchor
    (W0, b0) is ``center``, by default the start (w, b)."""
    w0, b0 = (w, b) if center is None else center
    buf = None
    for rows in batches:
        gw, gb = mlr_gradient(w, b, x[rows], y[rows], len(b))
        gw, gb = gw + mu * (w - w0), gb + mu * (b - b0)
        buf = (gw, gb) if buf is None else (momentum * buf[0] + gw, momentum * buf[1] + gb)
        w, b = w - lr * buf[0], b - lr * buf[1]
    return w, b


def client_batches(data, plan, position, client):
    """Data rows of ``client``'s minibatches, in order, from row ``position`` of ``plan``."""
    return [data.train.index[client][batch].numpy() for batch in plan.client_batches(position)]


def numpy_data(data):
    return data.x.numpy().astype(np.float64), data.y.numpy()


def run(algorithm, fed, rounds):
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        fed.begin_round(t)  # as the pipeline does: round t's shared streams
        state, _ = algorithm.round(fed, state, t)
    return state


def test_fedavg_with_one_client_is_plain_sgd():
    data = make_data([13], test=2)
    hp = LocalSGD(epochs=2, batch_size=4, lr=0.5)
    fed = make_federation(data, zero_mlr(), hp, seed=7)
    state = run(ALGORITHMS["fedavg"](), fed, rounds=3)

    # replay the client's stream: round t's first training pass of client 0 (fedbench.engine.streams)
    x, y = data.x.numpy().astype(np.float64), data.y.numpy()
    w, b = np.zeros((3, 5)), np.zeros(3)
    for t in range(1, 4):
        plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, client_streams(7, "batches", (t, 0), [0]))
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


def fedavg_by_hand(data, hp, *, seed, sampled, rounds, mu=0.0):
    """FedAvg / FedProx in numpy on the federation's streams: every round ``sampled`` distinct
    clients (``randperm`` of round t's sample stream, in increasing order), then their batch plan (each
    client's stream of round t's first pass); each runs ``sgd_by_hand`` from
    the global model, which becomes the sample-weighted average of their models."""
    x, y = numpy_data(data)
    counts = data.train.counts
    w, b = np.zeros((data.num_classes, x.shape[1])), np.zeros(data.num_classes)
    for t in range(1, rounds + 1):
        chosen = torch.randperm(len(counts), generator=stream(seed, "sample", t, 0))[:sampled].sort().values
        plan = make_batch_plan(counts[chosen], hp.epochs, hp.batch_size, client_streams(seed, "batches", (t, 0), chosen))
        local = [sgd_by_hand(w, b, x, y, client_batches(data, plan, c, k), hp.lr, mu=mu, momentum=hp.momentum)
                 for c, k in enumerate(chosen.tolist())]
        share = counts[chosen].numpy() / counts[chosen].sum().item()
        w = sum(p * wk for p, (wk, _) in zip(share, local))
        b = sum(p * bk for p, (_, bk) in zip(share, local))
    return w, b


@pytest.mark.parametrize(
    "method, params, momentum",
    [("fedavg", {}, 0.0), ("fedprox", {"mu": 0.8}, 0.5)],
)
def test_fedavg_and_fedprox_rounds_by_hand(method, params, momentum):
    """FedAvg (McMahan et al. 2017, Algorithm 1): each round m = max(C K, 1) = 2 of the K = 4 clients
    run E epochs of minibatch SGD from w_t and w_{t+1} = sum_{k in S_t} n_k / m_t w^k_{t+1}; FedProx
    (Li et al. 2020, Eq. 2 / Algorithm 2): the local objective adds mu/2 ||w - w_t||^2, i.e. each local
    gradient gets mu (w - w_t) with w_t the model received this round (here with momentum 0.5)."""
    data = make_data([9, 4, 13, 6], test=2)
    hp = LocalSGD(epochs=2, batch_size=4, lr=0.5, momentum=momentum)
    fed = make_federation(data, zero_mlr(), hp, participation=0.5, seed=3)
    state = run(ALGORITHMS[method](**params), fed, rounds=3)
    w, b = fedavg_by_hand(data, hp, seed=3, sampled=2, rounds=3, mu=params.get("mu", 0.0))
    np.testing.assert_allclose(state["global"]["1.weight"].numpy(), w, atol=1e-5)
    np.testing.assert_allclose(state["global"]["1.bias"].numpy(), b, atol=1e-5)


def test_train_clients_anchors_the_proximal_term_at_the_given_center():
    """Local SGD on F_k(v) + mu/2 ||v - c||^2 is anchored at ``center`` c when one is given, not at the
    model it starts from: Ditto's personal update (Li et al. 2021, Algorithm 1) runs from each client's
    own v_k and adds lam (v_k - w^t), w^t the round's global model.  Two clients start from different
    models and are pulled toward a third, common one (mu = 0.9, two epochs of batches of 4), replayed
    by hand on the federation's stream; anchored at their starts they would end elsewhere."""
    data = make_data([7, 10], test=2)
    hp = LocalSGD(epochs=2, batch_size=4, lr=0.3, prox_mu=0.9)
    fed = make_federation(data, zero_mlr(), LocalSGD(epochs=1, batch_size=4, lr=0.3), seed=4)
    rng = np.random.default_rng(1)
    starts = [(rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=3).astype(np.float32)) for _ in range(2)]
    center = (rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=3).astype(np.float32))

    def stacked(models):
        return {"1.weight": torch.from_numpy(np.stack([w for w, _ in models])),
                "1.bias": torch.from_numpy(np.stack([b for _, b in models]))}

    clients = torch.tensor([0, 1])
    trained, _ = fed.train_clients(stacked(starts), clients, hp=hp, center=stacked([center, center]))

    plan = make_batch_plan(data.train.counts[clients], hp.epochs, hp.batch_size,  # no round begun: round 0, pass 0
                           client_streams(4, "batches", (0, 0), clients))
    x, y = numpy_data(data)
    for k in range(2):
        start = tuple(v.astype(np.float64) for v in starts[k])
        batches = client_batches(data, plan, k, k)
        w, b = sgd_by_hand(*start, x, y, batches, hp.lr, mu=hp.prox_mu, center=tuple(v.astype(np.float64) for v in center))
        np.testing.assert_allclose(trained["1.weight"][k].numpy(), w, atol=1e-5)
        np.testing.assert_allclose(trained["1.bias"][k].numpy(), b, atol=1e-5)
        at_start, _ = sgd_by_hand(*start, x, y, batches, hp.lr, mu=hp.prox_mu)
        assert np.abs(at_start - w).max() > 1e-2  # the anchor matters in this case


def test_local_trains_only_the_sampled_clients_each_on_its_own_data():
    """Local (no federation): a sampled client takes its local epoch (one batch holds all its samples:
    one full-batch gradient step) from its own previous model on its own data; the others keep theirs.
    Two of three clients a round (participation 2/3), replayed from the round's sample stream."""
    data = make_data([6, 9, 4])
    hp = LocalSGD(epochs=1, batch_size=16, lr=0.3)
    fed = make_federation(data, zero_mlr(), hp, participation=2 / 3, seed=2)
    state = run(ALGORITHMS["local"](), fed, rounds=5)
    x, y = numpy_data(data)
    models = [(np.zeros((3, 5)), np.zeros(3)) for _ in range(3)]
    trained = set()
    for t in range(1, 6):
        chosen = torch.randperm(3, generator=stream(2, "sample", t, 0))[:2].sort().values  # round t's sample stream
        for k in chosen.tolist():
            rows = data.train.index[k, : data.train.counts[k]].numpy()
            models[k] = sgd_by_hand(*models[k], x, y, [rows], hp.lr)
        trained.add(tuple(chosen.tolist()))
    assert len(trained) > 1  # the sampled pair changes across rounds
    for k, (w, b) in enumerate(models):
        np.testing.assert_allclose(state["clients"]["1.weight"][k].numpy(), w, atol=1e-5)
        np.testing.assert_allclose(state["clients"]["1.bias"][k].numpy(), b, atol=1e-5)
    scored = ALGORITHMS["local"]().client_models(fed, state, 5)  # each client is scored with its own model
    for k, (w, b) in enumerate(models):
        np.testing.assert_allclose(scored["1.weight"][k].numpy(), w, atol=1e-5)


def test_participation_samples_round_rho_k_distinct_clients():
    fed = make_federation(make_data([5] * 10), zero_mlr(), LocalSGD(1, 5, 0.1), participation=0.3)
    for _ in range(20):
        chosen = fed.sample_clients()
        assert len(chosen) == 3 and len(set(chosen.tolist())) == 3


def test_participation_below_one_client_still_samples_one():
    """max(1, round(rho K)): rho K = 0.4 rounds to 0, and one client is still sampled each round."""
    fed = make_federation(make_data([5] * 4), zero_mlr(), LocalSGD(1, 5, 0.1), participation=0.1)
    assert {len(fed.sample_clients()) for _ in range(5)} == {1}


def test_weighted_average_by_hand():
    stacked = {"w": torch.tensor([[1.0, 0.0], [4.0, 3.0]]), "steps": torch.tensor([2, 5])}
    avg = weighted_average(stacked, torch.tensor([1, 3]))
    assert torch.allclose(avg["w"], torch.tensor([(1 + 12) / 4, 9 / 4]))
    assert avg["steps"] == 5  # integer buffers: max


def test_fedavg_plus_scores_each_client_with_the_global_model_finetuned_on_its_data():
    """FedAvg+ (FeMAM, Sec. 5 baselines: FedAvg "with personalized fine-tuning for 2 epochs"): client k is
    scored with the global model after finetune_epochs = 2 epochs of local SGD on its own data, in the
    clients' fine-tuning streams of round t; the fine-tuning is a copy that never feeds back into training."""
    data = make_data([11, 6, 9], test=2)
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.3)
    plus = ALGORITHMS["fedavg_plus"](finetune_epochs=2)
    fed = make_federation(data, zero_mlr(), hp, participation=2 / 3, seed=5)
    state = plus.init(fed, model_weights(fed.model))
    for t in (1, 2):
        fed.begin_round(t)
        state, _ = plus.round(fed, state, t)
        tuned = plus.client_models(fed, state, t)  # evaluated between rounds, as the pipeline does
    plain = run(ALGORITHMS["fedavg"](), make_federation(data, zero_mlr(), hp, participation=2 / 3, seed=5), 2)
    for k in plain["global"]:
        assert torch.equal(state["global"][k], plain["global"][k])

    x, y = numpy_data(data)
    start = [state["global"][k].double().numpy() for k in ("1.weight", "1.bias")]
    plan = make_batch_plan(data.train.counts, 2, hp.batch_size, client_streams(5, "finetune", (2,), range(3)))
    for k in range(3):
        w, b = sgd_by_hand(*start, x, y, client_batches(data, plan, k, k), hp.lr)
        np.testing.assert_allclose(tuned["1.weight"][k].numpy(), w, atol=1e-5)
        np.testing.assert_allclose(tuned["1.bias"][k].numpy(), b, atol=1e-5)
