"""FedMR's "ResNet-20" (Hu et al., KDD'24, Section 5.1; the authors' ``ResNet20_cifar`` / ``ResNet20_mnist``).

The paper says it took ResNet-20 "from Torchvision", which has no ResNet-20; the released model
is a pre-activation **bottleneck** ResNet with blocks [2, 2, 2] (notes section 2.3)::

    stem     conv3x3(C -> 16, no bias)                     (no BN or ReLU after it)
             [+ maxpool 3x3 / stride 1 / padding 1 in the greyscale variant ``ResNet20_mnist``]
    stage s  two bottlenecks, planes 16 / 32 / 64 (outputs x4 = 64 / 128 / 256), strides 1 / 2 / 2:
             BN-ReLU-conv1x1(planes), BN-ReLU-conv3x3(planes, stride), BN-ReLU-conv1x1(4 planes)
             + residual (the input, or conv1x1(stride, no bias) of it in a stage's first block)
    head     average pool over the whole final map (AvgPool(8) on 32x32, avg_pool2d(7) on 28x28),
             flatten, Linear(256 -> C)

Initialisation as released: convolutions N(0, sqrt(2 / (k*k*out_channels))), BatchNorm weight 0.5
and bias 0, the linear layer PyTorch's default.  The released model also declares a final
``BatchNorm2d(256)`` that its forward never uses (512 parameters that receive no gradient); it is
left out here, which changes no output.  218,970 parameters for 3x32x32 and 10 classes.
"""

from __future__ import annotations

import math

from torch import nn

from fedbench.models.registry import MODELS

EXPANSION = 4


def _strided(size: int, stride: int) -> int:
    return (size - 1) // stride + 1


class PreActBottleneck(nn.Module):
    """BN-ReLU-conv1x1, BN-ReLU-conv3x3(stride), BN-ReLU-conv1x1(x4) plus the (projected) input."""

    def __init__(self, in_channels: int, planes: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(in_channels, planes, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes)
        self.relu3 = nn.ReLU()
        self.conv3 = nn.Conv2d(planes, planes * EXPANSION, 1, bias=False)
        if stride != 1 or in_channels != planes * EXPANSION:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, planes * EXPANSION, 1, stride=stride, bias=False))
        else:
            self.downsample = nn.Sequential()  # identity

    def forward(self, x):
        out = self.conv1(self.relu1(self.bn1(x)))
        out = self.conv2(self.relu2(self.bn2(out)))
        out = self.conv3(self.relu3(self.bn3(out)))
        return out + self.downsample(x)


class ResNet20(nn.Module):
    def __init__(self, input_shape, num_classes: int, blocks=(2, 2, 2), planes=(16, 32, 64), strides=(1, 2, 2),
                 stem_maxpool: bool = False):
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        # ``ResNet20_mnist``'s max pool keeps the size (3x3, stride 1, padding 1)
        self.stem_pool = nn.MaxPool2d(3, stride=1, padding=1) if stem_maxpool else nn.Sequential()
        stages, previous = [], 16
        for count, p, s in zip(blocks, planes, strides):
            layers = [PreActBottleneck(previous, p, s)]
            previous = p * EXPANSION
            layers += [PreActBottleneck(previous, p) for _ in range(count - 1)]
            stages.append(nn.Sequential(*layers))
            height, width = _strided(height, s), _strided(width, s)
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AvgPool2d((height, width))  # the whole final map: 8x8 on 32x32, 7x7 on 28x28
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(previous, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
                nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 0.5)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        out = self.stem_pool(self.conv1(x))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.fc(self.flatten(self.avgpool(out)))


@MODELS.register("resnet20", family="resnet20", benchmark_input=(3, 32, 32))
def resnet20(input_shape, num_classes, *, stem_maxpool: bool | None = None) -> nn.Module:
    """FedMR's pre-activation bottleneck ResNet-20.  ``stem_maxpool``: the max pool after the stem of the
    released greyscale variant (FEMNIST/MNIST); ``None`` (default) = as released, on for one-channel
    images and off otherwise."""
    channels = input_shape[0]
    return ResNet20(tuple(input_shape), num_classes, stem_maxpool=channels == 1 if stem_maxpool is None else stem_maxpool)
