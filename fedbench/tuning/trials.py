"""Fair tuning as a stage of the workflow: every method gets the same number of trials, chosen on
validation rows only, and the chosen setting is re-run on seeds tuning never saw.

An experiment opts in with a ``tune:`` block::

    tune:
      trials: 8            # per algorithm entry: the same budget for every method
      seeds: [100]         # tuning seeds, disjoint from the config's seeds (those of the final runs)
      metric: val_acc_mean # what selection maximises (val_loss_mean: minimises), read at the last evaluated round
      holdout: 0.2         # share of each client's training rows held out as validation rows where the partition has none
      knobs: {momentum: [0.0, 0.5, 0.9]}   # optional: knobs tuned for every method that has them (over its own space)
      exclude: {ifca_k5: [num_clusters]}   # optional: knobs an entry keeps at its configured value

A method's knobs (:func:`search_space`): the learning rate (:data:`fedbench.registry.search_space.COMMON_SEARCH`),
the block's ``knobs`` and the method's own, registered beside its parameter bounds
(``ALGORITHMS.register(..., search=...)``), less ``exclude``.  Trial 0 is the configured (paper's)
setting; the others are a Latin hypercube over the space (scipy's ``qmc``, :func:`trial_settings`).
A trial is an ordinary cell run (:func:`trial_config`): the tuning seed's partition with
``holdout`` of each client's training rows held out (:func:`fedbench.data.partition.hold_out_validation`);
selection (:func:`select`) reads the validation columns of the trials' histories, never a test column.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import typing

import numpy as np
from scipy.stats import qmc

from fedbench.config.cells import TRAINING_DEFAULTS, ConfigError
from fedbench.config.checks import cluster_problem, grid_client_counts
from fedbench.config.files import training_problem
from fedbench.registry.algorithms import ALGORITHMS
from fedbench.registry.search_space import (
    COMMON_SEARCH,
    LogRange,
    Relative,
    check_space,
)

SELECTION_METRICS = {"val_acc_mean": "max", "val_acc_pooled": "max", "val_f1_mean": "max", "val_loss_mean": "min"}

DEFAULTS = {"metric": "val_acc_mean", "holdout": 0.2, "knobs": {}, "exclude": {}, "sampler_seed": 0}
TUNABLE_TRAINING = ("lr", "momentum", "weight_decay", "local_epochs", "batch_size")
"""Training settings a search space may name (a method's own knob that is not a builder parameter)."""
INTEGER_TRAINING = ("local_epochs", "batch_size")
"""The tunable training settings that are integers: a range over them is drawn as integers."""


def tune_block(config: dict, experiment: str) -> dict | None:
    """The experiment's ``tune:`` block with defaults filled in, or None where it does not tune."""
    block = config["experiments"][experiment].get("tune")
    return None if block is None else {**DEFAULTS, **block}


def tuned_experiments(config: dict) -> list[str]:
    """The experiments with a ``tune:`` block that the config runs (``only_experiments``)."""
    only = config.get("only_experiments")
    return [name for name, spec in config.get("experiments", {}).items()
            if spec.get("tune") is not None and (only is None or name in only)]


def _target(method: str, knob: str) -> str:
    """Where a knob lives: ``algorithm`` (a parameter of the method's builder) or ``training``."""
    if knob in ALGORITHMS.parameters(method):
        return "algorithm"
    if knob in TUNABLE_TRAINING:
        return "training"
    raise ConfigError(f"search space of {method!r}: {knob!r} is neither a parameter of its builder nor one of the "
                      f"training settings {', '.join(TUNABLE_TRAINING)}")


def search_space(config: dict, experiment: str, algorithm: str) -> dict[str, tuple[str, object]]:
    """knob -> (``algorithm`` | ``training``, space) of one algorithm entry in one tuned experiment: the
    learning rate, the method's registered knobs (``None``: a common knob the method does not read), and
    the block's ``knobs`` that the method has (these over the registered ones), less the block's
    ``exclude`` for the entry and the training settings the method never reads (``ignored_training``).
    A range over an integer knob (:func:`is_integer`) is drawn as integers."""
    block = tune_block(config, experiment)
    method = config["algorithms"][algorithm]["method"]
    extra = {k: _as_space(v) for k, v in block["knobs"].items()
             if k in TUNABLE_TRAINING or k in ALGORITHMS.parameters(method)}  # the block's knobs, where the method has them
    spaces = {**COMMON_SEARCH, **(ALGORITHMS.extra(method, "search") or {}), **extra}
    entry = {k: v for k, v in config["algorithms"][algorithm].items() if k != "method"}
    ignored = ALGORITHMS[method](**entry).ignored_training  # e.g. pFedMe's momentum: trials that varied it would be wasted
    for knob in [*block["exclude"].get(algorithm, []), *ignored]:
        spaces.pop(knob, None)
    spaces = {knob: space for knob, space in spaces.items() if space is not None}  # None: the method does not read it
    for knob, space in spaces.items():
        try:
            check_space(knob, space)
        except ValueError as error:
            raise ConfigError(f"{knob_place(experiment, block, method, knob)}: {error}") from None
        if isinstance(space, (LogRange, Relative)) and is_integer(method, knob):
            spaces[knob] = dataclasses.replace(space, integer=True)
    return {knob: (_target(method, knob), space) for knob, space in sorted(spaces.items())}


def knob_place(experiment: str, block: dict, method: str, knob: str) -> str:
    """Where a knob's space is written: the block's ``knobs`` or the method's registered search space."""
    if knob in block["knobs"]:
        return f"experiments.{experiment}.tune.knobs.{knob}"
    return f"experiments.{experiment}.tune: {knob!r} of method {method!r}'s registered search space"


def is_integer(method: str, knob: str) -> bool:
    """Whether a knob takes integers: an integer training setting, or a builder parameter typed ``int``."""
    if knob in TUNABLE_TRAINING:
        return knob in INTEGER_TRAINING
    hint = ALGORITHMS.hints(method).get(knob)
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is int


def _as_space(value):
    """A knob's space as a config writes it: a list of values, or ``{log: [low, high]}`` / ``{relative: [low, high]}``."""
    if isinstance(value, dict) and set(value) == {"log"}:
        return LogRange(*value["log"])
    if isinstance(value, dict) and set(value) == {"relative"}:
        return Relative(*value["relative"])
    return value


def configured(config: dict, experiment: str, algorithm: str) -> dict[str, dict]:
    """The configured setting of every knob: the entry's parameter (or its builder's default) or the experiment's training."""
    entry = {k: v for k, v in config["algorithms"][algorithm].items() if k != "method"}
    params = ALGORITHMS.with_defaults(config["algorithms"][algorithm]["method"], entry)
    training = {**TRAINING_DEFAULTS, **config["experiments"][experiment].get("training", {})}
    out = {"algorithm": {}, "training": {}}
    for knob, (target, _) in search_space(config, experiment, algorithm).items():
        out[target][knob] = params[knob] if target == "algorithm" else training[knob]
    return out


def _rounded(value, space):
    """A drawn value as the config would write it: 3 significant digits; an integer knob rounded (>= 1)."""
    if isinstance(space, (LogRange, Relative)) and space.integer:
        return max(1, int(round(value)))
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.3g}")
    return value.item() if isinstance(value, np.generic) else value


def trial_settings(config: dict, experiment: str, algorithm: str) -> list[dict[str, dict]]:
    """The ``trials`` settings of one algorithm entry: trial 0 the configured one, then a Latin
    hypercube (scipy's ``qmc.LatinHypercube``, scrambled, seeded by ``sampler_seed``) over the knobs,
    so that even a few trials spread over every knob's range: a range through its log-uniform
    quantiles, a list by equal shares.  Each setting ``{"algorithm": {knob: value}, "training": {...}}``."""
    block = tune_block(config, experiment)
    space = search_space(config, experiment, algorithm)
    base = configured(config, experiment, algorithm)
    lists = [s for _, s in space.values() if isinstance(s, list)]
    if len(lists) == len(space) and math.prod(map(len, lists)) < block["trials"] - 1:
        raise ConfigError(f"experiments.{experiment}.tune.trials: {block['trials']} trials, but {algorithm!r}'s search "
                          f"space has only {math.prod(map(len, lists))} settings besides the configured one; every "
                          f"method needs the same budget")
    settings = [base]
    if block["trials"] > 1:
        cube = qmc.LatinHypercube(d=len(space), seed=block["sampler_seed"]).random(block["trials"] - 1)
        for row in cube:
            setting = {"algorithm": {}, "training": {}}
            for u, (knob, (target, s)) in zip(row, space.items()):
                value = s[min(int(u * len(s)), len(s) - 1)] if isinstance(s, list) else _distribution(
                    s, base[target][knob], experiment, block, config["algorithms"][algorithm]["method"], knob).ppf(u)
                setting[target][knob] = _rounded(value, s)
            settings.append(setting)
    return settings


def _distribution(space, configured, experiment: str, block: dict, method: str, knob: str):
    """The range's distribution around the ``configured`` value; a :class:`ConfigError` naming the knob's place."""
    try:
        return space.distribution(configured)
    except ValueError as error:
        raise ConfigError(f"{knob_place(experiment, block, method, knob)}: {error}") from None


def extremes(space, configured) -> list:
    """The values a knob's space can draw at its ends: every value of a list, a range's low and high
    (a relative one's times ``configured``), rounded as a draw is.  A draw lies between them."""
    if isinstance(space, list):
        return list(space)
    scale = configured if isinstance(space, Relative) else 1
    return [_rounded(space.low * scale, space), _rounded(space.high * scale, space)]


def setting_label(setting: dict[str, dict]) -> str:
    """``lr=0.01, mu=0.1``: a trial's setting in one line."""
    values = {**setting["training"], **setting["algorithm"]}
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items()))


def apply_setting(config: dict, experiment: str, algorithm: str, setting: dict[str, dict], holdout: float = 0.0) -> dict:
    """A copy of ``config`` whose algorithm entry and experiment training carry ``setting`` (and,
    for a trial, the ``holdout`` share of training rows held out for validation)."""
    out = copy.deepcopy(config)
    out["algorithms"][algorithm].update(setting["algorithm"])
    training = out["experiments"][experiment].setdefault("training", {})
    training.update(setting["training"])
    if holdout:
        training["holdout"] = holdout
    return out


def trial_config(config: dict, experiment: str, algorithm: str, trial: int) -> dict:
    """The config a trial runs: trial ``trial``'s setting, the block's holdout."""
    settings = trial_settings(config, experiment, algorithm)
    if not 0 <= trial < len(settings):
        raise ConfigError(f"experiments.{experiment}.tune: no trial {trial} (trials 0..{len(settings) - 1})")
    return apply_setting(config, experiment, algorithm, settings[trial], tune_block(config, experiment)["holdout"])


# ---- selection ---------------------------------------------------------------------------------


















# ---- validation of the tune: blocks ------------------------------------------------------------


def check_tuning(config: dict, final_seeds: list[int]) -> None:
    """Every ``tune:`` block: a known selection metric, tuning seeds disjoint from ``final_seeds``
    (the config's and the claims' added seeds), ``exclude`` naming the experiment's entries and
    their knobs, and every trial's setting valid for its builder (bounds) -- before any job."""
    for experiment in config.get("experiments", {}):
        block = tune_block(config, experiment)
        if block is None:
            continue
        where = f"experiments.{experiment}.tune"
        if block["metric"] not in SELECTION_METRICS:
            raise ConfigError(f"{where}.metric: {block['metric']!r} unknown; valid choices: {', '.join(SELECTION_METRICS)}")
        shared = sorted(set(block["seeds"]) & set(final_seeds))
        if shared:
            raise ConfigError(f"{where}.seeds: {shared} are also seeds of the final runs; tuning seeds must be seeds the "
                              f"final runs never use")
        entries = {a for b in config["experiments"][experiment]["grid"] for a in b["algorithms"]}
        _check_knob_names(config, experiment, block, entries)
        for name, knobs in block["exclude"].items():
            if name not in entries:
                raise ConfigError(f"{where}.exclude: {name!r} is not an algorithm of the experiment's grid")
        for algorithm in sorted(entries):
            unknown = set(block["exclude"].get(algorithm, [])) - set(COMMON_SEARCH) - set(block["knobs"]) - set(
                ALGORITHMS.extra(config["algorithms"][algorithm]["method"], "search") or {})
            if unknown:
                raise ConfigError(f"{where}.exclude.{algorithm}: {sorted(unknown)} are not knobs of its search space")
            method = config["algorithms"][algorithm]["method"]
            _check_knob_bounds(config, experiment, block, algorithm)
            for trial, setting in enumerate(trial_settings(config, experiment, algorithm)):
                entry = {k: v for k, v in config["algorithms"][algorithm].items() if k != "method"}
                try:
                    ALGORITHMS.check_params(method, {**entry, **setting["algorithm"]}, f"{where} trial {trial} of {algorithm}")
                except ValueError as error:
                    raise ConfigError(str(error)) from None




def _check_knob_names(config: dict, experiment: str, block: dict, entries: set[str]) -> None:
    """Every knob of the block's ``knobs`` is a tunable training setting or a parameter of one of the
    experiment's methods (a misspelt knob would otherwise be tuned by no method)."""
    methods = sorted({config["algorithms"][name]["method"] for name in entries})
    valid = sorted({*TUNABLE_TRAINING, *(k for m in methods for k in ALGORITHMS.parameters(m))})
    for knob in block["knobs"]:
        if knob not in valid:
            close = difflib.get_close_matches(knob, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"experiments.{experiment}.tune.knobs.{knob}: no method of the experiment "
                              f"({', '.join(methods)}) has this knob{hint} (valid knobs: {', '.join(valid)})")


def _check_knob_bounds(config: dict, experiment: str, block: dict, algorithm: str) -> None:
    """Every value a knob's space can draw for ``algorithm`` (its :func:`extremes`) lies inside the
    knob's bounds: the builder's for a parameter, the schema's for a training setting; a cluster count the
    block's ``knobs`` give, at most a partition's clients."""
    method = config["algorithms"][algorithm]["method"]
    entry = {k: v for k, v in config["algorithms"][algorithm].items() if k != "method"}
    base = configured(config, experiment, algorithm)
    clients = grid_client_counts(config, experiment)
    for knob, (target, space) in search_space(config, experiment, algorithm).items():
        place = knob_place(experiment, block, method, knob)
        values = extremes(space, _positive(base[target][knob], space, place))
        for value in values:
            if target == "training":
                problem = training_problem(knob, value)
            else:
                try:
                    ALGORITHMS.check_params(method, {**entry, knob: value}, f"algorithms.{algorithm}")
                    written = knob in block["knobs"]  # a registered list is the method's, not the config's
                    problem = cluster_problem(value, clients) if knob == "num_clusters" and written else None
                except ValueError as error:
                    problem = str(error)
            if problem:
                kind = "" if isinstance(space, list) else f" (the range's {'low' if value == values[0] else 'high'} end for {algorithm!r})"
                raise ConfigError(f"{place}: {value!r}{kind} is out of bounds: {problem}")


def _positive(value, space, place: str):
    """The configured value a relative range multiplies: positive, else a :class:`ConfigError` naming the place."""
    if isinstance(space, Relative) and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ConfigError(f"{place}: a relative range needs a positive configured value, got {value!r}; "
                          "give a list of values or {log: [low, high]} instead")
    return value
