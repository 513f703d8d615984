"""scripts/own_data_counts.py: published numbers compared and agreeing, counted by hand on a made-up
scorecard, and the README's papers table quoting the counts of the committed scorecards."""
import re
from pathlib import Path

from conftest import load_script

own_data_counts = load_script("own_data_counts")
REPO = Path(__file__).resolve().parents[1]

CARD = """# Scorecard: published vs reproduced

## p Table 1: MNIST

| method    | setting | metric      | ±    | published              | reproduced | difference | z    | agree | seeds | notes |
|:----------|:--------|:------------|:-----|:-----------------------|:-----------|:-----------|:-----|:------|:------|:------|
| A         | T=1     | test acc. % | ± SE | 90.00 ± 0.10           | 90.10      | +0.10      | +0.5 | agree | 3     |       |
| B [b]     | T=1     | test acc. % | ± SE | 80.00 ± 0.10           | 70.00      | -10.00     | -9.0 | miss  | 3     |       |
| B [b_code]| T=1     | test acc. % | ± SE | 80.00 ± 0.10           | 80.05      | +0.05      | +0.2 | agree | 3     |       |
| C         | T=1     | test var. %²| ± SE | 18.42 / Table 8: 18.40 | 30.00      | +11.58     | +5.0 | miss  | 3     |       |
| D         | T=1     | test acc. % | ± SE | 70.00 ± 0.10           |            |            |      |       | 0     |       |

## Reading the differences

| method | agree |
|:-------|:------|
| A      | agree |
"""


def test_readings_of_one_number_count_once_and_a_number_printed_twice_counts_twice(tmp_path):
    path = tmp_path / "scorecard.md"
    path.write_text(CARD)
    # A agrees; B is one number (agrees in one of its two readings); C is Table 1's and Table 8's number,
    # one miss each; D was not run; the table under "Reading the differences" is no scorecard
    assert own_data_counts.counts_of([path]) == {"p": {"compared": 4, "agree": 2, "every reading": 1}}


PAPER_DATA = {  # the committed scorecards of runs on each paper's own data
    "pFedMT": ["reports/pfedmt_synthetic_scorecard.md", "reports/pfedmt_mnist/scorecard.md"],
    "FLT": ["reports/flt_mnist/scorecard.md"],
}


def test_the_readme_quotes_the_committed_scorecards_counts():
    readme = (REPO / "README.md").read_text()
    for paper, files in PAPER_DATA.items():
        (counts,) = own_data_counts.counts_of([REPO / f for f in files]).values()
        row = next(line for line in readme.splitlines() if line.startswith(f"| {paper} |"))
        assert f"{counts['compared']} compared, {counts['agree']} agree" in row, (paper, counts, row)
    for paper in ("FeMAM", "FedMR"):
        row = next(line for line in readme.splitlines() if line.startswith(f"| {paper} |"))
        assert re.search(r"\| none \(", row), row
