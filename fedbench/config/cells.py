"""Cells: the grid of a config expanded to one fully specified run each (:class:`Cell`,
:func:`expand_cells`, :func:`expand_partitions`), and a cell resolved to everything its run needs
with the defaults filled in (:func:`resolve_cell`); which training settings make a cell's
identity (:func:`identity_training`, :func:`results_settings`)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from fedbench.config import layout
from fedbench.engine.numerics import NUMERICS_DEFAULTS


class ConfigError(ValueError):
    """The config names something that does not exist or passes parameters nobody takes."""


@dataclass(frozen=True, order=True)
class Cell:
    """One fully specified run."""

    experiment: str
    dataset: str
    partition: str
    model: str
    algorithm: str
    seed: int

    def run_dir(self, results: str, kind: str = "train", trial: int | None = None) -> str:
        """Its run directory under ``results`` (:mod:`fedbench.config.layout`): at the paper's setting, or a
        tuning ``trial``'s, or its ``tuned`` run."""
        return layout.run_dir(results, kind, **self.as_dict(), **({} if trial is None else {"trial": trial}))

    def partition_stem(self, results: str) -> str:
        return layout.partition_stem(results, self.dataset, self.partition, self.seed)

    def as_dict(self) -> dict:
        return asdict(self)


def expand_partitions(config: dict) -> list[tuple[str, str, int]]:
    """``(dataset, partition, seed)`` of every partition to build: those the cells need plus the
    ``partition_grid`` blocks times every seed."""
    wanted = {(c.dataset, c.partition, c.seed) for c in expand_cells(config)}
    for block in config.get("partition_grid", []):
        wanted.update(itertools.product(block["datasets"], block["partitions"], map(int, config["seeds"])))
    return sorted(wanted)


def planned_encoders(config: dict) -> list[str]:
    """The ``encoders`` entries the plan pretrains: those the planned cells' algorithms read, and those no
    algorithm entry reads (declared to be pretrained on their own) unless ``only_experiments`` narrows the plan."""
    declared = config.get("encoders", {})
    read = {config["algorithms"][c.algorithm].get("encoder") for c in expand_cells(config)}
    referenced = {entry.get("encoder") for entry in config.get("algorithms", {}).values()}
    alone = config.get("only_experiments") is None
    return [name for name in declared if name in read or (alone and name not in referenced)]


def expand_cells(config: dict) -> list[Cell]:
    """Every experiment's grid blocks (cartesian products) times every seed, without duplicates
    (only the experiments listed in ``only_experiments``, where the config has that key)."""
    cells = set()
    only = config.get("only_experiments")
    for experiment, spec in config.get("experiments", {}).items():
        if only is not None and experiment not in only:
            continue
        for block in spec.get("grid", []):
            for dataset, partition, model, algorithm, seed in itertools.product(
                block["datasets"], block["partitions"], block["models"], block["algorithms"], config["seeds"]
            ):
                cells.add(Cell(experiment, dataset, partition, model, algorithm, int(seed)))
    return sorted(cells)


TRAINING_DEFAULTS = {
    "rounds": 20,
    "local_epochs": 1,
    "batch_size": 10,
    "lr": 0.01,
    "momentum": 0.0,
    "weight_decay": 0.0,
    "participation": 1.0,
    "eval_every": 1,
    "train_eval_every": None,
    "engine": "vectorised",
    "client_chunk": None,
    "bn_aggregation": "average",
    "memory_mb": None,
    "checkpoint_every": 25,
    "keep_checkpoint": False,
    **NUMERICS_DEFAULTS,  # precision fp32, channels_last, cudnn_benchmark, compile false
}


# training settings that change how a run is carried out, not the arithmetic it does: left out of a
# cell's recorded hyperparameters and provenance fingerprint (and of the workflow's params, so
# editing them retrains nothing).  The three numerics among them reorder or re-tile the same FP32
# (or bf16) operations -- other kernels, other rounding in the last bits, as another device or CPU
# instruction set gives -- and metrics.json's ``numerics`` records them (docs/configuration.md)
RUN_ONLY_SETTINGS = ("checkpoint_every", "keep_checkpoint", "channels_last", "cudnn_benchmark", "compile")


# settings of a cell's identity that are left out at their default, so that cells which do not set
# them keep the hyperparameters, fingerprints and workflow params they had before the setting existed
OMITTED_AT_DEFAULT = {"precision": NUMERICS_DEFAULTS["precision"]}


def identity_training(training: dict) -> dict:
    """The training settings a cell's identity is made of: ``training`` without RUN_ONLY_SETTINGS
    and without OMITTED_AT_DEFAULT settings at their default value."""
    return {k: v for k, v in training.items()
            if k not in RUN_ONLY_SETTINGS and not (k in OMITTED_AT_DEFAULT and v == OMITTED_AT_DEFAULT[k])}


def results_settings(spec: dict) -> dict:
    """The settings a cell's numbers depend on: ``resolve_cell``'s entries, training by :func:`identity_training`."""
    return {**{k: spec[k] for k in ("dataset", "partition", "model", "algorithm")}, "training": identity_training(spec["training"])}


def resolve_cell(config: dict, cell: Cell) -> dict:
    """Everything a run needs, with defaults filled in: the cell's entries and its experiment's training."""
    experiment = config["experiments"][cell.experiment]
    return {
        "dataset": dict(config["datasets"][cell.dataset]),
        "partition": dict(config["partitions"][cell.partition]),
        "model": dict(config["models"][cell.model]),
        "algorithm": dict(config["algorithms"][cell.algorithm]),
        "training": {**TRAINING_DEFAULTS, **experiment.get("training", {})},
        "protocol": experiment.get("protocol", "mean_client_last"),
    }
