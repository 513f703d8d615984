"""Hand-written batched step for plain ``[Flatten,] Linear, ReLU, ..., Linear`` stacks (``mlr``, ``mlp``).

Forward with ``baddbmm``, the softmax cross-entropy gradient by hand, then layer by layer
from the top the input gradient (with the old weights) and a fused in-place SGD update: the
weight gradient goes straight into the update (``baddbmm_``), so no gradient tensor is
written and read back.  On the CPU the step is bound by streaming the weights from memory;
this made it about 3x faster than the generic ``vmap`` step (784-200-10, 2-core EPYC).
Called like :func:`fedbench.engine.vectorised.vmap_step` (:mod:`fedbench.engine.step_args`).
"""

from __future__ import annotations

import torch
from torch import nn

from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.minibatch import gather_minibatch
from fedbench.engine.step_args import Minibatch, StepState


def linear_stack(model: nn.Module, input_dims: int) -> list[tuple[str, str]] | None:
    """``(weight, bias)`` parameter names of the Linear layers if ``model`` is
    ``Sequential([Flatten(),] Linear, ReLU, Linear, ..., Linear)`` with biases (Flatten needed
    unless samples have ``input_dims`` 1), else None."""
    if not isinstance(model, nn.Sequential):
        return None
    mods = list(model.named_children())
    if mods and isinstance(mods[0][1], nn.Flatten) and (mods[0][1].start_dim, mods[0][1].end_dim) == (1, -1):
        mods = mods[1:]
    elif input_dims != 1:
        return None
    linear, relu = mods[0::2], mods[1::2]
    if len(linear) != len(relu) + 1 or not all(isinstance(m, nn.ReLU) for _, m in relu):
        return None
    if not all(isinstance(m, nn.Linear) and m.bias is not None for _, m in linear):
        return None
    return [(f"{name}.weight", f"{name}.bias") for name, _ in linear]


def linear_stack_forward(layers, params, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Batched forward of a Linear/ReLU stack over a leading client axis: every layer's input
    ``[n, B, width]`` (the ReLU outputs, for the backward pass) and the logits."""
    acts = [x.flatten(2)]
    for i, (w, b) in enumerate(layers):
        z = torch.baddbmm(params[b].unsqueeze(1), acts[-1], params[w].mT)
        acts.append(z.relu_() if i < len(layers) - 1 else z)
    logits = acts.pop()
    return acts, logits


def mlp_step(layers, data: FederatedData, state: StepState, batch: Minibatch, hp: LocalSGD) -> None:
    """:func:`~fedbench.engine.vectorised.vmap_step` for a Linear/ReLU stack (``layers`` from :func:`linear_stack`), by hand:
    forward with ``baddbmm``, softmax cross-entropy gradient, then layer by layer from the top
    the input gradient (with the old weights) and the fused in-place SGD update."""
    params, mask = state.params, batch.mask
    x, y = gather_minibatch(data.x, data.y, batch.idx)
    acts, logits = linear_stack_forward(layers, params, x)
    log_p = logits.log_softmax(-1)
    per_sample = mask / mask.sum(1, keepdim=True).clamp_min(1.0)  # d(masked mean) / d(sample loss)
    nll = log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1).neg_()
    state.loss_sum.add_((nll * per_sample).sum(1))
    dz = log_p.exp_()  # d loss / d logits = (softmax - onehot) * per_sample
    dz.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(nll, -1.0).unsqueeze(-1)).mul_(per_sample.unsqueeze(-1))
    for i in reversed(range(len(layers))):
        w, b = layers[i]
        a = acts[i]
        d_in = torch.bmm(dz, params[w]) if i else None  # before the update changes the weights
        _sgd_update(w, state, lambda out, beta, alpha: out.baddbmm_(dz.mT, a, beta=beta, alpha=alpha), hp)
        g_b = dz.sum(1)
        _sgd_update(b, state, lambda out, beta, alpha: out.mul_(beta).add_(g_b, alpha=alpha), hp)
        if i:
            dz = d_in.mul_(a > 0)  # through the ReLU


def _sgd_update(name: str, state: StepState, accumulate, hp: LocalSGD) -> None:
    """``torch.optim.SGD`` step of ``state.params[name]`` in place on grad + mu (p - anchor), where
    ``accumulate(out, beta, alpha)`` sets out = beta * out + alpha * grad in place."""
    momentum, anchor = state.momentum, state.anchor
    lr, mom, wd, mu = hp.lr, hp.momentum, hp.weight_decay, hp.prox_mu
    p = state.params[name]
    if momentum is None:  # p = (1 - lr (wd + mu)) p - lr grad + lr mu anchor
        accumulate(p, 1.0 - lr * (wd + mu), -lr)
        if mu:
            p.add_(anchor[name], alpha=lr * mu)
        return
    buf = momentum[name]  # starts at zero: the first step gives buf = grad + ..., as torch.optim.SGD
    accumulate(buf, mom, 1.0)
    if wd + mu:
        buf.add_(p, alpha=wd + mu)
    if mu:
        buf.add_(anchor[name], alpha=-mu)
    p.add_(buf, alpha=-lr)


