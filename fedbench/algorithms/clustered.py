"""Server-side pieces shared by the clustered baselines (FeSEM, IFCA, CFL): fresh or perturbed
centre models, stacking, per-centre averaging, flattened parameters, assignment logs."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from fedbench.algorithms.base import Federation
from fedbench.engine.weights import (
    Weights,
    model_weights,
    parameter_names,
    rows,
    weighted_average,
)


def fresh_weights(fed: Federation, seed: int) -> Weights:
    """The model template re-initialised (every ``reset_parameters``) under ``seed``, on fed's device."""
    clone = copy.deepcopy(fed.model).to("cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in clone.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    return {k: v.to(fed.device) for k, v in model_weights(clone).items()}


def perturbed(single: Weights, std: float, seed: int) -> Weights:
    """``single`` + N(0, std^2) on every floating tensor (own seeded generator)."""
    g = torch.Generator().manual_seed(seed)
    return {
        k: v + std * torch.randn(v.shape, generator=g).to(v) if v.is_floating_point() else v.clone()
        for k, v in single.items()
    }


def stack(models: list[Weights]) -> Weights:
    return {k: torch.stack([m[k] for m in models]) for k in models[0]}


def cluster_average(
    fed: Federation, centres: Weights, trained: Weights, chosen: torch.Tensor, choice: torch.Tensor
) -> Weights:
    """Every centre with members <- sample-weighted average of its members' trained models; others kept."""
    out = {k: v.clone() for k, v in centres.items()}
    counts = fed.data.train.counts[chosen]
    for c in torch.unique(choice).tolist():
        members = (choice == c).nonzero().flatten()
        avg = weighted_average(rows(trained, members), counts[members])
        for k, value in out.items():
            value[c] = avg[k]
    return out


def assignment_frame(history: list[tuple[int, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """(round, clients, clusters) records -> long DataFrame with columns round, client, cluster."""
    if not history:
        return pd.DataFrame({"round": [], "client": [], "cluster": []}, dtype=int)
    return pd.DataFrame({
        "round": np.concatenate([np.full(len(c), t) for t, c, _ in history]),
        "client": np.concatenate([c for _, c, _ in history]),
        "cluster": np.concatenate([a for _, _, a in history]),
    })


def flat(fed: Federation, weights: Weights) -> torch.Tensor:
    """[n, P] flattened parameters (buffers excluded) of a stacked dict."""
    return torch.cat([weights[k].flatten(1).to(torch.float32) for k in parameter_names(fed.model)], 1)
