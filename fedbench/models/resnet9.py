"""FeMAM's "ResNet-9" (Chen et al., Section 5 "Models"; the authors' ``resnet.py``).

The paper names it ResNet-9; the released ``ResNet18()`` is a four-stage ResNet with one
BasicBlock per stage (notes section 1.3)::

    stem     conv3x3(C -> 8, no bias) - BN - ReLU
    stage s  one BasicBlock, widths 8 / 16 / 32 / 64, strides 1 / 2 / 2 / 2:
             conv3x3(stride) - BN - ReLU - conv3x3 - BN, plus the shortcut
             (identity, or conv1x1(stride, no bias) - BN when the shape changes), then ReLU
    head     avg_pool2d(4) - flatten - Linear(., num_classes)

9 convolutions (1 + 2 per block) and the linear layer; the two 1x1 shortcut convolutions are
not counted in the name.  The released code creates the linear layer on the first forward, so
its width follows the input: 64 features on 32x32 CIFAR-100 (a 4x4 map pooled to 1x1), 256 on
64x64 Tiny ImageNet (8x8 pooled to 2x2).  Here the width is computed from ``input_shape`` when
the model is built (same layer, same default initialisation, drawn at build time instead of at
the first forward), which also serves 28x28 greyscale images (4x4 map -> 64 features).
83,852 parameters for CIFAR-100, 128,752 for Tiny ImageNet.
"""

from __future__ import annotations

from torch import nn

from fedbench.models.registry import MODELS


def _strided(size: int, stride: int) -> int:
    """Output size of a 3x3 / padding 1 (or 1x1 / padding 0) convolution with ``stride``."""
    return (size - 1) // stride + 1


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN + shortcut, then ReLU (He et al. 2016; the released ``BasicBlock``)."""

    def __init__(self, in_channels: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False), nn.BatchNorm2d(channels)
            )
        else:
            self.shortcut = nn.Sequential()  # identity, as released (no parameters)
        self.relu2 = nn.ReLU()

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class ResNet9(nn.Module):
    """Stem, four one-block stages, ``AvgPool2d(4)``, flatten, ``linear`` (registered last, so that
    ``linear.weight`` and ``linear.bias`` are the last two state-dict entries, which FeMAM's code
    clusters clients on)."""

    def __init__(self, input_shape, num_classes: int, widths=(8, 16, 32, 64), strides=(1, 2, 2, 2), pool: int = 4):
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        stages, previous = [], widths[0]
        for w, s in zip(widths, strides):
            stages.append(nn.Sequential(BasicBlock(previous, w, s)))
            previous = w
            height, width = _strided(height, s), _strided(width, s)
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        if height < pool or width < pool:
            raise ValueError(f"resnet9: a {input_shape} input leaves a {height}x{width} map, smaller than the "
                             f"{pool}x{pool} average pool")
        self.pool = nn.AvgPool2d(pool)
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(previous * (height // pool) * (width // pool), num_classes)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(self.flatten(self.pool(out)))


@MODELS.register("resnet9", family="resnet9", benchmark_input=(3, 32, 32))
def resnet9(input_shape, num_classes) -> nn.Module:
    """FeMAM's ResNet-9 (released ``ResNet18``: BasicBlocks [1, 1, 1, 1], widths 8-64), head sized from the input."""
    return ResNet9(tuple(input_shape), num_classes)
