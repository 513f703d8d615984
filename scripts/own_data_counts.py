"""How many published numbers a set of scorecards compares, and how many agree, per paper.

    python scripts/own_data_counts.py reports/flt_mnist/scorecard.md reports/pfedmt_mnist/scorecard.md \
        reports/pfedmt_synthetic_scorecard.md

Reads scorecards as the scorecard rule writes them (``fedbench.results.scorecard.to_markdown``: one
``## <paper> <table>: <dataset>[, <model>]`` table each).  A published number is one (table, method,
setting, metric) of a heading; the readings that score it (``FLT (Enc2) [flt_enc2_mnist]`` and
``[flt_enc2_mnist_code]``, or two partitions' cells) are one number.  It is *compared* when a reading
has a verdict (agree or miss), and *agrees* when at least one reading agrees (``every reading`` counts
the numbers all of whose compared readings agree).  A number the paper prints differently in a second
table (``18.42 / Table 8: 18.40``) is scored once against the first and counts once per table.  The
README's papers table quotes these counts for the scorecards of runs on the papers' own data.
"""
import argparse
import re
from collections import defaultdict
from pathlib import Path

HEADING = re.compile(r"^## (\S+) (.+?): (.+)$")
VERDICTS = ("agree", "miss")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def scorecard_rows(text: str) -> list[dict]:
    """Every row of every table of one scorecard Markdown file, with its heading's paper and title."""
    rows, paper, title, header = [], None, None, None
    for line in text.splitlines():
        if line.startswith("## "):  # a scorecard table's heading, or another section (no rows read there)
            match = HEADING.match(line)
            paper, title, header = (match[1], f"{match[2]}: {match[3]}", None) if match else (None, None, None)
        elif line.startswith("|") and paper is not None:
            cells = _cells(line)
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set(":- "):
                rows.append({"paper": paper, "title": title, **dict(zip(header, cells))})
    return rows


def number_counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per paper: published numbers ``compared``, agreeing in at least one reading (``agree``) and in
    every compared reading (``every reading``)."""
    verdicts: dict[tuple, list[str]] = defaultdict(list)
    extra: dict[tuple, int] = {}
    for row in rows:
        if not {"method", "setting", "metric", "published", "agree"} <= row.keys():
            continue
        method = re.sub(r" \[[^\]]*\]$", "", row["method"])
        key = (row["paper"], row["title"], method, row["setting"], row["metric"])
        if row["agree"] in VERDICTS:
            verdicts[key].append(row["agree"])
        extra[key] = row["published"].count(" / Table ")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"compared": 0, "agree": 0, "every reading": 0})
    for key, found in verdicts.items():
        times = 1 + extra[key]
        paper = counts[key[0]]
        paper["compared"] += times
        paper["agree"] += times * ("agree" in found)
        paper["every reading"] += times * all(v == "agree" for v in found)
    return dict(counts)


def counts_of(paths: list[Path]) -> dict[str, dict[str, int]]:
    """:func:`number_counts` over the rows of every scorecard file given."""
    return number_counts([row for path in paths for row in scorecard_rows(Path(path).read_text())])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scorecards", nargs="+", type=Path)
    args = parser.parse_args()
    for paper, count in sorted(counts_of(args.scorecards).items()):
        print(f"{paper}: {count['compared']} published numbers compared, {count['agree']} agree "
              f"(in every reading: {count['every reading']})")


if __name__ == "__main__":
    main()
