"""FLT's local models (paper appendix D.4, Tables 11-12; the authors' CIFAR CNN): shapes and parameter counts."""

import pytest
import torch

from fedbench.models import MODELS, build_model


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("arch, shape, classes, params", [
    ("mlp_dropout", (1, 28, 28), 62, 169_462),  # Table 11's total
    ("mlp_dropout", (1, 28, 28), 10, 159_010),  # 784-200-10
    ("leaf_cnn", (1, 28, 28), 62, 6_603_710),  # the authors' CNNLeaf (Table 12 prints 3,459,582; notes 4.7.10)
    ("lenet_cifar", (3, 32, 32), 10, 62_006),  # CNNCifar (FedAvg's LeNet-5)
])
def test_shapes_and_parameter_counts(arch, shape, classes, params):
    model = build_model({"arch": arch}, shape, classes)
    assert count(model) == params
    assert model(torch.zeros(3, *shape)).shape == (3, classes)
    assert isinstance(model, torch.nn.Sequential)


def test_mlp_dropout_layer_order_and_train_eval():
    model = build_model({"arch": "mlp_dropout"}, (1, 28, 28), 10)
    assert [type(m).__name__ for m in model] == ["Flatten", "Linear", "Dropout", "ReLU", "Linear"]
    assert model[2].p == 0.5
    x = torch.rand(4, 1, 28, 28)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(x), model(x))  # dropout is active in training


def test_models_take_other_input_sizes():
    """The first FC layer follows the input size: leaf_cnn (same padding) 8 -> 4 -> 2, 64 * 2 * 2 = 256;
    lenet_cifar (no padding) 28 -conv5-> 24 -pool-> 12 -conv5-> 8 -pool-> 4, 16 * 4 * 4 = 256."""
    leaf = build_model({"arch": "leaf_cnn"}, (1, 8, 8), 10)
    lenet = build_model({"arch": "lenet_cifar"}, (1, 28, 28), 10)
    assert leaf[7].in_features == 256 and lenet[7].in_features == 256
    assert leaf(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert lenet(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert {"mlp_dropout", "leaf_cnn", "lenet_cifar"} <= set(MODELS.names())
