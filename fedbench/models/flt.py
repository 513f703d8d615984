"""The local models of FLT (federated learning with taskonomy, appendix D.4) and the authors' CIFAR CNN.

* ``mlp_dropout`` -- Table 11: Linear(d, 200), Dropout(0.5), Linear(200, C); the authors'
  ``MLP`` (src/models/nets.py) puts a ReLU after the dropout, which the table omits
  (169,462 parameters for 784 inputs and 62 classes, as the table says).
* ``leaf_cnn`` -- Table 12, LEAF's FEMNIST CNN as the authors' ``CNNLeaf`` builds it:
  conv5x5(32, pad 2)-ReLU-maxpool2, conv5x5(64, pad 2)-ReLU-maxpool2, FC 2048-ReLU, FC C
  (6,603,710 parameters for 28x28 and 62 classes).  The table prints 63 channels, one pooling
  layer and 3,459,582 parameters, which no variant of the layers it lists adds up to; we follow
  the code (notes section 4.7 item 10).
* ``lenet_cifar`` -- the LeNet-5 style ``CNNCifar`` of the original FLT configs for CIFAR-10
  (Scenarios 1/2; the paper does not state the model): conv5(6)-ReLU-pool, conv5(16)-ReLU-pool,
  FC 120-ReLU, FC 84-ReLU, FC C (62,006 parameters for 3x32x32 and 10 classes).
"""

from __future__ import annotations

import math

from torch import nn

from fedbench.models.registry import MODELS


@MODELS.register("mlp_dropout", bounds={"hidden": ">= 1", "dropout": "[0, 1)"}, family="mlp")
def mlp_dropout(input_shape, num_classes, *, hidden: int = 200, dropout: float = 0.5) -> nn.Module:
    """FLT Table 11: flatten -> Linear(d, hidden) -> Dropout(p) -> ReLU -> Linear(hidden, C)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden),
        nn.Dropout(dropout),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _pooled(size: int, times: int) -> int:
    for _ in range(times):
        size //= 2
    return size


@MODELS.register("leaf_cnn", bounds={"channels": ">= 1", "hidden": ">= 1"}, family="leaf_cnn", benchmark_input=(1, 28, 28))
def leaf_cnn(input_shape, num_classes, *, channels: list[int] = (32, 64), hidden: int = 2048) -> nn.Module:
    """LEAF's FEMNIST CNN (FLT Table 12, authors' ``CNNLeaf``): two conv5x5 (same padding) + ReLU +
    maxpool2 blocks, then FC ``hidden`` + ReLU and FC ``num_classes``."""
    in_channels, height, width = input_shape
    c1, c2 = channels
    flat = c2 * _pooled(height, 2) * _pooled(width, 2)
    return nn.Sequential(
        nn.Conv2d(in_channels, c1, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(c1, c2, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(flat, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


# LeNet-5 (FedMR's and FLT's CNNCifar) is a family of its own: its 6- and 16-channel convolutions run at
# about half the FedAvg CNN's FLOP/s on the CPU; benchmarked on Fashion-MNIST's shape (fedmr_claims)
@MODELS.register("lenet_cifar", bounds={"channels": ">= 1", "hidden": ">= 1"}, family="lenet", benchmark_input=(1, 28, 28))
def lenet_cifar(input_shape, num_classes, *, channels: list[int] = (6, 16), hidden: list[int] = (120, 84)) -> nn.Module:
    """The authors' ``CNNCifar`` (LeNet-5 style, FedAvg's CIFAR CNN): two conv5x5 (no padding) +
    ReLU + maxpool2 blocks, FC 120-ReLU, FC 84-ReLU, FC ``num_classes``."""
    in_channels, height, width = input_shape
    c1, c2 = channels
    h, w = _pooled(_pooled(height - 4, 1) - 4, 1), _pooled(_pooled(width - 4, 1) - 4, 1)
    if h < 1 or w < 1:
        raise ValueError(f"lenet_cifar needs inputs of at least 12x12 pixels, got {height}x{width}")
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, c1, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(c1, c2, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Flatten(),
    ]
    width_ = c2 * h * w
    for size in hidden:
        layers += [nn.Linear(width_, size), nn.ReLU()]
        width_ = size
    layers.append(nn.Linear(width_, num_classes))
    return nn.Sequential(*layers)
