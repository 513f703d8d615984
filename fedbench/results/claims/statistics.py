"""The statistic of a claim: Student-t intervals over seeds (paired, Welch's unpaired, one-sample)
and the sequential verdict of one claim in one cell (:mod:`fedbench.results.sequential`'s design:
each look's interval at the alpha-spending boundary's level for that look, Lan & DeMets 1983).

Layer 6 (results).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from fedbench.results.claims.spec import ClaimError
from fedbench.results.sequential import INCONCLUSIVE, NOT_COMPARABLE, Design, decide, sequential_verdicts

CONFIDENCE = 0.95


# ---- evaluation ----------------------------------------------------------------------------


def verdict(low: float, high: float, reference: float = 0.0, at_least: bool = False) -> str:
    """holds (interval above ``reference``; with ``at_least``, a threshold's, its lower end may equal
    it), does not hold (interval below), inconclusive (it straddles ``reference``, or there is no
    interval); no equivalence margin (:func:`fedbench.results.sequential.decide` has one)."""
    return decide(low, high, math.inf, reference, at_least)


def _interval(result, values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The test's interval at ``confidence``; a point where the values do not vary; NaN below 2 values."""
    if len(values) < 2:
        return math.nan, math.nan
    if np.ptp(values) == 0:
        return float(values[0]), float(values[0])
    ci = result.confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def _per_seed_text(seeds, values) -> str:
    return ", ".join(f"{v:+.2f} (seed {s})" for s, v in zip(seeds, values))


def compare(better: pd.Series, than: pd.Series, pairing: str = "paired", confidence: float = CONFIDENCE) -> dict:
    """Difference ``better - than`` of two per-seed series (indexed by seed): mean, t interval at
    ``confidence``, n.  Paired: the seeds both have, difference per seed; unpaired: Welch's interval of the two means."""
    if pairing == "paired":
        both = pd.concat([better, than], axis=1, keys=["a", "b"]).dropna()
        diffs = (both["a"] - both["b"]).to_numpy(float)
        result = stats.ttest_rel(both["a"], both["b"]) if len(diffs) >= 2 and np.ptp(diffs) > 0 else None
        low, high = _interval(result, diffs, confidence)
        return {"difference": float(diffs.mean()) if len(diffs) else math.nan, "low": low, "high": high, "n": len(diffs),
                "per_seed": _per_seed_text(both.index, diffs)}
    if pairing != "unpaired":
        raise ClaimError(f"pairing must be 'paired' or 'unpaired', got {pairing!r}")
    a, b = better.dropna().to_numpy(float), than.dropna().to_numpy(float)
    difference = a.mean() - b.mean() if len(a) and len(b) else math.nan
    out = {"difference": difference, "low": math.nan, "high": math.nan, "n": min(len(a), len(b)),
           "per_seed": f"{_per_seed_text(better.dropna().index, a)} vs {_per_seed_text(than.dropna().index, b)}"}
    if min(len(a), len(b)) < 2:
        return out
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return {**out, "low": difference, "high": difference}
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return {**out, "difference": float(difference), "low": float(ci.low), "high": float(ci.high)}


def threshold(values: pd.Series, at_least: float) -> dict:
    """Mean of a per-seed series and its one-sample 95 % t interval, against ``at_least``."""
    v = values.dropna().to_numpy(float)
    result = stats.ttest_1samp(v, at_least) if len(v) >= 2 and np.ptp(v) > 0 else None
    low, high = _interval(result, v)
    return {"difference": float(v.mean()) if len(v) else math.nan, "low": low, "high": high, "n": len(v),
            "per_seed": _per_seed_text(values.dropna().index, v)}


def decide_claim(claim: dict, series: list[pd.Series], design: Design) -> dict:
    """The sequential verdict of one claim in one cell from its algorithms' per-seed numbers (the same
    seeds, in the design's order): mean, interval, verdict, the look that gave it, the seeds it read."""
    pairing = claim.get("pairing", "paired") if "better" in claim else "one-sample"
    if pairing == "unpaired":
        return _decide_unpaired(*series, design)
    values = (series[0] - series[1]) if "better" in claim else series[0]
    reference = 0.0 if "better" in claim else float(claim["at_least"])
    result = sequential_verdicts(values.to_numpy(float)[None, :], design, reference, threshold="better" not in claim)
    look = int(result["look"][0])
    used = design.looks[look] if len(values) >= design.looks[0] else len(values)
    return {"difference": result["mean"][0], "low": result["low"][0], "high": result["high"][0], "n": int(result["n"][0]),
            "per_seed": _per_seed_text(values.index[:used], values.to_numpy(float)[:used]), "verdict": result["verdict"][0],
            "detectable": result["detectable"][0], "pending": bool(result["pending"][0]), "look": look, "used": used}


def _decide_unpaired(better: pd.Series, than: pd.Series, design: Design) -> dict:
    """As :func:`decide_claim` with Welch's interval at each look, at the look's nominal level of the
    design's boundary (:meth:`fedbench.results.sequential.Design.look_confidence`; Welch's df are the
    data's, so its critical t is that level's quantile at them, not the paired ``c_k``)."""
    available = len(better)
    looks = design.looks if available >= design.looks[0] else (available,)
    result = {}
    for look, used in enumerate(looks):
        if used > available:
            return {**result, "pending": True}
        result = compare(better.iloc[:used], than.iloc[:used], "unpaired", design.look_confidence(look))
        verdict = NOT_COMPARABLE if result["n"] == 0 else decide(result["low"], result["high"], design.delta)
        result.update(verdict=verdict, look=look, used=used, detectable=math.nan, pending=available < design.looks[0])
        if result["verdict"] != INCONCLUSIVE:
            break
    return result
