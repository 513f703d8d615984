"""What one vectorised training step takes, grouped: the state it trains in place and the minibatch.

Every step of :mod:`fedbench.engine.vectorised` (and :func:`fedbench.engine.fused_mlp.mlp_step`)
is called as ``step(state, batch, hp)`` after its model and the :class:`FederatedData` are bound:
``state`` a :class:`StepState`, ``batch`` a :class:`Minibatch`, ``hp`` the round's
:class:`~fedbench.engine.local_sgd.LocalSGD` (the step reads ``lr``, ``momentum``,
``weight_decay`` and ``prox_mu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fedbench.engine.weights import Weights

if TYPE_CHECKING:
    from fedbench.engine.local_sgd import LocalSGD


@dataclass(frozen=True)
class StepState:
    """One row per client, updated in place by every step: parameters, BatchNorm buffers,
    momentum buffers (None without momentum), the proximal anchor (None without a proximal term)
    and the running sum of each client's step losses."""

    params: Weights
    buffers: Weights
    momentum: Weights | None
    anchor: Weights | None
    loss_sum: torch.Tensor

    def rows(self, lo: int, hi: int) -> StepState:
        """Rows ``lo:hi`` of every tensor (views: a step on them trains these rows in place)."""
        return StepState(
            params=_rows(self.params, lo, hi),
            buffers=_rows(self.buffers, lo, hi),
            momentum=_rows(self.momentum, lo, hi),
            anchor=_rows(self.anchor, lo, hi),
            loss_sum=self.loss_sum[lo:hi],
        )


@dataclass(frozen=True)
class Minibatch:
    """One step's samples: ``idx`` ``[n, B]`` global sample rows of each client, ``mask`` ``[n, B]``
    1 for real samples (0 for the padding of a short last batch)."""

    idx: torch.Tensor
    mask: torch.Tensor


def _rows(weights: Weights | None, lo: int, hi: int) -> Weights | None:
    return None if weights is None else {k: v[lo:hi] for k, v in weights.items()}


def sgd_update(state: StepState, grads: list[torch.Tensor], hp: LocalSGD) -> None:
    """``torch.optim.SGD`` (dampening 0, no Nesterov) on grad + wd p + mu (p - anchor), in place
    on every row of ``state.params`` and ``state.momentum``."""
    params, momentum, anchor = state.params, state.momentum, state.anchor
    lr, mom, wd, mu = hp.lr, hp.momentum, hp.weight_decay, hp.prox_mu
    p, g = list(params.values()), list(grads)
    if wd + mu:  # g += mu (p - anchor) + wd p, without a temporary for p - anchor
        torch._foreach_add_(g, p, alpha=wd + mu)
    if mu:
        torch._foreach_add_(g, list(anchor.values()), alpha=-mu)
    if momentum is not None:  # buffers start at zero: the first step gives buf = g, as torch.optim.SGD
        buf = list(momentum.values())
        torch._foreach_mul_(buf, mom)
        torch._foreach_add_(buf, g)
        g = buf
    torch._foreach_add_(p, g, alpha=-lr)
