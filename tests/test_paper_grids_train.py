"""Every (algorithm, model, input shape, training) the four paper grids plan trains two rounds.

The dry runs (test_paper_grids.py) prove that each grid plans and the meta-device probe that each
model takes its inputs; neither runs an algorithm on its model.  Here every distinct pairing of
the grids under ``config/experiments/`` (the algorithm entry, the model entry, the dataset's
input shape and classes, the training settings a round reads) runs ``init``, two ``round``s and
both scoring hooks on synthetic images of the dataset's shape, with the work scaled down (one
local epoch of batch 4, two minibatch steps where a method counts steps, one team iteration).
FLT's encoders are untrained ConvAEs of the cell's shape.  A method that stops at its first
forward on one model (as the Moreau family did on every BatchNorm model) fails here by name.
About 10 minutes on 2 cores: marked slow (``pytest -m slow tests/test_paper_grids_train.py``).
``FEDBENCH_TEST_DEVICE=cuda`` runs every pairing on the GPU, data and model on the device as the
pipeline puts them (``GPU_CHECK=grids bash benchmarks/gpu_check.sh``).
"""

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedbench.registry.algorithms import ALGORITHMS
from fedbench.algorithms.base import Federation
from fedbench.algorithms.flt_encoders import encoder_settings
from fedbench.config.checks import DATASET_KEYS
from fedbench.config.cells import TRAINING_DEFAULTS
from fedbench.data.sources import DATASETS
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.models.convae import autoencoder_spec, build_autoencoder
from fedbench.models.registry import build_model

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "config" / "experiments").glob("*.yaml"))
SCALED_DOWN = {"local_steps": 2, "inner_steps": 1, "team_iterations": 1, "local_iterations": 2}
ROUND_SETTINGS = ("momentum", "weight_decay", "bn_aggregation", "participation", "engine")
CLIENTS, ROWS = 12, 8  # per client: ROWS training, test and validation rows each
DEVICE = torch.device(os.environ.get("FEDBENCH_TEST_DEVICE", "cpu"))


def planned_pairings() -> dict[str, dict]:
    """id -> what one pairing needs, once per distinct (algorithm, model, shape, classes, settings)."""
    found = {}
    for path in CONFIGS:
        config = yaml.safe_load(path.read_text())
        for experiment, spec in config.get("experiments", {}).items():
            training = {**TRAINING_DEFAULTS, **spec.get("training", {})}
            for block in spec.get("grid", []):
                for dataset, model, algorithm in itertools.product(block["datasets"], block["models"], block["algorithms"]):
                    entry = config["datasets"][dataset]
                    facts = DATASETS.extra(entry["source"], "facts")(
                        DATASETS.with_defaults(entry["source"], {k: v for k, v in entry.items() if k not in DATASET_KEYS}))
                    if facts.input_shape is None:
                        continue
                    classes = len(entry["classes"]) if entry.get("classes") is not None else facts.num_classes
                    pairing = {"algorithm": config["algorithms"][algorithm], "model": config["models"][model],
                               "shape": tuple(facts.input_shape), "classes": classes,
                               "training": {k: training[k] for k in ROUND_SETTINGS}, "config": config}
                    key = yaml.safe_dump({k: v for k, v in pairing.items() if k != "config"}, sort_keys=True)
                    if key not in {p["key"] for p in found.values()}:
                        found[f"{path.stem}/{experiment}/{dataset}/{model}/{algorithm}"] = {**pairing, "key": key}
    return found


PAIRINGS = planned_pairings()


def synthetic_data(shape: tuple[int, ...], classes: int) -> FederatedData:
    torch.manual_seed(0)
    x = torch.randn(CLIENTS * 3 * ROWS, *shape)
    y = torch.arange(len(x)) % classes
    split = [[np.arange((3 * c + s) * ROWS, (3 * c + s + 1) * ROWS) for c in range(CLIENTS)] for s in range(3)]
    train, test, val = (ClientIndex.from_lists(rows, DEVICE) for rows in split)
    return FederatedData(x.to(DEVICE), y.to(DEVICE), train, test, classes, val)


def untrained_encoder(config: dict, name: str, shape: tuple[int, ...], folder: Path) -> None:
    """An encoder file as the pretraining rule writes one, holding a freshly initialised ConvAE."""
    settings = encoder_settings(config, name)
    spec = autoencoder_spec(settings["arch"], shape, settings["latent_dim"], settings["output"])
    torch.save({"name": name, "spec": spec, "state_dict": build_autoencoder(spec).state_dict()}, folder / f"{name}.pt")


@pytest.mark.slow
@pytest.mark.parametrize("pairing", list(PAIRINGS))
def test_every_planned_pairing_trains_two_rounds(pairing, tmp_path):
    p = PAIRINGS[pairing]
    entry, training = dict(p["algorithm"]), p["training"]
    if "encoder" in entry:
        untrained_encoder(p["config"], entry["encoder"], p["shape"], tmp_path)
    data = synthetic_data(p["shape"], p["classes"])
    model = build_model(p["model"], p["shape"], p["classes"]).to(DEVICE)
    local = LocalSGD(epochs=1, batch_size=4, lr=0.01, momentum=training["momentum"], weight_decay=training["weight_decay"])
    fed = Federation(model=model, data=data, trainer=VectorisedTrainer(model, data), local=local,
                     participation=training["participation"], generator=torch.Generator().manual_seed(0), seed=0,
                     encoders=tmp_path, teams=np.arange(CLIENTS) % 2, bn_aggregation=training["bn_aggregation"])
    method = entry.pop("method")
    algorithm = ALGORITHMS[method](**{k: SCALED_DOWN.get(k, v) for k, v in entry.items()})
    state = algorithm.init(fed, model_weights(model))
    for round_ in (1, 2):
        state, loss = algorithm.round(fed, state, round_)
        assert loss.dim() == 1 and 1 <= len(loss) <= CLIENTS and torch.isfinite(loss).all(), f"round {round_}: {loss}"
    scored = algorithm.client_models(fed, state, 2)
    assert all(v.shape[0] == CLIENTS for v in scored.values())
    server = algorithm.global_model(fed, state)
    assert server is None or set(server) >= {name for name, _ in model.named_parameters()}
