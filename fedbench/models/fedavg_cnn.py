"""McMahan et al. 2017's CNN ("Communication-efficient learning of deep networks from decentralized
data", Section 3, the MNIST "CNN"): two 5x5 convolutions (32 and 64 channels), each followed by
ReLU and 2x2 max pooling, a fully connected layer of 512 units with ReLU and a softmax output
layer, "1,663,370 total parameters" on 28x28 MNIST -- a count that holds with "same" padding
(padding 2), which this model uses.

FedMR's paper (Section 5.1, "Model Settings") says its CNN is "obtained from (McMahan et al., 2017)"
and "consists of two convolutional layers and two FC layers", i.e. this model; FedMR's released
code trains a LeNet-style CNN with three FC layers instead (``fedmr_cnn``, the default for FedMR;
see docs/fidelity.md).  It is LEAF's FEMNIST CNN (``leaf_cnn``) with a 512-unit hidden layer
instead of 2048, and is built by the same function, so the two share one layer structure.
"""

from __future__ import annotations

from torch import nn

from fedbench.models.flt import leaf_cnn
from fedbench.models.registry import MODELS


@MODELS.register("fedavg_cnn", family="fedavg_cnn", benchmark_input=(1, 28, 28))
def fedavg_cnn(input_shape, num_classes, *, hidden: int = 512) -> nn.Module:
    """conv5x5(32, pad 2)-ReLU-maxpool2, conv5x5(64, pad 2)-ReLU-maxpool2, FC ``hidden``-ReLU, FC C."""
    return leaf_cnn(input_shape, num_classes, channels=(32, 64), hidden=hidden)
