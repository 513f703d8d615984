"""The convolutional models of FeMAM, FedMR and FedAvg: parameter counts computed here by hand from
the architectures (notes sections 1.3 and 2.3), output shapes, and batched (``vmap``) training-mode
forwards over stacked clients that match each client's own forward, BatchNorm buffers included."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call, vmap

from fedbench.models import MODELS, build_model

NEW_MODELS = ["resnet9", "resnet20", "vgg16", "fedmr_vgg16_mnist", "fedmr_cnn", "fedmr_femnist_cnn", "fedavg_cnn"]


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv(k: int, cin: int, cout: int, bias: bool = True) -> int:
    """k*k*cin*cout weights (+ cout biases)."""
    return k * k * cin * cout + (cout if bias else 0)


def bn(c: int) -> int:
    """BatchNorm: a weight and a bias per channel (running statistics are buffers, not parameters)."""
    return 2 * c


def fc(fan_in: int, fan_out: int) -> int:
    return fan_in * fan_out + fan_out


# ----------------------------------------------------------------------------- parameter counts by hand


def resnet9_count(in_channels: int, final_map: int, classes: int) -> int:
    """Stem conv3x3 + BN; BasicBlocks 8->8 (identity shortcut), 8->16, 16->32, 32->64 (1x1 conv + BN shortcut)."""
    stem = conv(3, in_channels, 8, bias=False) + bn(8)

    def block(cin, cout):
        body = conv(3, cin, cout, bias=False) + bn(cout) + conv(3, cout, cout, bias=False) + bn(cout)
        shortcut = 0 if cin == cout else conv(1, cin, cout, bias=False) + bn(cout)
        return body + shortcut

    blocks = block(8, 8) + block(8, 16) + block(16, 32) + block(32, 64)
    return stem + blocks + fc(64 * final_map * final_map, classes)


def resnet20_count(in_channels: int, classes: int) -> int:
    """Stem conv3x3 (no BN); per stage two pre-activation bottlenecks (BN-conv1x1, BN-conv3x3, BN-conv1x1 x4),
    the first with a 1x1 projection; FC 256 -> C."""
    total, cin = conv(3, in_channels, 16, bias=False), 16
    for planes in (16, 32, 64):
        for block in range(2):
            total += bn(cin) + conv(1, cin, planes, False) + bn(planes) + conv(3, planes, planes, False)
            total += bn(planes) + conv(1, planes, 4 * planes, False)
            if block == 0:
                total += conv(1, cin, 4 * planes, False)  # projection of the residual
            cin = 4 * planes
    return total + fc(256, classes)


def vgg16_count(pooled: int, classes: int) -> int:
    """13 conv3x3 (with bias) + BN; classifier 4096-4096-C."""
    widths = [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    total, cin = 0, 3
    for w in widths:
        total += conv(3, cin, w) + bn(w)
        cin = w
    return total + fc(512 * pooled * pooled, 4096) + fc(4096, 4096) + fc(4096, classes)


@pytest.mark.parametrize("arch, shape, classes, expected", [
    # FeMAM: CIFAR-100 (4x4 map after three stride-2 stages, pooled 4 -> 1x1), Tiny ImageNet (8x8 -> 2x2)
    ("resnet9", (3, 32, 32), 100, resnet9_count(3, 1, 100)),
    ("resnet9", (3, 64, 64), 200, resnet9_count(3, 2, 200)),
    ("resnet9", (1, 28, 28), 10, resnet9_count(1, 1, 10)),  # 28 -> 14 -> 7 -> 4, pooled to 1x1
    # FedMR: CIFAR-10 / CIFAR-100 coarse (20 classes) / FEMNIST (62)
    ("resnet20", (3, 32, 32), 10, resnet20_count(3, 10)),
    ("resnet20", (3, 32, 32), 20, resnet20_count(3, 20)),
    ("resnet20", (1, 28, 28), 62, resnet20_count(1, 62)),
    ("vgg16", (3, 32, 32), 10, vgg16_count(1, 10)),  # five 2x2 pools: 32 -> 1
    ("vgg16", (3, 32, 32), 20, vgg16_count(1, 20)),
    # VGG16_mnist (FEMNIST): conv1x1 1->64 (padding 1: 28 -> 30), conv3 64->64, conv3 64->128, conv3 128->256,
    # conv3 256->512, adaptive pool to 7x7, FC 512*7*7 = 25088 -> 256 -> 62; no BatchNorm
    ("fedmr_vgg16_mnist", (1, 28, 28), 62, conv(1, 1, 64) + conv(3, 64, 64) + conv(3, 64, 128) + conv(3, 128, 256)
     + conv(3, 256, 512) + fc(25088, 256) + fc(256, 62)),
    # CNNCifar: conv5 3->6, conv5 6->16, FC 16*5*5 -> 120 -> 84 -> C
    ("fedmr_cnn", (3, 32, 32), 10, conv(5, 3, 6) + conv(5, 6, 16) + fc(16 * 5 * 5, 120) + fc(120, 84) + fc(84, 10)),
    ("fedmr_cnn", (3, 32, 32), 20, conv(5, 3, 6) + conv(5, 6, 16) + fc(16 * 5 * 5, 120) + fc(120, 84) + fc(84, 20)),
    # CNNFashionMnist: 28 -conv5-> 24 -pool-> 12 -conv5-> 8 -pool-> 4: FC 32*4*4 = 512 -> 256 -> 62
    ("fedmr_femnist_cnn", (1, 28, 28), 62, conv(5, 1, 16) + conv(5, 16, 32) + fc(32 * 4 * 4, 256) + fc(256, 62)),
    # McMahan et al.'s CNN, same padding: 28 -> 14 -> 7, FC 64*7*7 -> 512 -> 10
    ("fedavg_cnn", (1, 28, 28), 10, conv(5, 1, 32) + conv(5, 32, 64) + fc(64 * 7 * 7, 512) + fc(512, 10)),
    ("fedavg_cnn", (3, 32, 32), 10, conv(5, 3, 32) + conv(5, 32, 64) + fc(64 * 8 * 8, 512) + fc(512, 10)),
])
def test_parameter_counts_and_shapes(arch, shape, classes, expected):
    model = build_model({"arch": arch}, shape, classes)
    assert count(model) == expected
    model.eval()
    assert model(torch.zeros(2, *shape)).shape == (2, classes)


def test_paper_quoted_sizes():
    """Sizes the sources state: McMahan et al. (2017) "1,663,370 total parameters"; notes section 1.3:
    ResNet-9 "~84 k params (CIFAR-100), ~129 k (Tiny)"."""
    assert round(resnet9_count(3, 1, 100), -3) == 84_000
    assert round(resnet9_count(3, 2, 200), -3) == 129_000
    assert conv(5, 1, 32) + conv(5, 32, 64) + fc(64 * 7 * 7, 512) + fc(512, 10) == 1_663_370


def test_layer_structure_as_released():
    vgg = build_model({"arch": "vgg16"}, (3, 32, 32), 10)
    assert isinstance(vgg, nn.Sequential)
    kinds = [type(m).__name__ for m in vgg]
    assert kinds.count("Conv2d") == 13 and kinds.count("BatchNorm2d") == 13 and kinds.count("MaxPool2d") == 5
    assert [type(m).__name__ for m in vgg[-8:]] == ["Flatten", "Linear", "ReLU", "Dropout", "Linear", "ReLU",
                                                     "Dropout", "Linear"]
    assert vgg[-7].out_features == 4096 and vgg[-4].out_features == 4096 and vgg[-5].p == 0.5
    for arch, shape in [("fedmr_cnn", (3, 32, 32)), ("fedmr_femnist_cnn", (1, 28, 28)), ("fedavg_cnn", (1, 28, 28))]:
        assert isinstance(build_model({"arch": arch}, shape, 10), nn.Sequential)
    femnist = build_model({"arch": "fedmr_femnist_cnn"}, (1, 28, 28), 62)
    assert [type(m).__name__ for m in femnist[:3]] == ["Conv2d", "MaxPool2d", "ReLU"]  # pool before ReLU, as released
    resnet9 = build_model({"arch": "resnet9"}, (3, 32, 32), 100)
    assert list(resnet9.state_dict())[-2:] == ["linear.weight", "linear.bias"]  # FeMAM clusters on these two
    # ResNet-20: released initialisation (BN weight 0.5, bias 0) and no stem BN; max pool after the stem on grey input
    r20 = build_model({"arch": "resnet20"}, (3, 32, 32), 10)
    assert all(torch.all(m.weight == 0.5) and torch.all(m.bias == 0) for m in r20.modules() if isinstance(m, nn.BatchNorm2d))
    assert isinstance(build_model({"arch": "resnet20"}, (1, 28, 28), 62).stem_pool, nn.MaxPool2d)
    assert len(r20.stem_pool) == 0
    std = r20.layer3[0].conv2.weight.std().item()  # N(0, sqrt(2 / (3*3*64)))
    assert abs(std - (2 / (3 * 3 * 64)) ** 0.5) < 0.1 * (2 / (3 * 3 * 64)) ** 0.5


def test_too_small_inputs_are_refused():
    with pytest.raises(ValueError, match="vgg16"):
        build_model({"arch": "vgg16"}, (1, 28, 28), 10)
    with pytest.raises(ValueError, match="resnet9"):
        build_model({"arch": "resnet9"}, (3, 16, 16), 10)
    with pytest.raises(ValueError, match="fedmr_femnist_cnn"):
        build_model({"arch": "fedmr_femnist_cnn"}, (1, 12, 12), 10)
    assert set(NEW_MODELS) <= set(MODELS.names())


# ----------------------------------------------------------------------------- vmap over stacked clients


@pytest.mark.parametrize("arch, shape", [
    ("resnet9", (3, 32, 32)), ("resnet9", (1, 28, 28)), ("resnet20", (3, 32, 32)), ("resnet20", (1, 28, 28)),
    ("vgg16", (3, 32, 32)), ("fedmr_vgg16_mnist", (1, 28, 28)), ("fedmr_cnn", (3, 32, 32)), ("fedmr_femnist_cnn", (1, 28, 28)),
    ("fedavg_cnn", (1, 28, 28)),
])
def test_vmap_over_two_clients_matches_each_client(arch, shape):
    """Train mode (batch statistics, running-statistics updates) with each client's own parameters and
    BatchNorm buffers stacked on a leading axis; dropout is switched off (its masks are random)."""
    torch.manual_seed(0)
    classes, batch = 5, 3
    clients = [build_model({"arch": arch}, shape, classes) for _ in range(2)]
    for i, client in enumerate(clients):
        client.train()
        for module in client.modules():
            if isinstance(module, nn.Dropout):
                module.eval()
            if isinstance(module, nn.BatchNorm2d):  # distinct running statistics per client
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)
                module.num_batches_tracked.fill_(3 + i)
    x = torch.randn(2, batch, *shape)
    template = copy.deepcopy(clients[0])
    params = {k: torch.stack([dict(c.named_parameters())[k].detach() for c in clients]) for k, _ in template.named_parameters()}
    buffers = {k: torch.stack([dict(c.named_buffers())[k].clone() for c in clients]) for k, _ in template.named_buffers()}

    batched = vmap(lambda p, b, xs: functional_call(template, (p, b), (xs,)), randomness="different")(params, buffers, x)

    with torch.no_grad():
        for i, client in enumerate(clients):
            torch.testing.assert_close(batched[i], client(x[i]), rtol=1e-4, atol=1e-5)
            for name, value in client.named_buffers():  # running statistics updated as each client's own forward did
                torch.testing.assert_close(buffers[name][i], value, rtol=1e-5, atol=1e-6)
    if buffers:
        assert any(not torch.equal(buffers[name][0], buffers[name][1]) for name in buffers if "running_mean" in name)
        assert all(buffers[name].tolist() == [4, 5] for name in buffers if name.endswith("num_batches_tracked"))
