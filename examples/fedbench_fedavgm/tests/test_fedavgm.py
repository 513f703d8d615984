"""FedAvgM against fedbench's algorithm contract, and its server step by hand."""

import numpy as np
import torch

from fedbench.algorithms import ALGORITHMS, Federation
from fedbench.extension.contract import Case, check_algorithm
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.registry.plugins import load_plugins

PLUGIN = "fedbench_fedavgm.fedavgm"


def test_fedavgm_passes_the_contract(tmp_path):
    check_algorithm(Case("fedavgm", {"server_momentum": 0.5}, plugins=(PLUGIN,)), tmp_path).raise_for_failures()


def federation(seed: int = 0) -> Federation:
    """Three clients of 6, 4 and 8 rows, 3 features, 2 classes, logistic regression."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(27, 3, generator=g), torch.randint(0, 2, (27,), generator=g)
    train = ClientIndex.from_lists([np.arange(0, 6), np.arange(6, 10), np.arange(10, 18)], "cpu")
    test = ClientIndex.from_lists([np.arange(18, 21), np.arange(21, 24), np.arange(24, 27)], "cpu")
    data = FederatedData(x, y, train, test, 2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 2))
    return Federation(model=model, data=data, trainer=VectorisedTrainer(model, data),
                      local=LocalSGD(epochs=1, batch_size=2, lr=0.1), participation=1.0,
                      generator=torch.Generator().manual_seed(seed), seed=seed)


def test_two_server_steps_by_hand():
    """Round 1: v1 = Δ1 = w0 - w̄1, w1 = w0 - η v1; round 2: v2 = β v1 + (w1 - w̄2), w2 = w1 - η v2, where w̄t
    is FedAvg's average of the clients trained from w(t-1) (FedAvg's own round from the same weights and
    random stream)."""
    load_plugins([PLUGIN])
    beta, eta = 0.6, 0.8
    fed, reference = federation(), federation()
    fedavgm, fedavg = ALGORITHMS["fedavgm"](server_momentum=beta, server_lr=eta), ALGORITHMS["fedavg"]()
    w0 = model_weights(fed.model)
    state = fedavgm.init(fed, w0)
    state, _ = fedavgm.round(fed, state, 1)
    mean1, _ = fedavg.round(reference, fedavg.init(reference, w0), 1)
    v1 = {k: w0[k] - mean1["global"][k] for k in w0}
    w1 = {k: w0[k] - eta * v1[k] for k in w0}
    assert all(torch.allclose(state["global"][k], w1[k], atol=1e-7) for k in w0)
    state, _ = fedavgm.round(fed, state, 2)
    mean2, _ = fedavg.round(reference, {"global": w1, "local": None}, 2)
    w2 = {k: w1[k] - eta * (beta * v1[k] + w1[k] - mean2["global"][k]) for k in w0}
    assert all(torch.allclose(state["global"][k], w2[k], atol=1e-6) for k in w0)


def test_no_momentum_and_unit_step_is_fedavg():
    load_plugins([PLUGIN])
    fed, reference = federation(), federation()
    fedavgm, fedavg = ALGORITHMS["fedavgm"](server_momentum=0.0, server_lr=1.0), ALGORITHMS["fedavg"]()
    a, b = fedavgm.init(fed, model_weights(fed.model)), fedavg.init(reference, model_weights(reference.model))
    for t in (1, 2, 3):
        a, _ = fedavgm.round(fed, a, t)
        b, _ = fedavg.round(reference, b, t)
    assert all(torch.allclose(a["global"][k], b["global"][k], atol=1e-6) for k in b["global"])
