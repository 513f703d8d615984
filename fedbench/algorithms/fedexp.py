"""FedExP — speeding up federated averaging via extrapolation (Jhunjhunwala et al., ICLR'23,
Eq. (8)), as the FedMR repository runs it (``Training_FedExP.py``, notes §2.6).

Sampled clients train from the global model w; with Delta_i = w_i - w and weights
p_i = n_i / n, the server forms Delta_bar = sum_S p_i Delta_i / sum_S p_i and the
extrapolated step size

    eta_g = max(1, sum_S p_i ||Delta_i||^2 / (2 sum_S p_i (||Delta_bar||^2 + epsilon m))),

(norms over the model's parameters; epsilon m is the code's 0.1 m), then w <- w + eta_g Delta_bar
on the whole state dict.  eta_g is 1 when the updates agree and grows when they cancel.
The scored model is the average of the last two iterates (w_t + w_{t+1}) / 2, as the code evaluates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.engine.weights import Weights, broadcast, shared, parameter_names, weighted_average
from fedbench.registry.search_space import LogRange


def fedexp_step_size(deltas: Weights, weights: torch.Tensor, names: list[str], epsilon: float) -> tuple[float, Weights]:
    """eta_g and Delta_bar of stacked client updates ``deltas`` with weights ``weights`` (the
    ``names`` entries enter the norms); the denominator carries ``epsilon`` times the number of clients."""
    mean = weighted_average(deltas, weights)
    w = weights.to(torch.float64) / weights.to(torch.float64).sum()
    spread = sum((w * deltas[n].to(torch.float64).flatten(1).pow(2).sum(1)).sum() for n in names)
    norm = sum(mean[n].to(torch.float64).pow(2).sum() for n in names)
    eta = max(1.0, float(0.5 * spread / (norm + epsilon * len(weights))))
    return eta, mean


@dataclass(frozen=True)
class FedExP(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    epsilon: float = 0.1
    scored: Literal["last_two", "last"] = "last_two"

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "previous": initial, "eta": 1.0}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        w = state["global"]
        trained, loss = fed.train_clients(broadcast(w, len(chosen)), chosen)
        deltas = {k: trained[k].to(torch.float64) - w[k].to(torch.float64) for k in w if w[k].is_floating_point()}
        eta, mean = fedexp_step_size(deltas, fed.data.train.counts[chosen], parameter_names(fed.model), self.epsilon)
        averaged = fed.average(trained, chosen)
        new = {k: (w[k] + eta * mean[k]).to(w[k].dtype) if k in mean else averaged[k] for k in w}
        return {"global": new, "previous": w, "eta": eta}, loss

    def _scored(self, state: dict) -> Weights:
        if self.scored == "last":
            return state["global"]
        g, p = state["global"], state["previous"]
        return {k: (g[k] + p[k]) / 2 if g[k].is_floating_point() else g[k] for k in g}

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(self._scored(state), fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return self._scored(state)


@ALGORITHMS.register("fedexp", search={"epsilon": LogRange(0.001, 1)})
def fedexp(*, epsilon: float = 0.1, scored: Literal["last_two", "last"] = "last_two") -> FedExP:
    """FedExP (Jhunjhunwala et al. 2023) with the code's ``epsilon`` (0.1, times the number of
    sampled clients); ``scored``: ``last_two`` (average of the last two iterates, the code) or ``last``."""
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if scored not in ("last_two", "last"):
        raise ValueError(f"scored must be 'last_two' or 'last', got {scored!r}")
    return FedExP(epsilon=float(epsilon), scored=scored)
