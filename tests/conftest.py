"""Shared fixtures: tiny federations built from hand-made arrays."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.algorithms import Federation
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.streams import client_streams, stream
from fedbench.engine.vectorised import VectorisedTrainer


def load_script(name: str):
    """``scripts/<name>.py`` imported as module ``name`` (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_data(sizes: list[int], dim: int = 5, num_classes: int = 3, seed: int = 0, test: int = 4) -> FederatedData:
    """Gaussian features with a linear labelling; client k owns ``sizes[k]`` train and ``test`` test rows."""
    rng = np.random.default_rng(seed)
    total = sum(sizes) + test * len(sizes)
    x = rng.normal(size=(total, dim)).astype(np.float32)
    y = (x @ rng.normal(size=(dim, num_classes))).argmax(1).astype(np.int64)
    train, test_rows, start = [], [], 0
    for n in sizes:
        train.append(np.arange(start, start + n))
        test_rows.append(np.arange(start + n, start + n + test))
        start += n + test
    return FederatedData(
        torch.from_numpy(x), torch.from_numpy(y),
        ClientIndex.from_lists(train, "cpu"), ClientIndex.from_lists(test_rows, "cpu"), num_classes,
    )


def tiny_digits_config(**training) -> dict:
    """One experiment ``tiny``: FedAvg with an 8-unit MLP on digits over 4 Dirichlet(0.5) clients,
    seed 0, on the CPU, with the given training settings (run directly, no results folder)."""
    return {
        "results": "unused",
        "device": "cpu",
        "seeds": [0],
        "datasets": {"digits": {"source": "digits"}},
        "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 4, "test_fraction": 0.25}},
        "models": {"mlp": {"arch": "mlp", "hidden": [8]}},
        "algorithms": {"fedavg": {"method": "fedavg"}},
        "experiments": {
            "tiny": {
                "training": training,
                "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["fedavg"]}],
            }
        },
    }


def make_federation(data: FederatedData, model, local: LocalSGD, participation=1.0, seed=0) -> Federation:
    return Federation(
        model=model, data=data, trainer=VectorisedTrainer(model, data), local=local,
        participation=participation, generator=torch.Generator().manual_seed(seed), seed=seed,
    )


class Streams:
    """A federation's shared streams replayed by hand (:mod:`fedbench.engine.streams`): after
    ``begin(t)``, the k-th draw of a purpose in round t is the stream ``(seed, purpose, t, k)``, one
    per client for the per-client purposes -- the numbering :class:`Federation` keeps."""

    def __init__(self, seed: int):
        self.seed, self.round, self.draws = seed, 0, {}

    def begin(self, round_: int) -> None:
        self.round, self.draws = round_, {}

    def _number(self, purpose: str) -> int:
        self.draws[purpose] = self.draws.get(purpose, -1) + 1
        return self.draws[purpose]

    def sample(self, num_clients: int, m: int) -> torch.Tensor:
        """The round's next sample: the first ``m`` of a permutation of the clients, in increasing order."""
        generator = stream(self.seed, "sample", self.round, self._number("sample"))
        return torch.randperm(num_clients, generator=generator)[:m].sort().values

    def clients(self, purpose: str, clients) -> list[torch.Generator]:
        """The round's next draw of ``purpose`` (``batches``, ``minibatches``): one stream per client."""
        return client_streams(self.seed, purpose, (self.round, self._number(purpose)), clients)


def ce_gradient(model, params, x, y):
    """Gradient (a dict like ``params``) and value of the mean cross-entropy of ``model`` at ``params``
    on (x, y), by plain autograd on one client's batch: the independent check of the batched oracles."""
    leaves = {n: v.detach().clone().requires_grad_() for n, v in params.items()}
    loss = torch.nn.functional.cross_entropy(torch.func.functional_call(model, leaves, (x,)), y)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())))), loss.detach()


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Every matplotlib ``Figure`` saved during the test, in order (``Figure.savefig`` is wrapped), so a
    figure test can check what was drawn (lines' data, cell values, labels), not only that a file exists."""
    from matplotlib.figure import Figure

    saved, savefig = [], Figure.savefig

    def recording_savefig(self, *args, **kwargs):
        saved.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording_savefig)
    return saved


def coloured_pixels(png: Path) -> int:
    """Pixels of the image ``png`` with a visible hue (largest minus smallest channel > 0.2), read back
    with ``matplotlib.image.imread``: what curves, bands, markers and heatmap cells paint; background,
    text, axes and grid lines are grey, so a figure with its data left out has (almost) none."""
    from matplotlib.image import imread

    rgb = imread(png)[..., :3].astype(np.float64)
    return int((rgb.max(-1) - rgb.min(-1) > 0.2).sum())


@pytest.fixture(autouse=True)
def no_system_fashion_mnist(monkeypatch, tmp_path_factory):
    """Tests never read the Fashion-MNIST that Debian's ``dataset-fashion-mnist`` may have installed:
    the source's system directory points at an empty folder (tests that need it write a fixture there)."""
    from fedbench.data import vision

    monkeypatch.setattr(vision, "DEBIAN_FASHION_MNIST", tmp_path_factory.mktemp("no-debian-fashion-mnist"))


@pytest.fixture
def tiny_data() -> FederatedData:
    return make_data([23, 7, 15, 10])
