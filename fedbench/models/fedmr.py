"""FedMR's CNNs as released (Hu et al., KDD'24; the authors' models/Nets.py, notes section 2.3).

* ``fedmr_cnn`` -- ``CNNCifar``, FedMR's "CNN" on CIFAR-10/100: conv5x5(6)-ReLU-maxpool2,
  conv5x5(16)-ReLU-maxpool2, FC 120-ReLU, FC 84-ReLU, FC C.  Three FC layers, where the paper
  says two (it names McMahan et al.'s CNN, ``fedavg_cnn``; docs/fidelity.md).  The same layers as
  FLT's CIFAR CNN (``lenet_cifar``), built by the same function: 62,006 parameters on 3x32x32 with
  10 classes, 62,856 with CIFAR-100's 20 coarse classes.
* ``fedmr_femnist_cnn`` -- ``CNNFashionMnist``, FedMR's "CNN" on FEMNIST: conv5x5(16)-maxpool2-ReLU,
  conv5x5(32)-maxpool2-ReLU, FC 256-ReLU, FC C (a ``Dropout2d`` is declared in the released class
  but never called, so it is absent here); 160,510 parameters on 1x28x28 with 62 classes.
"""

from __future__ import annotations

from torch import nn

from fedbench.models.flt import lenet_cifar
from fedbench.models.registry import MODELS


@MODELS.register("fedmr_cnn", family="lenet")
def fedmr_cnn(input_shape, num_classes) -> nn.Module:
    """FedMR's released CIFAR CNN (LeNet-5 style, three FC layers); the first FC width follows the input."""
    return lenet_cifar(input_shape, num_classes, channels=(6, 16), hidden=(120, 84))


@MODELS.register("fedmr_femnist_cnn", family="leaf_cnn")
def fedmr_femnist_cnn(input_shape, num_classes, *, hidden: int = 256) -> nn.Module:
    """FedMR's released FEMNIST CNN: conv5x5 (no padding) - maxpool2 - ReLU twice (16, 32 channels), FC 256, FC C."""
    channels, height, width = input_shape
    h, w = ((height - 4) // 2 - 4) // 2, ((width - 4) // 2 - 4) // 2
    if h < 1 or w < 1:
        raise ValueError(f"fedmr_femnist_cnn needs images of at least 16x16 pixels, got {tuple(input_shape)}")
    return nn.Sequential(
        nn.Conv2d(channels, 16, 5), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Conv2d(16, 32, 5), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * h * w, hidden), nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )
