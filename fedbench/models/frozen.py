"""Freezing part of a model for the engines: parameters turned into buffers of the same name.

The engines train every *parameter* of the module they are given and carry its *buffers* along,
so a part of a model is frozen by holding its parameters as buffers: the state-dict keys do not
change and stacked per-client weights are passed exactly as for the whole model.
"""

from __future__ import annotations

import copy
from typing import Iterable

from torch import nn


def freeze_parameters(module: nn.Module, names: Iterable[str] | None = None) -> nn.Module:
    """Turn the parameters ``names`` of ``module`` (all if None) into buffers of the same name, in place."""
    wanted = None if names is None else set(names)
    for full, _ in list(module.named_parameters()):
        if wanted is not None and full not in wanted:
            continue
        owner_name, _, leaf = full.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        tensor = owner._parameters.pop(leaf).detach()
        owner.register_buffer(leaf, tensor)
    return module


def frozen_copy(template: nn.Module, names: Iterable[str] | None = None) -> nn.Module:
    """A copy of ``template`` whose parameters ``names`` (all if None) are buffers."""
    return freeze_parameters(copy.deepcopy(template), names)
