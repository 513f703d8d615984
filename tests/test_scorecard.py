"""The scorecard: published numbers next to the reproduction, computed by hand on made-up runs."""

import json
import math
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
    from fedbench.registry.protocols import PROTOCOLS
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


# --- survivors of the results group's mutation run (docs/mutation.md, docs/mutation/) ---------------


def history_run(root, name, algorithm, seed, history, experiment="e", protocol="pooled_max"):
    """A made-up run directory of cell (experiment, syn, teams, mlr, algorithm, seed) with ``history``."""
    cell = {"experiment": experiment, "dataset": "syn", "partition": "teams", "model": "mlr", "algorithm": algorithm, "seed": seed}
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": protocol}))
    pd.DataFrame(history).to_csv(run / "history.csv", index=False)
    return run


def test_a_config_without_experiments_or_grid_gives_an_empty_card_with_every_column(tmp_path):
    """No experiment, or an experiment with links but no grid (no cell), scores nothing: an empty card
    that still has the scorecard's columns in their order (the CSV header), and its Markdown is the
    legend alone; written as CSV without the frame's index column."""
    from fedbench.results.scorecard import COLUMNS

    no_grid = {key: value for key, value in EXPERIMENT.items() if key != "grid"}
    for config in ({}, {"experiments": {"e": no_grid}}):
        card = scorecard(config, [], PUBLISHED)
        assert card.empty and list(card.columns) == COLUMNS
        assert to_markdown(card).endswith("Empty: not run here.\n")
    write_scorecard({"experiments": {"e": EXPERIMENT}}, [], PUBLISHED, tmp_path / "s.csv", tmp_path / "s.md")
    assert list(pd.read_csv(tmp_path / "s.csv").columns) == COLUMNS


def test_only_experiments_keeps_the_named_experiments_in_any_position():
    """``only_experiments`` restricts the card to the named experiments, wherever they stand in the
    config: "skip" (first) is left out and "keep" (second) scores EXPERIMENT's five published rows."""
    config = {"experiments": {"skip": EXPERIMENT, "keep": EXPERIMENT}, "only_experiments": ["keep"]}
    card = scorecard(config, [], PUBLISHED)
    assert card["experiment"].tolist() == ["keep"] * 5
    assert len(scorecard({"experiments": {"skip": EXPERIMENT, "keep": EXPERIMENT}}, [], PUBLISHED)) == 10


def test_a_link_of_an_algorithm_outside_the_cell_does_not_stop_the_later_links():
    """A cell scores the links of the algorithms its grid trains: with only fedavg in the grid, the
    pfedmt links (listed first) are skipped and FedAvg's link is still scored."""
    experiment = {**EXPERIMENT, "grid": [{**EXPERIMENT["grid"][0], "algorithms": ["fedavg"]}]}
    card = scorecard({"experiments": {"e": experiment}}, [], PUBLISHED)
    assert card[["method", "setting"]].values.tolist() == [["FedAvg", "T=3"]]


def test_each_row_records_its_link_protocol_and_published_statistic():
    """The columns that say what a row scores: the experiment's protocol ("mean_client_last" where the
    experiment names none), the config model, the link's scored model and horizon, and the published
    "±"; a published table without a ``notes`` column gives empty notes; with no runs the row has no
    reproduction note."""
    card = scorecard({"experiments": {"e": EXPERIMENT}}, [], PUBLISHED).set_index(["method", "setting"])
    gm2 = card.loc[("pFedMT(GM)", "T=2")]
    assert (gm2["protocol"], gm2["config_model"], gm2["scored"], gm2["rounds"], gm2["published_std"]) == (
        "pooled_max", "mlr", "global", 2, 1.0)
    assert card.loc[("pFedMT(PM)", "T=3"), "scored"] == "personal"
    assert (card["notes"] == "").all() and (card["note"] == "").all()
    default = {key: value for key, value in EXPERIMENT.items() if key != "protocol"}
    assert (scorecard({"experiments": {"e": default}}, [], PUBLISHED)["protocol"] == "mean_client_last").all()


def test_a_run_shorter_than_the_horizon_is_skipped_and_the_next_seed_still_scored(tmp_path):
    """A run that ends before the link's T is not comparable: it is skipped with a note, and the
    next seed's run is still read.  pFedMT(GM) at T = 3 (pooled_max, global model): seed 0 stops at
    round 2, seed 1 reaches round 3 with global accuracies 0.4, 0.7, 0.6: best 70 %."""
    short = history_run(tmp_path, "short", "pfedmt", 0, {"round": [1, 2], "acc_pooled": [0.5, 0.5], "global_acc": [0.5, 0.5]})
    full = history_run(tmp_path, "full", "pfedmt", 1, {"round": [1, 2, 3], "acc_pooled": [0.5] * 3, "global_acc": [0.4, 0.7, 0.6]})
    card = scorecard({"experiments": {"e": EXPERIMENT}}, [short, full], PUBLISHED).set_index(["method", "setting"])
    gm3 = card.loc[("pFedMT(GM)", "T=3")]
    assert (gm3["seeds"], gm3["reproduced"]) == pytest.approx((1, 70.0))
    assert gm3["note"] == "runs end at round 2 < T = 3: not comparable"


def test_cfl_that_never_split_is_noted(tmp_path):
    """A CFL run whose history counts no split (``cfl_splits`` 0 throughout) is FedAvg, and its row says
    so exactly (CFL's ``history_note``); one split (``cfl_splits`` reaching 1) and a history without the
    column give no note, and so does the same history under another algorithm, or under an entry the
    config does not define.  Linked to FedAvg T = 3 (global model): best global accuracy 60 % in every run."""
    fedavg_row = EXPERIMENT["published"]["rows"]["fedavg"]
    grid = [{**EXPERIMENT["grid"][0], "algorithms": ["cfl", "fedavg", "undefined"]}]
    base = {"round": [1, 2, 3], "acc_pooled": [0.5] * 3, "global_acc": [0.5, 0.6, 0.55]}
    cases = [("cfl", [0, 0, 0], "CFL never split (= FedAvg)"), ("cfl", [0, 1, 1], ""), ("cfl", None, ""),
             ("fedavg", [0, 0, 0], ""), ("undefined", [0, 0, 0], "")]
    for algorithm, splits, note in cases:
        experiment = {**EXPERIMENT, "grid": grid, "published": {**EXPERIMENT["published"], "rows": {algorithm: fedavg_row}}}
        config = {"experiments": {"e": experiment}, "algorithms": {"cfl": {"method": "cfl"}, "fedavg": {"method": "fedavg"}}}
        history = base if splits is None else {**base, "cfl_splits": splits}
        run = history_run(tmp_path / f"{algorithm}{splits}", "run", algorithm, 0, history)
        card = scorecard(config, [run], PUBLISHED)
        assert card["note"].tolist() == [note] and card["reproduced"].tolist() == pytest.approx([60.0]), algorithm


def test_history_note_is_a_class_hook_checked_at_registration():
    """The scorecard calls ``history_note`` on the algorithm's class: the base class gives no note, CFL
    its own, and a builder whose class defines it as an instance method is refused when registered."""
    from dataclasses import dataclass

    from fedbench.algorithms.base import Algorithm, check_algorithm_builder
    from fedbench.algorithms.cfl import CFL

    never = pd.DataFrame({"round": [1, 2], "cfl_splits": [0, 0]})
    assert Algorithm.history_note(never) == "" and CFL.history_note(never) == "CFL never split (= FedAvg)"

    @dataclass(frozen=True)
    class OnInstance(CFL):
        def history_note(self, history):
            return "bound to the instance"

    def build() -> OnInstance:
        return OnInstance()

    with pytest.raises(TypeError, match="history_note is called on the class; make it a staticmethod or classmethod"):
        check_algorithm_builder("on_instance", build)


def test_the_global_models_train_accuracy_is_not_recorded_so_not_scored(tmp_path):
    """A link scoring the global model: its test accuracy is the history's ``global_acc``, but its train
    accuracy is not recorded (``train_acc_mean`` is the personal models'), so the train row has no
    number, no seed and says why; FLT's mean_client_last protocol, last round: global 0.75 -> 75 %."""
    rows = {"fedavg": {"method": "FedAvg", "setting": "E=1", "scored": "global", "table": "Table 7"}}
    columns = {"acc_mean": [0.1, 0.8], "global_acc": [0.2, 0.75], "train_acc_mean": [0.3, 0.9], "acc_var": [0.0, 0.0]}
    run = flt_run(tmp_path, "e", "mnist", "s1", "mlp", "fedavg", 0, columns)
    published = FLT_PUBLISHED.iloc[[2, 4]]  # Table 7: train and test accuracy of FedAvg
    card = scorecard({"experiments": {"e": flt_experiment(rows)}}, [run], published).set_index("split")
    assert card.loc["test", "reproduced"] == pytest.approx(75.0) and card.loc["test", "seeds"] == 1
    train = card.loc["train"]
    assert pd.isna(train["reproduced"]) and train["seeds"] == 0
    assert train["note"] == "the runs do not record the train accuracy of the global model"


def test_the_published_plus_minus_and_the_tables_statistic_enter_the_flag(tmp_path):
    """``combined_se`` and ``z`` use the published row's "±", its table's statistic and its notes
    (agreement module doc).  Seeds 0 and 1 of pFedMT(PM) T = 3 (pooled_max) peak at 51 % and 53 %: mean
    52, u_r = sd(ddof=1)/sqrt(2) = 1.  Published 50 ± 2 in two tables: Table A, "mean±std over 4 runs"
    (u_p = 2/sqrt(4) = 1: u = sqrt(2), z = 2/sqrt(2) = sqrt(2)); Table B, a standard-error table whose
    notes also say "over 4 runs" (u_p = 2 as printed: u = sqrt(5), z = 2/sqrt(5))."""
    published = pd.DataFrame(
        [("pfedmt", "Table A", "Synthetic", "MLR", "2x25", "T=3", "pFedMT(PM)", "accuracy", "test", 50.0, 2.0, "mean±std over 4 runs"),
         ("pfedmt", "Table B", "Synthetic", "MLR", "2x25", "T=3", "pFedMT(PM)", "accuracy", "test", 50.0, 2.0, "std_error over 4 runs")],
        columns=list(FLT_PUBLISHED.columns),
    )
    rows = {"pfedmt": [{"method": "pFedMT(PM)", "setting": "T=3"}, {"method": "pFedMT(PM)", "setting": "T=3", "table": "Table B"}]}
    experiment = {**EXPERIMENT, "published": {**EXPERIMENT["published"], "table": "Table A", "rows": rows}}
    runs = [history_run(tmp_path, f"s{seed}", "pfedmt", seed, {"round": [1, 2, 3], "acc_pooled": [0.4, best, 0.45], "global_acc": [0.0] * 3})
            for seed, best in [(0, 0.51), (1, 0.53)]]
    card = scorecard({"experiments": {"e": experiment}}, runs, published).set_index("table")
    assert card.loc["Table A", "statistic"] == "std" and card.loc["Table B", "statistic"] == "std_error"
    assert (card.loc["Table A", "combined_se"], card.loc["Table A", "z"]) == pytest.approx((math.sqrt(2), math.sqrt(2)))
    assert (card.loc["Table B", "combined_se"], card.loc["Table B", "z"]) == pytest.approx((math.sqrt(5), 2 / math.sqrt(5)))


NAN = float("nan")
CARD_COLUMNS = ["paper", "table", "dataset", "model", "method", "setting", "metric", "split", "statistic", "published",
                "published_std", "also_published", "reproduced", "reproduced_spread", "seeds", "diverged", "difference", "z",
                "agreement", "algorithm", "config_dataset", "config_partition", "notes", "note"]


def test_markdown_of_a_hand_made_card_exactly():
    """The user-facing table, written out in full: the legend; one section per paper table and dataset
    (", model" only where the paper names one), in the card's order (pz before pa, not sorted); the
    columns method, setting, metric (split + label; an unknown metric by its own name), ±, published
    (2 decimals, "± std" only where printed; another table's number after " / "; nothing where the
    paper prints no number), reproduced ("diverged" where every run diverged, the count where some
    did, empty where nothing ran), difference (+.2f) and z (+.1f), empty where undefined, agree, seeds,
    notes (the paper's and ours joined by "; "); no index column.  Several cells scoring one published
    number are told apart by the algorithm and/or dataset/partition that differ ("FeMAM [femam,
    cifar/a]"); a method scored once has no tag."""
    card = pd.DataFrame([
        ("pz", "Table 9", "Zeta", "", "FedAvg", "E=1", "accuracy", "test", "std_error", 80.0, 0.5, "Table 3: 81.00 ± 0.40",
         79.0, 1.0, 2, 0, -1.0, -0.894, "agree", "fedavg", "mnist", "s1", "std_error", ""),
        ("pz", "Table 9", "Zeta", "", "FedAvg", "E=1", "variance", "train", "std_error", 40.0, NAN, "",
         NAN, NAN, 0, 0, NAN, NAN, "", "fedavg", "mnist", "s1", "FLAG: made up", "the runs do not record it"),
        ("pz", "Table 9", "Zeta", "", "FedProx", "mu=1", "loss", "test", "std", NAN, NAN, "Table 4: 1.25",
         1.5, 0.0, 1, 2, NAN, NAN, "", "fedprox", "mnist", "s1", "", ""),
        ("pz", "Table 9", "Zeta", "", "FedProx", "mu=2", "macro_f1", "test", "std", 60.0, 2.0, "",
         NAN, NAN, 0, 3, NAN, NAN, "", "fedprox2", "mnist", "s1", "a", "b"),
        ("pa", "Table 1", "Alpha", "CNN", "FeMAM", "all", "accuracy", "test", "std", 60.0, 1.0, "",
         62.0, 1.0, 4, 0, 2.0, 1.414, "agree", "femam", "cifar", "a", "", ""),
        ("pa", "Table 1", "Alpha", "CNN", "FeMAM", "all", "accuracy", "test", "std", 60.0, 1.0, "",
         65.0, 0.5, 4, 0, 5.0, 4.472, "miss", "femam_b", "cifar", "a", "", ""),
        ("pa", "Table 1", "Alpha", "CNN", "FeMAM", "all", "accuracy", "test", "std", 60.0, 1.0, "",
         59.5, 0.0, 4, 0, -0.5, -0.5, "agree", "femam", "cifar", "b", "", ""),
        ("pa", "Table 1", "Alpha", "CNN", "FedAvg", "all", "accuracy_delta", "test", "std", -2.0, NAN, "",
         -1.0, 0.5, 4, 0, 1.0, 2.0, "agree", "fedavg", "cifar", "a", "", ""),
    ], columns=CARD_COLUMNS)
    expected = "\n".join([
        "# Scorecard: published vs reproduced",
        "",
        "Published: as printed, ± the paper's statistic (column ±: SE = standard error, SD = standard",
        "deviation).  Reproduced: mean over seeds under the experiment's protocol, ± the same statistic",
        "(SE: sd(ddof=1)/√n over seeds; SD: np.std, ddof=0).  Accuracy and macro-F1 in %, variance across",
        "clients in %².  difference = reproduced − published; z = difference / combined standard error;",
        "agree: |z| ≤ 2 (docs: docs/user-guide.md, section Scorecard).  Empty: not run here.",
        "",
        "## pz Table 9: Zeta",
        "",
        "| method   | setting   | metric          | ±    | published                            | reproduced                 | difference   | z    | agree   | seeds   | notes                                    |",
        "|:---------|:----------|:----------------|:-----|:-------------------------------------|:---------------------------|:-------------|:-----|:--------|:--------|:-----------------------------------------|",
        "| FedAvg   | E=1       | test acc. %     | ± SE | 80.00 ± 0.50 / Table 3: 81.00 ± 0.40 | 79.00 ± 1.00               | -1.00        | -0.9 | agree   | 2       | std_error                                |",
        "| FedAvg   | E=1       | train var. %²   | ± SE | 40.00                                |                            |              |      |         | 0       | FLAG: made up; the runs do not record it |",
        "| FedProx  | mu=1      | test loss       | ± SD | Table 4: 1.25                        | 1.50 ± 0.00 (2/3 diverged) |              |      |         | 1       |                                          |",
        "| FedProx  | mu=2      | test macro-F1 % | ± SD | 60.00 ± 2.00                         | diverged                   |              |      |         | 0       | a; b                                     |",
        "",
        "## pa Table 1: Alpha, CNN",
        "",
        "| method                   | setting   | metric         | ±    | published    | reproduced   | difference   | z    | agree   | seeds   | notes   |",
        "|:-------------------------|:----------|:---------------|:-----|:-------------|:-------------|:-------------|:-----|:--------|:--------|:--------|",
        "| FeMAM [femam, cifar/a]   | all       | test acc. %    | ± SD | 60.00 ± 1.00 | 62.00 ± 1.00 | +2.00        | +1.4 | agree   | 4       |         |",
        "| FeMAM [femam_b, cifar/a] | all       | test acc. %    | ± SD | 60.00 ± 1.00 | 65.00 ± 0.50 | +5.00        | +4.5 | miss    | 4       |         |",
        "| FeMAM [femam, cifar/b]   | all       | test acc. %    | ± SD | 60.00 ± 1.00 | 59.50 ± 0.00 | -0.50        | -0.5 | agree   | 4       |         |",
        "| FedAvg                   | all       | test Δ acc. pp | ± SD | -2.00        | -1.00 ± 0.50 | +1.00        | +2.0 | agree   | 4       |         |",
        "",
    ])
    assert to_markdown(card) == expected


# --- survivors of the results group's mutation run at 1ea9dfb (docs/mutation/results.md) ------------


def published_cells(md: str) -> list[str]:
    """The "published" cells of every table row of a scorecard's Markdown, stripped, in order."""
    cells = []
    for line in md.splitlines():
        if line.startswith("| method"):
            column = [cell.strip() for cell in line.strip("|").split("|")].index("published")
        elif line.startswith("|") and not line.startswith("|:"):
            cells.append([cell.strip() for cell in line.strip("|").split("|")][column])
    return cells


TWO_ROWS = pd.DataFrame([
    ("pz", "Table 9", "Zeta", "", "FedAvg", "E=1", "accuracy", "test", "std_error", 80.0, 0.5, "Table 3: 81.00 ± 0.40",
     79.0, 1.0, 2, 0, -1.0, -0.894, "agree", "fedavg", "mnist", "s1", "", ""),
    ("pz", "Table 9", "Zeta", "", "FedProx", "mu=1", "accuracy", "test", "std_error", 60.0, 2.0, NAN,
     61.0, 1.0, 2, 0, 1.0, 0.447, "agree", "fedprox", "mnist", "s1", "", ""),
], columns=CARD_COLUMNS)


def test_markdown_of_a_card_without_the_also_published_column():
    """A card without ``also_published`` (a scorecard.csv written before the column existed, or a
    hand-made card) still renders, without a pandas warning: every row of a two-row table shows its
    own published number alone, "80.00 ± 0.50" and "60.00 ± 2.00", with nothing after it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        md = to_markdown(TWO_ROWS.drop(columns="also_published"))
    assert published_cells(md) == ["80.00 ± 0.50", "60.00 ± 2.00"]


def test_markdown_shows_a_blank_other_tables_number_as_nothing():
    """A blank ``also_published`` cell (NaN, as a CSV reads a blank text cell back) adds nothing to
    the published cell: "60.00 ± 2.00" alone, while the row beside it still shows its other table's
    number after " / "."""
    assert published_cells(to_markdown(TWO_ROWS)) == ["80.00 ± 0.50 / Table 3: 81.00 ± 0.40", "60.00 ± 2.00"]


def test_a_train_figure_the_history_leaves_blank_is_nan_in_a_nullable_history(tmp_path):
    """A run whose history has no train accuracy at the reported round gives NaN (not recorded), also
    where the history was read with pandas' nullable dtypes (``dtype_backend="numpy_nullable"``: the
    blank cell is ``pd.NA``, not NaN); the test accuracy at the same (last) round, 0.8, reads as 80 %."""
    from fedbench.registry.protocols import PROTOCOLS
    from fedbench.results.published import Link
    from fedbench.results.scorecard import reported_number

    path = tmp_path / "history.csv"
    path.write_text("round,acc_mean,train_acc_mean\n1,0.5,0.9\n2,0.8,\n")
    protocol, link = PROTOCOLS["mean_client_last"], Link("a", "m", "s")
    for history in (pd.read_csv(path), pd.read_csv(path, dtype_backend="numpy_nullable")):
        assert math.isnan(reported_number(history, protocol, link, "accuracy", "train"))
        assert reported_number(history, protocol, link, "accuracy", "test") == pytest.approx(80.0)
