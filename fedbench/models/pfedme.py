"""pFedMe's MNIST CNN (``Net`` in FLAlgorithms/trainmodel/models.py of the pFedMe repository)."""

from __future__ import annotations

from torch import nn

from fedbench.models.registry import MODELS


@MODELS.register("pfedme_cnn", family="fedavg_cnn")
def pfedme_cnn(input_shape, num_classes, *, dropout: bool = False) -> nn.Module:
    """conv 2x2 (C->16) - ReLU - maxpool(2, stride 1) - [Dropout .25] - conv 2x2 (16->32) - ReLU -
    maxpool(2, stride 1) - [Dropout .5] - FC (32 (H-4)(W-4) -> 128) - ReLU - FC (128 -> classes);
    18,432 inputs to the first FC layer on 28x28 MNIST.  ``dropout``: the pFedMe repository's
    version has the two dropout layers, PerMFL's copy (pFedMT's code base, the default) does not."""
    channels, height, width = input_shape
    if height < 5 or width < 5:
        raise ValueError(f"pfedme_cnn needs images of at least 5x5 pixels, got {input_shape}")
    drop = (lambda p: [nn.Dropout(p)]) if dropout else (lambda p: [])
    return nn.Sequential(
        nn.Conv2d(channels, 16, 2, 1), nn.ReLU(), nn.MaxPool2d(2, 1), *drop(0.25),
        nn.Conv2d(16, 32, 2, 1), nn.ReLU(), nn.MaxPool2d(2, 1), *drop(0.5),
        nn.Flatten(), nn.Linear(32 * (height - 4) * (width - 4), 128), nn.ReLU(), nn.Linear(128, num_classes),
    )
