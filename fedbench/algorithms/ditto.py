"""Ditto — Li, Hu, Beirami, Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization" (ICML 2021), Algorithm 1.

The global model w is trained by FedAvg; every sampled client also trains its personal model v_k
on F_k(v) + lam/2 ||v - w^t||^2 (w^t: the global model the round started from) for the same
number of local epochs.  Clients are scored with their personal models.  lam -> infinity pins
v_k to w (FedAvg's model); lam = 0 is local training.  FeMAM (App. C.1) uses lam = 0.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.weights import Weights, broadcast, put_rows, rows
from fedbench.registry.search_space import LogRange


@dataclass(frozen=True)
class Ditto(Algorithm):
    lam: float = 0.1

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Every sampled client trains E epochs of the global model and E of its personal model (Li et al.
        2021, Algorithm 1: the global update, then the personal one): 2 E passes a round."""
        return Workload(local_passes=2 * training["local_epochs"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "personal": broadcast(initial, fed.num_clients)}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        start = broadcast(state["global"], len(chosen))
        trained, _ = fed.train_clients(start, chosen, center=start)
        hp = fed.with_local(prox_mu=self.lam)
        personal, loss = fed.train_clients(rows(state["personal"], chosen), chosen, hp=hp, center=start)
        return {"global": fed.average(trained, chosen), "personal": put_rows(state["personal"], chosen, personal)}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["personal"]

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("ditto", search={"lam": LogRange(0.01, 10)})
def ditto(*, lam: float = 0.1) -> Ditto:
    """Ditto (Li et al. 2021): FedAvg's global model plus personal models with lam/2 ||v - w||^2."""
    if lam < 0:
        raise ValueError(f"Ditto lam must be >= 0, got {lam}")
    return Ditto(lam=lam)
