"""Results tables: every run's ``metrics.json`` -> one tidy frame -> mean ± std over seeds.

Accuracy and macro-F1 are reported in percent; the standard deviation is the population
one (``ddof=0``, as ``numpy.std`` and the papers' scripts compute it), so one seed gives 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd

from fedbench.data.partition_file import atomic_write

CELL_COLUMNS = ["experiment", "dataset", "partition", "model", "algorithm", "seed"]
GROUP_COLUMNS = ["experiment", "protocol", "dataset", "partition", "model", "algorithm"]
FINAL_METRICS = ["accuracy", "macro_f1", "loss", "variance", "round"]
GLOBAL_METRICS = ["accuracy", "macro_f1", "loss"]
PERCENT_METRICS = ["accuracy", "macro_f1", "global_accuracy"]
CLUSTER_METRICS = ["ari", "nmi", "ari_planted"]  # recovered client clusters vs the partition's ground truth
# (``ari_planted``: the clusters with their number set to the planted one, FLT's Ward tree cut at the true C)


def load_metrics(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per run: its cell, protocol, final numbers, the global model's numbers, device and wall time.

    Missing numbers (``null`` in the JSON, e.g. the global model of Local) become NaN.
    """
    rows = []
    for path in paths:
        metrics = json.loads(Path(path).read_text())
        row = {**metrics["cell"], "protocol": metrics.get("protocol")}
        row.update({key: metrics["final"].get(key) for key in FINAL_METRICS})
        row.update({f"global_{key}": (metrics.get("global") or {}).get(key) for key in GLOBAL_METRICS})
        row.update({key: (metrics.get("clustering") or {}).get(key) for key in CLUSTER_METRICS})
        row.update(device=metrics.get("device"), wall_time_s=metrics.get("wall_time_s"))
        row["diverged"] = metrics.get("status") == "diverged"  # NaN/inf training loss: no numbers
        rows.append(row)
    columns = CELL_COLUMNS + ["protocol"] + FINAL_METRICS + [f"global_{k}" for k in GLOBAL_METRICS] + CLUSTER_METRICS
    runs = pd.DataFrame(rows, columns=columns + ["device", "wall_time_s", "diverged"])
    numeric = FINAL_METRICS + [f"global_{k}" for k in GLOBAL_METRICS] + CLUSTER_METRICS + ["wall_time_s"]
    runs[numeric] = runs[numeric].apply(pd.to_numeric, errors="coerce").astype(float)
    runs["seed"] = runs["seed"].astype(int)
    return runs.sort_values(CELL_COLUMNS, kind="stable").reset_index(drop=True)


def order_rows(frame: pd.DataFrame, orders: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Sort by the cell columns, each in the given order (e.g. the config's), names not listed last."""
    orders = orders or {}

    def key(column: pd.Series) -> pd.Series:
        order = list(orders.get(column.name, []))
        if not order or column.dtype.kind in "iuf":
            return column
        rest = sorted(set(column) - set(order))
        return column.map({name: i for i, name in enumerate(order + rest)})

    by = [c for c in CELL_COLUMNS if c in frame.columns]
    return frame.sort_values(by, key=key, kind="stable").reset_index(drop=True)


def format_mean_std(mean: float, std: float, digits: int = 2) -> str:
    """``"85.31 ± 1.20"``; ``"–"`` where there is no number (e.g. Local has no global model)."""
    if pd.isna(mean):
        return "–"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _with_divergence(text: str, diverged: int, seeds: int) -> str:
    if not diverged:
        return text
    return "diverged" if diverged == seeds else f"{text} ({diverged}/{seeds} diverged)"


def summarise(runs: pd.DataFrame, orders: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Mean and standard deviation over seeds per experiment, dataset, partition, model and algorithm.

    Columns: the group keys, ``seeds`` (number of runs), ``<metric>_mean`` / ``<metric>_std`` for
    accuracy, macro_f1 and global_accuracy (percent), loss and variance (means, raw units),
    ``wall_time_s`` (mean), ``diverged`` (runs whose loss became NaN/inf; their numbers are
    missing, so the means are over the others), and ``accuracy`` formatted as ``"mean ± std"``,
    ``"diverged"`` where every seed diverged, ``"mean ± std (k/n diverged)"`` where some did.
    """
    grouped = runs.groupby(GROUP_COLUMNS, sort=False, dropna=False)
    summary = grouped.size().rename("seeds").to_frame()
    for metric in PERCENT_METRICS:
        values = grouped[metric]
        summary[f"{metric}_mean"] = 100 * values.mean()
        summary[f"{metric}_std"] = 100 * values.std(ddof=0)
    summary["loss_mean"] = grouped["loss"].mean()
    summary["variance_mean"] = grouped["variance"].mean()
    for metric in CLUSTER_METRICS:
        summary[f"{metric}_mean"] = grouped[metric].mean()
        summary[f"{metric}_std"] = grouped[metric].std(ddof=0)
    summary["wall_time_s"] = grouped["wall_time_s"].mean()
    summary["diverged"] = grouped["diverged"].sum().astype(int)
    summary = summary.reset_index()
    summary["accuracy"] = [
        _with_divergence(format_mean_std(m, s), d, n)
        for m, s, d, n in zip(summary["accuracy_mean"], summary["accuracy_std"], summary["diverged"], summary["seeds"])
    ]
    return order_rows(summary, orders)


def to_markdown(summary: pd.DataFrame) -> str:
    """One Markdown table per experiment: dataset/partition/model rows, algorithm columns, accuracy (%) mean ± std."""
    parts = ["# Results", "", "Accuracy (%) under each experiment's protocol, mean ± std over seeds.", ""]
    for experiment, table in summary.groupby("experiment", sort=False):
        protocols = ", ".join(table["protocol"].dropna().unique())
        seeds = ", ".join(str(n) for n in sorted(table["seeds"].unique()))
        algorithms = list(dict.fromkeys(table["algorithm"]))
        rows = list(dict.fromkeys(zip(table["dataset"], table["partition"], table["model"])))
        pivot = table.pivot(index=["dataset", "partition", "model"], columns="algorithm", values="accuracy")
        pivot = pivot.reindex(index=pd.MultiIndex.from_tuples(rows, names=pivot.index.names), columns=algorithms)
        pivot = pivot.fillna("").reset_index()
        pivot.index = pivot.index.rename(None)
        pivot.columns.name = None
        parts += [f"## {experiment}", "", f"Protocol: {protocols}; seeds per cell: {seeds}.", ""]
        parts += [pivot.to_markdown(index=False), ""]
        clustered = table.dropna(subset=["ari_mean"])
        if len(clustered):
            scores = clustered.assign(
                ARI=[format_mean_std(m, s) for m, s in zip(clustered["ari_mean"], clustered["ari_std"])],
                NMI=[format_mean_std(m, s) for m, s in zip(clustered["nmi_mean"], clustered["nmi_std"])],
            )[["dataset", "partition", "model", "algorithm", "ARI", "NMI"]]
            explained = "adjusted Rand index, NMI"
            if "ari_planted_mean" in clustered and clustered["ari_planted_mean"].notna().any():
                scores["ARI (planted C)"] = [format_mean_std(m, s) for m, s in
                                             zip(clustered["ari_planted_mean"], clustered["ari_planted_std"])]
                explained += "; ARI (planted C): the clusters cut at the true number of clusters, FLT's Ward tree"
            parts += [f"Recovered client clusters against the ground truth ({explained}):", ""]
            parts += [scores.to_markdown(index=False), ""]
    return "\n".join(parts)


def write_tables(
    metrics_paths: Iterable[str | Path],
    csv_path: str | Path,
    md_path: str | Path,
    orders: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """Summarise the runs and write the summary as CSV (all columns) and Markdown (accuracy pivots)."""
    summary = summarise(load_metrics(metrics_paths), orders)
    atomic_write(csv_path, lambda p: summary.to_csv(p, index=False, float_format="%.4f"))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(summary), encoding="utf-8"))
    return summary


__all__ = ["load_metrics", "summarise", "to_markdown", "write_tables", "format_mean_std", "order_rows"]
