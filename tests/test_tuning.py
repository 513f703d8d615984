"""Fair tuning (fedbench.tuning.trials, fedbench.registry.search_space): equal budgets with the paper's setting among
the trials, tuning seeds disjoint from the final seeds, validation rows held out of the training rows,
selection that never reads a test column -- shown by poisoning the test split of real trial runs."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedbench.registry.algorithms import ALGORITHMS
from fedbench.config.cells import Cell, ConfigError
from fedbench.data.partition import Partition, hold_out_validation
from fedbench.data.partition_file import load_partition, save_partition
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell
from fedbench.planning.validate import check_config
from fedbench.registry.search_space import COMMON_SEARCH, LogRange, Relative
from fedbench.tuning.trials import (
    TUNABLE_TRAINING, apply_setting, check_tuning, search_space, trial_config, trial_settings,
)
from fedbench.tuning.selection import select, trial_score, write_selection

CONFIG = {
    "results": "unused",
    "device": "cpu",
    "seeds": [0, 1, 2],
    "datasets": {"digits": {"source": "digits"}},
    "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 4, "test_fraction": 0.25}},
    "models": {"mlr": {"arch": "mlr"}},
    "algorithms": {"fedavg": {"method": "fedavg"}, "fedprox": {"method": "fedprox", "mu": 0.01},
                   "ifca": {"method": "ifca", "num_clusters": 2}},
    "experiments": {
        "e": {
            "training": {"rounds": 2, "local_epochs": 1, "batch_size": 20, "lr": 0.05, "eval_every": 1},
            "tune": {"trials": 4, "seeds": [50]},
            "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlr"],
                      "algorithms": ["fedavg", "fedprox", "ifca"]}],
        }
    },
}


# ---- search spaces and trials ------------------------------------------------------------------


def test_every_registered_knob_is_a_parameter_or_a_training_setting():
    for method in ALGORITHMS.names():
        for knob, space in (ALGORITHMS.extra(method, "search") or {}).items():
            assert knob in ALGORITHMS.parameters(method) or knob in TUNABLE_TRAINING, (method, knob)
            assert isinstance(space, (list, LogRange, Relative)) or (space is None and knob in COMMON_SEARCH), (method, knob)


def test_every_method_gets_the_same_budget_and_trial_0_is_the_configured_setting():
    settings = {a: trial_settings(CONFIG, "e", a) for a in ("fedavg", "fedprox", "ifca")}
    assert {a: len(s) for a, s in settings.items()} == {"fedavg": 4, "fedprox": 4, "ifca": 4}
    assert settings["fedavg"][0] == {"algorithm": {}, "training": {"lr": 0.05}}
    assert settings["fedprox"][0] == {"algorithm": {"mu": 0.01}, "training": {"lr": 0.05}}
    assert settings["ifca"][0] == {"algorithm": {"num_clusters": 2}, "training": {"lr": 0.05}}
    for trial in settings["fedprox"][1:]:
        assert 0.005 <= trial["training"]["lr"] <= 0.5  # 0.1x to 10x the configured 0.05
        assert 0.001 <= trial["algorithm"]["mu"] <= 1.0
    assert {t["algorithm"]["num_clusters"] for t in settings["ifca"][1:]} <= {2, 3, 4, 5, 6, 8}
    assert trial_settings(CONFIG, "e", "fedprox") == settings["fedprox"]  # drawn the same on every call


def test_the_latin_hypercube_spreads_a_few_trials_over_the_range():
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"]["trials"] = 9
    rates = sorted(np.log10([t["training"]["lr"] for t in trial_settings(config, "e", "fedavg")[1:]]))
    # 8 draws, one in each eighth of log10 [0.005, 0.5] = [-2.30, -0.30] (0.25 wide)
    assert [int((r + 2.30103) // 0.25) for r in rates] == list(range(8))


def test_exclude_and_extra_knobs():
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"].update(exclude={"ifca": ["num_clusters"]}, knobs={"momentum": [0.0, 0.9]})
    assert set(search_space(config, "e", "ifca")) == {"lr", "momentum"}
    assert {t["training"]["momentum"] for t in trial_settings(config, "e", "fedavg")[1:]} <= {0.0, 0.9}
    assert set(COMMON_SEARCH) == {"lr"}
    config["algorithms"]["pfedme"] = {"method": "pfedme"}
    config["algorithms"]["pfedmt"] = {"method": "pfedmt"}
    assert set(search_space(config, "e", "pfedme")) == {"lr", "lam", "personal_lr"}  # pFedMe never reads momentum
    assert set(search_space(config, "e", "pfedmt")) == {"alpha", "eta", "lam"}  # nor pFedMT the learning rate


def test_integer_knobs_are_rounded():
    config = copy.deepcopy(CONFIG)
    config["algorithms"]["femam"] = {"method": "femam", "init_rounds": 10, "window": 3, "threshold": 1.0e9}
    config["experiments"]["e"]["grid"][0]["algorithms"] = ["femam"]
    for trial in trial_settings(config, "e", "femam"):
        assert isinstance(trial["algorithm"]["init_rounds"], int) and 5 <= trial["algorithm"]["init_rounds"] <= 20


def test_tuning_seeds_must_differ_from_every_final_seed():
    check_tuning(CONFIG, [0, 1, 2])
    with pytest.raises(ConfigError, match=r"experiments\.e\.tune\.seeds: \[50\] are also seeds of the final runs"):
        check_tuning(CONFIG, [0, 1, 50])
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"]["seeds"] = [1]
    with pytest.raises(ConfigError, match=r"tune\.seeds: \[1\]"):
        check_config(config)
    # the seeds the claims may add come after the pilot, skipping the tuning seeds
    from fedbench.results.claims import design_seeds

    config = copy.deepcopy(CONFIG)
    config["claims_design"] = {"looks": [3, 5]}
    config["experiments"]["e"]["tune"]["seeds"] = [3]
    assert design_seeds(config) == [0, 1, 2, 4, 5]
    check_config(config)


def test_a_knob_out_of_its_bounds_or_a_budget_a_grid_cannot_fill_stops_planning():
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"]["knobs"] = {"mu": [-1.0]}  # FedProx's mu >= 0
    config["experiments"]["e"]["grid"][0]["algorithms"] = ["fedprox"]
    with pytest.raises(ConfigError, match=r"^experiments\.e\.tune\.knobs\.mu: -1\.0 is out of bounds: .* must be >= 0"):
        check_config(config)
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"].update(trials=9, exclude={"ifca": ["lr"]})
    with pytest.raises(ConfigError, match=r"9 trials, but 'ifca''s search space has only 6 settings"):
        check_config(config)


def test_apply_setting_leaves_the_config_alone():
    before = copy.deepcopy(CONFIG)
    trial = trial_config(CONFIG, "e", "fedprox", 1)
    assert CONFIG == before
    assert trial["experiments"]["e"]["training"]["holdout"] == 0.2
    assert trial["algorithms"]["fedprox"]["mu"] == trial_settings(CONFIG, "e", "fedprox")[1]["algorithm"]["mu"]
    final = apply_setting(CONFIG, "e", "fedprox", trial_settings(CONFIG, "e", "fedprox")[1])
    assert "holdout" not in final["experiments"]["e"]["training"]


# ---- validation rows held out of the training rows ---------------------------------------------------


def test_hold_out_validation_splits_each_clients_training_rows():
    train = [np.arange(0, 10), np.arange(10, 15), np.array([15])]
    test = [np.array([100]), np.array([101]), np.array([102])]
    split = hold_out_validation(Partition(train=train, test=test), 0.2, seed=0)
    for rows, kept, held in zip(train, split.train, split.val):
        assert not set(kept) & set(held) and sorted({*kept, *held}) == sorted(rows)
    assert [len(v) for v in split.val] == [2, 1, 0]  # 20 % rounded up by train_test_split; one row stays in training
    assert split.test == test
    again = hold_out_validation(Partition(train=train, test=test), 0.2, seed=0)
    assert all((a == b).all() for a, b in zip(split.val, again.val))
    existing = Partition(train=train, test=test, val=[np.array([200])] * 3)
    assert hold_out_validation(existing, 0.2, seed=0) is existing  # a partition's own validation rows stay


# ---- selection ------------------------------------------------------------------------------------------


def test_selection_takes_the_best_mean_validation_score():
    scores = pd.DataFrame({"trial": [0, 0, 1, 1, 2, 2], "seed": [5, 6] * 3, "score": [0.5, 0.75, 0.25, 1.0, 0.9, np.nan]})
    assert select(scores, "val_acc_mean")["trial"] == 0  # trial 2 diverged on a seed: last; 0 and 1 tie at 0.625 -> 0
    assert select(scores.assign(score=[0.5, 0.7, 0.8, 0.6, 0.1, 0.2]), "val_loss_mean")["trial"] == 2  # least loss
    with pytest.raises(ValueError, match="unknown selection metric 'acc_mean'"):
        select(scores, "acc_mean")


def test_a_trial_that_diverged_scores_nothing(tmp_path):
    path = tmp_path / "history.csv"
    pd.DataFrame({"round": [1, 2, 3], "train_loss": [1.0, 0.5, np.nan], "val_acc_mean": [0.5, 0.6, np.nan]}).to_csv(path)
    assert np.isnan(trial_score(path, "val_acc_mean"))
    pd.DataFrame({"round": [1, 2], "val_acc_mean": [0.5, 0.6]}).to_csv(path)
    assert trial_score(path, "val_acc_mean") == 0.6
    assert np.isnan(trial_score(path, "val_loss_mean"))  # no such column: never scored on validation rows


@pytest.fixture(scope="module")
def tuning_partitions(tmp_path_factory):
    """The tuning seed's partition, and a copy whose clients' test rows are replaced by other rows of the
    dataset (all of them labelled differently from what the clients train on)."""
    root = tmp_path_factory.mktemp("tuning")
    check_config(CONFIG)
    build_partition(CONFIG, "digits", "dir", 50, root / "clean.npz", root / "clean.json")
    clean = load_partition(root / "clean.npz")
    rng = np.random.default_rng(0)
    used = np.concatenate(clean.train)
    spare = np.setdiff1d(np.arange(1797), used)
    poisoned = Partition(train=clean.train, test=[rng.choice(spare, len(t), replace=False) for t in clean.test],
                         val=clean.val, groups=clean.groups, shared=clean.shared)
    meta = json.loads((root / "clean.json").read_text())
    from fedbench.data import load_dataset

    y = load_dataset({"source": "digits"}, "data").y
    save_partition(poisoned, y, 10, root / "poisoned.npz", root / "poisoned.json", meta)
    return root


def test_poisoning_the_test_split_leaves_the_choice_unchanged(tmp_path, tuning_partitions):
    """Every trial of two methods run twice, on the clean partition and on one whose test rows were
    swapped for other rows: the test scores move, the validation scores and the chosen trials do not."""
    config = copy.deepcopy(CONFIG)
    config["experiments"]["e"]["tune"]["trials"] = 3
    chosen, test_scores = {}, {}
    for name in ("clean", "poisoned"):
        for algorithm in ("fedavg", "fedprox"):
            histories = []
            for trial in range(3):
                out = tmp_path / name / algorithm / f"trial{trial}" / "seed50"
                run_cell(cell_job(trial_config(config, "e", algorithm, trial), Cell("e", "digits", "dir", "mlr", algorithm, 50)),
                         tuning_partitions / f"{name}.npz", out)
                histories.append(out / "history.csv")
                test_scores[name, algorithm, trial] = pd.read_csv(out / "history.csv")["acc_mean"].iloc[-1]
            chosen[name, algorithm] = write_selection(config, "e", algorithm, histories, tmp_path / f"{name}_{algorithm}.json",
                                                      tmp_path / f"{name}_{algorithm}.csv")
    for algorithm in ("fedavg", "fedprox"):
        assert chosen["clean", algorithm]["trial"] == chosen["poisoned", algorithm]["trial"]
        assert chosen["clean", algorithm]["score"] == chosen["poisoned", algorithm]["score"]
        assert any(test_scores["clean", algorithm, t] != test_scores["poisoned", algorithm, t] for t in range(3))
    table = pd.read_csv(tmp_path / "clean_fedprox.csv")
    assert list(table.columns[:4]) == ["algorithm", "trial", "lr", "mu"] and table["chosen"].sum() == 1


def test_the_plan_lists_every_trial_tuned_run_and_added_seed_that_make_stale_reads():
    """planned_runs (which make stale, the cost report and the workflow read): every entry's trials on the tuning
    seed, its tuned runs at the config's seeds, and the seeds the looks may add for the entries a claim compares,
    at both settings."""
    from fedbench.planning.jobs import planned_runs

    config = copy.deepcopy(CONFIG)
    config["claims_design"] = {"looks": [3, 4]}
    config["claims"] = {"c": {"source": "hand-made", "experiment": "e", "better": "fedprox", "than": "fedavg"}}
    runs = planned_runs(config)
    paths = {run.file(config["results"], "metrics.json") for run in runs}
    assert len(runs) == len(paths)
    by_kind = {kind: [r for r in runs if r.kind == kind and not r.added] for kind in ("train", "trial", "tuned")}
    assert [len(by_kind[k]) for k in ("train", "trial", "tuned")] == [3 * 3, 3 * 4, 3 * 3]  # 3 entries x seeds 0-2 / 4 trials
    added = sorted((r.kind, r.cell.algorithm, r.cell.seed) for r in runs if r.added)
    assert added == [(k, a, 3) for k in ("train", "tuned") for a in ("fedavg", "fedprox")]  # design seed 3: the claimed pair
    assert "unused/tuning/trials/e/digits/dir/mlr/fedprox/trial3/seed50/metrics.json" in paths
    assert "unused/tuned/runs/e/digits/dir/mlr/fedavg/seed3/metrics.json" in paths
    assert "unused/runs/e/digits/dir/mlr/fedprox/seed3/metrics.json" in paths


def test_a_tuned_run_at_the_configured_setting_copies_the_paper_run(tmp_path, tuning_partitions):
    """Where tuning chose trial 0 (the configured setting), the finished paper-setting run of the same seed is
    what a tuned run would compute -- shown by training it again -- and is copied; another setting, or code
    changed since the paper run, trains."""
    from fedbench.run.reuse import copy_run, reusable_paper_run

    config = {**copy.deepcopy(CONFIG), "results": str(tmp_path / "results")}
    cell = Cell("e", "digits", "dir", "mlr", "fedavg", 50)
    paper = Path(cell.run_dir(config["results"]))
    chosen = [apply_setting(config, "e", "fedavg", s) for s in trial_settings(config, "e", "fedavg")]
    assert reusable_paper_run(config, chosen[0], cell) is None  # no paper run yet
    run_cell(cell_job(config, cell), tuning_partitions / "clean.npz", paper)
    assert reusable_paper_run(config, chosen[0], cell) == paper
    assert reusable_paper_run(config, chosen[1], cell) is None  # another learning rate
    copy_run(paper, tmp_path / "copied")
    run_cell(cell_job(chosen[0], cell), tuning_partitions / "clean.npz", tmp_path / "trained")
    for name in ("history.csv", "clients.csv"):
        assert (tmp_path / "copied" / name).read_bytes() == (tmp_path / "trained" / name).read_bytes()
    copied = json.loads((tmp_path / "copied" / "metrics.json").read_text())
    trained = json.loads((tmp_path / "trained" / "metrics.json").read_text())
    assert copied["final"] == trained["final"] and copied["reused_from"] == str(paper)
    metrics = json.loads((paper / "metrics.json").read_text())
    metrics["provenance"]["code_files"]["fedbench/config/cells.py"] = "0" * 16  # as if config.py had changed since
    (paper / "metrics.json").write_text(json.dumps(metrics))
    assert reusable_paper_run(config, chosen[0], cell) is None
