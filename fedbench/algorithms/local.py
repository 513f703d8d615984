"""Local: every client trains its own model and never communicates (the no-federation baseline)."""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS, Federation
from fedbench.engine.weights import Weights, broadcast, put_rows, rows


@dataclass(frozen=True)
class Local:
    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"clients": broadcast(initial, fed.num_clients)}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        trained, loss = fed.train_clients(rows(state["clients"], chosen), chosen)
        return {"clients": put_rows(state["clients"], chosen, trained)}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["clients"]

    def global_model(self, fed: Federation, state: dict) -> None:
        return None


@ALGORITHMS.register("local")
def local() -> Local:
    """Local training only (each client's model on its own data; all start from the same init)."""
    return Local()
