"""FLT's sensitivity to the threshold γ (Jamali-Rad et al., Algorithm 2 line 19: Ã = Γ(A), γ "a
tunable threshold"; the authors' code γ = 1): the relatedness graph against γ for both distances,
the paper's min over centre pairs and the code's matching distance (notes §4.7.1), and the
accuracy of the FLT runs trained at the γ values the config lists.

The graph statistics need no training per γ: FLT's UMAP-embedded client signatures
(``centres_2d.npy`` of a run) do not depend on γ or on the distance, so every (γ, distance) gives
A, Ã = [A < γ] (:func:`~fedbench.clustering.fcr.threshold_adjacency`) and HC(Ã) as the run would
(:func:`~fedbench.clustering.fcr.hierarchical_clusters`, Ward on Ã's rows, C as the entry's
``clusters``; none or ``auto``: chosen by HC), scored against the partition's ground-truth
clusters: ARI of HC's clusters, the graph's density and its share of links across ground-truth
groups (:func:`~fedbench.run.scoring.adjacency_scores`, the numbers each run records at its own γ).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from sklearn.metrics import adjusted_rand_score

from fedbench.clustering.fcr import client_distances, hierarchical_clusters, threshold_adjacency
from fedbench.data.partition_file import atomic_write

#: γ grid of the graph statistics (log-spaced; UMAP coordinates are O(1)-O(10) apart)
GAMMAS = np.geomspace(0.01, 30.0, 31)
DISTANCES = ("min", "matching")
DISTANCE_LABELS = {"min": "min over pairs (paper)", "matching": "matching (code)"}
#: an FLT entry's keys that make its signatures (centres_2d); entries equal in these share them
SIGNATURE_KEYS = ("encoder", "finetune_epochs", "k", "umap_neighbors", "umap_min_dist", "random_state", "umap_fit",
                  "umap_order", "n_init")
#: the signature settings of the authors' code's reading (the paper's: k = 5, the run's seed, UMAP's fitted embedding)
CODE_SIGNATURE = {"k": "ground_truth", "random_state": "code", "umap_fit": "transform", "umap_order": "code"}


def graph_sweep(centres_2d: np.ndarray, truth, gammas=GAMMAS, num_clusters: int | None = None) -> pd.DataFrame:
    """One row per (distance, γ): ``ari`` of HC(Ã) against ``truth``, ``adj_density`` (linked share
    of the off-diagonal pairs) and ``adj_cross_group`` (share of links across ground-truth groups;
    NaN without links; both NaN without a ``truth``).  ``num_clusters``: HC's C (None: HC chooses).

    ``ari`` is NaN where Ã has no link: Ward on the identical rows of an identity matrix meets only
    ties, which scipy breaks in client order, so HC returns blocks of consecutive client ids, and
    where the partition numbers clients by cluster (FLT's scenarios) that would score ARI = 1
    for a graph that says nothing."""
    from fedbench.run.scoring import adjacency_scores  # heavy import (torch), only where a sweep is run

    truth = None if truth is None else np.asarray(truth)
    rows = []
    for distance in DISTANCES:
        a = client_distances(centres_2d, distance)
        for gamma in np.asarray(gammas, dtype=float):
            adjacency = threshold_adjacency(a, gamma)
            clusters, _ = hierarchical_clusters(adjacency, num_clusters, on="rows")
            edgeless = not (adjacency.sum() > len(adjacency))
            rows.append({"distance": distance, "gamma": float(gamma),
                         "ari": float("nan") if truth is None or edgeless else float(adjusted_rand_score(truth, clusters)),
                         **adjacency_scores(adjacency, truth)})
    return pd.DataFrame(rows, columns=["distance", "gamma", "ari", "adj_density", "adj_cross_group"])


def flt_entry(entry: dict) -> dict:
    """An ``flt`` algorithm entry with the builder's defaults filled in (γ, distance, aggregation, …)."""
    from fedbench.algorithms import ALGORITHMS

    return ALGORITHMS.with_defaults("flt", {k: v for k, v in entry.items() if k != "method"})


def signature_of(entry: dict) -> str:
    """A label for the entries sharing signatures: the encoder, with J where it is fine-tuned, and
    "code's signatures" where the entry computes them as the authors' code (:data:`CODE_SIGNATURE`)."""
    full = flt_entry(entry)
    j = full["finetune_epochs"]
    notes = [f"J={j}"] * bool(j) + ["code's signatures"] * any(full[k] == v for k, v in CODE_SIGNATURE.items())
    return f"{entry['encoder']}" + (f" ({', '.join(notes)})" if notes else "")


def reading_of(entry: dict) -> str:
    """An FLT entry's reading: its distance and aggregation (paper: min, simultaneous; code: matching, in place)."""
    entry = flt_entry(entry)
    return f"{entry['distance']}, {entry['aggregation'].replace('_', ' ')}"


def sweep_runs(runs: list[dict], gammas=GAMMAS) -> pd.DataFrame:
    """Graph sweeps of FLT runs.  ``runs``: dicts with ``entry`` (the algorithm's config entry),
    ``seed``, ``centres_2d`` and ``truth``.  Runs whose entries share their signatures
    (:data:`SIGNATURE_KEYS`) and seed share their ``centres_2d``: each such group is swept once
    (all γ of the grid and of the entries), labelled ``signature``."""
    seen, frames = set(), []
    grid = np.unique(np.r_[np.asarray(gammas, float), [float(flt_entry(r["entry"])["gamma"]) for r in runs]])
    for run in runs:
        entry = flt_entry(run["entry"])
        key = (tuple(entry[k] for k in SIGNATURE_KEYS), entry["clusters"], run["seed"])
        if key in seen:
            continue
        seen.add(key)
        clusters = entry["clusters"]
        frame = graph_sweep(run["centres_2d"], run["truth"], grid, None if clusters in (None, "auto") else int(clusters))
        frames.append(frame.assign(signature=signature_of(entry), seed=run["seed"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def accuracy_points(runs: list[dict]) -> pd.DataFrame:
    """Final accuracy of every FLT run at its own γ: ``signature``, ``reading``, ``gamma``, ``seed``,
    ``accuracy`` (runs carry ``entry``, ``seed`` and ``accuracy``)."""
    return pd.DataFrame(
        [{"signature": signature_of(r["entry"]), "reading": reading_of(r["entry"]),
          "gamma": float(flt_entry(r["entry"])["gamma"]), "seed": r["seed"], "accuracy": r["accuracy"]} for r in runs],
        columns=["signature", "reading", "gamma", "seed", "accuracy"],
    )


def plot_gamma_sweep(graph: pd.DataFrame, accuracy: pd.DataFrame, path: str | Path, title: str | None = None,
                     paper_gamma: float = 1.0) -> None:
    """Four panels against γ (log scale): ARI of HC(Ã), cross-group link share, graph density
    (mean over seeds, band = min-max), and the final accuracy of the trained runs (mean ± std over
    seeds).  Colour: distance/reading; line style: signature.  A dotted line marks γ = 1."""
    fig = Figure(figsize=(15, 3.6))
    axes = fig.subplots(1, 4)
    colours = dict(zip(DISTANCES, sns.color_palette("tab10", 2)))
    styles = dict(zip(sorted(set(graph.get("signature", pd.Series(dtype=str))) | set(accuracy["signature"])), ["-", "--", ":", "-."] * 4))
    panels = [("ari", "ARI of HC(Ã) vs ground truth"), ("adj_cross_group", "cross-group share of links"),
              ("adj_density", "graph density (off-diagonal)")]
    for ax, (column, label) in zip(axes, panels):
        for (signature, distance), part in graph.groupby(["signature", "distance"], sort=True) if len(graph) else []:
            stats = part.groupby("gamma")[column].agg(["mean", "min", "max"])
            ax.plot(stats.index, stats["mean"], styles[signature], color=colours[distance],
                    label=f"{DISTANCE_LABELS[distance]}, {signature}")
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colours[distance], alpha=0.15, linewidth=0)
        ax.set_ylabel(label)
    ax = axes[3]
    for (signature, reading), part in accuracy.groupby(["signature", "reading"], sort=True):
        stats = part.groupby("gamma")["accuracy"].agg(["mean", "std"]).fillna(0.0)
        distance = reading.split(",")[0]
        ax.errorbar(stats.index, 100 * stats["mean"], yerr=100 * stats["std"], fmt="o" + styles[signature],
                    color=colours.get(distance, "grey"), capsize=3, label=f"{reading}, {signature}")
    ax.set_ylabel("final accuracy (%)")
    gammas = np.r_[graph["gamma"].to_numpy(float) if len(graph) else [], accuracy["gamma"].to_numpy(float)]
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("γ")
        ax.axvline(paper_gamma, color="grey", linestyle=":", linewidth=1)
        if len(gammas):
            ax.set_xlim(gammas.min() / 1.3, gammas.max() * 1.3)
    for ax in axes[:3]:
        ax.set_ylim(-0.05, 1.05)
    handles, labels = [], []
    for ax in (axes[0], axes[3]):
        h, l = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + l
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8,
               bbox_to_anchor=(0.5, -0.02), frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    atomic_write(path, lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format=Path(path).suffix[1:]))
