"""Verdicts that are decided honestly: a group-sequential design over seeds, with an equivalence verdict.

A claim is first measured on a pilot of seeds (the config's ``seeds``); while it stays undecided,
the workflow adds seeds in batches up to a cap.  The seed counts at which the claim is looked at
are the design's ``looks`` (e.g. 3, 5, 7, 10).  At every look the same interval gives one of four
verdicts (:func:`decide`):

* **holds** -- the whole interval lies above 0 (a threshold claim: at or above ``at_least``);
* **does not hold** -- the whole interval lies below it;
* **equivalent** -- the interval lies inside (-delta, +delta) and straddles 0: no difference
  beyond ``delta``, the smallest difference that matters (two one-sided tests, TOST; comparisons only);
* **inconclusive** -- none of these; reported with the smallest effect the seeds run could have
  detected (:func:`detectable`).

A look with no number at all (every seed's run diverged, NaN) has no interval and nothing more seeds
could narrow: the claim is **not comparable** at that look and closes (its reading names the runs),
rather than staying "inconclusive", which means under-powered, and drawing seeds up to the cap.

The first look that decides (or finds the claim not comparable) ends the claim; a later look is never
consulted.

Error rate.  With ``L`` looks and error rate ``alpha``, every look uses the two-sided
``1 - 2 alpha / L`` Student-t interval (Bonferroni over the looks).  Each directional verdict is a
one-sided test at level ``alpha / L`` per look, so over all looks: with no true difference, P(holds)
<= alpha and P(does not hold) <= alpha; with a true difference of exactly +-delta, P(equivalent) <=
alpha (each of TOST's two tests at ``alpha / L``).  ``tests/test_sequential.py`` checks these by
simulating 10,000 claims.  With one look and ``alpha = 0.025`` the interval is the usual 95 % one.

The verdicts are vectorised over claims (:func:`sequential_verdicts`, rows = claims, columns =
seeds in the design's order; NaN = a run that diverged, left out), so the simulation and a report
run the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE = "holds", "does not hold", "equivalent", "inconclusive"
NOT_COMPARABLE = "not comparable"
VERDICTS = (HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE, NOT_COMPARABLE)
DECIDED = (HOLDS, FAILS, EQUIVALENT)
CLOSED = (*DECIDED, NOT_COMPARABLE)
"""Verdicts that end a claim's looks: a decision, or nothing to compare."""
POWER = 0.8  # the power at which an inconclusive claim's detectable effect is stated


@dataclass(frozen=True)
class Design:
    """When a claim is looked at (seed counts, increasing), its error rate and smallest difference that matters."""

    looks: tuple[int, ...]
    alpha: float = 0.025
    delta: float = 1.0

    def __post_init__(self):
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing seed counts >= 1, got {list(self.looks)}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if not self.delta > 0:
            raise ValueError(f"delta must be > 0, got {self.delta}")

    @property
    def per_look_alpha(self) -> float:
        """One-sided level of each look's tests (Bonferroni over the looks)."""
        return self.alpha / len(self.looks)

    @property
    def confidence(self) -> float:
        """Two-sided confidence of each look's interval: ``1 - 2 alpha / L``."""
        return 1 - 2 * self.per_look_alpha


def decide(low, high, delta=math.inf, reference=0.0, threshold: bool = False):
    """The verdict of intervals ``[low, high]`` (arrays or scalars): holds above ``reference`` (a
    threshold: its lower end may equal it), does not hold below, equivalent inside ``reference +-
    delta`` (comparisons only), else inconclusive; NaN ends (no interval) are inconclusive."""
    low, high = np.asarray(low, float), np.asarray(high, float)
    above = (low >= reference) if threshold else (low > reference)
    inside = (low > reference - delta) & (high < reference + delta) & (not threshold) & bool(np.isfinite(delta))
    out = np.where(above, HOLDS, np.where(high < reference, FAILS, np.where(inside, EQUIVALENT, INCONCLUSIVE)))
    out = np.where(np.isnan(low) | np.isnan(high), INCONCLUSIVE, out)
    return out.item() if out.ndim == 0 else out


def t_interval(values: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    """Per row of ``values`` (NaN left out): mean, standard error, degrees of freedom, n and the
    two-sided Student-t interval at ``confidence`` (a point where the values agree exactly; NaN below 2 values)."""
    values = np.atleast_2d(np.asarray(values, float))
    n = (~np.isnan(values)).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(n[:, None] > 0, values, 0.0), 1)
        mean = np.where(n > 0, mean, np.nan)
        sd = np.sqrt(np.nansum((values - mean[:, None]) ** 2, 1) / (n - 1))
        se = np.where(n >= 2, sd / np.sqrt(n), np.nan)
        df = np.maximum(n - 1, 1)
        half = stats.t.ppf(0.5 + confidence / 2, df) * se
    half = np.where(se == 0, 0.0, half)
    return {"mean": mean, "se": se, "df": df, "n": n, "low": mean - half, "high": mean + half}


def detectable(se, df, per_look_alpha: float, power: float = POWER):
    """The smallest true difference a look of this spread would find with probability ``power``:
    ``(t(1 - alpha_look, df) + t(power, df)) * se`` (NaN without an interval)."""
    return (stats.t.ppf(1 - per_look_alpha, df) + stats.t.ppf(power, df)) * np.asarray(se, float)


def sequential_verdicts(values, design: Design, reference: float = 0.0, threshold: bool = False,
                        delta: float | None = None) -> dict[str, np.ndarray]:
    """Run the design over rows of per-seed ``values`` (claims x seeds in the design's seed order;
    a threshold's metric, or a comparison's paired differences).  Row by row: the first look that
    decides, else the last look the row's seeds reach.  Returns per row ``verdict``, ``look`` (its
    index), ``n`` (seeds used), ``mean``, ``low``, ``high``, ``detectable`` and ``pending`` (undecided
    and the design has looks left that its seeds do not reach yet: the workflow adds seeds).  Fewer
    seeds than the first look (a pilot still running) are read at the first look's confidence,
    pending whatever they say."""
    values = np.atleast_2d(np.asarray(values, float))
    rows, available = values.shape
    delta = design.delta if delta is None else delta
    out = {"verdict": np.full(rows, INCONCLUSIVE, dtype=object), "look": np.full(rows, -1), "n": np.zeros(rows, int),
           "pending": np.zeros(rows, bool)}
    for key in ("mean", "low", "high", "detectable"):
        out[key] = np.full(rows, np.nan)
    open_ = np.ones(rows, bool)
    looks = design.looks if available >= design.looks[0] else (available,)  # a pilot not yet complete: what there is
    out["pending"][:] = available < design.looks[0]
    for k, seeds in enumerate(looks):
        if seeds > available:
            out["pending"] = open_.copy()
            break
        interval = t_interval(values[:, :seeds], design.confidence)
        verdict = decide(interval["low"], interval["high"], math.inf if threshold else delta, reference, threshold)
        verdict = np.where(interval["n"] == 0, NOT_COMPARABLE, verdict)
        take = open_
        out["verdict"][take] = np.atleast_1d(verdict)[take]
        out["look"][take] = k
        out["n"][take] = interval["n"][take]
        for key in ("mean", "low", "high"):
            out[key][take] = interval[key][take]
        out["detectable"][take] = detectable(interval["se"], interval["df"], design.per_look_alpha)[take]
        open_ = open_ & ~np.isin(np.atleast_1d(verdict), CLOSED)
    return out


__all__ = ["Design", "HOLDS", "FAILS", "EQUIVALENT", "INCONCLUSIVE", "NOT_COMPARABLE", "VERDICTS", "DECIDED", "CLOSED",
           "decide", "t_interval", "detectable", "sequential_verdicts"]
