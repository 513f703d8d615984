"""FedMut — generalised federated learning via stochastic mutation (Hu et al., AAAI'24), as the
FedMR and FedMut repositories run it (``Training_FedMut.py``, notes §2.5).

Every round the m intermediate models (one per sampled client, stacked) are trained, the
global model is their uniform mean w_glob, and Delta = w_glob - w_old is the round's global
update.  The next round's models are mutations of w_glob along Delta:

    w_j[k] = w_glob[k] + alpha * Delta[k] * c_{k,j},

independently for every state-dict entry k, where the m coefficients c_{k,.} are floor(m/2)
pairs, each (+1, -1 + rate) or (-1 + rate, +1) with probability 1/2, shuffled (an odd m leaves
the last model at w_glob).  The acceleration rate decays linearly to zero at the bound:
rate = acc_rate (1 - min(r / bound, 1)) (r = 0-based round), so the models' mean is
w_glob + alpha Delta rate/2 (for even m), and w_glob once r >= bound.
Integer buffers (BatchNorm's ``num_batches_tracked``) are not mutated: they take w_glob's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.algorithms.fedmr import uniform_average
from fedbench.engine.weights import Weights, broadcast, shared

#: the two repositories' defaults (notes §2.1): radius alpha, acceleration rate, bound
PRESETS = {"fedmr": (5.0, 0.3, 100), "fedmut": (4.0, 0.3, 50)}


def acceleration_rate(round_index: int, acc_rate: float, bound: int) -> float:
    """rate = acc_rate * (1 - min(r / bound, 1)) for the 0-based round r."""
    return acc_rate * (1.0 - min(round_index / bound, 1.0))


def mutation_coefficients(m: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """The m coefficients of one state-dict entry: shuffled pairs (+1, -1 + rate) / (-1 + rate, +1),
    and 0 for the last model when m is odd."""
    pairs = m // 2
    flip = torch.rand(pairs, generator=generator) < 0.5
    first = torch.where(flip, torch.full((pairs,), -1.0 + rate), torch.ones(pairs))
    second = torch.where(flip, torch.ones(pairs), torch.full((pairs,), -1.0 + rate))
    coef = torch.stack([first, second], 1).reshape(-1)
    coef = coef[torch.randperm(2 * pairs, generator=generator)]
    return torch.cat([coef, torch.zeros(m - 2 * pairs)])


def mutate(global_: Weights, delta: Weights, m: int, radius: float, rate: float, generator: torch.Generator) -> Weights:
    """The m mutated models around ``global_`` (stacked)."""
    out = {}
    for k, w in global_.items():
        if not w.is_floating_point():
            out[k] = w.unsqueeze(0).expand(m, *w.shape).clone()
            continue
        c = mutation_coefficients(m, rate, generator).to(w.device, w.dtype).view(m, *([1] * w.dim()))
        out[k] = w.unsqueeze(0) + radius * delta[k].unsqueeze(0) * c
    return out


@dataclass(frozen=True)
class FedMut(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    radius: float
    acc_rate: float
    bound: int

    def init(self, fed: Federation, initial: Weights) -> dict:
        m = max(1, round(fed.participation * fed.num_clients))
        return {"models": broadcast(initial, m), "global": initial}

    def round(self, fed: Federation, state: dict, round_: int):
        m = next(iter(state["models"].values())).shape[0]
        chosen = fed.sample_clients()
        trained, loss = fed.train_clients(state["models"], chosen)
        global_ = uniform_average(trained)
        delta = {k: v - state["global"][k] for k, v in global_.items() if v.is_floating_point()}
        rate = acceleration_rate(round_ - 1, self.acc_rate, self.bound)
        models = mutate(global_, delta, m, self.radius, rate, fed.generator)
        return {"models": models, "global": global_}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(state["global"], fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("fedmut", search={"momentum": [0.0, 0.5, 0.9]})
def fedmut(
    *,
    preset: Literal["fedmr", "fedmut"] = "fedmr",
    radius: float | None = None,
    acc_rate: float | None = None,
    bound: int | None = None,
) -> FedMut:
    """FedMut (Hu et al. 2024) with mutation radius alpha (``radius``), acceleration rate
    ``acc_rate`` and its ``bound`` (rounds until it reaches 0); unset values come from ``preset``:
    ``fedmr`` (the FedMR repository: 5.0, 0.3, 100) or ``fedmut`` (the FedMut repository: 4.0, 0.3, 50)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    r0, a0, b0 = PRESETS[preset]
    radius, acc_rate, bound = (r0 if radius is None else radius), (a0 if acc_rate is None else acc_rate), (b0 if bound is None else bound)
    if radius <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if not 0.0 <= acc_rate < 2.0:
        raise ValueError(f"acc_rate must lie in [0, 2), got {acc_rate}")
    if bound < 1:
        raise ValueError(f"bound must be >= 1 round, got {bound}")
    return FedMut(radius=float(radius), acc_rate=float(acc_rate), bound=int(bound))
