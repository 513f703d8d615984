"""Local training whose gradient is not plain cross-entropy SGD, for all clients at once.

Methods that change the local step (FedASAM's two-pass sharpness-aware step, FedGen's
generator-regularised loss) provide only a *gradient function*
``grad_fn(params, buffers, x, y, mask) -> (grads, loss)`` over the stacked client axis
(``[k, ...]`` rows; built with ``torch.func.vmap``); this module runs it on a
:class:`~fedbench.engine.batches.BatchPlan` with the same semantics as the vectorised trainer:
per-client epochs of fresh permutations, short last batches masked sample-wise, clients ordered
by their number of steps so that those still training at a step are a prefix, and
``torch.optim.SGD`` (momentum with fresh buffers, weight decay) applied to the returned gradient.
BatchNorm buffers are updated in place by the forward passes the gradient function makes.
``numerics``: the gradient function runs in bfloat16 autocast under ``bf16`` (its gradients and
the SGD update stay FP32) and compiled under ``compile``; ``channels_last`` cannot apply (``vmap``
takes no memory format), so the methods with custom steps declare it ignored.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedbench.engine.batches import BatchPlan
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.minibatch import gather_minibatch
from fedbench.engine.numerics import FP32, Numerics, fp32_batchnorm
from fedbench.engine.step_runner import EagerFallback
from fedbench.engine.weights import Weights, parameter_names

GradFn = Callable[[Weights, Weights, torch.Tensor, torch.Tensor, torch.Tensor], tuple[Weights, torch.Tensor]]


def masked_cross_entropy(model: nn.Module):
    """``loss(params, buffers, x, y, mask)``: one client's mean cross-entropy over its real samples."""

    def loss(params: Weights, buffers: Weights, x, y, mask):
        logits = functional_call(model, {**params, **buffers}, (x,))
        per_sample = F.cross_entropy(logits.float(), y, reduction="none")  # FP32 logits (a no-op without autocast)
        return (per_sample * mask).sum() / mask.sum().clamp_min(1.0)

    return loss


@torch.no_grad()
def train_with_gradient(
    model: nn.Module,
    data: FederatedData,
    start: Weights,
    clients: torch.Tensor,
    plan: BatchPlan,
    hp: LocalSGD,
    grad_fn: GradFn,
    numerics: Numerics | None = None,
) -> tuple[Weights, torch.Tensor]:
    """Run ``plan`` from the stacked ``start`` of ``clients`` with SGD on ``grad_fn``'s gradients;
    returns the trained stacked weights and every client's mean training loss."""
    if hp.prox_mu:
        raise ValueError("custom local steps do not take a proximal term")
    device = data.x.device
    numerics = numerics or FP32
    if numerics.compile:
        grad_fn = EagerFallback(grad_fn)
    if numerics.bf16:
        fp32_batchnorm(model)  # vmap's batch norm takes no bfloat16 input beside FP32 statistics
    model.train()
    names = parameter_names(model)
    n = len(clients)
    if n == 0:
        return {k: v.clone() for k, v in start.items()}, torch.zeros(0, device=device)
    by_steps = torch.argsort(plan.steps_per_epoch, descending=True, stable=True)
    at = by_steps.to(device)
    weights = {k: v.index_select(0, at).clone() for k, v in start.items()}
    params = {k: weights[k] for k in names}
    buffers = {k: v for k, v in weights.items() if k not in params}
    momentum = {k: torch.zeros_like(v) for k, v in params.items()} if hp.momentum else None
    counts = plan.counts[by_steps]
    order = plan.order[by_steps]
    batch, epochs = plan.batch_size, plan.epochs
    steps_per_epoch = ((counts + batch - 1) // batch).tolist()
    active = [sum(s < k for k in steps_per_epoch) for s in range(steps_per_epoch[0])]
    width = len(active) * batch
    order = F.pad(order, (0, max(width - order.shape[2], 0)))[:, :, :width].to(device)
    own = data.train.index[clients[by_steps.to(clients.device)]]
    rows = torch.gather(own[:, None, :].expand(-1, epochs, -1), 2, order.clamp(max=own.shape[1] - 1))
    rows = rows.view(n, epochs, len(active), batch).permute(1, 2, 0, 3)
    mask = (torch.arange(width, device=device) < counts.to(device)[:, None]).float()
    mask = mask.view(n, len(active), batch).transpose(0, 1)
    loss_sum = torch.zeros(n, device=device)
    for e in range(epochs):
        for s, k in enumerate(active):
            p = {name: v[:k] for name, v in params.items()}
            b = {name: v[:k] for name, v in buffers.items()}
            x, y = gather_minibatch(data.x, data.y, rows[e, s, :k])
            with torch.enable_grad(), numerics.autocast(device):
                grads, loss = grad_fn(p, b, x, y, mask[s, :k])
            loss_sum[:k] += loss.detach()
            g = [grads[name].detach() for name in p]
            pv = list(p.values())
            if hp.weight_decay:
                torch._foreach_add_(g, pv, alpha=hp.weight_decay)
            if momentum is not None:
                buf = [momentum[name][:k] for name in p]
                torch._foreach_mul_(buf, hp.momentum)
                torch._foreach_add_(buf, g)
                g = buf
            torch._foreach_add_(pv, g, alpha=-hp.lr)
    steps = torch.tensor(steps_per_epoch, device=device, dtype=torch.float32) * epochs
    out = {k: torch.empty_like(v) for k, v in start.items()}
    losses = torch.empty(n, device=device)
    for k, v in weights.items():
        out[k].index_copy_(0, at, v)
    losses.index_copy_(0, at, loss_sum / steps.clamp_min(1))
    return out, losses
