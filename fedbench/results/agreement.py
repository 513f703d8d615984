"""The papers' own "±" statistics and the agreement flag of a reproduced number.

What the "±" means differs by paper (``config/published_results.csv``, column ``notes``):

* ``std_error`` -- FLT Tables 1-4 and 7-10 print "% ± std. error".  The authors' code does not
  compute it (notes §4.6: it matches a binomial standard error over the test samples); the
  reproduction states its own standard error of the mean over seeds, ``sd(ddof=1) / sqrt(n)``.
* ``std`` -- everywhere else (pFedMT and pFedMe's ``average_data``: ``np.std`` over runs, FeMAM
  "mean±std over 4 runs", FedMR "± standard deviation", FLT Table 5 "% ± std."): the standard
  deviation over runs with numpy's default ``ddof=0`` (pFedMe's ``utils/plot_utils.average_data``
  uses ``np.std``; the other papers' code for it is not released, so numpy's default is assumed).

Agreement (:func:`agreement`): each side's uncertainty of its mean,

* published ``u_p``: the printed ± of a standard-error table; a printed standard deviation divided
  by sqrt(runs) where the notes state the number of runs ("over 4 runs"), the printed standard
  deviation itself where they do not (the conservative reading: at most one run's spread); 0 where
  nothing is printed (FLT's variance columns, FeMAM's Table 2 deltas);
* reproduced ``u_r = sd(ddof=1) / sqrt(n)`` over the n seeds (needs n >= 2);

combined ``u = sqrt(u_p^2 + u_r^2)``, ``z = (reproduced - published) / u``.  The row *agrees* when
``|z| <= 2`` (within two combined standard errors), *misses* otherwise; with fewer than two seeds
or ``u = 0`` there is no flag.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

import numpy as np

STD_ERROR = "std_error"
STD = "std"
AGREE, MISS = "agree", "miss"
THRESHOLD = 2.0  # |difference| <= THRESHOLD combined standard errors

_RUNS = re.compile(r"over (\d+) runs")


def statistic_of(table_notes: Iterable[str]) -> str:
    """The "±" statistic of a published table: ``std_error`` where the notes of its rows say so
    (FLT's accuracy rows; the variance rows of the same table print no ±), ``std`` otherwise."""
    return STD_ERROR if any(str(notes).startswith(STD_ERROR) for notes in table_notes) else STD


def spread(values: Sequence[float], statistic: str) -> float:
    """The paper's statistic over the seeds' values: standard error of the mean (``ddof=1``) or
    standard deviation (``ddof=0``, numpy's default, as pFedMe's ``average_data``)."""
    values = np.asarray(values, dtype=float)
    if statistic == STD_ERROR:
        return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) >= 2 else math.nan
    if statistic == STD:
        return float(values.std(ddof=0)) if len(values) else math.nan
    raise ValueError(f"statistic must be {STD_ERROR!r} or {STD!r}, got {statistic!r}")


def published_runs(notes: str) -> int | None:
    """The number of runs a published "mean ± std" is over, where the notes state it."""
    match = _RUNS.search(str(notes))
    return int(match.group(1)) if match else None


def published_uncertainty(std: float | None, statistic: str, notes: str) -> float:
    """``u_p``: the published mean's standard error as far as the paper lets one tell (module doc)."""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return 0.0
    if statistic == STD_ERROR:
        return float(std)
    runs = published_runs(notes)
    return float(std) / math.sqrt(runs) if runs else float(std)


def agreement(published: float, published_std: float | None, statistic: str, notes: str,
              values: Sequence[float]) -> dict:
    """The combined standard error, ``z`` and the flag of one row (module doc); ``values`` are the
    seeds' reproduced numbers."""
    values = np.asarray(values, dtype=float)
    out = {"combined_se": math.nan, "z": math.nan, "agreement": ""}
    if len(values) < 2:
        return out
    u_p = published_uncertainty(published_std, statistic, notes)
    u_r = float(values.std(ddof=1) / math.sqrt(len(values)))
    combined = math.hypot(u_p, u_r)
    if not combined > 0:
        return out
    z = (float(values.mean()) - float(published)) / combined
    return {"combined_se": combined, "z": z, "agreement": AGREE if abs(z) <= THRESHOLD else MISS}
