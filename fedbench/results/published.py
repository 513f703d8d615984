"""The papers' published numbers (config/published_results.csv) and the links from experiments to them.

An experiment's ``published`` block names the paper, table, dataset and partition (and model,
where a table has several) and, per algorithm of the experiment, the published ``method`` and
``setting``; together they select that algorithm's rows of the tidy CSV.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PUBLISHED_CSV = Path(__file__).resolve().parents[2] / "config" / "published_results.csv"


def load_published(path: str | Path = PUBLISHED_CSV) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"model": str, "setting": str}, keep_default_na=False, na_values={"value": [""], "std": [""]})


def published_rows(experiment: dict, algorithm: str, published: pd.DataFrame) -> pd.DataFrame:
    """The published rows (all metrics) of ``algorithm`` in ``experiment``; empty if it has no link."""
    link = experiment.get("published")
    if not link or algorithm not in link["rows"]:
        return published.iloc[0:0]
    row = link["rows"][algorithm]
    keys = {k: link[k] for k in ("paper", "table", "dataset", "partition", "model") if k in link}
    keys.update(method=row["method"], setting=row["setting"])
    mask = pd.Series(True, index=published.index)
    for column, value in keys.items():
        mask &= published[column] == value
    return published[mask]
