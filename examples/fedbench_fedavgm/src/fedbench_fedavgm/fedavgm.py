"""FedAvgM: FedAvg with server momentum (Hsu, Qi and Brown 2019, "Measuring the effects of
non-identical data distribution for federated visual classification", Sec. 3).

Every round the sampled clients run local SGD from the global model w as in FedAvg; the server
takes their sample-weighted average w̄ and treats Δ = w - w̄ as a gradient:

    v <- beta * v + Δ,        w <- w - server_lr * v.

beta = 0 and server_lr = 1 is FedAvg.  The velocity v is part of the state, so a resumed run
continues with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.weights import Weights, broadcast, parameter_names, shared


@dataclass(frozen=True)
class FedAvgM(Algorithm):
    scored_models = "global"  # every client is scored with the one server model
    server_momentum: float
    server_lr: float

    @classmethod
    def workload(cls, params: dict, training: dict) -> Workload:
        """What a round trains, as the cost model counts it (Hsu et al. Sec. 3): the sampled clients run
        ``local_epochs`` epochs of local SGD, as in FedAvg; the server step adds no training."""
        return Workload(local_passes=training["local_epochs"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        names = parameter_names(fed.model)  # buffers (BatchNorm statistics) are averaged, not moved
        return {"global": initial, "velocity": {k: torch.zeros_like(initial[k]) for k in names}}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        trained, loss = fed.train_clients(broadcast(state["global"], len(chosen)), chosen)
        average = fed.average(trained, chosen)
        velocity = {k: self.server_momentum * v + (state["global"][k] - average[k]) for k, v in state["velocity"].items()}
        new = {k: state["global"][k] - self.server_lr * velocity[k] if k in velocity else average[k] for k in average}
        return {"global": new, "velocity": velocity}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(state["global"], fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("fedavgm", bounds={"server_momentum": "[0, 1)", "server_lr": "> 0"})
def fedavgm(*, server_momentum: float = 0.9, server_lr: float = 1.0) -> FedAvgM:
    """FedAvgM (Hsu et al. 2019): FedAvg whose server step has momentum ``server_momentum`` and
    learning rate ``server_lr``."""
    return FedAvgM(server_momentum=server_momentum, server_lr=server_lr)
