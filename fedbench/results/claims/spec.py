"""What a claim is: the metrics it may read, the cells and published margin it names, the design that
decides it (looks, alpha, delta) and the seeds that design may add; checked against its config.

Layer 6 (results), as the rest of :mod:`fedbench.results.claims`; reads configs, never runs.
"""

from __future__ import annotations

import typing

import pandas as pd

from fedbench.algorithms.base import Algorithm
from fedbench.data import PARTITIONERS
from fedbench.registry.algorithms import algorithm_class
from fedbench.results.convergence import TARGET_METRICS, target_label
from fedbench.results.papers import experiment_paper
from fedbench.results.sequential import DEFAULT_SPENDING, Design, spending_function

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
DEFAULT_ALPHA = 0.025  # one look: the 95 % interval
DEFAULT_DELTA = {"accuracy": 1.0, "global_accuracy": 1.0, "macro_f1": 1.0, "ari": 0.05, "nmi": 0.05, "ari_planted": 0.05,
                 "rounds_to_target": 5.0, "mb_to_target": 10.0, "client_mb_to_target": 1.0}
"""The smallest difference that matters where neither the claim nor ``claims_design`` says: one
accuracy (or macro-F1) point, 0.05 of ARI or NMI, 5 rounds, 10 MB in all, 1 MB per client (the
time-to-target metrics take the claim's own ``delta`` or this, never ``claims_design.delta``, which is
in accuracy points)."""
SETTINGS = ("paper", "tuned")
MAX_SEEDS = 1000
"""The most seeds a claims design may ask for (``claims_design.looks``' last look; the schema's bound too)."""
SCALES = {"accuracy": (0, 100), "global_accuracy": (0, 100), "macro_f1": (0, 100), "ari": (-1, 1), "nmi": (0, 1),
          "ari_planted": (-1, 1)}
"""The values a threshold claim's metric can take (percent; ARI -1..1, NMI 0..1): an ``at_least`` outside can never be met."""
CLUSTER_METRICS = {"ari": "clusters", "nmi": "clusters", "ari_planted": "planted_clusters"}
"""Metrics scored from a method's recovered clusters -> the algorithm hook that reports them."""


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
        _check_sides(claim, f"claims.{name}")
        cells = claim_cells(config, name)
        _check_produced(config, claim, cells, f"claims.{name}")
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


def _check_sides(claim: dict, where: str) -> None:
    """A comparison names two different algorithm entries; a threshold one its metric can reach."""
    if "better" in claim and claim["better"] == claim["than"]:
        raise ClaimError(f"{where}.than: {claim['than']!r} is also the claim's better; a comparison needs two "
                         "different algorithm entries")
    metric = claim.get("metric", "accuracy")
    if "at_least" in claim and metric in SCALES:
        low, high = SCALES[metric]
        if not low <= claim["at_least"] <= high:
            raise ClaimError(f"{where}.at_least: {claim['at_least']!r} can never be reached by {metric}, which lies "
                             f"in [{low}, {high}]" + (" (percent)" if high == 100 else ""))


def _check_produced(config: dict, claim: dict, cells: list, where: str) -> None:
    """Every algorithm a claim reads produces its metric: clusters for ARI and NMI (and the partitions
    of its cells planted ones), a global model for ``global_accuracy``."""
    metric = claim.get("metric", "accuracy")
    for name in claim_algorithms(claim):
        method = config["algorithms"][name]["method"]
        cls = algorithm_class(method)
        if metric in CLUSTER_METRICS and getattr(cls, CLUSTER_METRICS[metric]) is getattr(Algorithm, CLUSTER_METRICS[metric]):
            reading = "recovers no client clusters" if metric != "ari_planted" else "has no reading at the planted number of clusters"
            raise ClaimError(f"{where}.metric: {metric!r} is not produced by algorithms.{name} (method {method!r}), which "
                             f"{reading}; claim accuracy, global_accuracy or macro_f1 for it")
        if metric == "global_accuracy" and _returns_none(cls.global_model):
            raise ClaimError(f"{where}.metric: 'global_accuracy' is not produced by algorithms.{name} (method {method!r}), "
                             "which keeps no global model; claim accuracy or macro_f1 for it")
    if metric in CLUSTER_METRICS:
        for partition in sorted({p for _, p, _ in cells}):
            kind = config["partitions"][partition]["kind"]
            if PARTITIONERS.extra(kind, "planted", True) is False:
                raise ClaimError(f"{where}.metric: {metric!r} needs planted client clusters, but partitions.{partition} "
                                 f"(kind {kind!r}) plants none; restrict the claim with cells.partitions to partitions "
                                 "that plant clusters")


def _returns_none(hook) -> bool:
    """Whether an algorithm hook is annotated to return ``None`` only (no global model, ever)."""
    try:
        return typing.get_type_hints(hook).get("return", object) is type(None)
    except Exception:  # an annotation that cannot be resolved: assume it may return something
        return False


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


# ---- the design: looks, error rate, smallest difference that matters, and the seeds it may add ----


def claims_design(config: dict) -> dict:
    """The config's ``claims_design`` with defaults: one look at the config's seeds, alpha 0.025, the
    :data:`fedbench.results.sequential.DEFAULT_SPENDING` spending function (one look spends all of alpha
    whichever it is: the 95 % interval)."""
    block = dict(config.get("claims_design") or {})
    block.setdefault("looks", [len(config.get("seeds", [0]))])
    block.setdefault("alpha", DEFAULT_ALPHA)
    block.setdefault("spending", DEFAULT_SPENDING)
    return block


def claim_design(config: dict, claim: dict) -> Design:
    """The design one claim is decided by: the config's looks, alpha and spending function, its ``delta``
    (the claim's, else the design's, else :data:`DEFAULT_DELTA` of its metric)."""
    block = claims_design(config)
    metric = claim.get("metric", "accuracy")
    design_delta = None if metric in TARGET_METRICS else block.get("delta")  # claims_design.delta: accuracy points
    delta = claim.get("delta", DEFAULT_DELTA[metric] if design_delta is None else design_delta)
    return Design(looks=tuple(block["looks"]), alpha=block["alpha"], delta=delta, spending=block["spending"])


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
    """``claims_design``: increasing looks from the pilot (the config's seed count), alpha and deltas in
    range, a known spending function (:func:`fedbench.results.sequential.spending_function`)."""
    block = claims_design(config)
    pilot = len(config.get("seeds", [0]))
    if block["looks"][0] != pilot:
        raise ClaimError(f"claims_design.looks: the first look is the pilot, the config's {pilot} seeds; "
                         f"got {block['looks'][0]}")
    try:
        spending_function(block["spending"])
    except ValueError as error:
        raise ClaimError(f"claims_design.{error}") from None
    for name, claim in (config.get("claims") or {}).items():
        try:
            claim_design(config, claim)
        except ValueError as error:
            raise ClaimError(f"claims.{name}: {error}" if "delta" in claim else f"claims_design: {error}") from None


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
