"""A small CNN for 1x28x28 images (the offline FeMAM analogue on Fashion-MNIST, 2 CPU cores)."""

from __future__ import annotations

from torch import nn

from fedbench.models.registry import MODELS


# FeMAM's offline analogues' small CNN (8 and 16 channels) is a family of its own
@MODELS.register("small_cnn", family="small_cnn", benchmark_input=(1, 28, 28))
def small_cnn(input_shape, num_classes, *, channels: list[int] = (8, 16)) -> nn.Module:
    """LeNet-style: conv 5x5 (C -> c1) - ReLU - maxpool 2 - conv 5x5 (c1 -> c2) - ReLU - maxpool 2 -
    Linear(c2 * 4 * 4 -> classes) on 28x28 inputs (5,994 parameters with the default widths and
    10 classes); no BatchNorm, no dropout."""
    c, h, w = input_shape
    if (h, w) != (28, 28):
        raise ValueError(f"small_cnn is built for 28x28 images, got {input_shape}")
    c1, c2 = channels
    return nn.Sequential(
        nn.Conv2d(c, c1, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c2 * 4 * 4, num_classes),
    )
