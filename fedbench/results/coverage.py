"""Coverage: how much of each paper the suite plans, has reproduced and agrees with.

Per paper and table of ``config/published_results.csv``: the published numbers, those linked to a
planned cell (a link of an experiment whose grid trains the linked algorithm), those reproduced
(at least one seed of a linked cell has the number) and those that agree (a linked reproduction's
flag is ``agree``, :mod:`fedbench.results.agreement`).  A number linked by two algorithm entries
(the paper's reading and the authors' code's) counts once, reproduced or agreeing if either is.
Planned counts need no run: ``scorecard(config, [], published)`` lists every planned link.

    python -m fedbench.results.coverage config/experiments/{flt,pfedmt,femam,fedmr}.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.results.agreement import AGREE

COLUMNS = ["paper", "table", "published", "planned", "reproduced", "agree"]


def _table_order(table: str) -> tuple:
    """Sort key: Table 2 before Table 10; lettered tables (Table C.2) after the numbered ones."""
    label = table.removeprefix("Table ").strip()
    if label.isdigit():
        return (0, "", int(label))
    appendix, _, number = label.partition(".")
    return (1, appendix, int(number) if number.isdigit() else 0)


def _rows(card: pd.DataFrame) -> set[int]:
    """The published rows a scorecard scores: each row's own and, where the paper prints the cell
    twice with different numbers, the other table's (``also_published_row``, ``;``-separated)."""
    rows = {int(r) for r in card["published_row"]}
    for also in card["also_published_row"].dropna():
        rows |= {int(float(r)) for r in str(also).split(";") if r.strip()}
    return rows


def coverage(published: pd.DataFrame, cards: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """One row per paper and table (every table of ``published``), then a ``total`` row."""
    from fedbench.results.scorecard import COLUMNS as CARD_COLUMNS

    card = pd.concat([pd.DataFrame(columns=CARD_COLUMNS), *cards], ignore_index=True)
    reproduced = card[(card["seeds"] > 0) & card["reproduced"].notna()]
    agree = card[card["agreement"] == AGREE]
    counts = published[["paper", "table"]].copy()
    counts["planned"] = published.index.isin(_rows(card))
    counts["reproduced"] = published.index.isin(_rows(reproduced))
    counts["agree"] = published.index.isin(_rows(agree))
    table = (counts.assign(published=1).groupby(["paper", "table"], sort=False)[["published", "planned", "reproduced", "agree"]]
             .sum().reset_index())
    table = table.sort_values(["paper", "table"], key=lambda s: s.map(_table_order) if s.name == "table" else s).reset_index(drop=True)
    total = {"paper": "total", "table": "", **{c: int(table[c].sum()) for c in COLUMNS[2:]}}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)[COLUMNS]


def total_line(table: pd.DataFrame) -> str:
    """``"N published · P planned · R reproduced · A agree"`` from :func:`coverage`'s total row."""
    total = table[table["paper"] == "total"].iloc[0]
    return " · ".join(f"{int(total[c])} {c}" for c in COLUMNS[2:])


def to_markdown(table: pd.DataFrame) -> str:
    return "\n".join([f"**{total_line(table)}**", "", table.to_markdown(index=False), ""])


def to_rst(table: pd.DataFrame, title: str = "Reproduction status") -> str:
    """A section for the report's landing page: the total line, then a list-table."""
    lines = [f".. rubric:: {title}", "", f"**{total_line(table)}**", "",
             "Published numbers per paper and table (``config/published_results.csv``); planned: linked to a",
             "cell of this config's grid; reproduced: runs present here; agree: within two combined standard",
             "errors (see the scorecard).", "",
             ".. list-table::", "   :header-rows: 1", ""]
    for row in [COLUMNS] + table[COLUMNS].astype(str).values.tolist():
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" if cell else "     -" for cell in row[1:]]
    return "\n".join(lines) + "\n"


def write_coverage(published: pd.DataFrame, cards: Iterable[pd.DataFrame], csv_path, md_path, rst_path) -> pd.DataFrame:
    table = coverage(published, list(cards))
    atomic_write(csv_path, lambda p: table.to_csv(p, index=False))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(table)))
    atomic_write(rst_path, lambda p: Path(p).write_text(to_rst(table)))
    return table


def planned(configs: Iterable[dict], published: pd.DataFrame) -> pd.DataFrame:
    """Coverage of the given configs' grids without any run (every planned link, nothing reproduced)."""
    from fedbench.results.scorecard import scorecard

    return coverage(published, [scorecard(config, [], published) for config in configs])


def main(argv: list[str]) -> None:
    import yaml

    from fedbench.results.published import load_published

    table = planned([yaml.safe_load(Path(path).read_text()) for path in argv], load_published())
    print(to_markdown(table))


if __name__ == "__main__":
    main(sys.argv[1:])
