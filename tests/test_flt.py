"""FLT's server updates against the algorithms they generalise (Algorithm 3, cases I and II)."""

import numpy as np
import torch
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


def run_flt(adjacency, cluster_count=None, clusters=None, aggregation="simultaneous", rounds=3, participation=1.0):
    """FLT with a given relatedness (FCR bypassed), on the shared toy federation."""
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1, momentum=0.5), participation, seed=3)
    algorithm = ALGORITHMS["flt"](encoder="unused", clusters=cluster_count, aggregation=aggregation)
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
    m = len(SIZES)
    ones = run_flt(np.ones((m, m)), cluster_count=1, clusters=np.zeros(m, dtype=int), participation=0.6)
    assert_same(ones, run("fedavg", participation=0.6), atol=1e-6)


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
