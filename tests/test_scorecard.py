"""The scorecard: published numbers next to the reproduction, computed by hand on made-up runs."""

import json

import pandas as pd
import pytest

from fedbench.results.scorecard import scorecard, to_markdown, write_scorecard

PUBLISHED = pd.DataFrame(
    [
        ("pfedmt", "Table 1", "Synthetic", "MLR", "2x25", "T=2", "pFedMT(GM)", "accuracy", "test", 50.0, 1.0),
        ("pfedmt", "Table 1", "Synthetic", "MLR", "2x25", "T=3", "pFedMT(GM)", "accuracy", "test", 60.0, 0.5),
        ("pfedmt", "Table 1", "Synthetic", "MLR", "2x25", "T=3", "pFedMT(PM)", "accuracy", "test", 90.0, 0.0),
        ("pfedmt", "Table 1", "Synthetic", "MLR", "2x25", "T=600", "pFedMT(PM)", "accuracy", "test", 95.0, 0.0),
        ("pfedmt", "Table 1", "Synthetic", "MLR", "2x25", "T=3", "FedAvg", "accuracy", "test", 40.0, 0.0),
    ],
    columns=["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std"],
)

EXPERIMENT = {
    "protocol": "pooled_max",
    "grid": [{"datasets": ["syn"], "partitions": ["teams"], "models": ["mlr"], "algorithms": ["pfedmt", "fedavg"]}],
    "published": {
        "paper": "pfedmt", "table": "Table 1", "dataset": "Synthetic", "partition": "2x25", "model": "MLR",
        "rows": {
            "pfedmt": [
                {"method": "pFedMT(GM)", "setting": "T=2", "scored": "global", "rounds": 2},
                {"method": "pFedMT(GM)", "setting": "T=3", "scored": "global", "rounds": 3},
                {"method": "pFedMT(PM)", "setting": "T=3", "rounds": 3},
                {"method": "pFedMT(PM)", "setting": "T=600", "rounds": 600},
            ],
            "fedavg": {"method": "FedAvg", "setting": "T=3", "scored": "global"},
        },
    },
}


def fake_run(root, algorithm, seed, personal, global_):
    cell = {"experiment": "e", "dataset": "syn", "partition": "teams", "model": "mlr", "algorithm": algorithm, "seed": seed}
    run = root / algorithm / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "pooled_max"}))
    pd.DataFrame({"round": [1, 2, 3], "acc_pooled": personal, "global_acc": global_}).to_csv(run / "history.csv", index=False)
    return run


def test_scorecard_by_hand(tmp_path):
    runs = [
        fake_run(tmp_path, "pfedmt", 0, [0.80, 0.85, 0.90], [0.40, 0.52, 0.61]),
        fake_run(tmp_path, "pfedmt", 1, [0.70, 0.95, 0.92], [0.50, 0.48, 0.59]),
    ]  # fedavg not run here
    card = scorecard({"experiments": {"e": EXPERIMENT}}, runs, PUBLISHED).set_index(["method", "setting"])
    gm2 = card.loc[("pFedMT(GM)", "T=2")]  # max of global_acc over rounds 1-2: 52 and 50 -> 51 ± 1
    assert (gm2["reproduced"], gm2["reproduced_std"], gm2["difference"], gm2["seeds"]) == pytest.approx((51.0, 1.0, 1.0, 2))
    gm3 = card.loc[("pFedMT(GM)", "T=3")]  # 61 and 59 -> 60 ± 1
    assert (gm3["reproduced"], gm3["difference"]) == pytest.approx((60.0, 0.0))
    pm3 = card.loc[("pFedMT(PM)", "T=3")]  # 90 and 95 -> 92.5 ± 2.5
    assert (pm3["reproduced"], pm3["reproduced_std"], pm3["difference"]) == pytest.approx((92.5, 2.5, 2.5))
    pm600 = card.loc[("pFedMT(PM)", "T=600")]  # the runs stop at round 3: no number, and why
    assert pd.isna(pm600["reproduced"]) and "round 3 < T = 600" in pm600["note"]
    fedavg = card.loc[("FedAvg", "T=3")]
    assert fedavg["seeds"] == 0 and pd.isna(fedavg["reproduced"]) and fedavg["published"] == 40.0

    md = to_markdown(card.reset_index())
    assert "## pfedmt Table 1: Synthetic, MLR" in md and "| 92.50 ± 2.50 |" in md and "+2.50" in md
    write_scorecard({"experiments": {"e": EXPERIMENT}}, runs, PUBLISHED, tmp_path / "s.csv", tmp_path / "s.md")
    assert len(pd.read_csv(tmp_path / "s.csv")) == 5


def test_ambiguous_or_missing_links_are_errors(tmp_path):
    broken = json.loads(json.dumps(EXPERIMENT))
    broken["published"]["rows"]["fedavg"] = {"method": "FedAvg", "setting": "T=9"}
    with pytest.raises(ValueError, match="FedAvg.*matches 0 published"):
        scorecard({"experiments": {"e": broken}}, [], PUBLISHED)


def test_every_pfedmt_link_resolves():
    """config/experiments/pfedmt.yaml links all 48 Table 1 numbers, each exactly once per run
    (pFedMe's PM rows twice: theta, the paper's, and w_{i,R}, the code's; 4 tables x 2 rows)."""
    from pathlib import Path

    import yaml

    from fedbench.results.published import load_published

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/experiments/pfedmt.yaml").read_text())
    card = scorecard(config, [], load_published())
    assert len(card) == 48 + 8 and card["published"].notna().all()
    published = load_published()
    assert len(published[(published["paper"] == "pfedmt") & (published["metric"] == "accuracy")]) == 48
    assert not card.duplicated(["dataset", "model", "method", "setting", "algorithm"]).any()
    twice = card[card.duplicated(["dataset", "model", "method", "setting"], keep=False)]
    assert len(twice) == 16 and set(twice["method"]) == {"pFedMe(PM)"}
    assert "pFedMe(PM) [pfedme_local]" in to_markdown(card)


def test_a_difference_link_and_a_second_table_by_hand(tmp_path):
    """``relative_to``: the published accuracy_delta against (variant - base) seed by seed;
    ``table``: the same cell linked to a second table."""
    published = pd.DataFrame(
        [
            ("femam", "Table C.4", "CIFAR-100", "ResNet-9", "ml", "all", "FeMAM", "accuracy", "test", 60.0, 1.0),
            ("femam", "Table 1", "CIFAR-100", "ResNet-9", "ml", "all", "FeMAM", "accuracy", "test", 61.0, 1.0),
            ("femam", "Table 2", "CIFAR-100", "ResNet-9", "ml", "no 5", "FeMAM", "accuracy_delta", "test", -2.0, None),
        ],
        columns=["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std"],
    )
    experiment = {
        "protocol": "pooled_max",
        "grid": [{"datasets": ["syn"], "partitions": ["teams"], "models": ["mlr"], "algorithms": ["femam", "femam_no5"]}],
        "published": {"paper": "femam", "table": "Table C.4", "dataset": "CIFAR-100", "partition": "ml", "model": "ResNet-9",
                      "rows": {"femam": [{"method": "FeMAM", "setting": "all"}, {"method": "FeMAM", "setting": "all", "table": "Table 1"}],
                               "femam_no5": {"method": "FeMAM", "setting": "no 5", "table": "Table 2", "relative_to": "femam"}}},
    }
    runs = [
        fake_run(tmp_path, "femam", 0, [0.50, 0.60, 0.55], [0, 0, 0]),     # best 60
        fake_run(tmp_path, "femam", 1, [0.50, 0.62, 0.55], [0, 0, 0]),     # best 62
        fake_run(tmp_path, "femam_no5", 0, [0.50, 0.57, 0.55], [0, 0, 0]),  # 57 - 60 = -3
        fake_run(tmp_path, "femam_no5", 1, [0.61, 0.50, 0.55], [0, 0, 0]),  # 61 - 62 = -1
    ]
    card = scorecard({"experiments": {"e": experiment}}, runs, published).set_index(["table", "setting"])
    delta = card.loc[("Table 2", "no 5")]
    assert (delta["reproduced"], delta["reproduced_std"], delta["difference"]) == pytest.approx((-2.0, 1.0, 0.0))
    assert card.loc[("Table 1", "all"), "reproduced"] == pytest.approx(61.0)
    assert card.loc[("Table C.4", "all"), "difference"] == pytest.approx(1.0)
