"""The sensitivity figure of a tuned experiment: every trial's validation score against the knob it
varied, one panel per algorithm entry (fedbench.tuning.trials; the rule ``tuning_figure``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
import pandas as pd  # noqa: E402

from fedbench.data.partition_file import atomic_write  # noqa: E402

NOT_KNOBS = {"algorithm", "trial", "score", "seeds", "setting", "chosen", "metric", "cell"}


def load_trials(paths) -> pd.DataFrame:
    """Every ``trials.csv`` of an experiment, with its cell (dataset/partition/model from the path)."""
    frames = []
    for path in paths:
        parts = Path(path).parts
        frames.append(pd.read_csv(path).assign(cell="/".join(parts[-5:-2])))
    return pd.concat(frames, ignore_index=True)


def plot_sensitivity(trials: pd.DataFrame, out, title: str = "") -> None:
    """Per algorithm entry a panel: validation score against the learning rate (log scale; the first
    knob where an entry has no learning rate), the entry's other knob as the marker colour, the configured
    setting (trial 0) ringed, the chosen one starred; one marker style per cell."""
    algorithms = list(dict.fromkeys(trials["algorithm"]))
    columns = min(4, len(algorithms))
    rows = int(np.ceil(len(algorithms) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.2 * rows), squeeze=False)
    markers = dict(zip(dict.fromkeys(trials["cell"]), "osD^v<>p"))
    for ax, algorithm in zip(axes.flat, algorithms):
        rows_ = trials[trials["algorithm"] == algorithm]
        knobs = [c for c in rows_.columns if c not in NOT_KNOBS and rows_[c].notna().any()]
        x = "lr" if "lr" in knobs else knobs[0]
        others = [k for k in knobs if k != x]
        colour = rows_[others[0]] if others else None
        for cell, part in rows_.groupby("cell", sort=False):
            c = None if colour is None else colour[part.index].astype(float)
            points = ax.scatter(part[x], part["score"], c=c, cmap="viridis", marker=markers[cell], s=36,
                                label=cell if len(markers) > 1 else None, edgecolors="none")
            configured = part[part["trial"] == 0]
            ax.scatter(configured[x], configured["score"], s=140, facecolors="none", edgecolors="black", linewidths=1.2)
            chosen = part[part["chosen"]]
            ax.scatter(chosen[x], chosen["score"], marker="*", s=160, color="crimson", zorder=3)
        if others:
            fig.colorbar(points, ax=ax, label=others[0])
        if x == "lr" or (rows_[x] > 0).all() and rows_[x].max() / max(rows_[x].min(), 1e-12) > 20:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # labels within a decade too
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(x)
        ax.set_ylabel(rows_["metric"].iloc[0] if "metric" in rows_ else "validation score")
        ax.set_title(algorithm, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(algorithms):]:
        ax.set_visible(False)
    if len(markers) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{title}  (ringed: the configured setting; star: chosen)", fontsize=10)
    fig.tight_layout()
    atomic_write(out, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)


__all__ = ["load_trials", "plot_sensitivity"]
