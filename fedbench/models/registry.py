"""``MODELS``: architecture name -> builder(input_shape, num_classes, **params) -> nn.Module."""

from __future__ import annotations

from torch import nn

from fedbench.registry import Registry

MODELS: Registry = Registry("model architecture")


def build_model(spec: dict, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Build the model a config entry ``{arch: NAME, **params}`` describes."""
    params = {k: v for k, v in spec.items() if k != "arch"}
    return MODELS[spec["arch"]](input_shape, num_classes, **params)
