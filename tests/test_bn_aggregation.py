"""BatchNorm at aggregation (``training.bn_aggregation``) on a hand-made two-client case.

A stand-in trainer returns fixed "trained" models, so every aggregated number is derived by
hand: clients with 1 and 3 training samples, so the sample-weighted average is (a + 3 b) / 4.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.config.cells import ConfigError
from fedbench.planning.validate import check_config
from fedbench.engine.local_sgd import LocalSGD
from conftest import make_data, make_federation

TINY_CONFIG = Path(__file__).parent / "data" / "tiny_config.yaml"

# trained models of client 0 and client 1 (a stand-in for local SGD)
TRAINED = {
    "0.weight": torch.tensor([[[2.0, 0.0]], [[6.0, 4.0]]]),
    "0.bias": torch.tensor([[1.0], [5.0]]),
    "1.weight": torch.tensor([[4.0], [8.0]]),
    "1.bias": torch.tensor([[-4.0], [0.0]]),
    "1.running_mean": torch.tensor([[10.0], [2.0]]),
    "1.running_var": torch.tensor([[3.0], [7.0]]),
    "1.num_batches_tracked": torch.tensor([1, 3]),
}


class FixedTrainer:
    """Returns ``TRAINED``'s rows of the requested clients and records the models it started from."""

    def __init__(self):
        self.starts, self.clients = [], []

    def train(self, start, clients, plan, hp, center=None):
        self.starts.append({k: v.clone() for k, v in start.items()})
        self.clients.append(clients.tolist())
        return {k: v[clients] for k, v in TRAINED.items()}, torch.zeros(len(clients))


def federation(mode: str):
    model = nn.Sequential(nn.Linear(2, 1), nn.BatchNorm1d(1))
    fed = make_federation(make_data([1, 3], dim=2, num_classes=2), model, LocalSGD(epochs=1, batch_size=2, lr=0.1))
    fed.trainer = FixedTrainer()
    fed.bn_aggregation = mode
    return fed, model


def two_rounds(mode: str):
    fed, model = federation(mode)
    algorithm = ALGORITHMS["fedavg"]()
    state = algorithm.init(fed, {k: v.detach().clone() for k, v in model.state_dict().items()})
    state, _ = algorithm.round(fed, state, 1)
    algorithm.round(fed, state, 2)
    return fed, state, algorithm.client_models(fed, state, 2)


def test_average_mode_averages_everything():
    fed, state, models = two_rounds("average")
    g = state["global"]
    assert torch.equal(g["0.weight"], torch.tensor([[5.0, 3.0]]))  # (2 + 3*6)/4, (0 + 3*4)/4
    assert torch.equal(g["1.weight"], torch.tensor([7.0]))  # (4 + 24)/4
    assert torch.equal(g["1.running_mean"], torch.tensor([4.0]))  # (10 + 6)/4
    assert torch.equal(g["1.running_var"], torch.tensor([6.0]))  # (3 + 21)/4
    assert int(g["1.num_batches_tracked"]) == 3  # integer buffers take the maximum
    second_start = fed.trainer.starts[1]
    for k in g:  # round 2 starts both clients from the global model
        assert torch.equal(second_start[k], torch.stack([g[k], g[k]])), k
    assert torch.equal(models["1.running_mean"], torch.tensor([[4.0], [4.0]]))


def test_local_stats_keep_running_statistics_per_client():
    fed, state, models = two_rounds("local_stats")
    assert fed.local_names == ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    second_start = fed.trainer.starts[1]
    assert torch.equal(second_start["1.running_mean"], TRAINED["1.running_mean"])  # each client's own
    assert torch.equal(second_start["1.num_batches_tracked"], TRAINED["1.num_batches_tracked"])
    assert torch.equal(second_start["1.weight"], torch.tensor([[7.0], [7.0]]))  # affine parameters averaged
    assert torch.equal(models["1.running_var"], TRAINED["1.running_var"])
    assert torch.equal(models["0.bias"], torch.tensor([[4.0], [4.0]]))  # (1 + 15)/4


def test_fedbn_keeps_every_batchnorm_entry_local():
    fed, state, models = two_rounds("local")
    assert set(fed.local_names) == {"1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"}
    for k in fed.local_names:
        assert torch.equal(models[k], TRAINED[k]), k
    assert torch.equal(models["0.weight"], torch.tensor([[[5.0, 3.0]], [[5.0, 3.0]]]))  # Linear averaged


def test_local_stats_of_clients_not_sampled_stay_as_they_were():
    """Partial participation (one of the two clients a round): only the sampled client's kept
    statistics take its trained values; the other client keeps what it had (the initial
    running_mean 0 and running_var 1 until it is first sampled)."""
    fed, model = federation("local_stats")
    fed.participation = 0.5
    algorithm = ALGORITHMS["fedavg"]()
    state = algorithm.init(fed, {k: v.detach().clone() for k, v in model.state_dict().items()})
    state, _ = algorithm.round(fed, state, 1)
    [chosen] = fed.trainer.clients[0]
    other = 1 - chosen
    kept = state["local"]
    assert torch.equal(kept["1.running_mean"][chosen], TRAINED["1.running_mean"][chosen])
    assert torch.equal(kept["1.running_var"][chosen], TRAINED["1.running_var"][chosen])
    assert torch.equal(kept["1.running_mean"][other], torch.tensor([0.0]))
    assert torch.equal(kept["1.running_var"][other], torch.tensor([1.0]))


def test_unknown_mode_is_refused():
    fed, _ = federation("average")
    with pytest.raises(ValueError, match="valid choices: average, local_stats, local"):
        dataclasses.replace(fed, bn_aggregation="sometimes")


def test_planning_refuses_local_bn_for_algorithms_that_ignore_it():
    config = yaml.safe_load(TINY_CONFIG.read_text())
    experiment = next(iter(config["experiments"].values()))
    experiment.setdefault("training", {})["bn_aggregation"] = "local"
    config["algorithms"]["ifca_x"] = {"method": "ifca"}
    experiment["grid"][0]["algorithms"] = ["ifca_x"]
    with pytest.raises(ConfigError, match=r"bn_aggregation: 'local' needs .* 'ifca_x' \(ifca\) does not"):
        check_config(config)
