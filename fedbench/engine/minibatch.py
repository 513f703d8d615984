"""Gathering minibatches from the device-resident data."""

from __future__ import annotations

import torch


def gather_minibatch(x_all: torch.Tensor, y_all: torch.Tensor, idx: torch.Tensor):
    """The minibatches ``x`` ``[n, B, ...]`` and ``y`` ``[n, B]`` of the global rows ``idx`` ``[n, B]``."""
    flat = idx.reshape(-1)
    return x_all.index_select(0, flat).view(*idx.shape, *x_all.shape[1:]), y_all.index_select(0, flat).view(idx.shape)


