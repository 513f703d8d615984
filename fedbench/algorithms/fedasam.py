"""FedASAM — FedAvg with adaptive sharpness-aware local steps (Caldarola et al., ECCV'22), as the
FedMR repository runs it (``Training_FedASAM.py``, notes §2.6): sampled clients train from the
global model with ASAM (rho, eta; :mod:`fedbench.engine.sam_step`), the server takes the
sample-weighted average.  The code hard-codes rho = 0.1, eta = 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.engine.custom_step import train_with_gradient
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.sam_step import asam_step
from fedbench.engine.weights import Weights, broadcast, shared
from fedbench.registry.search_space import LogRange


@dataclass(frozen=True)
class FedASAM(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    rho: float = 0.1
    eta: float = 0.0

    ignored_training = {"channels_last": f"FedASAM's two-pass step {VMAP}"}
    harmless_training = {"channels_last": False}

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial}  # tensors only: the state is checkpointed (torch.save)

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        plan = fed.batch_plan(chosen, fed.local.epochs, fed.local.batch_size)
        start = broadcast(state["global"], len(chosen))
        step = asam_step(fed.model, self.rho, self.eta)
        trained, loss = train_with_gradient(fed.model, fed.data, start, chosen, plan, fed.local, step, fed.numerics)
        return {**state, "global": fed.average(trained, chosen)}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(state["global"], fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("fedasam", search={"rho": LogRange(0.01, 1)})
def fedasam(*, rho: float = 0.1, eta: float = 0.0) -> FedASAM:
    """FedASAM (Caldarola et al. 2022): ASAM local steps with neighbourhood size ``rho`` and
    normalisation offset ``eta`` (defaults: the FedMR repository's hard-coded 0.1 and 0)."""
    if rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    return FedASAM(rho=float(rho), eta=float(eta))
