"""Published differences are scored as differences, and a cell the paper prints twice with two
numbers is one scorecard row (issue 24, items 1 and 10), on made-up runs worked out by hand."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedbench.results.coverage import coverage
from fedbench.results.published import load_published
from fedbench.results.scorecard import scorecard, to_markdown

REPO = Path(__file__).resolve().parents[1]
GRIDS = sorted((REPO / "config" / "experiments").glob("*.yaml"))


def test_every_delta_row_of_every_paper_is_scored_as_a_difference():
    """Over every paper grid: each published ``*_delta`` row is scored, and only by a link with
    ``relative_to`` (never against an absolute accuracy)."""
    published = load_published()
    scored = set()
    for grid in GRIDS:
        card = scorecard(yaml.safe_load(grid.read_text()), [], published)
        deltas = card[card["metric"].str.endswith("_delta")]
        assert deltas["relative_to"].notna().all(), (grid.name, deltas[deltas["relative_to"].isna()][["method", "setting"]])
        scored |= set(deltas["published_row"])
    expected = set(published.index[published["metric"].str.endswith("_delta")])
    assert expected and scored == expected


def femam_run(root: Path, algorithm: str, seed: int, test_acc: float) -> Path:
    """A made-up FeMAM-protocol run of the Table 2 cell: round 2 has the least validation loss, so
    its test accuracy is the run's figure."""
    cell = {"experiment": "cifar_ml3.6.11", "dataset": "cifar100", "partition": "femam_ml3.6.11", "model": "resnet9",
            "algorithm": algorithm, "seed": seed}
    run = root / algorithm / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "femam"}))
    pd.DataFrame({"round": [1, 2, 3], "val_loss_mean": [2.0, 1.0, 1.5], "acc_mean": [0.1, test_acc, 0.2],
                  "f1_mean": [0.1, 0.3, 0.2], "loss_mean": [2.0, 1.0, 1.5], "acc_var": [0.0, 0.0, 0.0]}).to_csv(
        run / "history.csv", index=False)
    return run


def test_table2_default_row_is_a_difference_by_hand(tmp_path):
    """FeMAM Table 2 (CIFAR-100 multi-level [3,6,11]): the header's 61.86 is FeMAM's accuracy, the
    "+0.00" row FeMAM minus itself (0 for every seed), the "-2.10" row (level 5 excluded) femam_no5
    minus femam seed by seed.  FeMAM 60 and 62 %, femam_no5 57 and 61 %: the header row reads 61.0,
    the default row 0.0, the ablation (57 - 60, 61 - 62) = (-3, -1), mean -2.0."""
    config = yaml.safe_load((REPO / "config/experiments/femam.yaml").read_text())
    config["only_experiments"] = ["cifar_ml3.6.11"]
    runs = [femam_run(tmp_path, "femam", 0, 0.60), femam_run(tmp_path, "femam", 1, 0.62),
            femam_run(tmp_path, "femam_no5", 0, 0.57), femam_run(tmp_path, "femam_no5", 1, 0.61)]
    card = scorecard(config, runs, load_published())
    table2 = card[card["table"] == "Table 2"].set_index(["setting", "metric"])
    default = "levels used: 1,2,3,4,5 (all; default)"
    assert table2.loc[(default, "accuracy"), "reproduced"] == pytest.approx(61.0)
    delta = table2.loc[(default, "accuracy_delta")]
    assert (delta["published"], delta["reproduced"], delta["seeds"]) == pytest.approx((0.0, 0.0, 2))
    assert "0 by definition" in delta["note"]
    no5 = table2.loc[("levels used: 1,2,3,4; excluded: 5", "accuracy_delta")]
    assert (no5["published"], no5["reproduced"], no5["difference"]) == pytest.approx((-2.10, -2.0, 0.10))


def test_a_cell_printed_twice_differently_is_one_row_by_hand(tmp_path):
    """FeMAM Tiny ImageNet client-wise FeSEM+: Table C.3 prints 37.38 ± 1.45, Table 1 44.93 ± 0.34.
    Made up here: C.3 prints 40.0 ± 2.0, Table 1 44.0 ± 0.0 for the same cell; two seeds at 41 and 43 %.
    One row, under C.3 (the experiment's own table, linked first): published 40.0, reproduced 42.0,
    difference +2.0, Table 1's number beside it; macro-F1, printed alike in both tables, stays two rows,
    each with nothing beside it (no other number, no other row; its Markdown cell the number alone)."""
    published = pd.DataFrame(
        [
            ("femam", "Table C.3", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "accuracy", "test", 40.0, 2.0, "mean±std over 4 runs"),
            ("femam", "Table C.3", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "macro_f1", "test", 30.0, 1.0, ""),
            ("femam", "Table 1", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "accuracy", "test", 44.0, 0.0, "FLAG: differs"),
            ("femam", "Table 1", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "macro_f1", "test", 30.0, 1.0, ""),
        ],
        columns=["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std", "notes"],
    )
    experiment = {
        "protocol": "femam",
        "grid": [{"datasets": ["cifar100"], "partitions": ["femam_ml3.6.11"], "models": ["resnet9"], "algorithms": ["fesem_plus"]}],
        "published": {"paper": "femam", "table": "Table C.3", "dataset": "Tiny", "partition": "dir", "model": "ResNet-9",
                      "rows": {"fesem_plus": [{"method": "FeSEM+", "setting": "s"},
                                              {"method": "FeSEM+", "setting": "s", "table": "Table 1"}]}},
    }
    runs = [femam_run(tmp_path, "fesem_plus", 0, 0.41), femam_run(tmp_path, "fesem_plus", 1, 0.43)]
    for run in runs:  # the cell of this made-up experiment
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["cell"]["experiment"] = "e"
        (run / "metrics.json").write_text(json.dumps(metrics))
    card = scorecard({"experiments": {"e": experiment}}, runs, published)
    accuracy = card[card["metric"] == "accuracy"]
    assert len(accuracy) == 1 and len(card[card["metric"] == "macro_f1"]) == 2
    row = accuracy.iloc[0]
    assert (row["table"], row["published"], row["reproduced"], row["difference"]) == pytest.approx(("Table C.3", 40.0, 42.0, 2.0))
    assert row["also_published"] == "Table 1: 44.00 ± 0.00" and row["also_published_row"] == "2"
    assert "Table 1: FLAG: differs" in row["notes"] and "scored against Table C.3" in row["note"]
    assert "| 40.00 ± 2.00 / Table 1: 44.00 ± 0.00 |" in to_markdown(card)
    f1 = card[card["metric"] == "macro_f1"]
    assert f1["also_published"].tolist() == ["", ""] and f1["also_published_row"].tolist() == ["", ""]
    assert markdown_cells(to_markdown(card), "published") == ["40.00 ± 2.00 / Table 1: 44.00 ± 0.00", "30.00 ± 1.00", "30.00 ± 1.00"]
    # coverage still counts both published numbers as planned and reproduced
    total = coverage(published, [card]).iloc[-1]
    assert (total["published"], total["planned"], total["reproduced"]) == (4, 4, 4)


# --- survivors of the results group's mutation run at 1ea9dfb (docs/mutation/results.md) ------------


def femam_cell_runs(root: Path, algorithm: str, accuracies: list[float], short: int | None = None) -> list[Path]:
    """``femam_run``s of seeds 0, 1, ... in the made-up experiment "e"; the run of seed ``short``
    ends at round 2 (its history's third row removed)."""
    runs = []
    for seed, accuracy in enumerate(accuracies):
        run = femam_run(root, algorithm, seed, accuracy)
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["cell"]["experiment"] = "e"
        (run / "metrics.json").write_text(json.dumps(metrics))
        if seed == short:
            history = pd.read_csv(run / "history.csv")
            history[history["round"] <= 2].to_csv(run / "history.csv", index=False)
        runs.append(run)
    return runs


def femam_experiment(rows: dict, algorithms: list[str]) -> dict:
    return {
        "protocol": "femam",
        "grid": [{"datasets": ["cifar100"], "partitions": ["femam_ml3.6.11"], "models": ["resnet9"], "algorithms": algorithms}],
        "published": {"paper": "femam", "table": "Table A", "dataset": "Tiny", "partition": "dir", "model": "ResNet-9",
                      "rows": rows},
    }


PUBLISHED_COLUMNS = ["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std", "notes"]


def test_the_default_against_itself_keeps_the_runs_own_note(tmp_path):
    """FeMAM's "+0.00" row (the default against itself, ``relative_to`` its own algorithm) with T = 3:
    seed 2's run ends at round 2, so it is skipped and said so, and the row also says that the
    difference is 0 by definition; the two notes are joined by "; ", each as written.  Seeds 0 and 1
    give 0 each: reproduced 0.0 from 2 seeds."""
    published = pd.DataFrame(
        [("femam", "Table A", "Tiny", "ResNet-9", "dir", "all", "FeMAM", "accuracy", "test", 60.0, 1.0, ""),
         ("femam", "Table 2", "Tiny", "ResNet-9", "dir", "all", "FeMAM", "accuracy_delta", "test", 0.0, None, "")],
        columns=PUBLISHED_COLUMNS,
    )
    rows = {"femam": [{"method": "FeMAM", "setting": "all", "rounds": 3},
                      {"method": "FeMAM", "setting": "all", "rounds": 3, "table": "Table 2", "relative_to": "femam"}]}
    runs = femam_cell_runs(tmp_path, "femam", [0.60, 0.62, 0.99], short=2)
    card = scorecard({"experiments": {"e": femam_experiment(rows, ["femam"])}}, runs, published).set_index("table")
    delta = card.loc["Table 2"]
    assert (delta["reproduced"], delta["seeds"]) == pytest.approx((0.0, 2))
    assert delta["note"] == "runs end at round 2 < T = 3: not comparable; the algorithm against itself: 0 by definition"
    assert card.loc["Table A", "note"] == "runs end at round 2 < T = 3: not comparable"


def markdown_cells(md: str, column: str) -> list[str]:
    """The cells of ``column`` in every table row of a scorecard's Markdown, stripped, in order."""
    cells = []
    for line in md.splitlines():
        if line.startswith("| method"):
            header = [cell.strip() for cell in line.strip("|").split("|")]
        elif line.startswith("|") and not line.startswith("|:"):
            cells.append([cell.strip() for cell in line.strip("|").split("|")][header.index(column)])
    return cells


def test_a_cell_printed_differently_in_three_tables_is_one_row_naming_both_others(tmp_path):
    """One cell printed three times with three numbers: Table A (the experiment's own, linked first)
    40.0 ± 2.0, Table B 44.0 ± 0.5, Table C 45.0 without a ±.  One row, under Table A, scored against
    40.0; beside it both other numbers in table order, "Table B: 44.00 ± 0.50; Table C: 45.00", their
    published rows "1;2", every table's notes ("; "-joined, the others' prefixed by their table), and
    the reproduction's own note (seed 2's run ends at round 2 < T = 3) followed by the remark naming
    Tables B and C.  Seeds 0 and 1 at 41 and 43 %: reproduced 42.0.  The Markdown's published cell is
    Table A's number, then " / " and the other two."""
    published = pd.DataFrame(
        [("femam", "Table A", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "accuracy", "test", 40.0, 2.0, "mean±std over 4 runs"),
         ("femam", "Table B", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "accuracy", "test", 44.0, 0.5, "FLAG: B differs"),
         ("femam", "Table C", "Tiny", "ResNet-9", "dir", "s", "FeSEM+", "accuracy", "test", 45.0, None, "FLAG: C differs")],
        columns=PUBLISHED_COLUMNS,
    )
    rows = {"fesem_plus": [{"method": "FeSEM+", "setting": "s", "rounds": 3},
                           {"method": "FeSEM+", "setting": "s", "rounds": 3, "table": "Table B"},
                           {"method": "FeSEM+", "setting": "s", "rounds": 3, "table": "Table C"}]}
    runs = femam_cell_runs(tmp_path, "fesem_plus", [0.41, 0.43, 0.99], short=2)
    card = scorecard({"experiments": {"e": femam_experiment(rows, ["fesem_plus"])}}, runs, published)
    assert len(card) == 1
    row = card.iloc[0]
    assert (row["table"], row["published"], row["reproduced"], row["seeds"]) == pytest.approx(("Table A", 40.0, 42.0, 2))
    assert row["also_published"] == "Table B: 44.00 ± 0.50; Table C: 45.00"
    assert row["also_published_row"] == "1;2"
    assert row["notes"] == "mean±std over 4 runs; Table B: FLAG: B differs; Table C: FLAG: C differs"
    assert row["note"] == ("runs end at round 2 < T = 3: not comparable; "
                           "the paper prints this cell differently in Table B, Table C: scored against Table A")
    assert markdown_cells(to_markdown(card), "published") == ["40.00 ± 2.00 / Table B: 44.00 ± 0.50; Table C: 45.00"]
