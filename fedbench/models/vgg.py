"""FedMR's "VGG-16" (Hu et al., KDD'24, Section 5.1; the authors' ``VGG16`` in models/Nets.py).

Thirteen conv3x3 (padding 1, with bias) each followed by BatchNorm and ReLU, in the VGG-16
configuration 64, 64, M, 128, 128, M, 256 x3, M, 512 x3, M, 512 x3, M (M = maxpool 2x2), then the
classifier Linear(512 -> 4096)-ReLU-Dropout(0.5), Linear(4096 -> 4096)-ReLU-Dropout(0.5),
Linear(4096 -> C) (notes section 2.3).  The paper says the model comes "from Torchvision", whose
``vgg16_bn`` instead pools adaptively to 7x7 and starts its classifier with Linear(25088 -> 4096);
the released one is followed here.  The released ``AvgPool2d(1)`` after the last max pool is an
identity and is left out; the first linear layer's width is 512 * (H/32) * (W/32), 512 on 32x32 (the
released code fixes 512, so only 32x32 inputs run there).  One ``nn.Sequential``.

On FEMNIST's 1x28x28 images the five pools leave nothing (28 -> 0), and the released code does not
build ``VGG16`` there: ``--model vgg --dataset femnist`` builds ``VGG16_mnist`` instead (main_fed.py:
``'mnist' in args.dataset``), a five-convolution network, registered here as ``fedmr_vgg16_mnist``
(the paper's "VGG-16" on FEMNIST; docs/fidelity.md).
"""

from __future__ import annotations

from torch import nn

from fedbench.models.registry import MODELS

VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


@MODELS.register("vgg16", family="vgg16", benchmark_input=(3, 32, 32))
def vgg16(input_shape, num_classes, *, hidden: int = 4096, dropout: float = 0.5) -> nn.Module:
    """VGG-16 with BatchNorm and the ``hidden``-wide two-layer classifier with dropout, as FedMR releases it."""
    channels, height, width = input_shape
    layers: list[nn.Module] = []
    for item in VGG16_LAYERS:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
            height, width = height // 2, width // 2
        else:
            layers += [nn.Conv2d(channels, item, 3, padding=1), nn.BatchNorm2d(item), nn.ReLU()]
            channels = item
    if height < 1 or width < 1:
        raise ValueError(f"vgg16 needs images of at least 32x32 pixels (five 2x2 max pools), got {tuple(input_shape)}")
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(channels * height * width, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, num_classes),
    )


@MODELS.register("fedmr_vgg16_mnist", family="vgg16")
def fedmr_vgg16_mnist(input_shape, num_classes, *, hidden: int = 256) -> nn.Module:
    """What FedMR's released code runs for "VGG-16" on (F)EMNIST: ``VGG16_mnist`` (models/Nets.py),
    five convolutions with ReLU and no BatchNorm -- conv1x1(C -> 64, padding 1), conv3x3(64),
    maxpool 2 / stride 1, conv3x3(128), maxpool 2 / stride 1, conv3x3(256), conv3x3(512),
    maxpool 2 / stride 2 -- then an adaptive average pool to 7x7, Linear(25088 -> ``hidden``) and
    Linear(``hidden`` -> C) with no activation between the two linear layers, as released.  On
    1x28x28 the map is 30 -> 29 -> 28 -> 14 before the pool (notes section 2.3)."""
    channels, height, width = input_shape
    if height < 2 or width < 2:
        raise ValueError(f"fedmr_vgg16_mnist needs images of at least 2x2 pixels, got {tuple(input_shape)}")
    return nn.Sequential(
        nn.Conv2d(channels, 64, 1, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, stride=1),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, stride=1),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, stride=2),
        nn.AdaptiveAvgPool2d((7, 7)),
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, hidden),
        nn.Linear(hidden, num_classes),
    )
