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
    difference +2.0, Table 1's number beside it; macro-F1, printed alike in both tables, stays two rows."""
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
    # coverage still counts both published numbers as planned and reproduced
    total = coverage(published, [card]).iloc[-1]
    assert (total["published"], total["planned"], total["reproduced"]) == (4, 4, 4)
