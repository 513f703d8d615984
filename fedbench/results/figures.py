"""Figures: accuracy-vs-round curves from the runs' ``history.csv`` and client x class heatmaps of partitions.

Figures are drawn on :class:`matplotlib.figure.Figure` objects directly (no pyplot state, so
no GUI backend is ever needed) with seaborn's axes-level functions, and written atomically.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from fedbench.data.partition_file import atomic_write
from fedbench.results.tables import CELL_COLUMNS, order_rows

PANEL_COLUMNS = ["dataset", "partition", "model"]
CURVE_METRICS = {
    "acc_mean": "mean client accuracy (%)",
    "acc_pooled": "pooled client accuracy (%)",
    "global_acc": "global model accuracy (%)",
}


def load_histories(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every run's ``history.csv`` (one row per evaluated round) with the run's cell from its ``metrics.json``."""
    frames = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        cell = json.loads((run_dir / "metrics.json").read_text())["cell"]
        history = pd.read_csv(run_dir / "history.csv")
        frames.append(history.assign(**cell))
    if not frames:
        raise ValueError("no runs given")
    histories = pd.concat(frames, ignore_index=True)
    return histories[CELL_COLUMNS + [c for c in histories.columns if c not in CELL_COLUMNS]]


def _save(fig: Figure, path: str | Path, dpi: int = 120) -> None:
    atomic_write(path, lambda p: fig.savefig(p, dpi=dpi, bbox_inches="tight", format=Path(path).suffix[1:]))


def plot_accuracy_curves(
    histories: pd.DataFrame,
    path: str | Path,
    metric: str = "acc_mean",
    orders: Mapping[str, Sequence[str]] | None = None,
    title: str | None = None,
) -> None:
    """Accuracy (%) against round, one panel per dataset x partition x model, one line per algorithm.

    Lines are the mean over seeds; the band is ± one standard deviation over seeds.
    """
    data = order_rows(histories, orders).assign(value=lambda d: 100 * d[metric])
    panels = list(dict.fromkeys(data[PANEL_COLUMNS].itertuples(index=False, name=None)))
    algorithms = list(dict.fromkeys(data["algorithm"]))
    palette = dict(zip(algorithms, sns.color_palette("colorblind", len(algorithms))))
    # distinct dash patterns too, so identical curves (e.g. FedProx with a tiny mu vs FedAvg) stay visible
    dashes = dict(zip(algorithms, itertools.cycle([(1, 0), (4, 2), (1, 1.5), (6, 2, 1, 2), (3, 1)])))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
    for ax, panel in zip(axes, panels):
        subset = data[(data[PANEL_COLUMNS] == pd.Series(panel, index=PANEL_COLUMNS)).all(axis=1)]
        sns.lineplot(
            data=subset, x="round", y="value", hue="algorithm", hue_order=algorithms, palette=palette,
            style="algorithm", style_order=algorithms, dashes=dashes,
            errorbar="sd", marker="o", markersize=3, ax=ax, legend=False,
        )
        ax.set(title=" / ".join(panel), xlabel="round", ylabel=CURVE_METRICS.get(metric, metric))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=palette[a], dashes=dashes[a], marker="o", markersize=3) for a in algorithms]
    fig.legend(handles, algorithms, loc="outside lower center", ncols=len(algorithms), title="algorithm")
    if title:
        fig.suptitle(title)
    _save(fig, path)


def plot_partition_heatmap(summary_json: str | Path, path: str | Path, split: str = "train") -> None:
    """Client x class heatmap of the sample counts of one partition's ``split`` (train or test).

    With ground-truth groups (clusters, levels, teams), clients are ordered by their groups
    (the first level listed outermost) and white lines mark where a group of the
    innermost level ends, so the planted structure is visible at a glance.
    """
    summary = json.loads(Path(summary_json).read_text())
    counts = np.asarray(summary[f"{split}_class_counts"], dtype=int)
    clients, classes = counts.shape
    groups = summary.get("groups", {})
    order = np.lexsort([np.asarray(ids) for ids in reversed(list(groups.values()))]) if groups else np.arange(clients)
    counts = counts[order]
    big = clients * classes > 400
    fig = Figure(figsize=(min(1.2 + 0.45 * classes, 14), min(1.4 + 0.32 * clients, 30)), layout="constrained")
    ax = fig.subplots()
    sns.heatmap(
        counts, ax=ax, cmap="viridis", annot=not big, fmt="d", annot_kws={"fontsize": 7},
        cbar_kws={"label": f"{split} samples"}, linewidths=0 if big else 0.3,
        xticklabels=max(1, classes // 25), yticklabels=[str(c) for c in order] if clients <= 60 else max(1, clients // 30),
    )
    if groups:
        innermost = np.asarray(list(groups.values())[-1])[order]
        for boundary in np.flatnonzero(np.diff(innermost)) + 1:
            ax.axhline(boundary, color="white", linewidth=1.5)
    ax.set(xlabel="class", ylabel="client" + (f" (ordered by {', '.join(groups)})" if groups else ""))
    ax.set_title(
        f"{summary['dataset']} / {summary['partition']} / seed {summary['seed']}: "
        f"{clients} clients, {int(counts.sum())} {split} samples"
    )
    _save(fig, path)


__all__ = ["load_histories", "plot_accuracy_curves", "plot_partition_heatmap"]
