"""The algorithms as the layers below them see them: the ``ALGORITHMS`` registry, filled on its
first lookup by importing :mod:`fedbench.algorithms` (whose modules register their builders),
:func:`algorithm_class`, the class a builder returns, and :class:`PlanContext`, what the config's checks tell an algorithm about the plan it is in
(:meth:`fedbench.algorithms.base.Algorithm.check_plan`).  Config validation and provenance
import this module, never an algorithm's."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from fedbench.registry.core import Registry

ALGORITHMS: Registry = Registry("algorithm", provider="fedbench.algorithms")


def returned_class(builder) -> Any:
    """What ``builder`` is annotated to return (None without an annotation)."""
    return typing.get_type_hints(builder).get("return")


def algorithm_class(method: str) -> type:
    """The Algorithm subclass the ``ALGORITHMS`` builder ``method`` returns (checked at registration)."""
    return returned_class(ALGORITHMS[method])


@dataclass(frozen=True)
class PlanContext:
    """One algorithm entry in one grid block of an experiment, as the config declares it."""

    name: str  # the entry's name (``algorithms.<name>``)
    entry: Mapping[str, Any]  # its parameters as the config gives them (without ``method``)
    training: Mapping[str, Any]  # the experiment's training settings, defaults filled in
    training_set: Mapping[str, Any] = field(default_factory=dict)  # those the experiment sets itself
    clients: Mapping[str, int] = field(default_factory=dict)  # partition -> client count, the block's partitions where known
