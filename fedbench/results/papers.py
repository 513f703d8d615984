"""Which paper an experiment reproduces, and the report category that holds its outputs.

Every experiment names its paper in its ``paper:`` key (``config/experiments/*.yaml`` do; the
schema lists the choices, :data:`PAPERS`).  An experiment without the key belongs to the paper of
its ``published`` block, and to the default suite where it has none; a ``paper:`` that contradicts
the ``published`` block's is a config error (:func:`fedbench.planning.validate.check_config`).  The HTML
report has one category per paper (and one for the default suite), each with its tables,
scorecard, curves and structure figures; outputs that several papers share (a partition two
papers' experiments train on, or one only ``partition_grid`` builds) go to :data:`SHARED`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.results.scorecard import TEXT_COLUMNS as SCORECARD_TEXT, to_markdown as scorecard_markdown
from fedbench.results.tables import to_markdown as results_markdown

PAPERS = {
    "default": "Default suite",
    "flt": "FLT",
    "pfedmt": "pFedMT",
    "femam": "FeMAM",
    "fedmr": "FedMR",
}
"""Config key -> report category (the published table's ``paper`` column uses the same keys)."""

GUIDES = {
    "default": (
        "**Look for** the partition column first.  On ``iid`` every client holds every digit: FedAvg "
        "(and IFCA, whose cluster models see alike data) beats Local, which learns from its own samples "
        "only.  On ``dir0.3`` (label skew) the one global model fits no client's mix well and fine-tuning "
        "it on each client (FedAvg+) leads.  On ``clusters`` two groups of clients hold disjoint digits: "
        "a single global model (FedAvg, FedProx) must serve both and falls below even Local, while IFCA "
        "learns one model per group and leads by a wide margin; its ARI against the two ground-truth "
        "groups is in the second table, and the Cluster assignments figure shows when it found them.  On "
        "Synthetic the users' data differ so much that Local leads.  FedProx's μ = 1 pulls every local "
        "update toward the global model: with one local epoch there is little drift to correct, so on "
        "digits the pull mostly slows training and FedProx trails FedAvg."
    ),
    "flt": (
        "**Look for** FLT against FedAvg and the clustered baselines (FeSEM, IFCA, CFL, PCA+kM+HC) on "
        "the structured partitions: FLT's claim is that clustering clients by their encoded data "
        "(Algorithm 2) recovers the ground-truth clusters (ARI near 1) and therefore beats a single global "
        "model; Enc1 vs Enc2 shows how much the encoder's training data matters, and the γ sweep how "
        "sensitive the clusters are to the threshold."
    ),
    "pfedmt": (
        "**Look for** the personalised models (PM) against the global ones (GM), and pFedMT against "
        "pFedMe and Per-FedAvg: Table 1's claim is that the multi-tier Moreau envelopes give the best "
        "personalised accuracy on both Synthetic and MNIST, convex (MLR) and not (DNN/CNN)."
    ),
    "femam": (
        "**Look for** FeMAM against the single-structure baselines (FedAvg, FedAvg+, Ditto, FeSEM, …) on "
        "the cluster-wise and multi-level partitions, and the level ablations: FeMAM's claim is that adding "
        "levels (global, cluster, personal) where the data has them beats any one level; the structure "
        "figures show which levels it added and whether they match the ground-truth groups (ARI)."
    ),
    "fedmr": (
        "**Look for** FedMR (layer-wise model recombination, with and without two-stage training) against "
        "FedAvg and the other global-model baselines as the Dirichlet α falls: the paper's claim is that "
        "recombination keeps the global model accurate under strong label skew (α = 0.1)."
    ),
}
"""What a reader should look for in each paper's outputs (reStructuredText; the per-paper tables' captions)."""


SHARED = "Shared partitions"
"""Report category of partitions no single paper's experiments own."""


def experiment_paper(config: dict, experiment: str) -> str:
    """The paper key of ``experiment``: its ``paper:``, else its published block's paper, else ``default``."""
    spec = config["experiments"][experiment]
    if "paper" in spec:
        return spec["paper"]
    published = spec.get("published") or {}
    return published.get("paper", "default")


def paper_experiments(config: dict, paper: str) -> list[str]:
    """The experiments of ``paper``, in the config's order."""
    return [name for name in config.get("experiments", {}) if experiment_paper(config, name) == paper]


def config_papers(config: dict, experiments: Iterable[str] | None = None) -> list[str]:
    """The papers of ``experiments`` (default: all of the config's), in :data:`PAPERS`' order."""
    names = config.get("experiments", {}) if experiments is None else experiments
    present = {experiment_paper(config, name) for name in names}
    return [paper for paper in PAPERS if paper in present]


def category(paper: str) -> str:
    """The report category of a paper key."""
    return PAPERS[paper]


def shared_category(papers: Iterable[str]) -> str:
    """The category of an output used by the experiments of ``papers``: that paper's when there is one, else :data:`SHARED`."""
    papers = set(papers)
    return category(papers.pop()) if len(papers) == 1 else SHARED


def paper_rows(table: pd.DataFrame, experiments: Iterable[str]) -> pd.DataFrame:
    """The rows of a results table or scorecard (both have an ``experiment`` column) that belong to ``experiments``."""
    return table[table["experiment"].isin(list(experiments))].reset_index(drop=True)


def write_paper_rows(kind: str, table_csv, experiments: Iterable[str], csv_path, md_path) -> pd.DataFrame:
    """Write one paper's rows of the whole config's ``results`` table or ``scorecard`` (``kind``)
    as CSV (all columns) and Markdown (the table's own layout)."""
    to_markdown = {"results": results_markdown, "scorecard": scorecard_markdown}[kind]
    # a scorecard's blank text cell (FLT's model) reads back as NaN, which groupby would drop
    text = dict.fromkeys(SCORECARD_TEXT, str) if kind == "scorecard" else None
    rows = paper_rows(pd.read_csv(table_csv, dtype=text), experiments)
    if kind == "scorecard":
        rows = rows.fillna(dict.fromkeys(SCORECARD_TEXT, ""))
    atomic_write(csv_path, lambda p: rows.to_csv(p, index=False))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(rows), encoding="utf-8"))
    return rows


__all__ = ["PAPERS", "SHARED", "experiment_paper", "paper_experiments", "config_papers", "category", "shared_category",
           "paper_rows", "write_paper_rows"]
