"""The papers' published numbers (config/published_results.csv) and the links from experiments to them.

An experiment's ``published`` block names the paper, table, dataset and partition (and the
paper's model, or a ``models`` map from config model names to the paper's, where a table has
several) and, per algorithm of the experiment, one link or a list of links.  A link names the
published ``method`` and ``setting`` and, optionally, which numbers of the run it is compared
with: ``scored`` (``personal``, the protocol's own, or ``global``, the global model's) and
``rounds`` (only the first T rounds count, e.g. pFedMT's T = 100 and T = 600 columns).
A link may also name another ``table`` (the same cell printed in two tables, e.g. FeMAM's Table 1
and Tables C.2-C.4) and, for a table of differences (FeMAM's Table 2 ablation, ``accuracy_delta``),
the algorithm the difference is taken to (``relative_to``).  A link stands for every number the
table prints for its method and setting (test and train accuracy, macro-F1, variance across
clients): the scorecard scores each from the same runs; a difference row (``*_delta``) only through
a link with ``relative_to`` (FeMAM's "+0.00" default row: ``relative_to`` the algorithm itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

PUBLISHED_CSV = Path(__file__).resolve().parents[2] / "config" / "published_results.csv"


@dataclass(frozen=True)
class Link:
    algorithm: str
    method: str
    setting: str
    scored: str = "personal"
    rounds: int | None = None
    table: str | None = None  # the published table, where it is not the block's
    relative_to: str | None = None  # published number = accuracy of algorithm - accuracy of this one

    @property
    def metric(self) -> str:
        """The published test metric that identifies the link's row (exactly one must match); the
        scorecard then scores every metric and split printed for that method and setting."""
        return "accuracy" if self.relative_to is None else "accuracy_delta"


def load_published(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"model": str, "setting": str}, keep_default_na=False, na_values={"value": [""], "std": [""]})


def links(experiment: dict) -> list[Link]:
    """Every link of an experiment's ``published`` block, in the config's order (none without one)."""
    block = experiment.get("published")
    if not block:
        return []
    out = []
    for algorithm, entries in block["rows"].items():
        for entry in entries if isinstance(entries, list) else [entries]:
            out.append(Link(algorithm, **entry))
    return out


def link_keys(experiment: dict, link: Link, model: str | None = None) -> dict[str, str]:
    """The CSV columns and values that select ``link``'s rows, in the order they narrow the table
    down (paper, table, dataset, partition, model, method, setting); ``model`` (a config model
    name) picks the paper's model through the block's ``models`` map where it has one."""
    block = experiment["published"]
    keys = {k: block[k] for k in ("paper", "table", "dataset", "partition", "model") if k in block}
    if link.table is not None:
        keys["table"] = link.table
    if model is not None and model in block.get("models", {}):
        keys["model"] = block["models"][model]
    keys.update(method=link.method, setting=link.setting)
    return keys


def published_rows(experiment: dict, link: Link, published: pd.DataFrame, model: str | None = None) -> pd.DataFrame:
    """The published rows (all metrics) of ``link`` (:func:`link_keys`)."""
    keys = link_keys(experiment, link, model)
    mask = pd.Series(True, index=published.index)
    for column, value in keys.items():
        mask &= published[column] == value
    return published[mask]
