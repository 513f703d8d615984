"""Claims evaluated on runs: each claim's per-seed numbers read from the runs' ``metrics.json`` (and,
for global accuracy and time to target, their ``history.csv``), decided cell by cell; one paper's
table written, and one look of the sequential design (the workflow's ``claims_look``).

Layer 6 (results).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.registry.protocols import PROTOCOLS
from fedbench.results.claims.spec import (REACHED, ClaimError, claim_algorithms, claim_cells, claim_design,
                                          claims_design, design_seeds, evaluated_claims, margin_text, metric_column)
from fedbench.results.claims.statistics import decide_claim
from fedbench.results.claims.table import to_markdown
from fedbench.results.convergence import TARGET_METRICS, run_time_to_target, target_label
from fedbench.results.papers import experiment_paper
from fedbench.results.sequential import INCONCLUSIVE, Design
from fedbench.results.tables import CELL_COLUMNS, PERCENT_METRICS, load_metrics

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
                "statistic": statistic(pairing, design, result["look"]), "verdict": result["verdict"],
            })
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def statistic(pairing: str, design: Design, look: int) -> str:
    """The statistic column: the interval, its level at this look and the boundary's critical t there,
    e.g. ``paired t, 92.92 % (look 4 of 4: critical t 2.048 at 10 seeds, hsd(-2) spending)``."""
    return (f"{pairing} t, {100 * design.look_confidence(look):.4g} % (look {look + 1} of {len(design.looks)}: "
            f"critical t {design.critical[look]:.3f} at {design.looks[look]} seeds, {design.spending} spending)")


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
    design = claim_design(config, {})  # the boundary: the config's looks, alpha and spending
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(table, [design]), encoding="utf-8"))
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
