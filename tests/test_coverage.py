"""Coverage counts on a tiny published table and a tiny results tree."""

import json

import pandas as pd

from fedbench.results.coverage import coverage, to_rst, total_line, write_coverage
from fedbench.results.scorecard import scorecard

PUBLISHED = pd.DataFrame(
    [
        ("p", "Table 1", "D", "", "s", "A", "M1", "accuracy", "test", 80.0, 1.0, "std_error"),
        ("p", "Table 1", "D", "", "s", "A", "M2", "accuracy", "test", 60.0, 1.0, "std_error"),
        ("p", "Table 1", "D", "", "s", "A", "M3", "accuracy", "test", 70.0, 1.0, "std_error"),
        ("p", "Table 10", "D", "", "s", "A", "M1", "accuracy", "test", 80.0, 1.0, "std_error"),
        ("p", "Table 2", "D", "", "s", "A", "M1", "accuracy", "test", 99.0, 1.0, "std_error"),
        ("q", "Table C.2", "D", "", "s", "A", "M1", "accuracy", "test", 1.0, 1.0, "mean±std"),
    ],
    columns=["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std", "notes"],
)

CONFIG = {"experiments": {"e": {
    "protocol": "mean_client_last",
    "grid": [{"datasets": ["d"], "partitions": ["s"], "models": ["mlp"], "algorithms": ["m1", "m1_code", "m2", "m3"]}],
    "published": {"paper": "p", "table": "Table 1", "dataset": "D", "partition": "s", "rows": {
        "m1": [{"method": "M1", "setting": "A"}, {"method": "M1", "setting": "A", "table": "Table 10"}],
        "m1_code": {"method": "M1", "setting": "A"},  # the same published number, a second reading
        "m2": {"method": "M2", "setting": "A"},
        "m3": {"method": "M3", "setting": "A"},
    }},
}}}


def run(root, algorithm, seed, accuracy):
    cell = {"experiment": "e", "dataset": "d", "partition": "s", "model": "mlp", "algorithm": algorithm, "seed": seed}
    path = root / algorithm / f"seed{seed}"
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "mean_client_last"}))
    pd.DataFrame({"round": [1], "acc_mean": [accuracy], "acc_var": [0.0], "f1_mean": [0.0], "loss_mean": [1.0]}).to_csv(
        path / "history.csv", index=False)
    return path


def test_coverage_counts_by_hand(tmp_path):
    runs = [
        run(tmp_path, "m1", 0, 0.79), run(tmp_path, "m1", 1, 0.81),            # 80 ± 1 (SE): agrees with 80
        run(tmp_path, "m1_code", 0, 0.70), run(tmp_path, "m1_code", 1, 0.72),  # 71: misses 80 (one number, counted once)
        run(tmp_path, "m2", 0, 0.70), run(tmp_path, "m2", 1, 0.71),            # 70.5 vs 60: misses
    ]  # m3 not run
    table = coverage(PUBLISHED, [scorecard(CONFIG, runs, PUBLISHED)]).set_index(["paper", "table"])
    assert list(table.index) == [("p", "Table 1"), ("p", "Table 2"), ("p", "Table 10"), ("q", "Table C.2"), ("total", "")]
    assert table.loc[("p", "Table 1")].tolist() == [3, 3, 2, 1]
    assert table.loc[("p", "Table 10")].tolist() == [1, 1, 1, 1]
    assert table.loc[("p", "Table 2")].tolist() == [1, 0, 0, 0]
    assert table.loc[("q", "Table C.2")].tolist() == [1, 0, 0, 0]
    assert total_line(table.reset_index()) == "6 published · 4 planned · 3 reproduced · 2 agree"


def test_planned_coverage_needs_no_run_and_is_written(tmp_path):
    table = write_coverage(PUBLISHED, [scorecard(CONFIG, [], PUBLISHED)], tmp_path / "c.csv", tmp_path / "c.md", tmp_path / "c.rst")
    assert total_line(table) == "6 published · 4 planned · 0 reproduced · 0 agree"
    assert pd.read_csv(tmp_path / "c.csv").shape == (5, 6)
    assert (tmp_path / "c.md").read_text().startswith("**6 published · 4 planned · 0 reproduced · 0 agree**")
    rst = (tmp_path / "c.rst").read_text()
    assert "**6 published · 4 planned · 0 reproduced · 0 agree**" in rst and ".. list-table::" in rst
    assert to_rst(table).count("   * - ") == 6  # header + 5 rows
