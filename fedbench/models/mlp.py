"""Fully connected models: multinomial logistic regression and the MLP of FedAvg/FLT."""

from __future__ import annotations

import math

from torch import nn

from fedbench.models.registry import MODELS


@MODELS.register("mlr", family="mlp")
def multinomial_logistic_regression(input_shape, num_classes) -> nn.Module:
    """Multinomial logistic regression (pFedMe's ``Mclr_Logistic``): flatten -> Linear(d, C)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


# the MLP family: matrix products on the flattened input, one figure at any input size (benchmarked on
# FedAvg's 784-200-10, benchmarks/engine_round.py)
@MODELS.register("mlp", bounds={"hidden": ">= 1"}, family="mlp", benchmark_input=(784,))
def multilayer_perceptron(input_shape, num_classes, *, hidden: list[int] = (200,)) -> nn.Module:
    """MLP with ReLU hidden layers, e.g. FedAvg's/FLT's 784-200-10 or pFedMe's DNN 60-20-10."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)
