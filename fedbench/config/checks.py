"""The experiment config's own semantic checks, after the JSON schema (:mod:`fedbench.config.files`).

The JSON schema (``workflow/schemas/config.schema.yaml``) checks structure and types; this
module checks what the schema cannot, from the registries alone: that every name refers to a
registered source, partitioner, model, algorithm or protocol (the installed plugins' and the
config's ``plugins`` included, :mod:`fedbench.registry.plugins`), that grids name declared entries,
that each entry's parameters are ones its builder accepts with values of its builder's types and
declared bounds (:meth:`fedbench.registry.core.Registry.check_params`) and that a parameter naming
another section's entry (a builder's registered ``refers``) names a declared one, that no
experiment sets a training setting one of its algorithms ignores, that every algorithm accepts
its place in the plan (its ``check_plan`` hook), and that no two grid blocks produce the same
cell.  Algorithm- and partition-specific rules sit beside their builders (hooks and registered
facts); this module applies them generically and names none.  The workflow's full validation (published links, papers, claims) is
:func:`fedbench.planning.validate.validate_config`.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools

from fedbench.config.cells import TRAINING_DEFAULTS, ConfigError
from fedbench.config.files import check_finite
from fedbench.data import DATASETS, PARTITIONERS
from fedbench.data.partition import COMMON_KEYS
from fedbench.data.sources import COMMON_KEYS as DATASET_KEYS
from fedbench.engine.numerics import Numerics
from fedbench.models import MODELS
from fedbench.registry.algorithms import ALGORITHMS, PlanContext, algorithm_class
from fedbench.registry.core import UnknownNameError
from fedbench.registry.plugins import PluginError, load_plugins
from fedbench.registry.protocols import PROTOCOLS

# config section -> (key naming the builder, registry, keys handled outside the builder)
SECTIONS = {
    "datasets": ("source", DATASETS, DATASET_KEYS),
    "partitions": ("kind", PARTITIONERS, COMMON_KEYS),
    "models": ("arch", MODELS, ()),
    "algorithms": ("method", ALGORITHMS, ()),
}
GRID_AXES = ("datasets", "partitions", "models", "algorithms")








def check_entries(config: dict) -> None:
    """Raise :class:`ConfigError` naming the first problem of the config's own entries and the
    valid choices (what needs no results code; :func:`fedbench.planning.validate.check_config` adds the rest)."""
    try:
        check_finite(config)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    try:  # installed plugins and the config's own: their builders are checked below like the built-ins
        load_plugins(config.get("plugins") or ())
    except PluginError as error:
        raise ConfigError(f"plugins: {error}") from None
    _check_encoder_datasets(config)
    _check_tracking(config)
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
            _check_references(config, where, registry.extra(entry[key], "refers", {}), params)
    algorithms = _build_algorithms(config)
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
        _check_numerics(experiment, spec)
        _check_ignored_training(config, experiment, spec, algorithms)
        _check_repeated_cells(experiment, spec)
        _check_bn_aggregation(config, experiment, spec, algorithms)
        _check_plans(config, experiment, spec, algorithms, client_counts)
        _check_model_inputs(config, experiment, spec)
    _check_feasible(config)
    _check_memory_budgets(config)
    unknown = sorted(set(config.get("only_experiments", [])) - set(config.get("experiments", {})))
    if unknown:
        raise ConfigError(
            f"only_experiments: {', '.join(unknown)} not declared under 'experiments'; "
            f"declared: {', '.join(config.get('experiments', {})) or '(none)'}"
        )


def _partition_pairs(config: dict) -> list[tuple[str, str]]:
    """Every (dataset, partition) pair a grid block or the ``partition_grid`` asks for."""
    blocks = [block for spec in config.get("experiments", {}).values() for block in spec.get("grid", [])]
    blocks += config.get("partition_grid", [])
    return sorted({pair for block in blocks for pair in itertools.product(block["datasets"], block["partitions"])})


def _check_feasible(config: dict) -> None:
    """What the config says is enough to know a partition cannot be built: more clients than
    samples, a kind's class or cluster structure the dataset cannot hold (its registered
    ``feasible`` check against the source's registered ``facts``), teams beyond the clients, a
    global test set or users the dataset does not have."""
    for dataset, partition in _partition_pairs(config):
        d_entry, p_entry = config["datasets"][dataset], config["partitions"][partition]
        facts_of = DATASETS.extra(d_entry["source"], "facts")
        if facts_of is None:
            continue  # a source that declares no facts is checked when it is loaded
        facts = facts_of(DATASETS.with_defaults(d_entry["source"], {k: v for k, v in d_entry.items() if k not in DATASET_KEYS}))
        if d_entry.get("classes") is not None:  # a class subset, relabelled 0..k-1
            outside = sorted(set(d_entry["classes"]) - set(range(facts.num_classes)))
            if outside:
                raise ConfigError(f"datasets.{dataset}.classes: {outside} not among the dataset's {facts.num_classes} classes")
            facts = dataclasses.replace(facts, num_classes=len(d_entry["classes"]), num_samples=None)
        kind = p_entry["kind"]
        params = PARTITIONERS.with_defaults(kind, {k: v for k, v in p_entry.items() if k not in COMMON_KEYS})
        where = f"partitions.{partition} (kind {kind!r}) on datasets.{dataset} (source {d_entry['source']!r})"
        clients = params.get("num_clients", params.get("num_users"))
        if kind == "natural":
            clients = facts.num_users
        problem = PARTITIONERS.extra(kind, "feasible", lambda p, d: None)(params, facts)
        if problem is None and clients is not None and facts.num_samples is not None and 2 * clients > facts.num_samples:
            problem = f"{clients} clients for the dataset's {facts.num_samples} samples (each needs a train and a test sample)"
        teams = p_entry.get("teams")
        if problem is None and teams and clients is not None and teams["count"] > clients:
            problem = f"teams.count {teams['count']} exceeds the {clients} clients"
        if problem is None and p_entry.get("test_set") == "global" and not facts.official_test:
            problem = "test_set: global needs a dataset with an official test set"
        if problem:
            raise ConfigError(f"{where}: {problem}")


def _build_algorithms(config: dict) -> dict:
    """Every algorithm entry built by its builder (cheap: plain settings), so the builder's own
    checks run before any job; name -> algorithm."""
    built = {}
    for name, entry in config.get("algorithms", {}).items():
        params = {k: v for k, v in entry.items() if k != "method"}
        try:
            built[name] = ALGORITHMS[entry["method"]](**params)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"algorithms.{name}: {error}") from None
    return built


def _plan(config: dict, spec: dict, name: str, clients: dict[str, int] | None = None) -> PlanContext:
    """What the config says of algorithm entry ``name`` in experiment ``spec`` (and a block's ``clients``)."""
    return PlanContext(
        name=name,
        entry={k: v for k, v in config["algorithms"][name].items() if k != "method"},
        training={**TRAINING_DEFAULTS, **spec.get("training", {})},
        training_set=dict(spec.get("training", {})),
        clients=clients or {},
    )


def _check_ignored_training(config: dict, experiment: str, spec: dict, algorithms: dict) -> None:
    """A training setting the experiment sets but one of its grid's algorithms never reads is an
    error (the built algorithm's :meth:`~fedbench.algorithms.base.Algorithm.ignored_settings`,
    which leaves out one its entry replaces or sets to the value the algorithm uses anyway)."""
    for block in spec.get("grid", []):
        for name in block["algorithms"]:
            for key, why in algorithms[name].ignored_settings(_plan(config, spec, name)).items():
                raise ConfigError(
                    f"experiments.{experiment}.training.{key}: algorithm {name!r} "
                    f"(method {config['algorithms'][name]['method']!r}) ignores it: {why}; "
                    f"remove {key!r} or move {name!r} to an experiment without it"
                )


def _check_numerics(experiment: str, spec: dict) -> None:
    """``precision``, ``channels_last``, ``cudnn_benchmark`` and ``compile`` (:mod:`fedbench.engine.numerics`):
    valid values (the schema's check, repeated for configs checked without it), and ``compile`` only
    for the vectorised engine.  What a method's own steps cannot honour its ``ignored_training`` says."""
    training = {**TRAINING_DEFAULTS, **spec.get("training", {})}
    where = f"experiments.{experiment}.training"
    try:
        Numerics.from_training(training)
    except ValueError as error:
        raise ConfigError(f"{where}.{error}") from None
    if training["compile"] and training["engine"] != "vectorised":
        raise ConfigError(f"{where}.compile: the {training['engine']!r} engine runs eagerly; compile applies to "
                          "the vectorised engine (set engine: vectorised or compile: false)")


def _check_repeated_cells(experiment: str, spec: dict) -> None:
    """Two grid blocks of one experiment must not produce the same cell (the same run directory)."""
    owner: dict[tuple, int] = {}
    for i, block in enumerate(spec.get("grid", [])):
        for combo in itertools.product(block["datasets"], block["partitions"], block["models"], block["algorithms"]):
            if combo in owner:
                raise ConfigError(
                    f"experiments.{experiment}.grid[{owner[combo]}] and grid[{i}] both produce the cell "
                    f"{'/'.join(combo)} (one run directory); list it in one block only"
                )
            owner[combo] = i


def _check_bn_aggregation(config: dict, experiment: str, spec: dict, algorithms: dict) -> None:
    """``training.bn_aggregation`` other than ``average`` only for algorithms that keep state local
    (the built algorithm's ``keeps_local_bn``)."""
    mode = spec.get("training", {}).get("bn_aggregation", "average")
    if mode == "average":
        return
    for name in sorted({a for block in spec.get("grid", []) for a in block["algorithms"]}):
        entry = config["algorithms"][name]
        if not algorithms[name].keeps_local_bn:
            raise ConfigError(
                f"experiments.{experiment}.training.bn_aggregation: {mode!r} needs algorithms that keep BatchNorm "
                f"state local; {name!r} ({entry['method']}) does not (use 'average', or a method that does: "
                f"{', '.join(_local_bn_methods())})"
            )


def _local_bn_methods() -> list[str]:
    """Registered methods whose algorithm keeps BatchNorm state local (``keeps_local_bn`` of the
    class their builder returns)."""
    return [m for m in ALGORITHMS.names() if algorithm_class(m).keeps_local_bn]


def _check_partition_specs(config: dict) -> dict[str, int]:
    """Partition kinds that can check their entry before any job (a registered ``validate_spec``,
    e.g. an index file's parse, duplicates and negative indices) do so for every partition a grid uses (declared
    but unused entries are options, e.g. index files not downloaded); returns the known client
    count of every partition (its ``num_clients``, or what ``validate_spec`` found)."""
    used = {p for block in config.get("partition_grid", []) for p in block.get("partitions", [])}
    for spec in config.get("experiments", {}).values():
        used.update(p for block in spec.get("grid", []) for p in block.get("partitions", []))
    counts = {}
    for name, entry in config.get("partitions", {}).items():
        params = {k: v for k, v in entry.items() if k not in COMMON_KEYS}
        validate = PARTITIONERS.extra(entry["kind"], "validate_spec")
        if validate is not None and name in used:
            try:
                counts[name] = validate(params)
            except ValueError as error:
                raise ConfigError(f"partitions.{name}: {error}") from None
        elif isinstance(entry.get("num_clients"), int):
            counts[name] = entry["num_clients"]
    return counts


def _check_plans(config: dict, experiment: str, spec: dict, algorithms: dict, client_counts: dict[str, int]) -> None:
    """Every algorithm of every grid block accepts its place in the plan (its ``check_plan`` hook:
    the experiment's training, the client count of each of the block's partitions where known), and
    asks for no more clusters than a partition has clients (:func:`cluster_problem`)."""
    for i, block in enumerate(spec.get("grid", [])):
        clients = {p: client_counts[p] for p in block["partitions"] if p in client_counts}
        for name in block["algorithms"]:
            problem = algorithms[name].check_plan(_plan(config, spec, name, clients))
            if problem:
                raise ConfigError(f"experiments.{experiment}.grid[{i}]: {problem}")
            problem = cluster_problem(config["algorithms"][name].get(CLUSTER_COUNT), clients)
            if problem:
                raise ConfigError(f"algorithms.{name}.{CLUSTER_COUNT}: {problem} (experiments.{experiment}.grid[{i}])")


CLUSTER_COUNT = "num_clusters"  # a builder parameter of this name is a number of client clusters


def cluster_problem(count, clients: dict[str, int]) -> str | None:
    """Why ``count`` clusters cannot be formed of the partitions' clients (partition -> client count), or ``None``."""
    if not isinstance(count, int) or not clients:
        return None
    partition, fewest = min(clients.items(), key=lambda item: item[1])
    if count > fewest:
        return f"{count} clusters exceed the {fewest} clients of partitions.{partition}; at most {fewest}"
    return None


def grid_client_counts(config: dict, experiment: str) -> dict[str, int]:
    """partition -> known client count of every partition the experiment's grid uses."""
    counts = _check_partition_specs(config)
    used = {p for block in config["experiments"][experiment].get("grid", []) for p in block["partitions"]}
    return {p: n for p, n in counts.items() if p in used}


def _check_model_inputs(config: dict, experiment: str, spec: dict) -> None:
    """Every model of a grid block builds and runs on every dataset's samples (shape and classes from
    the source's registered ``facts``; a source without a known shape is checked when loaded), so a
    pairing such as VGG-16's five 2x2 pools on 28x28 FEMNIST stops planning instead of every job.
    Each distinct (model, shape, classes) is probed once on the ``meta`` device
    (:func:`fedbench.models.registry.input_problem`)."""
    from fedbench.models.registry import input_problem

    for i, block in enumerate(spec.get("grid", [])):
        for dataset in block["datasets"]:
            d_entry = config["datasets"][dataset]
            facts_of = DATASETS.extra(d_entry["source"], "facts")
            if facts_of is None:
                continue
            facts = facts_of(DATASETS.with_defaults(d_entry["source"], {k: v for k, v in d_entry.items() if k not in DATASET_KEYS}))
            if facts.input_shape is None:
                continue
            classes = len(d_entry["classes"]) if d_entry.get("classes") is not None else facts.num_classes
            for model in block["models"]:
                m_entry = config["models"][model]
                problem = input_problem(m_entry, facts.input_shape, classes)
                if problem:
                    shape = "x".join(map(str, facts.input_shape))
                    raise ConfigError(
                        f"experiments.{experiment}.grid[{i}]: models.{model} (arch {m_entry['arch']!r}) cannot run on "
                        f"datasets.{dataset} ({shape} inputs, {classes} classes): {problem}"
                    )


def _check_memory_budgets(config: dict) -> None:
    """A working budget (``training.memory_mb``, or the CPU's default on ``device: cpu``) that cannot
    hold one client's training pass stops the workflow before any job, with both figures in MB.
    Checked at the mean client's size (the largest client is at least that large; the rule's
    resources check the partition's real largest client once it exists)."""
    from fedbench.cost.memory import check_one_client_fits
    from fedbench.cost import estimated_shape
    from fedbench.engine.memory import MemoryBudgetError

    device = config.get("device", "auto")
    for experiment, spec in config.get("experiments", {}).items():
        training = {**TRAINING_DEFAULTS, **spec.get("training", {})}
        if training["memory_mb"] is None and device != "cpu":
            continue  # the budget is the GPU's free memory, known only in the job
        for i, block in enumerate(spec.get("grid", [])):
            for dataset, partition, model in itertools.product(block["datasets"], block["partitions"], block["models"]):
                try:
                    shape = estimated_shape(config["datasets"][dataset], config["partitions"][partition])
                except (KeyError, TypeError, ValueError):
                    continue  # a shape known only from the data: checked by the rule's resources
                shape = dataclasses.replace(shape, largest_client=max(1, shape.train_samples // shape.num_clients))
                try:
                    check_one_client_fits(config["models"][model], shape, training, "cpu")
                except MemoryBudgetError as error:
                    raise ConfigError(f"experiments.{experiment}.grid[{i}] ({dataset}/{partition}/{model}): {error}") from None


def _check_tracking(config: dict) -> None:
    """``tensorboard: true`` needs torch's TensorBoard writer, which needs the optional tensorboard package."""
    if config.get("tensorboard") is not True:
        return
    try:
        importlib.import_module("torch.utils.tensorboard")
    except ImportError as error:
        raise ConfigError(f"tensorboard: true needs the tensorboard package, which is not installed here ({error}); "
                          "install the optional extra, pip install -e '.[tensorboard]', or set tensorboard: false") from None


def _check_encoder_datasets(config: dict) -> None:
    """Every ``encoders`` entry's ``dataset`` is a declared dataset."""
    datasets = config.get("datasets", {})
    for name, entry in config.get("encoders", {}).items():
        if entry.get("dataset") not in datasets:
            raise ConfigError(
                f"encoders.{name}.dataset: {entry.get('dataset')!r} is not declared under 'datasets'; "
                f"declared: {', '.join(sorted(datasets)) or '(none)'}"
            )


def _check_references(config: dict, where: str, refers: dict[str, str], params: dict) -> None:
    """A parameter that names an entry of another section (its builder's registered ``refers``,
    parameter -> section) names a declared one."""
    for key, section in refers.items():
        declared = config.get(section, {})
        if key in params and params[key] not in declared:
            raise ConfigError(
                f"{where}.{key}: {params[key]!r} is not declared under '{section}'; "
                f"declared: {', '.join(sorted(declared)) or '(none)'}"
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













