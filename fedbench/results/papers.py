"""Which paper an experiment reproduces, and the report category that holds its outputs.

Every experiment names its paper in its ``paper:`` key (``config/experiments/*.yaml`` do; the
schema lists the choices, :data:`PAPERS`).  An experiment without the key belongs to the paper of
its ``published`` block, and to the default suite where it has none; a ``paper:`` that contradicts
the ``published`` block's is a config error (:func:`fedbench.config.check_config`).  The HTML
report has one category per paper (and one for the default suite), each with its tables,
scorecard, curves and structure figures; outputs that several papers share (a partition two
papers' experiments train on, or one only ``partition_grid`` builds) go to :data:`SHARED`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.results import scorecard, tables

PAPERS = {
    "default": "Default suite",
    "flt": "FLT",
    "pfedmt": "pFedMT",
    "femam": "FeMAM",
    "fedmr": "FedMR",
}
"""Config key -> report category (the published table's ``paper`` column uses the same keys)."""

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
    to_markdown = {"results": tables.to_markdown, "scorecard": scorecard.to_markdown}[kind]
    rows = paper_rows(pd.read_csv(table_csv), experiments)
    if kind == "scorecard":
        rows = rows.fillna({"notes": "", "note": ""})
    atomic_write(csv_path, lambda p: rows.to_csv(p, index=False))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(rows), encoding="utf-8"))
    return rows


__all__ = ["PAPERS", "SHARED", "experiment_paper", "paper_experiments", "config_papers", "category", "shared_category",
           "paper_rows", "write_paper_rows"]
