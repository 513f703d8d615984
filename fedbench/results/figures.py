"""Figures: accuracy-vs-round curves from the runs' ``history.csv`` and client x class heatmaps of partitions.

Figures are drawn on :class:`matplotlib.figure.Figure` objects directly (no pyplot state, so
no GUI backend is ever needed) with seaborn's axes-level functions, and written atomically.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from fedbench.data.partition_file import atomic_write
from fedbench.registry.protocols import PROTOCOLS
from fedbench.results.published import links
from fedbench.results.tables import CELL_COLUMNS, order_rows

PANEL_COLUMNS = ["dataset", "partition", "model"]
LOSS_COLUMNS = {"personal": "train_loss_pooled", "global": "global_train_loss"}


@dataclass(frozen=True)
class Curve:
    """One line of the training-curve figure: an algorithm's personal or global model."""

    algorithm: str
    label: str
    accuracy: str  # history column of the test accuracy
    loss: str  # history column of the training loss


def experiment_curves(experiment: dict, algorithms: Sequence[str]) -> list[Curve]:
    """The lines to draw for an experiment: one per (algorithm, scored model) its published links
    name, labelled with the paper's method name (e.g. "pFedMT(GM)", "pFedMT(PM)"), and the
    protocol's own (personal) view of every algorithm without a link."""
    protocol = PROTOCOLS[experiment.get("protocol", "mean_client_last")]
    curves: dict[tuple[str, str], Curve] = {}
    for link in links(experiment):
        if link.algorithm in algorithms:
            key = (link.algorithm, link.scored)
            curves.setdefault(key, Curve(link.algorithm, link.method, protocol.columns(link.scored)["accuracy"], LOSS_COLUMNS[link.scored]))
    for algorithm in algorithms:
        if not any(a == algorithm for a, _ in curves):
            curves[(algorithm, "personal")] = Curve(algorithm, algorithm, protocol.accuracy, LOSS_COLUMNS["personal"])
    return list(curves.values())


def load_histories(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every run's ``history.csv`` (one row per evaluated round) with the run's cell from its
    ``metrics.json`` and ``diverged_round`` (NaN for a run that did not diverge)."""
    frames = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        history = pd.read_csv(run_dir / "history.csv")
        frames.append(history.assign(**metrics["cell"], diverged_round=metrics.get("diverged_round", np.nan)))
    if not frames:
        raise ValueError("no runs given")
    histories = pd.concat(frames, ignore_index=True)
    return histories[CELL_COLUMNS + [c for c in histories.columns if c not in CELL_COLUMNS]]


def _save(fig: Figure, path: str | Path, dpi: int = 120) -> None:
    atomic_write(path, lambda p: fig.savefig(p, dpi=dpi, bbox_inches="tight", format=Path(path).suffix[1:]))


def loss_axis(panel: pd.DataFrame) -> tuple[str, str]:
    """The training-loss column a panel draws, and its axis label: the evaluated training loss
    (taken every ``train_eval_every`` rounds) when the panel has it at two rounds or more, else the
    mean loss of the round's local training, which every evaluated round records (a single point
    is no curve, e.g. ``train_eval_every`` = the run's length)."""
    if panel.dropna(subset=["loss"])["round"].nunique() >= 2:
        return "loss", "training loss"
    return "round_loss", "training loss (local, in the round)"


def plot_training_curves(
    histories: pd.DataFrame,
    path: str | Path,
    curves: Sequence[Curve],
    orders: Mapping[str, Sequence[str]] | None = None,
    title: str | None = None,
) -> None:
    """Training loss (see :func:`loss_axis`) and test accuracy (%) against round (pFedMT's Figure 2
    layout): one row per dataset x partition x model, one line per curve; lines are means over
    seeds, bands ± one standard deviation.  Curves whose columns the runs lack (e.g. no global
    model) are skipped.  Diverged runs (``diverged_round``) are marked: the curve's label says how
    many diverged, and a dotted line of its colour stands at the round (every run diverged: the
    panels hold only those marks)."""
    data = order_rows(histories, orders)
    if "diverged_round" not in data:
        data = data.assign(diverged_round=np.nan)
    panels = list(dict.fromkeys(data[PANEL_COLUMNS].itertuples(index=False, name=None)))
    frames = []
    for curve in curves:
        runs = data[data["algorithm"] == curve.algorithm]
        diverged = runs["diverged_round"].notna()
        if not diverged.any() and (curve.accuracy not in runs or runs[curve.accuracy].isna().all()):
            continue
        label = curve.label
        if diverged.any():
            seeds = runs[PANEL_COLUMNS + ["seed"]].drop_duplicates()
            failed = runs.loc[diverged, PANEL_COLUMNS + ["seed"]].drop_duplicates()
            label = f"{curve.label} ({len(failed)}/{len(seeds)} diverged)"
        frames.append(runs[PANEL_COLUMNS + ["seed", "round", "diverged_round"]].assign(
            curve=label, accuracy=100 * runs.get(curve.accuracy, np.nan), loss=runs.get(curve.loss, np.nan),
            round_loss=runs.get("train_loss", np.nan),
        ).replace([np.inf, -np.inf], np.nan))
    if not frames:
        raise ValueError("none of the curves has data in these runs")
    long = pd.concat(frames, ignore_index=True)
    labels = list(dict.fromkeys(long["curve"]))
    palette = dict(zip(labels, sns.color_palette("colorblind", len(labels))))
    # distinct dash patterns too, so identical curves (e.g. FedProx with a tiny mu vs FedAvg) stay visible;
    # six patterns against the palette's ten colours: no two of the first 30 curves share both
    dashes = dict(zip(labels, itertools.cycle([(1, 0), (4, 2), (1, 1.5), (6, 2, 1, 2), (3, 1), (8, 2, 1, 2, 1, 2)])))
    fig = Figure(figsize=(9.5, 3.2 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for row, panel in zip(axes, panels):
        subset = long[(long[PANEL_COLUMNS] == pd.Series(panel, index=PANEL_COLUMNS)).all(axis=1)]
        few = subset["round"].nunique() <= 30
        for ax, (metric, label) in zip(row, (loss_axis(subset), ("accuracy", "test accuracy (%)"))):
            drawn = subset.dropna(subset=[metric])
            if len(drawn):  # nothing where every run diverged before it was scored
                sns.lineplot(
                    data=drawn, x="round", y=metric, hue="curve", hue_order=labels, palette=palette,
                    style="curve", style_order=labels, dashes=dashes, errorbar="sd",
                    marker="o" if few else None, markersize=3, ax=ax, legend=False,
                )
            for curve, at in subset.dropna(subset=["diverged_round"]).groupby("curve")["diverged_round"]:
                for r in sorted(set(at)):
                    ax.axvline(r, color=palette[curve], dashes=(1, 2), linewidth=1.5)
                    ax.annotate(f"diverged (round {r:.0f})", (r, 1), xycoords=("data", "axes fraction"), rotation=90,
                                va="top", ha="right", fontsize=7, color=palette[curve])
            ax.set(title=" / ".join(panel), xlabel="round", ylabel=label)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=palette[c], dashes=dashes[c]) for c in labels]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
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


__all__ = ["Curve", "experiment_curves", "load_histories", "plot_partition_heatmap", "plot_training_curves"]
