"""The measured scorecards committed under reports/ parse, and every row names a published number."""

import re
from pathlib import Path

import pytest

from fedbench.results.published import load_published

REPO = Path(__file__).resolve().parents[1]
SCORECARDS = sorted((REPO / "reports").glob("*scorecard*.md"))
HEADING = re.compile(r"^## (\w+) (Table [\w.]+): ([^,]+)(?:, (.+))?$")


def scorecard_rows(text: str) -> list[dict]:
    """Every table row of a scorecard in Markdown, with its section's paper, table, dataset and model."""
    rows, section, header = [], None, None
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading:
            section, header = dict(zip(("paper", "table", "dataset", "model"), heading.groups(default=""))), None
        elif section and line.startswith("|"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(line) <= set("|:- "):
                rows.append({**section, **dict(zip(header, cells))})
    return rows


def test_the_scorecards_reports_readme_lists_are_the_ones_checked():
    """The parametrised check below runs on the glob's files; were they moved or renamed, it would
    collect nothing and pass: the scorecards reports/README.md lists must be exactly those."""
    listed = set(re.findall(r"`([\w./-]*scorecard[\w.-]*\.md)`", (REPO / "reports" / "README.md").read_text()))
    assert listed == {"pfedmt_synthetic_scorecard.md"}
    assert {p.name for p in SCORECARDS} == listed


@pytest.mark.parametrize("path", SCORECARDS, ids=lambda p: p.stem)
def test_committed_scorecard_parses_and_its_rows_are_published(path):
    rows = scorecard_rows(path.read_text())
    assert rows, f"{path.name}: no scorecard table"
    published = load_published()
    keys = {tuple(r) for r in published[["paper", "table", "dataset", "model", "method", "setting"]].astype(str).values}
    for row in rows:
        method = re.sub(r" \[[^]]*\]$", "", row["method"])  # "pFedMe(PM) [pfedme_local]": the run's name
        assert (row["paper"], row["table"], row["dataset"], row["model"], method, row["setting"]) in keys, row
        assert re.fullmatch(r"-?\d+\.\d+( ± \d+\.\d+)?", row["published"]), row
        assert row["reproduced"] == "" or re.fullmatch(r"-?\d+\.\d+ ± \d+\.\d+", row["reproduced"]), row
