"""The scorecard: published numbers next to the reproduction, computed by hand on made-up runs."""

import json
import re

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
    assert (gm2["reproduced"], gm2["reproduced_spread"], gm2["difference"], gm2["seeds"]) == pytest.approx((51.0, 1.0, 1.0, 2))
    gm3 = card.loc[("pFedMT(GM)", "T=3")]  # 61 and 59 -> 60 ± 1
    assert (gm3["reproduced"], gm3["difference"]) == pytest.approx((60.0, 0.0))
    pm3 = card.loc[("pFedMT(PM)", "T=3")]  # 90 and 95 -> 92.5 ± 2.5
    assert (pm3["reproduced"], pm3["reproduced_spread"], pm3["difference"]) == pytest.approx((92.5, 2.5, 2.5))
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
            ("femam", "Table 1", "CIFAR-100", "ResNet-9", "ml", "all", "FeMAM", "accuracy", "test", 60.0, 1.0),
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
    assert (delta["reproduced"], delta["reproduced_spread"], delta["difference"]) == pytest.approx((-2.0, 1.0, 0.0))
    assert card.loc[("Table 1", "all"), "reproduced"] == pytest.approx(61.0)
    assert card.loc[("Table C.4", "all"), "difference"] == pytest.approx(1.0)


def flt_run(root, experiment, dataset, partition, model, algorithm, seed, columns):
    """A made-up FLT-protocol run: ``columns`` of history.csv (fractions, as the pipeline writes)."""
    cell = {"experiment": experiment, "dataset": dataset, "partition": partition, "model": model, "algorithm": algorithm, "seed": seed}
    run = root / experiment / dataset / partition / model / algorithm / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "mean_client_last"}))
    pd.DataFrame({"round": [1, 2], **columns}).to_csv(run / "history.csv", index=False)
    return run


FLT_PUBLISHED = pd.DataFrame(
    [
        ("flt", "Table 1", "MNIST", "", "s1", "E=1", "FedAvg", "accuracy", "test", 80.0, 0.5, "std_error"),
        ("flt", "Table 1", "MNIST", "", "s1", "E=1", "FedAvg", "variance", "test", 40.0, None, "variance of accuracy across clients (fairness)"),
        ("flt", "Table 7", "MNIST", "", "s1", "E=1", "FedAvg", "accuracy", "train", 85.0, 0.2, "std_error; note: made up"),
        ("flt", "Table 7", "MNIST", "", "s1", "E=1", "FedAvg", "variance", "train", 10.0, None, "FLAG: made up"),
        ("flt", "Table 7", "MNIST", "", "s1", "E=1", "FedAvg", "accuracy", "test", 80.0, 0.5, "std_error"),
        ("flt", "Table 7", "MNIST", "", "s1", "E=1", "FedAvg", "variance", "test", 40.0, None, "variance"),
    ],
    columns=["paper", "table", "dataset", "model", "partition", "setting", "method", "metric", "split", "value", "std", "notes"],
)


def flt_experiment(table_rows: dict) -> dict:
    return {
        "protocol": "mean_client_last",
        "grid": [{"datasets": ["mnist"], "partitions": ["s1"], "models": ["mlp"], "algorithms": list(table_rows)}],
        "published": {"paper": "flt", "table": "Table 1", "dataset": "MNIST", "partition": "s1", "rows": table_rows},
    }


def test_every_metric_from_the_same_runs_in_the_papers_units(tmp_path):
    """Test and train accuracy (%), variance across clients (%², np.var of per-client accuracies in
    %), the paper's standard error over seeds, the notes kept; last round (mean_client_last)."""
    rows = {"fedavg": [{"method": "FedAvg", "setting": "E=1"}, {"method": "FedAvg", "setting": "E=1", "table": "Table 7"}]}
    runs = [
        flt_run(tmp_path, "e", "mnist", "s1", "mlp", "fedavg", seed, {
            "acc_mean": [0.1, acc], "acc_var": [0.5, var], "train_acc_mean": [0.1, train], "train_acc_var": [0.5, train_var],
            "f1_mean": [0.1, 0.1], "loss_mean": [1.0, 1.0]})
        for seed, (acc, var, train, train_var) in enumerate([(0.79, 0.0036, 0.84, 0.0009), (0.81, 0.0044, 0.86, 0.0011)])
    ]
    card = scorecard({"experiments": {"e": flt_experiment(rows)}}, runs, FLT_PUBLISHED)
    assert len(card) == 6 and sorted(card["published_row"]) == list(range(6))
    card = card.set_index(["table", "metric", "split"])
    test = card.loc[("Table 1", "accuracy", "test")]
    # 79 and 81 %: mean 80, SE = sd(ddof=1)/sqrt(2) = sqrt(2)/sqrt(2) = 1
    assert (test["reproduced"], test["reproduced_spread"], test["statistic"]) == pytest.approx((80.0, 1.0, "std_error"))
    variance = card.loc[("Table 1", "variance", "test")]  # 0.0036 and 0.0044 fraction² = 36 and 44 %²
    assert (variance["reproduced"], variance["difference"]) == pytest.approx((40.0, 0.0))
    assert variance["statistic"] == "std_error"  # the table's statistic (FLT prints no ± for variances)
    train = card.loc[("Table 7", "accuracy", "train")]  # 84 and 86
    assert (train["reproduced"], train["difference"], train["notes"]) == pytest.approx((85.0, 0.0, "std_error; note: made up"))
    train_var = card.loc[("Table 7", "variance", "train")]  # 9 and 11 %²
    assert train_var["reproduced"] == pytest.approx(10.0) and train_var["notes"] == "FLAG: made up"
    md = to_markdown(card.reset_index())
    assert "train var. %²" in md and "FLAG: made up" in md and "± SE" in md


def test_pooled_max_scores_the_global_model_at_its_best_round():
    """pFedMe's average_data: the max over rounds of each run (not the last round), then mean and
    np.std (ddof=0) over runs."""
    from fedbench.protocols import PROTOCOLS
    from fedbench.results.published import Link
    from fedbench.results.scorecard import reported_number

    history = pd.DataFrame({"round": [1, 2, 3, 4], "acc_pooled": [0.5, 0.6, 0.9, 0.7], "global_acc": [0.3, 0.72, 0.6, 0.65]})
    protocol = PROTOCOLS["pooled_max"]
    assert reported_number(history, protocol, Link("a", "m", "s", scored="global"), "accuracy", "test") == pytest.approx(72.0)
    assert reported_number(history, protocol, Link("a", "m", "s"), "accuracy", "test") == pytest.approx(90.0)
    # within the first T = 1 round: round 1 only
    assert reported_number(history, protocol, Link("a", "m", "s", scored="global", rounds=1), "accuracy", "test") == pytest.approx(30.0)


def test_runs_are_never_pooled_across_cells(tmp_path):
    """Runs of another experiment, model or algorithm entry do not enter a row; a grid that puts two
    partitions under one published row gives one row per partition."""
    rows = {"fedavg": {"method": "FedAvg", "setting": "E=1"}, "fedavg2": {"method": "FedAvg", "setting": "E=1"}}
    hist = lambda acc: {"acc_mean": [acc, acc], "acc_var": [0.0, 0.0], "f1_mean": [0, 0], "loss_mean": [1, 1]}  # noqa: E731
    runs = [
        flt_run(tmp_path, "e", "mnist", "s1", "mlp", "fedavg", 0, hist(0.80)),
        flt_run(tmp_path, "e", "mnist", "s1", "mlp", "fedavg2", 0, hist(0.50)),   # another algorithm entry
        flt_run(tmp_path, "other", "mnist", "s1", "mlp", "fedavg", 1, hist(0.10)),  # another experiment
        flt_run(tmp_path, "e", "mnist", "s1", "cnn", "fedavg", 2, hist(0.20)),    # a model not in the grid
    ]
    card = scorecard({"experiments": {"e": flt_experiment(rows)}}, runs, FLT_PUBLISHED.iloc[:2])
    accuracy = card[card["metric"] == "accuracy"].set_index("algorithm")
    assert accuracy.loc["fedavg", "reproduced"] == pytest.approx(80.0) and accuracy.loc["fedavg", "seeds"] == 1
    assert accuracy.loc["fedavg2", "reproduced"] == pytest.approx(50.0) and accuracy.loc["fedavg2", "seeds"] == 1
    # one published row, two partitions in the grid: two rows, each from its own cell's runs
    runs.append(flt_run(tmp_path, "e", "mnist", "s2", "mlp", "fedavg", 0, hist(0.30)))
    two = flt_experiment({"fedavg": {"method": "FedAvg", "setting": "E=1"}})
    two["grid"][0]["partitions"] = ["s1", "s2"]
    card = scorecard({"experiments": {"e": two}}, runs, FLT_PUBLISHED.iloc[:2])
    accuracy = card[card["metric"] == "accuracy"].set_index("config_partition")
    assert accuracy.loc["s1", "reproduced"] == pytest.approx(80.0) and accuracy.loc["s2", "reproduced"] == pytest.approx(30.0)
    assert (accuracy["seeds"] == 1).all()
    assert "FedAvg [mnist/s2]" in to_markdown(card)


def test_every_flt_number_including_the_appendix_is_linked():
    """FLT's 340 published numbers (Tables 1-5 and 7-10: test and train accuracy, variance), every
    one linked to a planned cell of config/experiments/flt.yaml; Tables 7-10 use Tables 1-4's runs."""
    from pathlib import Path

    import yaml

    from fedbench.results.published import load_published

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/experiments/flt.yaml").read_text())
    published = load_published()
    flt = published[published["paper"] == "flt"]
    card = scorecard(config, [], published)
    also = {int(r) for r in card["also_published_row"] if r}  # three cells Tables 2/3 and 8/9 print differently
    assert set(card["published_row"]) | also == set(flt.index) and len(also) == 3
    appendix = card[card["table"].isin(["Table 7", "Table 8", "Table 9", "Table 10"])]
    assert len(set(appendix["published_row"]) | also) == len(flt[flt["table"].isin(["Table 7", "Table 8", "Table 9", "Table 10"])])
    assert set(appendix["split"]) == {"train", "test"} and set(appendix["metric"]) == {"accuracy", "variance"}
    assert set(appendix["experiment"]) <= {name for name in config["experiments"] if name.startswith(("table1", "table2", "table3", "table4"))}
    assert (card.loc[card["table"] != "Table 5", "statistic"] == "std_error").all()
    assert (card.loc[card["table"] == "Table 5", "statistic"] == "std").all()


def test_diverged_runs_are_shown_as_diverged_not_as_numbers(tmp_path):
    ok = fake_run(tmp_path, "pfedmt", 0, [0.80, 0.85, 0.90], [0.40, 0.52, 0.61])
    bad = fake_run(tmp_path, "pfedmt", 1, [0.70, float("nan"), float("nan")], [0.50, float("nan"), float("nan")])
    metrics = json.loads((bad / "metrics.json").read_text())
    (bad / "metrics.json").write_text(json.dumps({**metrics, "status": "diverged", "diverged_round": 2}))
    dead = fake_run(tmp_path, "fedavg", 0, [0.5, float("nan"), float("nan")], [0.5, float("nan"), float("nan")])
    metrics = json.loads((dead / "metrics.json").read_text())
    (dead / "metrics.json").write_text(json.dumps({**metrics, "status": "diverged", "diverged_round": 2}))
    card = scorecard({"experiments": {"e": EXPERIMENT}}, [ok, bad, dead], PUBLISHED).set_index(["method", "setting"])
    pm3 = card.loc[("pFedMT(PM)", "T=3")]  # seed 0 only: max 90 %; seed 1 counted as diverged
    assert (pm3["reproduced"], pm3["seeds"], pm3["diverged"]) == pytest.approx((90.0, 1, 1))
    fedavg = card.loc[("FedAvg", "T=3")]
    assert fedavg["seeds"] == 0 and fedavg["diverged"] == 1 and pd.isna(fedavg["reproduced"])
    md = to_markdown(card.reset_index())
    assert re.search(r"\| 90\.00 ± 0\.00 \(1/2 diverged\)\s+\|", md) and re.search(r"\| diverged\s+\|", md)
