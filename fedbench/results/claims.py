"""The papers' claims as data, checked against the runs: one verdict per claim and cell.

A config's ``claims:`` section maps a claim id to what the paper says and how to test it on one
experiment of the same config:

* a **comparison** (``better`` vs ``than``, two algorithm entries): the per-seed difference
  ``better - than`` of ``metric`` in every selected cell (dataset, partition, model);
* a **threshold** (``algorithm`` and ``at_least``): ``metric`` of one algorithm, e.g. ARI >= 0.9.

``source`` quotes or cites the paper; ``published`` (comparisons) names the rows of
``config/published_results.csv`` whose difference is the paper's margin, so the margin is
computed, never typed in; ``margin`` (text) states it where the paper gives no table difference.

Statistic: a Student-t interval over seeds (scipy.stats) -- paired by default (the two algorithms'
runs on the same partition and seed), Welch's unpaired interval only where a claim sets ``pairing:
unpaired``; a threshold's is the one-sample interval of the metric.  Not a bootstrap: with 3-10
seeds a percentile bootstrap has a handful of distinct resamples and its interval is too narrow.
Verdicts come from the group-sequential design of :mod:`fedbench.results.sequential` (the config's
``claims_design``: looks, error rate ``alpha``, smallest difference that matters ``delta``, a claim's
own ``delta`` over it): holds, does not hold, **equivalent** (inside +-delta) or inconclusive with the
smallest effect its seeds could have detected.  Without ``claims_design`` there is one look at the
config's seeds with ``alpha = 0.025``: the 95 % interval.  The config's ``seeds`` are the pilot; the
workflow adds the next seeds (:func:`design_seeds`) to claims still undecided, look by look.  A pilot
run that is missing is an error (:class:`ClaimError`); a diverged run (no number) leaves its seed out
and is counted.  A claim on a tuned experiment (``tune:``, :mod:`fedbench.tuning.trials`) is read twice:
at the paper's setting and tuned (``setting``), side by side.

The workflow's rule ``paper_claims`` writes each paper's table from its runs (:func:`write_claims`);
``python -m fedbench.results.claims CONFIG...`` writes ``reports/claims.md`` from whatever runs are on
disk, naming the command for the claims not yet measured (:func:`write_report`).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from fedbench.data.partition_file import atomic_write
from fedbench.registry.protocols import PROTOCOLS
from fedbench.results.convergence import TARGET_METRICS, run_time_to_target, target_label
from fedbench.results.papers import PAPERS as PAPER_NAMES
from fedbench.results.papers import experiment_paper
from fedbench.results.published import load_published
from fedbench.results.sequential import (EQUIVALENT, FAILS, HOLDS, INCONCLUSIVE, NOT_COMPARABLE, Design, decide,
                                        sequential_verdicts)
from fedbench.results.tables import CELL_COLUMNS, PERCENT_METRICS, load_metrics
from fedbench.config.files import load_yaml_strict

METRICS = ("accuracy", "global_accuracy", "macro_f1", "ari", "nmi", "ari_planted", *TARGET_METRICS)
"""What a claim may compare (columns of :func:`fedbench.results.tables.load_metrics`; ``global_accuracy``
is the global model's at the round the experiment's protocol picks for it, :func:`protocol_global_accuracy`).
``ari``: the algorithm's recovered clusters as it reports them (FLT: Ward on Ã's rows with the C that HC
chooses itself, or the entry's ``clusters``); ``ari_planted``: the same tree cut at the planted number of
clusters (:meth:`fedbench.algorithms.base.Algorithm.planted_clusters`), so a claim can read structure
recovery without HC's choice of C.  ``rounds_to_target``, ``mb_to_target``, ``client_mb_to_target``: the
rounds, megabytes and megabytes per client a run took to reach the claim's ``target`` (accuracy %) or
``target_fraction`` (of its own final accuracy), :mod:`fedbench.results.convergence`; fewer is better, so
their comparisons read ``than - better`` (positive: ``better`` got there sooner).  A run that never
reached the target counts its last evaluated round (and the bytes sent by then): the claim compares the
restricted time to target, ``min(tau, T)`` (:mod:`fedbench.results.convergence`), and names the runs so
counted; a claim's ``not_reached: leave_out`` leaves such a run out of its seed's pair instead, as a
diverged run always is."""
CELL_AXES = ("datasets", "partitions", "models")
CONFIDENCE = 0.95
DEFAULT_ALPHA = 0.025  # one look: the 95 % interval
DEFAULT_DELTA = {"accuracy": 1.0, "global_accuracy": 1.0, "macro_f1": 1.0, "ari": 0.05, "nmi": 0.05, "ari_planted": 0.05,
                 "rounds_to_target": 5.0, "mb_to_target": 10.0, "client_mb_to_target": 1.0}
"""The smallest difference that matters where neither the claim nor ``claims_design`` says: one
accuracy (or macro-F1) point, 0.05 of ARI or NMI, 5 rounds, 10 MB in all, 1 MB per client (the
time-to-target metrics take the claim's own ``delta`` or this, never ``claims_design.delta``, which is
in accuracy points)."""
SETTINGS = ("paper", "tuned")


class ClaimError(ValueError):
    """A claim names something its config does not have, or a run it needs is missing."""


# ---- the claim's cells and published margin --------------------------------------------


def _grid_cells(experiment: dict) -> set[tuple[str, str, str, str]]:
    """(dataset, partition, model, algorithm) of every cell of an experiment's grid."""
    return {
        (d, p, m, a)
        for block in experiment.get("grid", [])
        for d in block["datasets"] for p in block["partitions"] for m in block["models"] for a in block["algorithms"]
    }


def claim_algorithms(claim: dict) -> list[str]:
    """The algorithm entries a claim reads: ``[better, than]`` or ``[algorithm]``."""
    return [claim["better"], claim["than"]] if "better" in claim else [claim["algorithm"]]


def claim_cells(config: dict, name: str) -> list[tuple[str, str, str]]:
    """The (dataset, partition, model) cells claim ``name`` is tested on: those of its experiment
    that the ``cells`` filter keeps and that hold every algorithm it reads, in sorted order."""
    claim = config["claims"][name]
    where = f"claims.{name}"
    experiments = config.get("experiments", {})
    if claim["experiment"] not in experiments:
        raise ClaimError(f"{where}.experiment: {claim['experiment']!r} is not declared under 'experiments'; "
                         f"declared: {', '.join(experiments) or '(none)'}")
    grid = _grid_cells(experiments[claim["experiment"]])
    for key in ("better", "than", "algorithm"):
        if key in claim and claim[key] not in {c[3] for c in grid}:
            raise ClaimError(f"{where}.{key}: {claim[key]!r} is not an algorithm of experiment "
                             f"{claim['experiment']!r}; its algorithms: {', '.join(sorted({c[3] for c in grid}))}")
    wanted = claim.get("cells", {})
    for i, axis in enumerate(CELL_AXES):
        present = {c[i] for c in grid}
        for value in wanted.get(axis, []):
            if value not in present:
                raise ClaimError(f"{where}.cells.{axis}: {value!r} is not in experiment {claim['experiment']!r}'s grid; "
                                 f"its {axis}: {', '.join(sorted(present))}")
    algorithms = claim_algorithms(claim)
    cells = sorted(
        {c[:3] for c in grid if all(c[i] in wanted.get(axis, [c[i]]) for i, axis in enumerate(CELL_AXES))}
    )
    cells = [c for c in cells if all((*c, a) in grid for a in algorithms)]
    if not cells:
        raise ClaimError(f"{where}: no cell of experiment {claim['experiment']!r} runs {' and '.join(algorithms)} "
                         f"within cells {wanted or '(all)'}")
    return cells


def _published_value(published: pd.DataFrame, keys: dict, where: str) -> float:
    mask = pd.Series(True, index=published.index)
    for column, value in keys.items():
        mask &= published[column].astype(str) == str(value)
    rows = published[mask]
    if len(rows) != 1:
        raise ClaimError(f"{where}: {len(rows)} rows of the published table match {keys} (need exactly 1)")
    return float(rows["value"].iloc[0])


def published_margins(claim: dict, published: pd.DataFrame, where: str = "claim") -> list[tuple[str, float]]:
    """(label, published better - than) for every ``published`` entry of a comparison claim."""
    entries = claim.get("published", [])
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        common = {k: v for k, v in entry.items() if k not in ("better", "than", "better_setting", "than_setting")}
        common.setdefault("metric", "accuracy")
        common.setdefault("split", "test")
        sides = []
        for side in ("better", "than"):
            keys = {**common, "method": entry[side]}
            if f"{side}_setting" in entry:
                keys["setting"] = entry[f"{side}_setting"]
            sides.append(_published_value(published, keys, f"{where}.published[{i}].{side}"))
        label = f"{entry['table']}, {entry['dataset']} {entry.get('model', '')} {entry['partition']}".replace("  ", " ")
        out.append((label, sides[0] - sides[1]))
    return out


def margin_text(claim: dict, published: pd.DataFrame, where: str = "claim") -> str:
    """The paper's margin as shown: every published difference with its table and cell, else the claim's ``margin``."""
    margins = published_margins(claim, published, where) if "better" in claim else []
    return "; ".join(f"{value:+.2f} ({label})" for label, value in margins) or claim.get("margin", "")


def check_claims(config: dict, published: pd.DataFrame | None = None) -> None:
    """Every claim names a declared experiment, algorithms and cells of its grid, a known metric,
    and (``published`` given) rows that resolve one each; raises :class:`ClaimError` at the first problem."""
    for name, claim in (config.get("claims") or {}).items():
        if claim.get("metric", "accuracy") not in METRICS:
            raise ClaimError(f"claims.{name}.metric: {claim['metric']!r} unknown; valid choices: {', '.join(METRICS)}")
        _check_target(claim, f"claims.{name}")
        claim_cells(config, name)
        if published is not None and "better" in claim:
            published_margins(claim, published, f"claims.{name}")


def _check_target(claim: dict, where: str) -> None:
    """A time-to-target claim is a comparison with exactly one of ``target`` and ``target_fraction``;
    no other claim has either, nor ``not_reached``."""
    given = [key for key in ("target", "target_fraction") if key in claim]
    if claim.get("metric", "accuracy") not in TARGET_METRICS:
        extra = [*given, *(["not_reached"] if "not_reached" in claim else [])]
        if extra:
            raise ClaimError(f"{where}.{extra[0]}: only a *_to_target metric has a target (and not_reached); "
                             f"metric is {claim.get('metric', 'accuracy')!r}")
        return
    if len(given) != 1:
        raise ClaimError(f"{where}: metric {claim['metric']} needs exactly one of target (accuracy %) and target_fraction")
    if "better" not in claim:
        raise ClaimError(f"{where}: metric {claim['metric']} is compared between two methods (better, than), "
                         "not against a threshold")


def metric_column(claim: dict) -> str:
    """The column of the runs' frame a claim reads: its metric, or for a time-to-target metric the
    metric at its target (e.g. ``rounds_to_target@80 %``)."""
    metric = claim.get("metric", "accuracy")
    if metric not in TARGET_METRICS:
        return metric
    left_out = " (not reached: left out)" if claim.get("not_reached", "horizon") == "leave_out" else ""
    return f"{metric}@{target_label(claim.get('target'), claim.get('target_fraction'))}{left_out}"


REACHED = " reached"
"""Suffix of the column beside a time-to-target column: whether the run reached the target."""


# ---- evaluation ----------------------------------------------------------------------------


def verdict(low: float, high: float, reference: float = 0.0, at_least: bool = False) -> str:
    """holds (interval above ``reference``; with ``at_least``, a threshold's, its lower end may equal
    it), does not hold (interval below), inconclusive (it straddles ``reference``, or there is no
    interval); no equivalence margin (:func:`fedbench.results.sequential.decide` has one)."""
    return decide(low, high, math.inf, reference, at_least)


# ---- the design: looks, error rate, smallest difference that matters, and the seeds it may add ----


def claims_design(config: dict) -> dict:
    """The config's ``claims_design`` with defaults: one look at the config's seeds, alpha 0.025."""
    block = dict(config.get("claims_design") or {})
    block.setdefault("looks", [len(config.get("seeds", [0]))])
    block.setdefault("alpha", DEFAULT_ALPHA)
    return block


def claim_design(config: dict, claim: dict) -> Design:
    """The design one claim is decided by: the config's looks and alpha, its ``delta`` (the claim's,
    else the design's, else :data:`DEFAULT_DELTA` of its metric)."""
    block = claims_design(config)
    metric = claim.get("metric", "accuracy")
    design_delta = None if metric in TARGET_METRICS else block.get("delta")  # claims_design.delta: accuracy points
    delta = claim.get("delta", DEFAULT_DELTA[metric] if design_delta is None else design_delta)
    return Design(looks=tuple(block["looks"]), alpha=block["alpha"], delta=delta)


def design_seeds(config: dict) -> list[int]:
    """The seeds in the order the looks take them: the config's (the pilot), then the next integers
    after the largest that no ``tune:`` block uses, up to the last look."""
    seeds = [int(s) for s in config.get("seeds", [0])]
    tuning = {int(s) for spec in config.get("experiments", {}).values() for s in (spec.get("tune") or {}).get("seeds", [])}
    candidate = max(seeds) + 1
    while len(seeds) < claims_design(config)["looks"][-1]:
        if candidate not in tuning:
            seeds.append(candidate)
        candidate += 1
    return seeds


def check_design(config: dict) -> None:
    """``claims_design``: increasing looks from the pilot (the config's seed count), alpha and deltas in range."""
    block = claims_design(config)
    pilot = len(config.get("seeds", [0]))
    if block["looks"][0] != pilot:
        raise ClaimError(f"claims_design.looks: the first look is the pilot, the config's {pilot} seeds; "
                         f"got {block['looks'][0]}")
    for name, claim in (config.get("claims") or {}).items():
        try:
            claim_design(config, claim)
        except ValueError as error:
            raise ClaimError(f"claims.{name}: {error}" if "delta" in claim else f"claims_design: {error}") from None


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


def _per_seed(runs: pd.DataFrame, experiment: str, cell: tuple, algorithm: str, metric: str,
              seeds: list[int], required: list[int], where: str) -> pd.Series:
    """``metric`` of one algorithm in one cell per seed, over ``seeds`` in order as far as their runs
    exist; a missing ``required`` (pilot) seed is a :class:`ClaimError`."""
    d, p, m = cell
    rows = runs[(runs["experiment"] == experiment) & (runs["dataset"] == d) & (runs["partition"] == p)
                & (runs["model"] == m) & (runs["algorithm"] == algorithm)]
    missing = sorted(set(required) - set(rows["seed"]))
    if missing:
        raise ClaimError(f"{where}: no run of {experiment}/{d}/{p}/{m}/{algorithm} for seed(s) "
                         f"{', '.join(map(str, missing))}; run that cell before evaluating the claim")
    present = set(rows["seed"])
    leading = list(itertools.takewhile(present.__contains__, seeds))
    series = rows.set_index("seed").loc[leading, metric].astype(float)
    return series * (100 if metric in PERCENT_METRICS else 1)


def evaluated_claims(config: dict, paper: str | None = None, setting: str = "paper") -> list[str]:
    """The claims whose experiment the config runs (``only_experiments``), of one ``paper`` or all;
    for the ``tuned`` setting, those whose experiment has a ``tune:`` block."""
    only = config.get("only_experiments")
    return [
        name for name, claim in (config.get("claims") or {}).items()
        if (only is None or claim["experiment"] in only)
        and (paper is None or experiment_paper(config, claim["experiment"]) == paper)
        and (setting == "paper" or config["experiments"][claim["experiment"]].get("tune") is not None)
    ]


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
    """As :func:`decide_claim` with Welch's interval at each look."""
    available = len(better)
    looks = design.looks if available >= design.looks[0] else (available,)
    result = {}
    for look, used in enumerate(looks):
        if used > available:
            return {**result, "pending": True}
        result = compare(better.iloc[:used], than.iloc[:used], "unpaired", design.confidence)
        verdict = NOT_COMPARABLE if result["n"] == 0 else decide(result["low"], result["high"], design.delta)
        result.update(verdict=verdict, look=look, used=used, detectable=math.nan, pending=available < design.looks[0])
        if result["verdict"] != INCONCLUSIVE:
            break
    return result


def evaluate_claims(config: dict, runs: pd.DataFrame, published: pd.DataFrame, paper: str | None = None,
                    setting: str = "paper") -> pd.DataFrame:
    """One row per claim (:func:`evaluated_claims`) and cell: the paper's margin, the measured mean and
    interval over the seeds the design read (the config's seeds, then :func:`design_seeds` as far as
    runs exist), the verdict and the look that gave it."""
    seeds, pilot = design_seeds(config), [int(s) for s in config["seeds"]]
    rows = []
    for name in evaluated_claims(config, paper, setting):
        claim = config["claims"][name]
        metric = claim.get("metric", "accuracy")
        fewer = -1.0 if metric in TARGET_METRICS else 1.0  # fewer is better: better - than of the negated = than - better
        design = claim_design(config, claim)
        paper_margin = margin_text(claim, published, f"claims.{name}")
        for cell in claim_cells(config, name):
            series = [fewer * _per_seed(runs, claim["experiment"], cell, a, metric_column(claim), seeds, pilot,
                                        f"claims.{name}") for a in claim_algorithms(claim)]
            common = min(len(s) for s in series)
            series = [s.iloc[:common] for s in series]
            result = decide_claim(claim, series, design)
            used = [s.iloc[:result["used"]] for s in series]
            why = "did not reach the target or diverged" if metric in TARGET_METRICS else "diverged"
            diverged = "; ".join(f"{a} {why} (seed {', '.join(map(str, per.index[per.isna()]))})"
                                 for a, per in zip(claim_algorithms(claim), used) if per.isna().any())
            at_horizon = _not_reached_at_horizon(runs, claim, cell, used)
            pairing = claim.get("pairing", "paired") if "better" in claim else "one-sample"
            comparison = (f"{claim['better']} − {claim['than']}" if "better" in claim
                          else f"{claim['algorithm']} ≥ {claim['at_least']:g}")
            if metric in TARGET_METRICS:  # fewer is better: what ``better`` saves
                comparison = f"{claim['than']} − {claim['better']}, to {target_label(claim.get('target'), claim.get('target_fraction'))}"
            rows.append({
                "claim": name, "paper": experiment_paper(config, claim["experiment"]), "setting": setting,
                "source": claim["source"], "experiment": claim["experiment"], "dataset": cell[0], "partition": cell[1],
                "model": cell[2], "metric": metric, "comparison": comparison, "paper_margin": paper_margin,
                **{k: result[k] for k in ("difference", "low", "high", "n", "per_seed", "detectable", "pending")},
                "seeds_run": result["used"], "look": f"{result['look'] + 1} of {len(design.looks)}",
                "seeds_left_out": result["used"] - result["n"], "diverged": diverged, "at_horizon": at_horizon,
                "delta": design.delta,
                "statistic": f"{pairing} t, {100 * design.confidence:.4g} %", "verdict": result["verdict"],
            })
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


CLAIM_COLUMNS = ["claim", "paper", "setting", "source", "experiment", "dataset", "partition", "model", "metric",
                 "comparison", "paper_margin", "difference", "low", "high", "n", "per_seed", "detectable", "pending",
                 "seeds_run", "look", "seeds_left_out", "diverged", "at_horizon", "delta", "statistic", "verdict"]


def _not_reached_at_horizon(runs: pd.DataFrame, claim: dict, cell: tuple, used: list[pd.Series]) -> str:
    """Of a time-to-target claim read at the horizon: which of its runs never reached the target and
    were counted at their last evaluated round (``''``: none, or not such a claim)."""
    column = metric_column(claim) + REACHED
    if column not in runs:
        return ""
    notes = []
    for algorithm, per in zip(claim_algorithms(claim), used):
        reached = _per_seed(runs, claim["experiment"], cell, algorithm, column, list(per.index), [], column)
        seeds = [s for s in per.index[per.notna()] if not reached[s]]
        if seeds:
            notes.append(f"{algorithm} did not reach the target (seed {', '.join(map(str, seeds))}: counted at its last round)")
    return "; ".join(notes)


# ---- output -----------------------------------------------------------------------------


def _measured(row: pd.Series) -> str:
    """``+3.00 [+0.52, +5.48]``; an inconclusive one adds the smallest effect its seeds could have detected."""
    if row["verdict"] == "not yet measured":
        return "not yet measured"
    if math.isnan(row["difference"]):
        return "–"
    if math.isnan(row["low"]):
        return f"{row['difference']:+.2f} (no interval: {int(row['n'])} seed)"
    text = f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]"
    if row["verdict"] == INCONCLUSIVE and not pd.isna(row.get("detectable")):
        text += f"; detectable: ±{row['detectable']:.2f}"
    return text


def _seeds(row: pd.Series) -> str:
    """Which seeds (or how many) the verdict read, at which look, and whether the design plans more."""
    if row["verdict"] == "not yet measured":
        return row["seeds"]
    if pd.isna(row.get("seeds_run")):
        return ""
    which = row["seeds"] if isinstance(row.get("seeds"), str) else str(int(row["seeds_run"]))
    return f"{which}; look {row['look']}{'; more seeds planned' if row.get('pending') is True else ''}"


KEY = ["claim", "experiment", "dataset", "partition", "model"]


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim and cell: the paper's setting and, where its experiment is tuned, the tuned
    setting (columns prefixed ``tuned_``), and whether the verdict survives tuning."""
    table = table.reindex(columns=table.columns.union(KEY + ["setting"], sort=False))
    table[KEY] = table[KEY].astype(object).fillna("")
    table["setting"] = table["setting"].fillna("paper")
    paper = table[table["setting"] == "paper"].drop(columns="setting")
    tuned = table[table["setting"] == "tuned"][[c for c in table.columns if c not in ("setting", "source", "paper")]]
    out = paper.merge(tuned.add_prefix("tuned_").rename(columns={f"tuned_{k}": k for k in KEY}), on=KEY, how="left")
    if "tuned_verdict" not in out:
        out["tuned_verdict"] = np.nan

    def survives(row) -> str:
        if pd.isna(row["tuned_verdict"]):
            return "not tuned"
        if row["verdict"] == row["tuned_verdict"]:
            return "yes"
        return f"no: {row['verdict']} → {row['tuned_verdict']}"

    out["survives_tuning"] = out.apply(survives, axis=1)
    return out


def _tuned(row: pd.Series) -> pd.Series:
    """The tuned columns of a :func:`side_by_side` row, unprefixed (for :func:`_measured` and :func:`_seeds`)."""
    return pd.Series({k[len("tuned_"):]: v for k, v in row.items() if k.startswith("tuned_")})


def _shown(rows: pd.DataFrame, reading_column: bool) -> pd.DataFrame:
    """The displayed table: per claim and cell the paper's setting and the tuned one side by side."""
    both = side_by_side(rows)
    tuned = both.apply(_tuned, axis=1) if both["tuned_verdict"].notna().any() else None
    shown = pd.DataFrame({
        "claim": both["claim"], "source": both["source"],
        "cell": both.apply(lambda r: " / ".join(x for x in (r["experiment"], r["dataset"], r["partition"], r["model"]) if x), axis=1),
        "comparison": both["comparison"] + " (" + both["metric"].fillna("accuracy") + ")",
        "paper's margin": both["paper_margin"].fillna(""),
        "at the paper's setting": both.apply(_measured, axis=1), "seeds": both.apply(_seeds, axis=1),
        "verdict": "**" + both["verdict"] + "**",
    })
    if tuned is not None:
        shown["tuned"] = [_measured(r) if isinstance(r["verdict"], str) else "" for _, r in tuned.iterrows()]
        shown["tuned seeds"] = [_seeds(r) if isinstance(r["verdict"], str) else "" for _, r in tuned.iterrows()]
        shown["tuned verdict"] = ["**" + v + "**" if isinstance(v, str) else "" for v in tuned["verdict"]]
        shown["survives tuning"] = both["survives_tuning"]
    if reading_column:
        shown["reading"] = both.apply(reading, axis=1)
    return shown


VERDICT_LEGEND = (
    "Measured: mean over seeds of the difference (a threshold claim: of the metric) [Student-t interval at the "
    "design's per-look confidence, paired over the same partition and seed unless stated]; accuracy in %.  "
    "Verdict: holds (interval above 0, or at/above the threshold), does not hold (below), equivalent (inside "
    "±delta, the smallest difference that matters, and straddling 0), inconclusive (none of these: *detectable* is "
    "the smallest difference its seeds would have found with 80 % power), not comparable (no seed gave a number "
    "to compare: a method's runs diverged on every seed of the look; more seeds are not drawn).  *seeds*: the seeds the verdict read and "
    "the look (fedbench.results.sequential: with L looks each interval is at 1 − 2α/L, so a wrong directional "
    "verdict has probability at most α over all looks).  *tuned*: the same claim after every method was tuned on "
    "validation rows with the same budget (fedbench.tuning.trials), re-run on seeds tuning never used.")


def to_markdown(table: pd.DataFrame) -> str:
    """The claims table: per claim and cell the paper's margin, the measured difference and verdict at the
    paper's setting and tuned, side by side, and whether the verdict survives tuning."""
    parts = ["# Claims", "", VERDICT_LEGEND, ""]
    if table.empty:
        return "\n".join(parts + ["No claim of this config's experiments.", ""])
    return "\n".join(parts + [_shown(table, reading_column=False).to_markdown(index=False), ""])


def protocol_global_accuracy(metrics_path: str | Path, protocol: str) -> float:
    """The global model's accuracy at the round ``protocol`` reports for it (e.g. pooled_max: the best
    round, as the scorecard's GM rows), from the ``history.csv`` beside ``metrics_path``."""
    history = pd.read_csv(Path(metrics_path).with_name("history.csv"))
    value = PROTOCOLS[protocol].final(history, "global")["accuracy"]
    return math.nan if value is None else value


def _runs_with_global(config: dict, metrics_paths: Iterable[str | Path]) -> pd.DataFrame:
    """:func:`load_metrics` of the runs; where a claim compares ``global_accuracy``, the protocol's reading of
    it; where one compares a time-to-target metric, that metric at its target (:func:`metric_column`)."""
    paths = list(metrics_paths)
    runs = load_metrics(paths)
    claims = (config.get("claims") or {}).values()
    targets = {metric_column(c): c for c in claims if c.get("metric") in TARGET_METRICS}
    wants_global = any(c.get("metric") == "global_accuracy" for c in claims)
    if not targets and not wants_global:
        return runs
    runs = runs.set_index(CELL_COLUMNS)
    for path in paths:
        metrics = json.loads(Path(path).read_text())
        key = tuple(metrics["cell"][c] for c in CELL_COLUMNS)
        if wants_global:
            runs.loc[key, "global_accuracy"] = protocol_global_accuracy(path, metrics["protocol"])
        for column, claim in targets.items():
            at_horizon = claim.get("not_reached", "horizon") == "horizon"
            measured = run_time_to_target(path, claim.get("target"), claim.get("target_fraction"), at_horizon)
            runs.loc[key, column], runs.loc[key, column + REACHED] = measured[claim["metric"]], measured["reached"]
    return runs.reset_index()


def write_claims(config: dict, metrics_paths: Iterable[str | Path], published: pd.DataFrame, csv_path, md_path,
                 paper: str | None = None, tuned_paths: Iterable[str | Path] = ()) -> pd.DataFrame:
    """Evaluate the config's claims (of ``paper``) on the runs' ``metrics.json`` at the paper's setting
    and, from ``tuned_paths``, tuned; write the table (CSV, Markdown)."""
    table = evaluate_claims(config, _runs_with_global(config, metrics_paths), published, paper)
    tuned_paths = list(tuned_paths)
    if tuned_paths:
        tuned = evaluate_claims(config, _runs_with_global(config, tuned_paths), published, paper, setting="tuned")
        table = pd.concat([table, tuned], ignore_index=True)
    atomic_write(csv_path, lambda p: table.to_csv(p, index=False, float_format="%.4f"))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(table), encoding="utf-8"))
    return table


def look_state(config: dict, metrics_paths: Iterable[str | Path], published: pd.DataFrame, paper: str, setting: str,
               look: int, open_claims: list[str] | None = None) -> dict:
    """One look of the sequential design (the workflow's checkpoint ``claims_look``): the claims still
    open (``open_claims``; None: all of ``paper``'s at ``setting``) evaluated on the runs of the design's
    first ``looks[look]`` seeds; which stay undecided, and whether the design is done with the paper."""
    names = evaluated_claims(config, paper, setting) if open_claims is None else list(open_claims)
    design = claims_design(config)
    seeds = design_seeds(config)[: design["looks"][look]]
    table = pd.DataFrame(columns=CLAIM_COLUMNS)
    if names:
        subset = {**config, "claims": {n: config["claims"][n] for n in names}}
        table = evaluate_claims(subset, _runs_with_global(subset, metrics_paths), published, paper, setting)
    still_open = sorted(set(table.loc[table["verdict"] == INCONCLUSIVE, "claim"]))
    return {"paper": paper, "setting": setting, "look": look, "seeds": seeds, "open": still_open,
            "done": not still_open or look == len(design["looks"]) - 1,
            "verdicts": {f"{r.claim} {r.dataset}/{r.partition}/{r.model}": r.verdict for r in table.itertuples()}}


# ---- the committed report (reports/claims.md): every paper's claims, measured where runs exist ----


def setting_root(config: dict, setting: str) -> Path:
    """Where a setting's runs are: ``<results>/runs`` (the paper's setting) or ``<results>/tuned/runs``."""
    results = Path(config.get("results", "results"))
    return results / "runs" if setting == "paper" else results / "tuned" / "runs"


def _metrics_paths(config: dict, name: str, seed: int, setting: str = "paper") -> list[Path]:
    """``metrics.json`` of every run claim ``name`` reads for ``seed`` at ``setting``, under the config's
    ``results`` (the layout of :meth:`fedbench.config.cells.Cell.run_dir`)."""
    claim = config["claims"][name]
    root = setting_root(config, setting) / claim["experiment"]
    return [root / d / p / m / a / f"seed{seed}" / "metrics.json"
            for d, p, m in claim_cells(config, name) for a in claim_algorithms(claim)]


def _measured_seeds(config: dict, name: str, setting: str = "paper") -> list[int]:
    """The design's seeds (pilot first) for which every run claim ``name`` reads is on disk."""
    return [s for s in design_seeds(config) if all(path.exists() for path in _metrics_paths(config, name, s, setting))]


def report_rows(config_path: str | Path, published: pd.DataFrame) -> pd.DataFrame:
    """Every claim of one config file at the paper's setting and, where its experiment is tuned, tuned:
    measured (on the seeds whose runs all exist, named in ``seeds``) or, where none exist, ``not yet
    measured`` with the command that measures it."""
    config = load_yaml_strict(config_path)
    cap = claims_design(config)["looks"][-1]
    rows = []
    for name, claim in (config.get("claims") or {}).items():
        tuned = config["experiments"][claim["experiment"]].get("tune") is not None
        for setting in SETTINGS if tuned else ("paper",):
            measured = _measured_seeds(config, name, setting)
            pilot = [s for s in measured if s in config["seeds"]]
            if pilot:
                paths = [path for seed in measured for path in _metrics_paths(config, name, seed, setting)]
                one = {**config, "claims": {name: claim}, "only_experiments": None}
                if len(pilot) < len(config["seeds"]):  # a pilot still running: what there is
                    one["seeds"] = pilot
                table = evaluate_claims(one, _runs_with_global(one, paths), published, setting=setting)
                read = design_seeds(one)[:int(table["seeds_run"].max())]
                rows.append(table.assign(seeds=f"{', '.join(map(str, read))} ({len(read)} of {cap})"))
                continue
            command = (f"snakemake --cores 2 --configfile {config_path} --replace-workflow-config "
                       f"--config 'only_experiments=[{claim['experiment']}]'")
            rows.append(pd.DataFrame([{
                "claim": name, "paper": experiment_paper(config, claim["experiment"]), "setting": setting,
                "source": claim["source"], "experiment": claim["experiment"],
                "comparison": claim.get("better", claim.get("algorithm")), "metric": claim.get("metric", "accuracy"),
                "paper_margin": margin_text(claim, published, f"claims.{name}"),
                "verdict": "not yet measured", "seeds": f"none (0 of {cap})", "command": command,
            }]))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def reading(row: pd.Series) -> str:
    """One line: what the verdict says next to the paper's margin (and which runs diverged, left out)."""
    if row["verdict"] == "not yet measured":
        return f"`{row['command']}`"
    diverged, at_horizon = row.get("diverged"), row.get("at_horizon")
    horizon = f"; {at_horizon}" if isinstance(at_horizon, str) and at_horizon else ""
    if isinstance(diverged, str) and diverged:
        if row["n"] == 0:
            return f"no seed to compare: {diverged}"
        return f"{_reading(row)}; left out: {diverged}{horizon}"
    return _reading(row) + horizon


def _reading(row: pd.Series) -> str:
    if row["comparison"].count("≥"):
        return {HOLDS: "recovered: the whole interval is at or above the threshold",
                FAILS: "not recovered: the whole interval is below the threshold",
                INCONCLUSIVE: "the interval straddles the threshold (or too few seeds)"}[row["verdict"]]
    if row["verdict"] == INCONCLUSIVE and row["n"] == 2:
        return "2 seeds only: the paired t interval has 1 degree of freedom (t = 12.7) and is wide; more seeds narrow it"
    return {HOLDS: "the direction the paper reports, beyond the seed spread",
            FAILS: "the opposite of the paper's direction, beyond the seed spread",
            EQUIVALENT: f"no difference beyond ±{row['delta']:g}, the smallest that matters",
            INCONCLUSIVE: "the seeds cannot tell the two apart here"}[row["verdict"]]


REPORT_TITLE = "# The papers' claims, tested on the offline analogues"


def report_sections(text: str) -> dict[str, str]:
    """An existing ``reports/claims.md`` cut at its ``## <paper>`` headings: paper name -> that section's text."""
    sections: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            name = line[3:].strip()
            sections[name] = ""
        if name is not None:
            sections[name] += line
    return sections


# the mark of a section written by this version (claims decided look by look, the tuned setting beside the
# paper's where the config tunes): an HTML comment, invisible in the rendered report
LOOKS_MARK = "<!-- fedbench.results.claims: looks and tuning -->"


def _section(paper: str, rows: pd.DataFrame, config_paths: list[str], note: str) -> str:
    """One paper's section: the command that wrote it, ``note``, the claims table (both settings side by side)."""
    rows = rows.reindex(columns=rows.columns.union(["per_seed"], sort=False)).astype({"per_seed": object})
    written = f"Written by `python -m fedbench.results.claims --update {' '.join(config_paths)}` from the runs on disk."
    return "\n".join([f"## {PAPER_NAMES[paper]}", LOOKS_MARK, "", written, *([note] if note else []), "",
                      _shown(rows, reading_column=True).to_markdown(index=False), "", ""])


def section_status(sections: dict[str, str]) -> list[str]:
    """The header's line on which sections were measured with looks and tuning (they carry
    :data:`LOOKS_MARK`, :func:`_section`) and which were measured before (one look, untuned; written by an
    earlier version of this module and kept by ``--update``), read from the sections themselves."""
    tuned = [name for name, text in sections.items() if LOOKS_MARK in text]
    earlier = [name for name in sections if name not in tuned]
    if not earlier:
        return []
    return [f"**Measured before claims were decided look by look and before tuning: {', '.join(earlier)}** (one look "
            "at the config's seeds, a 95 % interval, no equivalence or not-comparable verdict, every method at the "
            "paper's setting; re-running an analogue's claims, `snakemake claims`, and `--update` rewrites its section "
            "with both settings side by side).  "
            + (f"Measured with looks and tuning: {', '.join(tuned)}." if tuned else ""), ""]


def write_report(config_paths: Iterable[str | Path], out: str | Path, published: pd.DataFrame, note: str = "",
                 update: bool = False) -> pd.DataFrame:
    """``reports/claims.md``: per paper, every claim of the given config files (:func:`report_rows`), each
    paper's section naming the command that wrote it and ``note``.  ``update``: rewrite only the sections
    of the papers these configs test and keep the report's other sections as they are (each paper's
    analogue is measured on its own, at its own time)."""
    config_paths = [str(path) for path in config_paths]
    table = pd.concat([report_rows(path, published) for path in config_paths], ignore_index=True)
    sections = report_sections(Path(out).read_text(encoding="utf-8")) if update and Path(out).exists() else {}
    for paper in table["paper"].unique():
        sections[PAPER_NAMES[paper]] = _section(paper, table[table["paper"] == paper], config_paths, note)
    order = [PAPER_NAMES[paper] for paper in ("femam", "fedmr", "flt", "pfedmt", "default")]
    header = [REPORT_TITLE, "",
              "Each paper's section is written by `python -m fedbench.results.claims --update CONFIG...` from the "
              "runs on disk under the config's `results:` directory (none typed in) and names its command; "
              "`--update` rewrites only the sections of the configs given.  *seeds*: the seeds whose runs all exist "
              "(of the design's cap).  A claim with no runs yet says so, with the command that measures it.",
              "", VERDICT_LEGEND, "", *section_status(sections), ""]
    body = [sections[name] for name in sorted(sections, key=lambda n: order.index(n) if n in order else len(order))]
    atomic_write(out, lambda p: Path(p).write_text("\n".join(header) + "".join(body).rstrip("\n") + "\n", encoding="utf-8"))
    return table


def main(argv: list[str]) -> None:
    """``python -m fedbench.results.claims [--update] CONFIG... [--out reports/claims.md] [--note TEXT]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedbench.results.claims",
                                     description="Write reports/claims.md from the runs on disk of the configs' claims.")
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="experiment config files with a claims: section")
    parser.add_argument("--update", action="store_true", help="rewrite only the sections of the papers these configs test")
    parser.add_argument("--out", default="reports/claims.md", help="the report (default: %(default)s)")
    parser.add_argument("--note", default="", help="a paragraph under each written section's heading")
    args = parser.parse_args(argv)
    table = write_report(args.configs, args.out, load_published(), args.note, update=args.update)
    print(table[["claim", "setting", "verdict", "seeds"]].to_string())


__all__ = ["ClaimError", "check_claims", "claim_cells", "compare", "threshold", "verdict", "evaluated_claims",
           "evaluate_claims", "published_margins", "to_markdown", "write_claims", "report_rows", "report_sections",
           "write_report"]


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
