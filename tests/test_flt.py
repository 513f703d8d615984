"""FLT's server updates against the algorithms they generalise (Algorithm 3, cases I and II)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.flt import neighbour_average
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import broadcast, model_weights

SIZES = [12, 30, 9, 17, 21]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))


def run_flt(adjacency, cluster_count=None, clusters=None, aggregation="simultaneous", rounds=3, participation=1.0,
            cluster_average="all"):
    """FLT with a given relatedness (FCR bypassed), on the shared toy federation."""
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1, momentum=0.5), participation, seed=3)
    algorithm = ALGORITHMS["flt"](encoder="unused", clusters=cluster_count, aggregation=aggregation,
                                  cluster_average=cluster_average)
    state = {"clients": broadcast(model_weights(fed.model), fed.num_clients), "adjacency": adjacency,
             "clusters": clusters}
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
    return state["clients"]


def run(name, rounds=3, participation=1.0, **params):
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1, momentum=0.5), participation, seed=3)
    algorithm = ALGORITHMS[name](**params)
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
    return algorithm.client_models(fed, state, rounds)


def assert_same(a, b, atol=0.0):
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0.0 if atol == 0 else 1e-6)


def test_identity_adjacency_is_local():
    m = len(SIZES)
    assert_same(run_flt(np.eye(m), participation=0.6), run("local", participation=0.6))
    assert_same(run_flt(np.eye(m), aggregation="in_place", participation=0.6), run("local", participation=0.6))


def test_all_ones_adjacency_is_fedavg():
    m = len(SIZES)
    assert_same(run_flt(np.ones((m, m))), run("fedavg"), atol=1e-6)


def test_one_cluster_is_fedavg():
    """Case II with one cluster: FedAvg over the sampled members ("sampled"); with every client
    taking part, "all" (Algorithm 3 lines 20-22) is the same thing."""
    m = len(SIZES)
    ones = run_flt(np.ones((m, m)), cluster_count=1, clusters=np.zeros(m, dtype=int), participation=0.6,
                   cluster_average="sampled")
    assert_same(ones, run("fedavg", participation=0.6), atol=1e-6)
    everyone = run_flt(np.ones((m, m)), cluster_count=1, clusters=np.zeros(m, dtype=int), cluster_average="all")
    assert_same(everyone, run("fedavg"), atol=1e-6)


def test_case_two_averages_all_members_or_only_the_sampled_ones_by_hand():
    """lr = 0 leaves every model as it is; client m holds (m + 1) * w0.  Clusters {0, 1}, {2, 3, 4},
    sampled {0, 2}.  "all": cluster 0 -> (12*1 + 30*2)/42 w0, cluster 1 -> (9*3 + 17*4 + 21*5)/47 w0;
    "sampled": cluster 0 -> 1 w0, cluster 1 -> 3 w0."""
    clusters = np.array([0, 0, 1, 1, 1])
    expected = {
        "all": [72 / 42, 72 / 42, 200 / 47, 200 / 47, 200 / 47],
        "sampled": [1.0, 1.0, 3.0, 3.0, 3.0],
    }
    for how, factors in expected.items():
        fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.0), seed=3)
        fed.sample_clients = lambda: torch.tensor([0, 2])
        algorithm = ALGORITHMS["flt"](encoder="unused", clusters=2, cluster_average=how)
        w0 = model_weights(fed.model)
        scale = torch.arange(1, 6, dtype=torch.float32)
        stacked = {k: broadcast(w0, 5)[k] * scale.view(-1, *[1] * v.dim()) for k, v in w0.items()}
        state, _ = algorithm.round(fed, {"clients": stacked, "adjacency": None, "clusters": clusters}, 1)
        for k, v in w0.items():
            want = torch.stack([f * v for f in factors])
            torch.testing.assert_close(state["clients"][k], want, rtol=1e-5, atol=1e-6)


def gd_step(template, weights, x, y, lr):
    """One full-batch gradient step on the mean cross-entropy, plain autograd."""
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    loss = F.cross_entropy(torch.func.functional_call(template, w, (x,)), y)
    return {k: (w[k] - lr * g).detach() for k, g in zip(w, torch.autograd.grad(loss, list(w.values())))}


@pytest.mark.parametrize("aggregation", ["simultaneous", "in_place"])
def test_case_one_round_averages_over_the_relatedness_graph_by_hand(aggregation):
    """FLT Algorithm 3, lines 5-19, case I: the sampled clients train their own models (one full-batch
    step here), the server collects W̄ (the others' current models) and every client's model becomes the
    Ã-neighbourhood's sample-weighted average w_m = sum_j Ã_mj n_j w̄_j / sum_j Ã_mj n_j ("in_place":
    the authors' loop, client m already averaging the updated w_0..w_{m-1}).  Ã: the path 0-1-2-3-4 with
    self-loops; clients hold different models; sampled {0, 2}."""
    lr = 0.1
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 64, lr), seed=3)
    fed.sample_clients = lambda: torch.tensor([0, 2])
    algorithm = ALGORITHMS["flt"](encoder="unused", aggregation=aggregation)
    models = []
    for m in range(len(SIZES)):
        torch.manual_seed(100 + m)
        models.append(model_weights(nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))))
    adjacency = np.eye(5) + np.eye(5, k=1) + np.eye(5, k=-1)
    stacked = {k: torch.stack([w[k] for w in models]) for k in models[0]}
    state, _ = algorithm.round(fed, {"clients": stacked, "adjacency": adjacency, "clusters": None}, 1)
    current = []
    for m, w in enumerate(models):
        rows = fed.data.train.index[m, : SIZES[m]]
        current.append(gd_step(fed.model, w, fed.data.x[rows], fed.data.y[rows], lr) if m in (0, 2) else w)
    updated = list(current)
    for m in range(5):
        weights = adjacency[m] * np.array(SIZES, dtype=np.float64)
        source = updated if aggregation == "in_place" else current
        updated[m] = {k: sum(float(a) * source[j][k].double() for j, a in enumerate(weights)).float() / float(weights.sum())
                      for k in models[0]}
    for m in range(5):
        for k, v in updated[m].items():
            torch.testing.assert_close(state["clients"][k][m], v, rtol=1e-5, atol=1e-6)


def test_neighbour_average_by_hand():
    stacked = {"w": torch.tensor([[1.0], [2.0], [4.0]])}
    adjacency = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    samples = torch.tensor([1, 1, 2])
    simultaneous = neighbour_average(stacked, adjacency, samples, in_place=False)["w"].flatten()
    torch.testing.assert_close(simultaneous, torch.tensor([1.5, 11 / 4, 10 / 3]))
    # the authors' loop: client 1 already sees client 0's new model, client 2 sees client 1's
    in_place = neighbour_average(stacked, adjacency, samples, in_place=True)["w"].flatten()
    first = 1.5
    second = (first + 2.0 + 2 * 4.0) / 4
    torch.testing.assert_close(in_place, torch.tensor([first, second, (second + 2 * 4.0) / 3]))


def test_fesem_as_flt_code_clusters_all_models_and_averages_per_cluster_by_hand():
    """lr = 0 keeps the models; client m holds s_m * w0 with s = (1, 1.1, 10, 10.5, 11): k-means on
    all five flattened models finds {0, 1} and {2, 3, 4}; each member then holds its cluster's
    sample-weighted mean, (12*1 + 30*1.1)/42 w0 and (9*10 + 17*10.5 + 21*11)/47 w0 (only client 0
    trained: the stale ones count too)."""
    scale = torch.tensor([1.0, 1.1, 10.0, 10.5, 11.0])
    a, b = 45 / 42, 499.5 / 47
    # in place (the code's loop): later members average the already-updated earlier ones
    a1 = (12 * a + 30 * 1.1) / 42
    b3 = (9 * b + 17 * 10.5 + 21 * 11) / 47
    b4 = (9 * b + 17 * b3 + 21 * 11) / 47
    expected = {"simultaneous": [a, a, b, b, b], "in_place": [a, a1, b, b3, b4]}
    for aggregation, factors in expected.items():
        fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.0), seed=3)
        fed.sample_clients = lambda: torch.tensor([0])
        algorithm = ALGORITHMS["fesem_flt"](num_clusters=2, aggregation=aggregation)
        w0 = model_weights(fed.model)
        state = algorithm.init(fed, w0)
        state["clients"] = {k: v * scale.view(-1, *[1] * (v.dim() - 1)) for k, v in state["clients"].items()}
        state, _ = algorithm.round(fed, state, 1)
        labels = algorithm.clusters(fed, state)
        assert labels[0] == labels[1] != labels[2] == labels[3] == labels[4]
        for k, v in w0.items():
            torch.testing.assert_close(state["clients"][k], torch.stack([f * v for f in factors]), rtol=1e-5, atol=1e-6)
