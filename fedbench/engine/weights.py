"""Model weights as plain ``dict[name, Tensor]`` (parameters and buffers), stacked along a client axis.

A *stacked* dict holds ``[C, ...]`` tensors, one row per client; a *single* dict
holds one model's tensors.  These helpers are the whole server-side vocabulary:
broadcast, gather rows, write rows back, weighted average.
"""

from __future__ import annotations

import torch
from torch import nn

Weights = dict[str, torch.Tensor]


def model_weights(model: nn.Module) -> Weights:
    """A detached copy of the model's parameters and buffers (a single dict)."""
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def parameter_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters()]


def broadcast(single: Weights, n: int) -> Weights:
    """``n`` copies of one model as a stacked dict."""
    return {k: v.unsqueeze(0).expand(n, *v.shape).clone() for k, v in single.items()}


def shared(single: Weights, n: int) -> Weights:
    """``n`` clients holding the same model, as a read-only stacked view (no copy: a global model
    scored for 100 clients of a 6.6 M-parameter CNN would otherwise take 2.6 GB).  Writing into it
    raises; ``evaluate_clients`` recognises it and runs the model once."""
    return {k: v.unsqueeze(0).expand(n, *v.shape) for k, v in single.items()}


def is_shared(stacked: Weights) -> bool:
    """True for a :func:`shared` view (every row the same storage)."""
    return all(v.dim() > 0 and v.stride(0) == 0 for v in stacked.values())


def rows(stacked: Weights, index: torch.Tensor) -> Weights:
    return {k: v[index] for k, v in stacked.items()}


def put_rows(stacked: Weights, index: torch.Tensor, values: Weights) -> Weights:
    """A copy of ``stacked`` with rows ``index`` replaced by ``values``."""
    out = {k: v.clone() for k, v in stacked.items()}
    for k in out:
        out[k][index] = values[k]
    return out


def weighted_average(stacked: Weights, weights: torch.Tensor) -> Weights:
    """Sum_c w_c * theta_c / Sum_c w_c over the client axis (FedAvg, McMahan et al. 2017, Alg. 1).

    Integer buffers (BatchNorm's ``num_batches_tracked``) take the maximum instead.
    """
    w = weights.to(torch.float64) / weights.to(torch.float64).sum()
    out = {}
    for k, v in stacked.items():
        if v.is_floating_point():
            shape = (-1,) + (1,) * (v.dim() - 1)
            out[k] = (v.to(torch.float64) * w.view(shape)).sum(0).to(v.dtype)
        else:
            out[k] = v.max(0).values
    return out
