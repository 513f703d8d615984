"""Figures of FLT's client relatedness (FCR, Algorithm 2): the adjacency matrix Ã before and
after reordering by hierarchical clustering (paper Fig. 2a and Fig. 6) and the UMAP embedding
of the clients' k-means centres.

Drawn on :class:`matplotlib.figure.Figure` objects directly (no pyplot state) with seaborn,
written atomically through :func:`fedbench.data.partition_file.atomic_write`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy.cluster.hierarchy import dendrogram

from fedbench.data.partition_file import atomic_write


def _save(fig: Figure, path: str | Path, dpi: int = 120) -> None:
    atomic_write(path, lambda p: fig.savefig(p, dpi=dpi, bbox_inches="tight", format=Path(path).suffix[1:]))


def _palette(n: int) -> list:
    return sns.color_palette("tab10" if n <= 10 else "husl", n)


def _truth_codes(truth, m: int) -> tuple[np.ndarray, list]:
    """Ground-truth labels as 0..n-1 codes and their names."""
    names, codes = np.unique(np.asarray(truth).ravel(), return_inverse=True)
    if len(codes) != m:
        raise ValueError(f"truth has {len(codes)} labels for {m} clients")
    return codes, list(names)


def _strip(ax, codes: np.ndarray, n: int) -> None:
    ax.imshow(codes[:, None], aspect="auto", interpolation="nearest", cmap=ListedColormap(_palette(n)),
              vmin=-0.5, vmax=n - 0.5)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_adjacency(adjacency: np.ndarray, linkage: np.ndarray | None, truth, path: str | Path,
                   title: str | None = None) -> None:
    """Two panels: Ã in client-ID order, and Ã reordered by the HC leaf order with the
    dendrogram on its left (paper Fig. 2a / Fig. 6).  ``truth`` (ground-truth cluster per
    client, or None) is drawn as a colour strip beside each matrix.  ``linkage=None`` leaves
    the second panel in ID order without a dendrogram.  Works for 0/1 or real-valued matrices.
    """
    a = np.asarray(adjacency, dtype=float)
    m = len(a)
    if linkage is not None and len(linkage) == m - 1 and m > 1:
        order = np.asarray(dendrogram(linkage, no_plot=True)["leaves"])
    else:
        order, linkage = np.arange(m), None
    has_truth = truth is not None
    if has_truth:
        codes, names = _truth_codes(truth, m)

    fig = Figure(figsize=(12.5, 5.6))
    widths = [0.05, 1, 0.08, 0.3, 0.05, 1]
    grid = fig.add_gridspec(1, len(widths), width_ratios=widths, wspace=0.04)
    strip_raw, ax_raw, spacer, ax_tree, strip_ord, ax_ord = (fig.add_subplot(grid[0, i]) for i in range(len(widths)))
    spacer.set_axis_off()

    binary = np.isin(a, (0.0, 1.0)).all()
    cmap = sns.color_palette("Greys" if binary else "rocket_r", as_cmap=True)
    for ax, mat, label in ((ax_raw, a, "clients (ID order)"), (ax_ord, a[np.ix_(order, order)], "clients (HC order)")):
        im = ax.imshow(mat, cmap=cmap, interpolation="nearest", aspect="auto")
        ax.set_yticks([])
        ax.set_xlabel(label)
    ax_raw.set_title("adjacency Ã" if binary else "distances A")
    ax_ord.set_title("reordered by hierarchical clustering")
    if not binary:
        fig.colorbar(im, ax=ax_ord, fraction=0.04)

    if linkage is not None:
        dendrogram(linkage, ax=ax_tree, orientation="left", no_labels=True,
                   color_threshold=0, above_threshold_color="0.3")
        ax_tree.set_ylim(10 * m, 0)  # leaf i sits at y = 10 i + 5: first leaf on top, as imshow
    ax_tree.set_axis_off()

    if has_truth:
        _strip(strip_raw, codes, len(names))
        _strip(strip_ord, codes[order], len(names))
        strip_raw.set_ylabel("true cluster")
        pal = _palette(len(names))
        handles = [Line2D([], [], color=pal[i], marker="s", linestyle="", label=str(nm)) for i, nm in enumerate(names)]
        if len(names) <= 20:
            fig.legend(handles=handles, title="true cluster", loc="center left", bbox_to_anchor=(0.92, 0.5),
                       frameon=False)
    else:
        strip_raw.set_axis_off()
        strip_ord.set_axis_off()
    if title:
        fig.suptitle(title)
    _save(fig, path)


def plot_umap_signatures(centres_2d: np.ndarray, truth, path: str | Path, title: str | None = None) -> None:
    """Scatter of the UMAP-embedded client centres Z ([M, k, u], first two coordinates),
    coloured by the client's ground-truth cluster (``truth`` [M], or None)."""
    z = np.asarray(centres_2d, dtype=float)
    m, k = z.shape[:2]
    fig = Figure(figsize=(6.4, 5.4))
    ax = fig.add_subplot()
    x, y = z[..., 0].ravel(), z[..., 1].ravel()
    if truth is not None:
        codes, names = _truth_codes(truth, m)
        hue = np.repeat(np.asarray(names, dtype=object)[codes], k).astype(str)
        order = [str(n) for n in names]
        sns.scatterplot(x=x, y=y, hue=hue, hue_order=order, palette=_palette(len(names)), s=14, linewidth=0,
                        alpha=0.8, ax=ax, legend=len(names) <= 20)
        if len(names) <= 20:
            ax.legend(title="true cluster", loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    else:
        sns.scatterplot(x=x, y=y, s=14, linewidth=0, alpha=0.8, ax=ax)
    ax.set_xlabel("UMAP 1")
    ax.set_ylabel("UMAP 2")
    ax.set_title(title or f"UMAP of client k-means centres (M = {m}, k = {k})")
    _save(fig, path)


def plot_assignments(assignments, truth, path: str | Path, title: str | None = None) -> None:
    """Cluster of every client over the rounds (FeSEM, IFCA): ``assignments`` has columns round,
    client, cluster for the clients trained in each round; a client keeps its last assignment
    until it is sampled again (blank before its first).  Rows are ordered by ground-truth cluster,
    drawn as a colour strip."""
    table = assignments.pivot_table(index="client", columns="round", values="cluster", aggfunc="last")
    m = len(truth) if truth is not None else int(assignments["client"].max()) + 1
    table = table.reindex(index=range(m)).ffill(axis=1)
    order = np.argsort(np.asarray(truth), kind="stable") if truth is not None else np.arange(m)
    values = table.to_numpy(dtype=float)[order]
    n = int(np.nanmax(values)) + 1 if np.isfinite(values).any() else 1
    fig = Figure(figsize=(9, 0.12 * m + 2.2))
    grid = fig.add_gridspec(1, 2, width_ratios=[0.03, 1], wspace=0.02)
    strip, ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax.imshow(np.ma.masked_invalid(values), aspect="auto", interpolation="nearest",
              cmap=ListedColormap(_palette(n)), vmin=-0.5, vmax=n - 0.5)
    rounds = table.columns.to_numpy()
    ticks = np.linspace(0, len(rounds) - 1, min(len(rounds), 8)).astype(int)
    ax.set_xticks(ticks, [str(rounds[i]) for i in ticks])
    ax.set_yticks([])
    ax.set_xlabel("round")
    ax.set_title(title or "assigned cluster per client and round")
    if truth is not None:
        codes, names = _truth_codes(truth, m)
        _strip(strip, codes[order], len(names))
        strip.set_ylabel("clients by true cluster")
    else:
        strip.set_axis_off()
    _save(fig, path)
