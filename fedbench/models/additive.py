"""FeMAM's additive model (Chen et al., Eq. 2): a client's prediction is the sum over its levels
of the level models' outputs, sum_l a_l f(x; theta^(l)).

:class:`AdditiveLevels` holds ``n`` copies of a template under ``levels.{l}`` plus a buffer
``active`` (a_l in {0, 1}: a level a client pruned leaves its prediction by a_l = 0).  With
``trainable=True`` only the newest level ``levels.{n-1}`` has parameters; the earlier ones are
frozen (parameters held as buffers, :func:`~fedbench.models.frozen.freeze_parameters`) and
stay in eval mode even when the module is put in training mode, so their BatchNorm uses running
statistics (notes §1.4, ``clients.train_model``).  ``combine="mean"`` divides the sum by the
number of active levels (the released code's loss on the mean of the logits, notes §1.7.1).

The forward reads ``active`` as ``[clients, levels]`` rows -- one row for one client's model (also
under ``vmap``), k rows in the *wide* model of :mod:`fedbench.engine.wide_model`, where every
level's output ``[B, k*C]`` holds the k clients' logits side by side -- so the model folds
(``wide_buffers``): each client's active levels are a per-client mask on the summed output.

``level_logits`` (None, or a :class:`~fedbench.engine.frozen_levels.LevelLogits` that FeMAM shares
between its models of 1..L levels): where set, evaluation runs the model level by level and keeps
each level's logits of the evaluated rows while the level's weights are the same tensors.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from fedbench.models.frozen import freeze_parameters

COMBINE = ("sum", "mean")


class AdditiveLevels(nn.Module):
    wide_buffers = ("active",)  # read per client by forward: widen may fold the model
    level_logits = None  # where evaluation keeps the levels' logits (module doc)

    def __init__(self, template: nn.Module, n_levels: int, combine: str = "sum", trainable: bool = True):
        super().__init__()
        if n_levels < 1:
            raise ValueError(f"an additive model needs >= 1 level, got {n_levels}")
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
        self.levels = nn.ModuleList(copy.deepcopy(template) for _ in range(n_levels))
        self.frozen = n_levels - 1 if trainable else n_levels
        for level in self.levels[: self.frozen]:
            freeze_parameters(level)
        self.combine = combine
        self.register_buffer("active", torch.ones(n_levels))

    def train(self, mode: bool = True):
        super().train(mode)
        for level in self.levels[: self.frozen]:
            level.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return combine_levels([level(x) for level in self.levels], self.active, self.combine)


def combine_levels(outputs: list[torch.Tensor], active: torch.Tensor, combine: str) -> torch.Tensor:
    """Eq. (2): sum_l a_l outputs[l] (``combine="mean"``: divided by the number of active levels).
    ``outputs[l]`` ``[B, k*C]`` (k clients' logits side by side; k = 1 for one client's model),
    ``active`` ``[k * levels]`` or ``[k, levels]`` (row j: client j's a_l)."""
    a = active.reshape(-1, len(outputs))  # [k, levels]
    batch = outputs[0].shape[0]
    return sum_levels([y.view(batch, a.shape[0], -1) for y in outputs], a, combine).reshape(batch, -1)


def sum_levels(outputs: list[torch.Tensor], a: torch.Tensor, combine: str) -> torch.Tensor:
    """:func:`combine_levels` on ``outputs[l]`` ``[..., k, C]`` (client j's logits at j on the
    second-last axis) with ``a`` ``[k, levels]``."""
    out = 0
    for l, y in enumerate(outputs):
        out = out + y * a[:, l, None]
    if combine == "mean":
        out = out / a.sum(1).clamp_min(1.0)[:, None]
    return out


def level_key(level: int, name: str) -> str:
    """The state-dict key of template entry ``name`` inside level ``level`` (0-based)."""
    return f"levels.{level}.{name}"


def level_weights(weights: dict[str, torch.Tensor], level: int) -> dict[str, torch.Tensor]:
    """Level ``level``'s entries of an additive model's (stacked) weights, named as in the template."""
    prefix = level_key(level, "")
    return {name[len(prefix):]: v for name, v in weights.items() if name.startswith(prefix)}


def additive_weights(levels: list[dict[str, torch.Tensor]], active: torch.Tensor) -> dict[str, torch.Tensor]:
    """Stacked weights of an :class:`AdditiveLevels` from per-level stacked template weights and
    ``active`` ``[clients, levels]``."""
    out = {level_key(l, k): v for l, weights in enumerate(levels) for k, v in weights.items()}
    out["active"] = active
    return out
