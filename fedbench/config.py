"""The experiment config: semantic checks (after the JSON schema), cells, and resolved cell specs.

The JSON schema (``workflow/schemas/config.schema.yaml``) checks structure and types; this
module checks what the schema cannot: that every name refers to a registered source,
partitioner, model, algorithm or protocol, that grids name declared entries, and that each
entry's parameters are ones its builder accepts.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from fedbench.algorithms import ALGORITHMS
from fedbench.data import DATASETS, PARTITIONERS
from fedbench.data.partition import COMMON_KEYS
from fedbench.data.sources import COMMON_KEYS as DATASET_KEYS
from fedbench.models import MODELS
from fedbench.protocols import PROTOCOLS
from fedbench.registry import UnknownNameError

# config section -> (key naming the builder, registry, keys handled outside the builder)
SECTIONS = {
    "datasets": ("source", DATASETS, DATASET_KEYS),
    "partitions": ("kind", PARTITIONERS, COMMON_KEYS),
    "models": ("arch", MODELS, ()),
    "algorithms": ("method", ALGORITHMS, ()),
}
GRID_AXES = ("datasets", "partitions", "models", "algorithms")


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

    def run_dir(self, results: str) -> str:
        return f"{results}/runs/{self.experiment}/{self.dataset}/{self.partition}/{self.model}/{self.algorithm}/seed{self.seed}"

    def partition_stem(self, results: str) -> str:
        return partition_stem(results, self.dataset, self.partition, self.seed)

    def as_dict(self) -> dict:
        return asdict(self)


def partition_stem(results: str, dataset: str, partition: str, seed: int) -> str:
    return f"{results}/partitions/{dataset}/{partition}/seed{seed}"


def check_config(config: dict) -> None:
    """Raise :class:`ConfigError` naming the first problem and the valid choices."""
    _check_encoder_names(config)
    for section, (key, registry, extra) in SECTIONS.items():
        for name, entry in config.get(section, {}).items():
            where = f"{section}.{name}"
            if key not in entry:
                raise ConfigError(f"{where}: missing {key!r}; valid choices: {', '.join(registry.names())}")
            try:
                registry[entry[key]]
            except UnknownNameError as error:
                raise ConfigError(f"{where}.{key}: {error}") from None
            params = {k: v for k, v in entry.items() if k != key and k not in extra}
            try:
                registry.check_params(entry[key], params, where)
            except ValueError as error:
                raise ConfigError(str(error)) from None
    client_counts = _check_partition_specs(config)
    for i, block in enumerate(config.get("partition_grid", [])):
        _check_declared(config, block, f"partition_grid[{i}]", ("datasets", "partitions"))
    for experiment, spec in config.get("experiments", {}).items():
        try:
            PROTOCOLS[spec.get("protocol", "mean_client_last")]
        except UnknownNameError as error:
            raise ConfigError(f"experiments.{experiment}.protocol: {error}") from None
        for i, block in enumerate(spec.get("grid", [])):
            _check_declared(config, block, f"experiments.{experiment}.grid[{i}]", GRID_AXES)
        _check_published_links(experiment, spec)
        _check_rounds_and_models(config, experiment, spec, client_counts)
    unknown = sorted(set(config.get("only_experiments", [])) - set(config.get("experiments", {})))
    if unknown:
        raise ConfigError(
            f"only_experiments: {', '.join(unknown)} not declared under 'experiments'; "
            f"declared: {', '.join(config.get('experiments', {})) or '(none)'}"
        )


def _check_published_links(experiment: str, spec: dict) -> None:
    """A ``published`` block links only algorithms (and maps only models) of the experiment's grid."""
    block = spec.get("published")
    if not block:
        return
    for axis, declared in (("rows", "algorithms"), ("models", "models")):
        in_grid = {name for grid in spec.get("grid", []) for name in grid[declared]}
        stray = sorted(set(block.get(axis, {})) - in_grid)
        if stray:
            raise ConfigError(
                f"experiments.{experiment}.published.{axis}: {', '.join(stray)} not in the experiment's grid "
                f"{declared} ({', '.join(sorted(in_grid))})"
            )


def _check_partition_specs(config: dict) -> dict[str, int]:
    """Partition kinds that can check their entry before any job (``validate_spec``, e.g. an index
    file's parse, duplicates and negative indices) do so for every partition a grid uses (declared
    but unused entries are options, e.g. index files not downloaded); returns the known client
    count of every partition (its ``num_clients``, or what ``validate_spec`` found)."""
    used = {p for block in config.get("partition_grid", []) for p in block.get("partitions", [])}
    for spec in config.get("experiments", {}).values():
        used.update(p for block in spec.get("grid", []) for p in block.get("partitions", []))
    counts = {}
    for name, entry in config.get("partitions", {}).items():
        params = {k: v for k, v in entry.items() if k not in COMMON_KEYS}
        validate = getattr(PARTITIONERS[entry["kind"]], "validate_spec", None)
        if validate is not None and name in used:
            try:
                counts[name] = validate(params)
            except ValueError as error:
                raise ConfigError(f"partitions.{name}: {error}") from None
        elif isinstance(entry.get("num_clients"), int):
            counts[name] = entry["num_clients"]
    return counts


def _check_rounds_and_models(config: dict, experiment: str, spec: dict, client_counts: dict[str, int]) -> None:
    """Cross-entry limits: an algorithm's ``first_stage_rounds`` (FedMR's aggregation stage) within
    the experiment's rounds; its ``models`` (FedMR's m intermediate models) at most the number of
    clients of every partition it runs on."""
    rounds = {**TRAINING_DEFAULTS, **spec.get("training", {})}["rounds"]
    for i, block in enumerate(spec.get("grid", [])):
        for algorithm in block["algorithms"]:
            entry = config.get("algorithms", {}).get(algorithm, {})
            stage = entry.get("first_stage_rounds")
            if isinstance(stage, int) and stage > rounds:
                raise ConfigError(
                    f"experiments.{experiment}.grid[{i}]: algorithms.{algorithm}.first_stage_rounds = {stage} "
                    f"exceeds the experiment's rounds ({rounds})"
                )
            m = entry.get("models")
            for partition in block["partitions"]:
                if isinstance(m, int) and partition in client_counts and m > client_counts[partition]:
                    raise ConfigError(
                        f"experiments.{experiment}.grid[{i}]: algorithms.{algorithm}.models = {m} intermediate models "
                        f"exceed the {client_counts[partition]} clients of partitions.{partition}"
                    )


def _check_encoder_names(config: dict) -> None:
    """FLT encoders: an algorithm's ``encoder`` names a declared ``encoders`` entry, and an
    encoder's ``dataset`` a declared dataset."""
    encoders = config.get("encoders", {})
    for name, entry in config.get("algorithms", {}).items():
        if "encoder" in entry and entry["encoder"] not in encoders:
            raise ConfigError(
                f"algorithms.{name}.encoder: {entry['encoder']!r} is not declared under 'encoders'; "
                f"declared: {', '.join(sorted(encoders)) or '(none)'}"
            )
    datasets = config.get("datasets", {})
    for name, entry in encoders.items():
        if entry.get("dataset") not in datasets:
            raise ConfigError(
                f"encoders.{name}.dataset: {entry.get('dataset')!r} is not declared under 'datasets'; "
                f"declared: {', '.join(sorted(datasets)) or '(none)'}"
            )


def _check_declared(config: dict, block: dict, where: str, sections) -> None:
    """Every name a grid block lists is declared in its config section."""
    for section in sections:
        declared = config.get(section, {})
        for name in block.get(section, []):
            if name not in declared:
                raise ConfigError(
                    f"{where}.{section}: {name!r} is not declared under '{section}'; "
                    f"declared: {', '.join(sorted(declared)) or '(none)'}"
                )


def expand_partitions(config: dict) -> list[tuple[str, str, int]]:
    """``(dataset, partition, seed)`` of every partition to build: those the cells need plus the
    ``partition_grid`` blocks times every seed."""
    wanted = {(c.dataset, c.partition, c.seed) for c in expand_cells(config)}
    for block in config.get("partition_grid", []):
        wanted.update(itertools.product(block["datasets"], block["partitions"], map(int, config["seeds"])))
    return sorted(wanted)


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
}


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
