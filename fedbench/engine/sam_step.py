"""Adaptive sharpness-aware minimisation (ASAM, Kwon et al. 2021, Eq. (11)-(12)) as a vectorised
local step (FedASAM, Caldarola et al. 2022; the FedMR repository's ``utils/sam_minimizers.py``).

Per client and minibatch: g = grad L(w); with the normalisation operator
T_w = |w| + eta on parameters whose name contains "weight" and T_w = 1 elsewhere,
the ascent epsilon = rho T_w^2 g / ||T_w g|| (one norm over all the client's parameters);
the descent uses the gradient at the perturbed point, g' = grad L(w + epsilon), in an SGD step
from w.  Both passes run the model in training mode (BatchNorm statistics move twice per step,
as the two forward passes of the released code do).  The reported loss is the first pass's.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import grad_and_value, vmap

from fedbench.engine.custom_step import GradFn, masked_cross_entropy
from fedbench.engine.weights import Weights


def asam_scale(name: str, w: torch.Tensor, eta: float) -> torch.Tensor | None:
    """T_w for one parameter: |w| + eta for "weight" parameters, None (identity) otherwise."""
    return w.abs() + eta if "weight" in name else None


def asam_perturbation(params: Weights, grads: Weights, rho: float, eta: float, eps: float = 1e-16) -> Weights:
    """epsilon = rho T_w^2 g / (||T_w g|| + eps) for stacked ``params``/``grads`` (norm per client row);
    eps = 1e-16 is the released code's guard against a zero gradient (``wgrad_norm + 1.e-16``)."""
    scaled = {}
    for n, g in grads.items():
        t = asam_scale(n, params[n], eta)
        scaled[n] = g if t is None else t * g
    norm = torch.sqrt(sum(v.reshape(len(v), -1).pow(2).sum(1) for v in scaled.values()))  # [k]
    out = {}
    for n, tg in scaled.items():
        t = asam_scale(n, params[n], eta)
        e = tg if t is None else t * tg
        out[n] = rho * e / (norm + eps).view(-1, *([1] * (e.dim() - 1)))
    return out


def asam_gradient(grad_fn: Callable, rho: float, eta: float) -> Callable:
    """Wrap a stacked gradient function ``grad_fn(params, *args) -> (grads, loss)`` into ASAM's:
    the gradient at w + epsilon(w), and the loss at w."""

    def step(params: Weights, *args):
        grads, loss = grad_fn(params, *args)
        eps = asam_perturbation(params, grads, rho, eta)
        perturbed = {n: p + eps[n] for n, p in params.items()}
        grads2, _ = grad_fn(perturbed, *args)
        return grads2, loss

    return step


def asam_step(model: nn.Module, rho: float, eta: float) -> GradFn:
    """ASAM's gradient for every client row at once (cross-entropy on masked minibatches)."""
    plain = vmap(grad_and_value(masked_cross_entropy(model)), randomness="different")
    return asam_gradient(plain, rho, eta)
