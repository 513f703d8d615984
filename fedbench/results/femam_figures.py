"""FeMAM's discovered structure as figures (Chen et al., Fig. 4, A.1, C.2-C.4): the level x client
grouping beside the partition's ground truth, and the number of levels against rounds.

Both read the run's ``structure.json`` (:meth:`fedbench.algorithms.femam.FeMAM.artifacts`) and are
drawn on :class:`matplotlib.figure.Figure` objects (no pyplot state), written atomically.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from fedbench.data.partition_file import atomic_write


def _save(fig: Figure, path: str | Path, dpi: int = 120) -> None:
    atomic_write(path, lambda p: fig.savefig(p, dpi=dpi, bbox_inches="tight", format=Path(path).suffix[1:]))


def client_order(truth: dict[str, list], m: int) -> np.ndarray:
    """Clients ordered by their ground-truth groups (top grouping first), ties by client id."""
    if not truth:
        return np.arange(m)
    keys = [np.asarray(ids) for ids in reversed(list(truth.values()))]
    return np.lexsort([np.arange(m)] + keys)


def _panel(ax, columns: list[np.ndarray], names: list[str], order: np.ndarray, title: str) -> None:
    """One cell per client (rows, in ``order``) and grouping (columns); each column's groups in their
    own colours, -1 (no model at this level) white; lines where adjacent clients' groups differ."""
    m = len(order)
    image = np.ones((m, len(columns), 3))
    for j, groups in enumerate(columns):
        g = np.asarray(groups)[order]
        labels = [x for x in np.unique(g) if x >= 0]
        palette = sns.color_palette("tab20" if len(labels) <= 20 else "husl", max(len(labels), 1))
        for k, label in enumerate(labels):
            image[g == label, j] = palette[k]
        for i in np.flatnonzero(g[1:] != g[:-1]):
            ax.plot([j - 0.5, j + 0.5], [i + 0.5, i + 0.5], color="black", lw=0.8)
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(columns)), names, rotation=0)
    ax.set_ylabel("clients (ordered by ground truth)")
    ax.set_yticks([])
    ax.set_title(title)


def plot_structure(structure: dict, truth: dict[str, list], path: str | Path, title: str | None = None,
                   scores: dict | None = None) -> None:
    """Ground-truth groupings (left) beside FeMAM's levels (right), clients in ground-truth order;
    ``scores`` (``{level: {truth: {ari, nmi}}}``) annotates each level with its best ARI."""
    levels = structure["levels"]
    m = len(levels[0]["assignment"])
    order = client_order(truth, m)
    fig = Figure(figsize=(2.0 + 0.9 * (len(truth) + len(structure["structure"])), 6))
    grid = fig.add_gridspec(1, 2, width_ratios=[max(len(truth), 1), len(structure["structure"])], wspace=0.25)
    ax_truth, ax_found = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    if truth:
        _panel(ax_truth, list(truth.values()), list(truth), order, "ground truth")
    else:
        ax_truth.set_axis_off()
        ax_truth.set_title("no ground-truth groups")
    columns = [np.asarray(level["assignment"]) for level in levels]
    columns += [np.full(m, -1)] * (len(structure["structure"]) - len(levels))  # levels never reached
    names = []
    for l, kind in enumerate(structure["structure"]):
        name = f"{l + 1}\n{kind}"
        best = max((s["ari"] for s in (scores or {}).get(f"level{l + 1}", {}).values()), default=None)
        names.append(name + (f"\nARI {best:.2f}" if best is not None else ""))
    _panel(ax_found, columns, names, order, "FeMAM levels (white: no model)")
    if title:
        fig.suptitle(title)
    _save(fig, path)


def plot_levels(structure: dict, path: str | Path, title: str | None = None) -> None:
    """Number of levels trained at every round (steps where a level was added) and the mean
    validation accuracy on a second axis."""
    trace = structure["trace"]
    rounds = [t["round"] for t in trace]
    fig = Figure(figsize=(7, 3.6))
    ax = fig.add_subplot()
    ax.step(rounds, [t["levels"] for t in trace], where="post", color="tab:blue")
    ax.set_xlabel("round")
    ax.set_ylabel("levels", color="tab:blue")
    ax.set_yticks(range(1, len(structure["structure"]) + 1))
    twin = ax.twinx()
    twin.plot(rounds, [100 * t["val_acc"] for t in trace], color="tab:orange", lw=0.8)
    twin.set_ylabel("mean validation accuracy (%)", color="tab:orange")
    if title:
        ax.set_title(title)
    _save(fig, path)
