"""Search spaces of tuning knobs, declared beside a builder's parameter bounds.

An algorithm registers its own knobs (``ALGORITHMS.register("fedprox", search={"mu": LogRange(1e-3, 1)})``);
every algorithm is also tuned in the learning rate (:data:`COMMON_SEARCH`).  A knob's space is

* a list of values (a choice, e.g. IFCA's number of clusters),
* :class:`LogRange` -- log-uniform between two absolute values (FedProx's mu), or
* :class:`Relative` -- log-uniform factors of the value the config sets (the learning rate: 0.1x to 10x
  the paper's, whatever the paper's is), or
* ``None`` -- a common knob the method does not read (pFedMT's steps are its own alpha, eta, beta, not
  the learning rate).

Trials are a Latin hypercube over the knobs (:func:`fedbench.tuning.trials.trial_settings`);
the value the config sets is always trial 0, so the paper's setting is always among the trials.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class LogRange:
    """Log-uniform between ``low`` and ``high`` (absolute values); an ``integer`` knob (a batch size)
    is rounded to the nearest integer, at least 1."""

    low: float
    high: float
    integer: bool = False

    def distribution(self, configured=None):
        return stats.loguniform(self.low, self.high)

    def describe(self) -> str:
        return f"log-uniform [{self.low:g}, {self.high:g}]{', rounded' if self.integer else ''}"


@dataclass(frozen=True)
class Relative:
    """Log-uniform factors ``low``..``high`` of the configured value (which must be > 0); an
    ``integer`` knob (a number of rounds) is rounded to the nearest integer, at least 1."""

    low: float
    high: float
    integer: bool = False

    def distribution(self, configured):
        if not isinstance(configured, (int, float)) or isinstance(configured, bool) or configured <= 0:
            raise ValueError(f"a relative range needs a positive configured value, got {configured!r}; "
                             "give a list of values or {log: [low, high]} instead")
        return stats.loguniform(self.low * configured, self.high * configured)

    def describe(self) -> str:
        return f"{self.low:g}x to {self.high:g}x the configured value, log-uniform{', rounded' if self.integer else ''}"


Space = list | LogRange | Relative

COMMON_SEARCH: dict[str, Space] = {"lr": Relative(0.1, 10.0)}
"""Tuned for every algorithm: the local learning rate (``training.lr``)."""


def check_space(name: str, space) -> None:
    """A knob's space is a non-empty list, a :class:`LogRange` or a :class:`Relative`; the ``ValueError``
    names the problem, the caller the knob's place."""
    if isinstance(space, list):
        if not space:
            raise ValueError("an empty list: give at least one value")
        return
    if not isinstance(space, (LogRange, Relative)):
        raise ValueError(f"{space!r} is not a search space: give a list, {{log: [low, high]}} or {{relative: [low, high]}}")
    if not 0 < space.low < space.high:
        raise ValueError(f"[{space.low:g}, {space.high:g}] is not a range: it needs 0 < low < high")


def describe(space) -> str:
    return f"one of {space}" if isinstance(space, list) else space.describe()


__all__ = ["LogRange", "Relative", "Space", "COMMON_SEARCH", "check_space", "describe"]
