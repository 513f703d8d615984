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

Error rate: an alpha-spending boundary.  Each directional verdict is a one-sided test at every look
(holds: ``t_k = mean / se > c_k``; does not hold: ``t_k < -c_k``), and so is each of TOST's two tests
(``(mean + delta) / se > c_k`` and ``(delta - mean) / se > c_k``).  The critical values ``c_k`` spend
the error rate ``alpha`` across the looks by a named spending function ``alpha(tau)`` of the
information fraction ``tau_k = n_k / n_L`` (Lan & DeMets 1983): with no true difference, the chance of
crossing at look ``k`` and at no earlier look is ``alpha(tau_k) - alpha(tau_{k-1})``, so over all looks
P(holds) <= alpha, P(does not hold) <= alpha, and with a true difference of exactly +-delta
P(equivalent) <= alpha (the boundary is non-binding: stopping for another verdict only lowers these).
The spending functions (:func:`spending_function`, ``claims_design.spending``):

* ``hsd(gamma)`` -- Hwang, Shih & DeCani (1990): ``alpha (1 - exp(-gamma tau)) / (1 - exp(-gamma))``
  (``gamma = 0``: ``alpha tau``); the default ``hsd(-2)`` spends little at the early looks;
* ``obf`` -- the O'Brien-Fleming-type function of Lan & DeMets (1983), one-sided:
  ``2 - 2 Phi(z_{1 - alpha/2} / sqrt(tau))``, which spends almost nothing before the last looks;
* ``bonferroni`` -- no spending function: every look at the one-sided level ``alpha / L``, the two-sided
  ``1 - 2 alpha / L`` interval (conservative: about 0.034 instead of 0.05 at four looks).

The critical values are those of the one-sample (paired) t-statistic, whose degrees of freedom grow
with the looks (``n_k - 1``) and whose looks share their seeds, so no normal-theory table applies
(:func:`critical_values`): the first look's is exact, ``t(1 - alpha(tau_1), n_1 - 1)``, so one look is
the fixed-sample interval; each later look's is solved on a seeded simulation of the t-statistics of
:data:`SIMULATION_PATHS` standard-normal paths and their mirror images (under no difference the
t-statistic is free of the spread).  The same numbers on every call, cached per design.  A look's
interval is the Student-t interval at the look's nominal level ``p_k = P(t_{n_k - 1} > c_k)``
(:meth:`Design.look_alpha`): with every seed's number present exactly ``mean +- c_k se``; with seeds
left out (diverged runs), ``t(1 - p_k, n - 1)`` for the ``n`` seeds there are, and Welch's unpaired
interval at the same level.  ``tests/test_sequential.py`` simulates 10,000 claims to check the error
rates and checks the critical values against an independent simulation.  With one look and
``alpha = 0.025`` the interval is the usual 95 % one.

The verdicts are vectorised over claims (:func:`sequential_verdicts`, rows = claims, columns =
seeds in the design's order; NaN = a run that diverged, left out), so the simulation and a report
run the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache as functools_cache

import numpy as np
from scipy import stats

HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE = "holds", "does not hold", "equivalent", "inconclusive"
NOT_COMPARABLE = "not comparable"
VERDICTS = (HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE, NOT_COMPARABLE)
DECIDED = (HOLDS, FAILS, EQUIVALENT)
CLOSED = (*DECIDED, NOT_COMPARABLE)
"""Verdicts that end a claim's looks: a decision, or nothing to compare."""
POWER = 0.8  # the power at which an inconclusive claim's detectable effect is stated
DEFAULT_SPENDING = "hsd(-2)"
SIMULATION_PATHS = 2 ** 21
"""Simulated paths behind a later look's critical value (each also read mirrored, -x).  Measured over 8
simulation seeds at alpha = 0.05, hsd(-2): a standard deviation of 0.002 in the last look's critical t
(3/5/7/10 and 5/7/10 seeds), 0.002-0.007 at the looks between; the first look's is exact."""
SIMULATION_SEED = 0
_CHUNK = 2 ** 17  # paths simulated at a time (memory)
_FEWEST_CROSSINGS = 100  # below this many simulated crossings a look takes the marginal t quantile


# ---- spending functions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spending:
    """A spending function by name: ``hsd`` (with ``gamma``), ``obf`` or ``bonferroni``."""

    name: str
    gamma: float = 0.0

    def __str__(self) -> str:
        return f"hsd({self.gamma:g})" if self.name == "hsd" else self.name

    def spent(self, alpha: float, tau):
        """Error rate spent by information fraction ``tau`` (0 < tau <= 1; exactly ``alpha`` at 1).
        ``hsd``: Hwang, Shih & DeCani (1990), ``alpha (1 - e^{-gamma tau}) / (1 - e^{-gamma})``,
        ``alpha tau`` at ``gamma = 0``; ``obf``: Lan & DeMets (1983)'s O'Brien-Fleming-type function,
        ``2 - 2 Phi(z_{1 - alpha/2} / sqrt(tau))``; ``bonferroni``: ``alpha k / L`` at the k-th of L looks
        (``tau`` must then be the looks' ranks over L)."""
        tau = np.asarray(tau, float)
        if self.name == "hsd":
            out = alpha * tau if self.gamma == 0 else alpha * -np.expm1(-self.gamma * tau) / -np.expm1(-self.gamma)
        elif self.name == "obf":
            out = 2 * stats.norm.sf(stats.norm.isf(alpha / 2) / np.sqrt(tau))
        else:
            out = alpha * tau
        out = np.where(tau >= 1, alpha, out)
        return out.item() if out.ndim == 0 else out


SPENDING_NAMES = ("hsd(GAMMA)", "obf", "bonferroni")


def spending_function(text: str) -> Spending:
    """``hsd(-2)`` (any finite ``gamma`` in [-40, 40]), ``obf`` or ``bonferroni``; anything else is a ValueError."""
    given = str(text).strip().lower().replace(" ", "")
    if given in ("obf", "bonferroni"):
        return Spending(given)
    if given.startswith("hsd(") and given.endswith(")"):
        try:
            gamma = float(given[4:-1])
        except ValueError:
            gamma = math.nan
        if math.isfinite(gamma) and abs(gamma) <= 40:
            return Spending("hsd", gamma)
    raise ValueError(f"spending must be one of {', '.join(SPENDING_NAMES)} (GAMMA a number in [-40, 40], "
                     f"e.g. {DEFAULT_SPENDING}), got {text!r}")


# ---- the boundary: critical t per look ---------------------------------------------------------


def _simulated_t(looks: tuple[int, ...], paths: int, seed: int) -> np.ndarray:
    """Paths x looks: the one-sample t-statistic ``mean / (sd / sqrt(n_k))`` of the first ``n_k`` of
    each path's ``n_L`` standard-normal values (NaN at a look of 1 value)."""
    rng = np.random.default_rng(seed)
    n = np.asarray(looks)
    out = np.empty((paths, len(looks)))
    for start in range(0, paths, _CHUNK):
        x = rng.standard_normal((min(_CHUNK, paths - start), looks[-1]))
        total, squares = np.cumsum(x, 1)[:, n - 1], np.cumsum(x * x, 1)[:, n - 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            variance = np.maximum(squares - total * total / n, 0.0) / (n - 1)
            out[start:start + len(x)] = (total / n) / np.sqrt(variance / n)
    return out


def _upper_quantile(p, df):
    """``t(1 - p, df)``: exactly scipy's ``ppf(1 - p)`` (so one look is the fixed-sample quantile to the
    last bit), ``isf(p)`` where ``1 - p`` would lose ``p``'s digits (below 1e-8)."""
    p = np.asarray(p, float)
    return np.where(p < 1e-8, stats.t.isf(p, df), stats.t.ppf(1 - p, df))


def _crossing_value(values: np.ndarray, crossings: float) -> float:
    """The value ``c`` with ``crossings`` of ``values`` above it: the descending order statistics read at
    position ``crossings - 1/2``, linear between neighbours (for a whole number, midway between the
    ``crossings``-th largest and the next)."""
    position = crossings - 0.5
    j = int(math.floor(position))
    top = len(values) - 1 - j  # ascending index of the (j + 1)-th largest
    ordered = np.partition(values, [top - 1, top])
    return float(ordered[top] + (position - j) * (ordered[top - 1] - ordered[top]))


@functools_cache
def critical_values(looks: tuple[int, ...], alpha: float, spending: str = DEFAULT_SPENDING) -> tuple[float, ...]:
    """One-sided critical t per look: ``c_k`` such that, with no true difference, the t-statistic first
    exceeds the boundary at look ``k`` with probability ``alpha(tau_k) - alpha(tau_{k-1})`` (Lan & DeMets
    1983's alpha spending, the t-statistic at ``n_k - 1`` df).  ``bonferroni``: ``t(1 - alpha / L, n_k - 1)``.
    Otherwise the first look's is exact, ``t(1 - alpha(tau_1), n_1 - 1)``; later ones are order statistics
    of :data:`SIMULATION_PATHS` seeded paths of the t-statistics and their mirror images, among the paths
    that crossed at no earlier look (where a look's share is under :data:`_FEWEST_CROSSINGS` paths, the
    marginal quantile ``t(1 - share, n_k - 1)``, the larger, safe one).  Deterministic; cached."""
    looks, function = tuple(int(n) for n in looks), spending_function(spending)
    df = np.maximum(np.asarray(looks) - 1, 1)
    if function.name == "bonferroni":
        return tuple(float(c) for c in _upper_quantile(alpha / len(looks), df))
    spent = function.spent(alpha, np.asarray(looks) / looks[-1])
    share = np.diff(spent, prepend=0.0)
    critical = [float(_upper_quantile(spent[0], df[0]))]
    if len(looks) == 1:
        return tuple(critical)
    t = _simulated_t(looks, SIMULATION_PATHS, SIMULATION_SEED)
    up, down = ~(t[:, 0] > critical[0]), ~(-t[:, 0] > critical[0])  # still open (NaN: open)
    for k in range(1, len(looks)):
        crossings = share[k] * 2 * len(t)
        if crossings < _FEWEST_CROSSINGS:
            critical.append(float(stats.t.isf(share[k], df[k])))
        else:
            candidates = np.concatenate([t[up, k], -t[down, k]])
            candidates = np.where(np.isnan(candidates), -np.inf, candidates)
            critical.append(_crossing_value(candidates, crossings))
        up &= ~(t[:, k] > critical[k])
        down &= ~(-t[:, k] > critical[k])
    return tuple(critical)


@dataclass(frozen=True)
class Design:
    """When a claim is looked at (seed counts, increasing), its error rate, smallest difference that
    matters and the spending function that spreads the error rate over the looks."""

    looks: tuple[int, ...]
    alpha: float = 0.025
    delta: float = 1.0
    spending: str = DEFAULT_SPENDING

    def __post_init__(self):
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing seed counts >= 1, got {list(self.looks)}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if not self.delta > 0:
            raise ValueError(f"delta must be > 0, got {self.delta}")
        object.__setattr__(self, "spending", str(spending_function(self.spending)))

    @property
    def spent(self) -> tuple[float, ...]:
        """Cumulative error rate spent by each look, each direction: ``alpha(n_k / n_L)`` (Bonferroni: ``k alpha / L``)."""
        function, n = spending_function(self.spending), np.asarray(self.looks)
        tau = np.arange(1, len(n) + 1) / len(n) if function.name == "bonferroni" else n / n[-1]
        return tuple(float(a) for a in function.spent(self.alpha, tau))

    @property
    def critical(self) -> tuple[float, ...]:
        """Each look's critical t for the t-statistic at ``n_k - 1`` df (:func:`critical_values`)."""
        return critical_values(tuple(self.looks), float(self.alpha), self.spending)

    def look_alpha(self, look: int) -> float:
        """One-sided nominal level of look ``look``'s tests (0-based): ``P(t_{n_k - 1} > c_k)``; the first
        look's (and Bonferroni's every look's) exactly as spent."""
        if spending_function(self.spending).name == "bonferroni":
            return self.alpha / len(self.looks)
        if look == 0:
            return self.spent[0]
        return float(stats.t.sf(self.critical[look], max(self.looks[look] - 1, 1)))

    def look_confidence(self, look: int) -> float:
        """Two-sided confidence of look ``look``'s interval: ``1 - 2 p_k``."""
        return 1 - 2 * self.look_alpha(look)

    def boundary(self) -> list[dict]:
        """Per look: its seed count, critical t, nominal one-sided level and the error rate spent by then."""
        return [{"seeds": n, "critical": c, "level": self.look_alpha(k), "spent": spent}
                for k, (n, c, spent) in enumerate(zip(self.looks, self.critical, self.spent))]


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


def detectable(se, df, look_alpha: float, power: float = POWER):
    """The smallest true difference a look of this spread would find with probability ``power``:
    ``(t(1 - p_k, df) + t(power, df)) * se`` for the look's nominal level ``p_k`` (with every seed's number,
    ``t(1 - p_k, n_k - 1)`` is the look's critical value ``c_k``; NaN without an interval)."""
    return (stats.t.isf(look_alpha, df) + stats.t.ppf(power, df)) * np.asarray(se, float)


def sequential_verdicts(values, design: Design, reference: float = 0.0, threshold: bool = False,
                        delta: float | None = None) -> dict[str, np.ndarray]:
    """Run the design over rows of per-seed ``values`` (claims x seeds in the design's seed order;
    a threshold's metric, or a comparison's paired differences).  Row by row: the first look that
    decides, else the last look the row's seeds reach.  Returns per row ``verdict``, ``look`` (its
    index), ``n`` (seeds used), ``mean``, ``low``, ``high``, ``detectable`` and ``pending`` (undecided
    and the design has looks left that its seeds do not reach yet: the workflow adds seeds).  Fewer
    seeds than the first look (a pilot still running) are read at the first look's confidence,
    pending whatever they say.  Each look's interval is at the design's level for that look
    (:meth:`Design.look_confidence`, the boundary's critical t)."""
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
        interval = t_interval(values[:, :seeds], design.look_confidence(k))
        verdict = decide(interval["low"], interval["high"], math.inf if threshold else delta, reference, threshold)
        verdict = np.where(interval["n"] == 0, NOT_COMPARABLE, verdict)
        take = open_
        out["verdict"][take] = np.atleast_1d(verdict)[take]
        out["look"][take] = k
        out["n"][take] = interval["n"][take]
        for key in ("mean", "low", "high"):
            out[key][take] = interval[key][take]
        out["detectable"][take] = detectable(interval["se"], interval["df"], design.look_alpha(k))[take]
        open_ = open_ & ~np.isin(np.atleast_1d(verdict), CLOSED)
    return out


__all__ = ["Design", "Spending", "DEFAULT_SPENDING", "SPENDING_NAMES", "SIMULATION_PATHS", "spending_function",
           "critical_values", "HOLDS", "FAILS", "EQUIVALENT", "INCONCLUSIVE", "NOT_COMPARABLE", "VERDICTS", "DECIDED", "CLOSED",
           "decide", "t_interval", "detectable", "sequential_verdicts"]
