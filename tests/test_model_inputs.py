"""A model that cannot take its dataset's samples stops planning (``validate_config``, run by the
Snakefile before any job) with one line naming the experiment, the model and the dataset; FedMR's
"VGG-16" on FEMNIST is the released code's ``VGG16_mnist`` (notes section 2.3)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import check_config, validate_config
from fedbench.models import build_model
from fedbench.models.registry import _input_problem, input_problem

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "tests" / "data" / "tiny_config.yaml").read_text())
FEDMR = REPO / "config" / "experiments" / "fedmr.yaml"


def tiny_with(model: dict, size: int = 28) -> dict:
    """The tiny suite on size x size digits (1 channel, 10 classes) with ``model`` as its only model."""
    config = copy.deepcopy(TINY)
    config["datasets"]["digits"]["size"] = size
    config["models"] = {"net": model}
    for block in config["experiments"]["tiny"]["grid"]:
        block["models"] = ["net"]
    return config


def test_vgg16_on_28x28_images_stops_planning_naming_experiment_model_and_dataset():
    """Five 2x2 pools take 28 -> 14 -> 7 -> 3 -> 1 -> 0: no 28x28 image reaches the classifier."""
    with pytest.raises(ConfigError) as caught:
        validate_config(tiny_with({"arch": "vgg16"}))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("experiments.tiny.grid[0]: models.net (arch 'vgg16') cannot run on datasets.digits")
    assert "1x28x28 inputs, 10 classes" in message and "at least 32x32" in message
    validate_config(tiny_with({"arch": "vgg16"}, size=32))  # 32 -> 1 after five pools: fine
    validate_config(tiny_with({"arch": "fedmr_vgg16_mnist"}))


def test_the_papers_fedmr_grid_validates_and_the_unfixed_one_does_not():
    """femnist_writers_deep runs VGG16_mnist (``vgg16_femnist``) on FEMNIST; put back ``vgg16`` and
    planning stops before any of the 2 x 8 x 3 = 48 jobs of that experiment."""
    config = yaml.safe_load(FEDMR.read_text())
    validate_config(config, [FEDMR])
    experiment = config["experiments"]["femnist_writers_deep"]
    assert experiment["grid"][0]["models"] == ["resnet20", "vgg16_femnist"]
    assert config["models"]["vgg16_femnist"] == {"arch": "fedmr_vgg16_mnist"}
    assert experiment["published"]["models"]["vgg16_femnist"] == "VGG-16"
    broken = copy.deepcopy(config)
    broken["experiments"]["femnist_writers_deep"]["grid"][0]["models"] = ["resnet20", "vgg16"]
    broken["experiments"]["femnist_writers_deep"]["published"]["models"] = {"resnet20": "ResNet-20", "vgg16": "VGG-16"}
    with pytest.raises(ConfigError, match=r"^experiments\.femnist_writers_deep\.grid\[0\]: models\.vgg16 \(arch 'vgg16'\) "
                                          r"cannot run on datasets\.femnist \(1x28x28 inputs, 62 classes\)"):
        check_config(broken, published_csv=None)


def test_each_distinct_model_and_input_is_probed_once():
    """The FedMR grid's 648 cells hold 9 distinct (model, input shape, classes): CNN, ResNet-20 and
    VGG-16 on CIFAR-10 (3x32x32, 10) and CIFAR-100 (3x32x32, 100); the FEMNIST CNN, ResNet-20 and
    VGG16_mnist on FEMNIST (1x28x28, 62).  A second check of the grid builds nothing."""
    config = yaml.safe_load(FEDMR.read_text())
    _input_problem.cache_clear()
    check_config(config, published_csv=None)
    info = _input_problem.cache_info()
    assert info.misses == 9 and info.hits == 648 // 3 // 8 - 9  # one lookup per (experiment, dataset, model)
    check_config(config, published_csv=None)
    assert _input_problem.cache_info().misses == 9


def test_probe_reports_a_wrong_number_of_logits_and_builder_errors():
    assert input_problem({"arch": "fedmr_vgg16_mnist"}, (1, 28, 28), 62) is None
    assert "32x32" in input_problem({"arch": "vgg16"}, (1, 28, 28), 62)
    assert "resnet9" in input_problem({"arch": "resnet9"}, (3, 16, 16), 10)


def test_vgg16_mnist_layers_as_released():
    """models/Nets.py ``VGG16_mnist``: conv1x1 (padding 1) then four conv3x3, ReLU after each, max pools
    2/stride 1, 2/stride 1, 2/stride 2, AdaptiveAvgPool2d(7, 7), Linear(25088, 256) directly followed by
    the classifier Linear(256, C) (no activation between), no BatchNorm or dropout.  On 1x28x28 the map
    is 30 (1x1 conv, padding 1) -> 29 -> 28 (pools of stride 1) -> 14 (stride 2) -> 7."""
    model = build_model({"arch": "fedmr_vgg16_mnist"}, (1, 28, 28), 62)
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "ReLU", "Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU",
                     "Conv2d", "ReLU", "MaxPool2d", "AdaptiveAvgPool2d", "Flatten", "Linear", "Linear"]
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert [(m.in_channels, m.out_channels, m.kernel_size, m.padding) for m in convs] == [
        (1, 64, (1, 1), (1, 1)), (64, 64, (3, 3), (1, 1)), (64, 128, (3, 3), (1, 1)),
        (128, 256, (3, 3), (1, 1)), (256, 512, (3, 3), (1, 1))]
    assert [m.stride for m in model if isinstance(m, nn.MaxPool2d)] == [1, 1, 2]
    sizes = []
    x = torch.zeros(1, 1, 28, 28)
    for layer in model[:14]:
        x = layer(x)
        if isinstance(layer, (nn.MaxPool2d, nn.AdaptiveAvgPool2d)) or layer is model[0]:
            sizes.append(x.shape[-1])
    assert sizes == [30, 29, 28, 14, 7]
    assert (model[-2].in_features, model[-2].out_features, model[-1].out_features) == (25088, 256, 62)
