"""What an algorithm declares about its work, in the cost model's terms (:class:`Workload`): a plain
declaration beside the registry, so that an algorithm declares it without importing the cost model.

Every algorithm answers :meth:`fedbench.algorithms.base.Algorithm.workload` from its entry's
parameters and the training settings: which clients train in a round and how much (passes over
their rows, or counted minibatch steps), and what else a run computes: fine-tuning before each
evaluation, levels frozen along the way, rows scored to choose a model, a relatedness step, a
clustering, an in-place server average, and whether every client ends with a model of its own.
The cost model (:mod:`fedbench.cost.work`, :mod:`fedbench.cost.server`) reads only this
declaration, never a method's name; the algorithm contract checks it against what the algorithm
trains (:mod:`fedbench.extension.contract`, ``workload``)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass


@dataclass(frozen=True)
class Clustering:
    """A clustering a run computes beyond its models' FLOPs, priced at the device's measured
    ``flt_clustering`` figures (:func:`fedbench.cost.server.clustering_seconds`)."""

    signature_centres: int = 0  # k-means of every client's signature rows, once, into this many centres (0: none)
    restarts: int = 1  # that k-means' restarts
    signature_pca: bool = False  # a PCA of every client's rows before its k-means
    centres_umap: bool = False  # UMAP of all the clients' centres
    model_kmeans: bool = False  # every round, k-means of the clients' flattened models

    def __post_init__(self):
        _check_fields(self)
        if self.restarts < 1:
            raise ValueError(f"Clustering.restarts: {self.restarts} is not >= 1")


@dataclass(frozen=True)
class Workload:
    """One run's work as its algorithm declares it.  Training: the clients that train in a round (the
    round's sampled ones, or ``every_client_trains``), each ``local_passes`` passes over its training
    rows (its models together: Ditto's global and personal model are 2 passes), or, where
    ``local_steps`` > 0, that many minibatch steps of ``batches_per_step`` minibatches each."""

    local_passes: float = 0.0
    local_steps: int = 0  # minibatch steps of one training client per round; 0: counted in passes
    batches_per_step: int = 1  # minibatches one counted step computes a gradient on
    every_client_trains: bool = False  # every client trains every round, not only the sampled ones
    evaluation_finetune_epochs: int = 0  # epochs every client fine-tunes its model before each evaluation
    frozen_levels: int = 0  # levels frozen within the run's rounds, each one forward per row, once
    choice_models: int = 0  # models each sampled client scores on its training rows to choose one
    choice_rounds: int = 0  # rounds in which it so chooses
    relatedness_finetune_epochs: int | None = None  # a one-off relatedness step: every client's training
    # rows embedded by an encoder after this many epochs of its own fine-tuning; None: no such step
    in_place_average: bool = False  # the server averages the clients' models one after another, every round
    clustering: Clustering | None = None
    own_models: bool = False  # every client ends with a model of its own, though the method averages per cluster

    def __post_init__(self):
        _check_fields(self)
        if self.batches_per_step < 1:
            raise ValueError(f"Workload.batches_per_step: {self.batches_per_step} is not >= 1")


def _check_fields(declaration) -> None:
    """``TypeError`` or ``ValueError`` naming the first field of ``declaration`` that is not of its
    declared type or is negative."""
    for field in dataclasses.fields(declaration):
        value = getattr(declaration, field.name)
        problem = _problem(value, _hints(type(declaration))[field.name])
        if problem:
            raise TypeError(f"{type(declaration).__name__}.{field.name}: {value!r} is not {problem}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{type(declaration).__name__}.{field.name}: {value!r} is not a finite number >= 0")


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _problem(value, hint) -> str | None:
    """What ``value`` should be under ``hint`` (bool, int, float, a declaration class, or X | None); None: it is."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return None
        if option is bool and isinstance(value, bool):
            return None
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return None
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        if isinstance(option, type) and option not in (bool, int, float, type(None)) and isinstance(value, option):
            return None
    return " or ".join(getattr(option, "__name__", str(option)) for option in options)


def sampled_local_epochs(training: dict) -> Workload:
    """FedAvg's workload (McMahan et al. 2017, Algorithm 1): the round's sampled clients, ``local_epochs``
    passes each, nothing else: :class:`~fedbench.algorithms.base.Algorithm`'s default."""
    return Workload(local_passes=training["local_epochs"])


def entry_parameters(algorithm: dict) -> dict:
    """An algorithm entry's parameters (without ``method``) with its builder's defaults filled in (pFedMe's
    ``inner_steps`` 5 and ``local_steps`` 20 where the entry leaves them out); an unknown method's as given."""
    from fedbench.registry.algorithms import ALGORITHMS

    params = {k: v for k, v in algorithm.items() if k != "method"}
    try:
        return ALGORITHMS.with_defaults(algorithm["method"], params)
    except KeyError:
        return params


def declared_workload(algorithm: dict, training: dict) -> Workload:
    """The workload a config's algorithm entry declares (its class's ``workload`` with the builder's
    defaults filled in); for a method the registry does not know (a plugin not loaded),
    :func:`sampled_local_epochs`.  ``TypeError`` where the declaration is not a :class:`Workload`."""
    from fedbench.registry.algorithms import algorithm_class

    try:
        cls = algorithm_class(algorithm["method"])
    except KeyError:
        return sampled_local_epochs(training)
    workload = cls.workload(entry_parameters(algorithm), training)
    if not isinstance(workload, Workload):
        raise TypeError(f"algorithm {algorithm['method']!r}: {cls.__name__}.workload returned {workload!r}, not a Workload")
    return workload
