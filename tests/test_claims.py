"""Claims (fedbench.results.claims): verdicts from hand-made per-seed numbers, pairing, missing runs,
and the config checks that reject a claim naming what its experiment does not have.

Expected intervals by hand: a 95 % t interval is mean ± t(0.975, df) · sd / sqrt(n) with the
tabulated quantiles t(0.975, 2) = 4.3027 and t(0.975, 4) = 2.7764."""

import copy
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import validate_config
from fedbench.results.claims import (
    FAILS, HOLDS, INCONCLUSIVE, NOT_COMPARABLE, ClaimError, check_design, compare, evaluate_claims, threshold,
    write_claims,
)
from fedbench.results.published import load_published

T2 = 4.3027  # t(0.975, df=2)
T4 = 2.7764  # t(0.975, df=4)

with open(Path(__file__).parents[1] / "config" / "config.yaml") as f:
    DEFAULT = yaml.safe_load(f)


def seeds(*values):
    return pd.Series(values, index=range(len(values)), dtype=float)


# ---- verdicts --------------------------------------------------------------------------------


def test_paired_difference_that_holds():
    # differences 2, 3, 4: mean 3, sd 1 -> 3 ± 4.3027 / sqrt(3) = 3 ± 2.4842 -> [0.516, 5.484] above 0
    result = compare(seeds(82, 83, 84), seeds(80, 80, 80))
    assert result["difference"] == pytest.approx(3.0)
    assert (result["low"], result["high"]) == pytest.approx((3 - 2.4842, 3 + 2.4842), abs=1e-3)
    assert result["n"] == 3


def test_paired_difference_that_does_not_hold_and_one_that_straddles():
    from fedbench.results.claims import verdict

    low_fail = compare(seeds(80, 80, 80), seeds(82, 83, 84))  # mirror image: [-5.484, -0.516]
    assert verdict(low_fail["low"], low_fail["high"]) == FAILS
    straddle = compare(seeds(81, 82, 83), seeds(80, 80, 80))  # 2 ± 2.4842 -> [-0.484, 4.484]
    assert (straddle["low"], straddle["high"]) == pytest.approx((2 - 2.4842, 2 + 2.4842), abs=1e-3)
    assert verdict(straddle["low"], straddle["high"]) == INCONCLUSIVE
    assert verdict(0.516, 5.484) == HOLDS


def test_pairing_changes_the_verdict():
    # seeds 70/80/90 vs 68.8/79/89.2: per-seed differences 1.2, 1.0, 0.8 (mean 1, sd 0.2):
    # paired 1 ± 4.3027 · 0.2 / sqrt(3) = 1 ± 0.4968 -> [0.503, 1.497]: holds.
    # Unpaired (Welch): sd 10 and 10.2, se = sqrt(100/3 + 104.04/3) = 8.2470, df = 3.998 (t ~ 2.7766)
    # -> 1 ± 22.90: straddles 0, inconclusive.
    better, than = seeds(70, 80, 90), seeds(68.8, 79, 89.2)
    paired = compare(better, than, "paired")
    assert (paired["low"], paired["high"]) == pytest.approx((1 - 0.4968, 1 + 0.4968), abs=1e-3)
    unpaired = compare(better, than, "unpaired")
    assert unpaired["difference"] == pytest.approx(1.0)
    assert (unpaired["low"], unpaired["high"]) == pytest.approx((1 - 22.90, 1 + 22.90), abs=0.02)
    config = claims_config({"better": "a", "than": "b"})
    runs = hand_runs({"a": [0.70, 0.80, 0.90], "b": [0.688, 0.79, 0.892]})
    assert evaluate_claims(config, runs, load_published())["verdict"].tolist() == [HOLDS]
    config["claims"]["c"]["pairing"] = "unpaired"
    assert evaluate_claims(config, runs, load_published())["verdict"].tolist() == [INCONCLUSIVE]


def test_unpaired_interval_with_five_seeds_each():
    # both sd(ddof=1) = sqrt(2.5) = 1.5811, se = sqrt(2.5/5 + 2.5/5) = 1, df = 8 -> t = 2.3060
    result = compare(seeds(11, 12, 13, 14, 15), seeds(1, 2, 3, 4, 5), "unpaired")
    assert (result["low"], result["high"]) == pytest.approx((10 - 2.3060, 10 + 2.3060), abs=1e-3)


def test_threshold_claims():
    # ARI 0.95, 0.97, 0.99: mean 0.97, sd 0.02 -> 0.97 ± 4.3027 · 0.02 / sqrt(3) = ± 0.04968 -> low 0.9203 >= 0.9
    ok = threshold(seeds(0.95, 0.97, 0.99), 0.9)
    assert (ok["low"], ok["high"]) == pytest.approx((0.97 - 0.04968, 0.97 + 0.04968), abs=1e-4)
    perfect = threshold(seeds(1.0, 1.0, 1.0), 0.9)  # no spread: the interval is the point 1.0
    assert (perfect["low"], perfect["high"]) == (1.0, 1.0)
    config = claims_config({"algorithm": "a", "at_least": 0.9, "metric": "ari"})
    verdicts = {}
    for name, values in {"ok": [0.95, 0.97, 0.99], "exact": [0.9, 0.9, 0.9], "mixed": [0.5, 0.9, 1.0],
                         "low": [0.2, 0.3, 0.4]}.items():  # low: 0.3 ± 0.2484 -> [0.052, 0.548] < 0.9
        verdicts[name] = evaluate_claims(config, hand_runs({"a": values}, metric="ari"), load_published())["verdict"][0]
    assert verdicts == {"ok": HOLDS, "exact": HOLDS, "mixed": INCONCLUSIVE, "low": FAILS}


def test_diverged_runs_are_left_out_and_named():
    """A diverged run (no number) leaves its seed out of the paired comparison, and the table and the
    report's reading name it; when every seed of one side diverged there is nothing to compare."""
    from fedbench.results.claims import reading

    config = claims_config({"better": "a", "than": "b"})
    some = evaluate_claims(config, hand_runs({"a": [0.9, 0.8, 0.85], "b": [0.5, float("nan"), 0.55]}), load_published())
    # seeds 0 and 2: differences 40 and 30 -> mean 35, sd 7.071, t(0.975, 1) = 12.706 -> 35 ± 63.53
    assert (some["n"][0], some["difference"][0], some["diverged"][0]) == (2, pytest.approx(35.0), "b diverged (seed 1)")
    assert reading({**some.iloc[0], "verdict": some["verdict"][0]}).endswith("; left out: b diverged (seed 1)")
    none = evaluate_claims(config, hand_runs({"a": [0.9, 0.8, 0.85], "b": [float("nan")] * 3}), load_published())
    assert none["n"][0] == 0 and none["verdict"][0] == NOT_COMPARABLE
    unpaired = evaluate_claims(claims_config({"better": "a", "than": "b", "pairing": "unpaired"}),
                               hand_runs({"a": [0.9, 0.8, 0.85], "b": [float("nan")] * 3}), load_published())
    assert unpaired["verdict"][0] == NOT_COMPARABLE
    assert reading(none.iloc[0]) == "no seed to compare: b diverged (seed 0, 1, 2)"


def test_one_seed_gives_no_interval_and_is_inconclusive():
    config = claims_config({"better": "a", "than": "b"}, seed_list=[0])
    table = evaluate_claims(config, hand_runs({"a": [0.9], "b": [0.1]}), load_published())
    assert table["difference"][0] == pytest.approx(80.0)
    assert table["verdict"].tolist() == [INCONCLUSIVE]
    assert pd.isna(table["low"][0])


def test_a_missing_run_is_an_error():
    config = claims_config({"better": "a", "than": "b"})
    runs = hand_runs({"a": [0.7, 0.8, 0.9], "b": [0.6, 0.7, 0.8]})
    runs = runs[~((runs["algorithm"] == "b") & (runs["seed"] == 1))]
    with pytest.raises(ClaimError, match=r"claims\.c: no run of e/d/p/m/b for seed\(s\) 1"):
        evaluate_claims(config, runs, load_published())


def test_the_paper_margin_is_computed_from_the_published_table():
    # pFedMT Table 1, Synthetic MLR, T=600: pFedMT(PM) 89.86 - pFedMe(PM) 89.08 = +0.78
    published = {"paper": "pfedmt", "table": "Table 1", "dataset": "Synthetic", "model": "MLR",
                 "partition": "non-iid(2 teams x 25 devices)",
                 "better": "pFedMT(PM)", "better_setting": "T=600; lambda=15; gamma=0.1; beta=1.0",
                 "than": "pFedMe(PM)", "than_setting": "T=600; lambda=15; gamma=-; beta=0.5"}
    config = claims_config({"better": "a", "than": "b", "published": published})
    table = evaluate_claims(config, hand_runs({"a": [0.7, 0.8, 0.9], "b": [0.6, 0.7, 0.8]}), load_published())
    assert table["paper_margin"][0] == "+0.78 (Table 1, Synthetic MLR non-iid(2 teams x 25 devices))"


def test_write_claims_reads_the_runs(tmp_path):
    paths = metrics_files(tmp_path, {"a": [0.82, 0.83, 0.84], "b": [0.80, 0.80, 0.80]})
    config = claims_config({"better": "a", "than": "b"})
    table = write_claims(config, paths, load_published(), tmp_path / "claims.csv", tmp_path / "claims.md")
    assert table["verdict"].tolist() == [HOLDS]  # the first test's numbers: [0.516, 5.484]
    assert "| c " in (tmp_path / "claims.md").read_text()
    assert pd.read_csv(tmp_path / "claims.csv")["difference"][0] == pytest.approx(3.0)


def test_global_accuracy_is_read_at_the_round_the_protocol_picks(tmp_path):
    # pooled_max picks each run's best round of the global model (pFedMT's T = 600 column):
    # a peaks at 0.9 and ends at 0.7, b stays at 0.8 -> +10 points per seed (the last round would say -10)
    paths = []
    for algorithm, curve in {"a": [0.5, 0.9, 0.7], "b": [0.8, 0.8, 0.8]}.items():
        for seed in (0, 1):
            run = tmp_path / algorithm / f"seed{seed}"
            run.mkdir(parents=True)
            pd.DataFrame({"round": [1, 2, 3], "global_acc": curve, "global_f1": curve, "global_loss": [1.0] * 3}).to_csv(
                run / "history.csv", index=False)
            cell = {"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": algorithm, "seed": seed}
            (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "pooled_max", "final": {"accuracy": 0.5},
                                                          "global": {"accuracy": curve[-1]}}))
            paths.append(run / "metrics.json")
    config = claims_config({"better": "a", "than": "b", "metric": "global_accuracy"}, seed_list=[0, 1])
    table = write_claims(config, paths, load_published(), tmp_path / "claims.csv", tmp_path / "claims.md")
    assert table[["difference", "low", "high", "verdict"]].values.tolist() == [[pytest.approx(10.0)] * 3 + [HOLDS]]


def test_the_report_measures_the_seeds_on_disk_and_names_the_command_for_the_rest(tmp_path):
    from fedbench.results.claims import report_rows

    config = claims_config({"better": "a", "than": "b"})
    config["claims"]["later"] = {"source": "hand-made", "experiment": "e", "better": "b", "than": "a"}
    config["experiments"]["e"]["grid"].append({"datasets": ["d"], "partitions": ["q"], "models": ["m"], "algorithms": ["a", "b"]})
    config["claims"]["later"]["cells"] = {"partitions": ["q"]}
    config["claims"]["c"]["cells"] = {"partitions": ["p"]}
    config["results"] = str(tmp_path / "results")
    for algorithm, values in {"a": [0.82, 0.83], "b": [0.80, 0.80]}.items():  # seeds 0 and 1 of 0, 1, 2, cell p only
        for seed, value in enumerate(values):
            path = tmp_path / "results" / "runs" / "e" / "d" / "p" / "m" / algorithm / f"seed{seed}" / "metrics.json"
            path.parent.mkdir(parents=True)
            cell = {"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": algorithm, "seed": seed}
            path.write_text(json.dumps({"cell": cell, "protocol": "mean_client_last", "final": {"accuracy": value}}))
    config_path = tmp_path / "c.yaml"
    config_path.write_text(yaml.safe_dump(config))
    rows = report_rows(config_path, load_published()).set_index("claim")
    # differences 2 and 3 points: mean 2.5, sd 0.7071, t(0.975, 1) = 12.706 -> 2.5 ± 6.353: straddles 0
    assert rows.loc["c", "seeds"] == "0, 1 (2 of 3)"
    assert rows.loc["later", "seeds"] == "none (0 of 3)"
    assert rows.loc["c", "difference"] == pytest.approx(2.5)
    assert rows.loc["c", "high"] - rows.loc["c", "difference"] == pytest.approx(6.353, abs=1e-3)
    assert rows.loc["c", "verdict"] == INCONCLUSIVE
    assert rows.loc["later", "verdict"] == "not yet measured"
    assert rows.loc["later", "command"] == (f"snakemake --cores 2 --configfile {config_path} --replace-workflow-config "
                                            "--config 'only_experiments=[e]'")


def test_update_rewrites_only_the_sections_of_the_configs_given(tmp_path):
    """``--update``: the sections of the configs' papers are rewritten (command and note in each), every other
    paper's section is kept byte for byte; without it the report holds only the configs' papers."""
    from fedbench.results.claims import LOOKS_MARK, REREAD, Design, report_sections, section_design, write_report

    config = claims_config({"better": "a", "than": "b"})
    config["results"] = str(tmp_path / "results")
    config_path = tmp_path / "c.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "claims.md"
    kept = "## FLT\n\nmeasured elsewhere, 3 seeds\n\n| claim |\n|:--|\n| x |\n\n"
    bonferroni = f"## FedMR\n{LOOKS_MARK}\n\ndecided look by look, 1 - 2 alpha / L\n\n| claim |\n|:--|\n| y |\n\n"
    out.write_text("# old title\n\n" + kept + bonferroni + "## Default suite\n\nstale table\n")
    write_report([config_path], out, load_published(), note="ran on 2 cores", update=True)
    sections = report_sections(out.read_text())
    assert list(sections) == ["FedMR", "FLT", "Default suite"]  # the report's order of papers
    assert sections["FLT"] == kept and sections["FedMR"] == bonferroni
    assert "stale table" not in sections["Default suite"]
    assert f"`python -m fedbench.results.claims --update {config_path}`" in sections["Default suite"]
    assert "ran on 2 cores" in sections["Default suite"] and "**not yet measured**" in sections["Default suite"]
    assert section_design(sections["Default suite"]) == Design((3,), 0.025)  # the config's design, recorded
    text = out.read_text()
    assert "**Measured before claims were decided look by look and before tuning: FLT**" in text  # no tuned column
    assert "**Decided under Bonferroni over the looks: FedMR**" in text and f"]({REREAD})" in text
    assert ("**Decided with the spending boundary: Default suite**, looks at 3 seeds, α = 0.025 each direction, "
            "hsd(-2) spending (Hwang, Shih & DeCani 1990)") in text
    # its boundary: one look, the 95 % interval, t(0.975, 2) = 4.303 (Bonferroni's the same at one look)
    assert "| 1 of 1 | 3 | 4.303 | 0.0250 | 95.00 % | 0.0250 | 4.303 |" in re.sub(" +", " ", text)
    write_report([config_path], out, load_published())
    assert list(report_sections(out.read_text())) == ["Default suite"]
    assert "Measured before claims" not in out.read_text()  # every section has both settings
    assert "Bonferroni over the looks:" not in out.read_text()


def test_a_named_section_sits_beside_the_papers_own_and_is_rewritten_alone(tmp_path):
    """``claims_section``: a second config of one paper (its own data beside an earlier analogue) writes its
    own section, after the paper's, and ``--update`` with it leaves the paper's section as it was."""
    from fedbench.results.claims import report_sections, write_report

    config = claims_config({"better": "a", "than": "b"})
    config.update(results=str(tmp_path / "results"), claims_section="Default suite on its own data")
    validate_config({**with_claim({"better": "ifca", "than": "fedavg"}), "claims_section": "x"})  # a known key
    config_path = tmp_path / "own.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "claims.md"
    kept = "## Default suite\n\nthe earlier analogue\n\n"
    out.write_text("# title\n\n## FLT\n\nflt\n\n" + kept)
    write_report([config_path], out, load_published(), update=True)
    sections = report_sections(out.read_text())
    assert list(sections) == ["FLT", "Default suite", "Default suite on its own data"]
    assert sections["Default suite"] == kept
    assert f"--update {config_path}`" in sections["Default suite on its own data"]


# ---- config checks ---------------------------------------------------------------------------


def with_claim(claim: dict) -> dict:
    config = copy.deepcopy(DEFAULT)
    config["claims"] = {"c": {"source": "Table 1", "experiment": "default", **claim}}
    return config


def test_a_valid_claim_passes_the_config_checks():
    validate_config(with_claim({"better": "ifca", "than": "fedavg", "cells": {"partitions": ["clusters"]}}))


@pytest.mark.parametrize("claim, message", [
    ({"better": "femam", "than": "fedavg"}, r"claims\.c\.better: 'femam' is not an algorithm of experiment 'default'"),
    ({"algorithm": "ifca", "at_least": 0.9, "metric": "ari", "cells": {"partitions": ["scenario1"]}},
     r"claims\.c\.cells\.partitions: 'scenario1' is not in experiment 'default'"),
    ({"better": "ifca", "than": "fedavg", "experiment": "flt"}, r"claims\.c\.experiment: 'flt' is not declared"),
    ({"better": "ifca", "than": "fedavg", "published": {"paper": "flt", "table": "Table 1", "dataset": "MNIST",
      "partition": "scenario1", "better": "FLT (Enc3)", "than": "FedAvg"}}, r"claims\.c\.published\[0\]\.better: 0 rows"),
    ({"better": "ifca", "than": "fedavg", "not_reached": "leave_out"},
     r"claims\.c\.not_reached: only a \*_to_target metric has a target \(and not_reached\); metric is 'accuracy'"),
])
def test_the_config_checks_reject_unknown_methods_cells_and_rows(claim, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(with_claim(claim))


def test_the_schema_rejects_a_claim_that_is_neither_comparison_nor_threshold():
    with pytest.raises(ValueError, match=r"claims\.c: .* is not valid under any of the given schemas"):
        validate_config(with_claim({"better": "ifca"}))


# ---- hand-made configs and runs --------------------------------------------------------------


def claims_config(claim: dict, seed_list=(0, 1, 2)) -> dict:
    """One experiment ``e`` (cell d/p/m, algorithms a and b) and claim ``c``."""
    grid = [{"datasets": ["d"], "partitions": ["p"], "models": ["m"], "algorithms": ["a", "b"]}]
    return {"seeds": list(seed_list), "experiments": {"e": {"grid": grid}},
            "claims": {"c": {"source": "hand-made", "experiment": "e", **claim}}}


def hand_runs(values: dict[str, list[float]], metric: str = "accuracy") -> pd.DataFrame:
    """Rows as load_metrics gives them: one per algorithm and seed (accuracy as a fraction)."""
    rows = [{"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": a, "seed": s, metric: v}
            for a, per_seed in values.items() for s, v in enumerate(per_seed)]
    return pd.DataFrame(rows)


def metrics_files(root, values: dict[str, list[float]]) -> list:
    """``metrics.json`` of one run per algorithm and seed (cell e/d/p/m, accuracy as a fraction) under ``root``."""
    paths = []
    for algorithm, per_seed in values.items():
        for seed, value in enumerate(per_seed):
            path = root / algorithm / f"seed{seed}" / "metrics.json"
            path.parent.mkdir(parents=True)
            cell = {"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": algorithm, "seed": seed}
            path.write_text(json.dumps({"cell": cell, "protocol": "mean_client_last", "final": {"accuracy": value}}))
            paths.append(path)
    return paths


# ---- the workflow (the tiny suite of tests/test_workflow.py) -----------------------------------

from test_workflow import planned_jobs, report_categories, snakemake, tiny_run, write_config  # noqa: E402,F401  (tiny_run: a fixture)


def test_the_workflow_evaluates_the_claims_from_the_runs(tiny_run):
    config = yaml.safe_load((tiny_run / "tiny_config.yaml").read_text())
    config["claims"] = {"fedavg_beats_local": {"source": "hand-made", "experiment": "tiny", "better": "fedavg", "than": "local"}}
    configfile = write_config(tiny_run / "claims_config.yaml", config)
    jobs = planned_jobs(snakemake(tiny_run, "-n", configfile=configfile).stdout)
    assert jobs["paper_claims"] == 1 and "train_cell" not in jobs, jobs  # the claims, from the runs already there
    snakemake(tiny_run, "--cores", "1", configfile=configfile)
    table = pd.read_csv(tiny_run / "results" / "tables" / "default" / "claims.csv")
    assert table[["claim", "partition", "n", "verdict"]].values.tolist() == [
        ["fedavg_beats_local", "dir0.5", 1, INCONCLUSIVE], ["fedavg_beats_local", "iid", 1, INCONCLUSIVE]]  # one seed
    report = tiny_run / "claims_report.html"
    snakemake(tiny_run, "--report", str(report), configfile=configfile)
    suite = report_categories(report.read_text(errors="replace"))["Default suite"]
    assert sorted(suite)[0] == "0. Claims"  # the report lists subcategories by name: the claims first
    assert sorted(Path(p).name for p in suite["0. Claims"]) == ["claims.csv", "claims.md"]


def test_a_claim_on_an_unknown_algorithm_stops_the_workflow_before_any_job(tmp_path):
    config = yaml.safe_load((Path(__file__).parent / "data" / "tiny_config.yaml").read_text())
    config["claims"] = {"c": {"source": "hand-made", "experiment": "tiny", "better": "femam", "than": "local"}}
    process = snakemake(tmp_path, "-n", configfile=write_config(tmp_path / "bad.yaml", config), check=False)
    assert process.returncode != 0
    assert "claims.c.better: 'femam' is not an algorithm of experiment 'tiny'" in process.stdout, process.stdout[-3000:]


# ---- the sequential design, equivalence and the tuned setting ---------------------------------------------


def test_a_small_difference_with_little_spread_reads_equivalent_and_names_its_delta():
    """a - b = 0.2, 0.1, 0.0 points (mean 0.1, sd 0.1): 0.1 ± 4.3027 · 0.1 / sqrt(3) = [-0.148, +0.348], inside ±1."""
    config = claims_config({"better": "a", "than": "b"})
    table = evaluate_claims(config, hand_runs({"a": [0.802, 0.801, 0.800], "b": [0.800] * 3}), load_published())
    assert table["verdict"][0] == "equivalent" and table["delta"][0] == 1.0
    config["claims"]["c"]["delta"] = 0.3  # a claim's own smallest difference that matters: the interval pokes out
    assert evaluate_claims(config, hand_runs({"a": [0.802, 0.801, 0.800], "b": [0.800] * 3}),
                           load_published())["verdict"][0] == INCONCLUSIVE


def test_looks_read_the_added_seeds_and_stop_at_the_first_decision():
    """Pilot 0-2 straddles; so does the look at 5 seeds (the Bonferroni design, named: each look's
    interval at 1 - 2 · 0.05 / 2 = 95 %)."""
    config = claims_config({"better": "a", "than": "b"})
    config["claims_design"] = {"looks": [3, 5], "alpha": 0.05, "spending": "bonferroni"}
    runs = hand_runs({"a": [0.81, 0.79, 0.84, 0.83, 0.82], "b": [0.80] * 5})
    row = evaluate_claims(config, runs, load_published()).iloc[0]
    # differences 1, -1, 4, 3, 2: mean 1.8, sd 1.9235, t(0.975, 4) = 2.7764 -> 1.8 ± 2.388: still straddles
    assert (row["seeds_run"], row["look"], row["verdict"]) == (5, "2 of 2", INCONCLUSIVE)
    assert row["high"] - row["difference"] == pytest.approx(T4 * 1.9235 / 5 ** 0.5, abs=1e-3)
    decided = evaluate_claims(config, hand_runs({"a": [0.82, 0.83, 0.84, 0.10, 0.10], "b": [0.80] * 5}),
                              load_published()).iloc[0]
    assert (decided["seeds_run"], decided["verdict"]) == (3, HOLDS)  # the pilot decides: seeds 3-4 are never read
    pilot_only = evaluate_claims(config, runs[runs["seed"] < 3], load_published()).iloc[0]
    assert pilot_only["pending"] and pilot_only["look"] == "1 of 2"  # the design has a look its seeds do not reach


def test_each_look_reads_its_interval_at_the_spending_boundary_paired_and_welch():
    """The default boundary, hsd(-2) over looks at 3 and 5 seeds: the same differences 1, -1, 4, 3, 2 as
    above read at look 2 give 1.8 ± c_2 · 1.9235 / sqrt(5), c_2 the design's critical t (narrower than
    Bonferroni's 2.7764 there, wider than the unadjusted t(0.95, 4) = 2.1318); the statistic column names
    the look's level, critical t and spending function.  A Welch (unpaired) claim on the same runs takes
    the look's nominal level p_2 = P(t_4 > c_2): scipy's Welch interval at confidence 1 - 2 p_2."""
    from scipy import stats

    from fedbench.results.sequential import Design

    config = claims_config({"better": "a", "than": "b"})
    config["claims_design"] = {"looks": [3, 5], "alpha": 0.05}
    a, b = [0.81, 0.79, 0.84, 0.83, 0.82], [0.80, 0.80, 0.80, 0.80, 0.80]
    row = evaluate_claims(config, hand_runs({"a": a, "b": b}), load_published()).iloc[0]
    c2 = Design((3, 5), 0.05).critical[1]
    assert stats.t.ppf(0.95, 4) < c2 < T4
    assert row["look"] == "2 of 2" and row["high"] - row["difference"] == pytest.approx(c2 * 1.9235 / 5 ** 0.5, abs=1e-3)
    p2 = stats.t.sf(c2, 4)
    assert row["statistic"] == (f"paired t, {100 * (1 - 2 * p2):.4g} % (look 2 of 2: critical t {c2:.3f} at 5 seeds, "
                                "hsd(-2) spending)")
    # Welch: b varies a little so that both groups have a spread
    b = [0.80, 0.79, 0.81, 0.80, 0.80]
    config["claims"]["c"]["pairing"] = "unpaired"
    welch = evaluate_claims(config, hand_runs({"a": a, "b": b}), load_published()).iloc[0]
    expected = stats.ttest_ind([100 * v for v in a], [100 * v for v in b], equal_var=False).confidence_interval(1 - 2 * p2)
    assert welch["look"] == "2 of 2"
    assert (welch["low"], welch["high"]) == pytest.approx((expected.low, expected.high), abs=1e-9)


@pytest.mark.parametrize("spending", ["pocock", "hsd(x)", "hsd(-50)"])
def test_an_unknown_spending_function_is_refused(spending):
    config = claims_config({"better": "a", "than": "b"})
    config["claims_design"] = {"looks": [3, 5], "alpha": 0.05, "spending": spending}
    with pytest.raises(ClaimError, match=r"claims_design\.spending must be one of hsd\(GAMMA\), obf, bonferroni"):
        check_design(config)


def test_validation_names_the_spending_functions():
    config = copy.deepcopy(DEFAULT)
    config["claims"] = {"c": {"source": "Table 1", "experiment": "default", "better": "ifca", "than": "fedavg"}}
    config["claims_design"] = {"looks": [3, 5], "spending": "pocock"}
    with pytest.raises(ConfigError, match=r"claims_design\.spending must be one of hsd\(GAMMA\), obf, bonferroni .*'pocock'"):
        validate_config(config)


def test_the_first_look_must_be_the_pilot():
    config = copy.deepcopy(DEFAULT)
    config["claims"] = {"c": {"source": "Table 1", "experiment": "default", "better": "ifca", "than": "fedavg"}}
    config["claims_design"] = {"looks": [2, 5]}
    with pytest.raises(ConfigError, match=r"claims_design\.looks: the first look is the pilot, the config's 3 seeds; got 2"):
        validate_config(config)


def test_a_look_keeps_the_undecided_claims_open(tmp_path):
    from fedbench.results.claims import look_state

    config = claims_config({"better": "a", "than": "b"})
    config["claims"]["d"] = {"source": "hand-made", "experiment": "e", "better": "b", "than": "a"}
    config["claims_design"] = {"looks": [3, 5], "alpha": 0.05}
    paths = metrics_files(tmp_path, {"a": [0.9, 0.8, 0.85], "b": [0.5, 0.9, 0.55]})
    state = look_state(config, paths, load_published(), "default", "paper", 0)
    assert state["open"] == ["c", "d"] and not state["done"] and state["seeds"] == [0, 1, 2]


def test_the_table_sets_the_tuned_verdict_beside_the_papers(tmp_path):
    paths = {"paper": metrics_files(tmp_path / "paper", {"a": [0.82, 0.83, 0.84], "b": [0.80] * 3}),
             "tuned": metrics_files(tmp_path / "tuned", {"a": [0.80, 0.79, 0.81], "b": [0.80] * 3})}
    config = claims_config({"better": "a", "than": "b"})
    config["experiments"]["e"]["tune"] = {"trials": 2, "seeds": [9]}
    table = write_claims(config, paths["paper"], load_published(), tmp_path / "c.csv", tmp_path / "c.md",
                         tuned_paths=paths["tuned"])
    assert table[["setting", "verdict"]].values.tolist() == [["paper", HOLDS], ["tuned", INCONCLUSIVE]]
    markdown = (tmp_path / "c.md").read_text()
    assert "| **holds**" in markdown and "**inconclusive**" in markdown and "no: holds → inconclusive" in markdown
    # the legend is followed by the config's boundary: one look at 3 seeds, t(0.975, 2) = 4.303
    assert "Boundary: looks at 3 seeds, α = 0.025 each direction, hsd(-2) spending" in markdown
    assert "| 1 of 1 | 3 | 4.303 |" in re.sub(" +", " ", markdown)


# ---- the re-read of Bonferroni verdicts at the spending boundary (benchmarks/reread_claims.py) ----


def test_a_bonferroni_verdict_is_reread_at_the_spending_boundary_from_its_interval():
    """Looks 3/5/7/10, alpha 0.05.  A cell that held at 5 seeds with 3.7 ± 3.4954 (Bonferroni's t(0.9875,
    4) with se 1) reads 3.7 ± c_2 at the spending boundary, c_2 = 3.997 > 3.7: undecided at a look before
    the last, so it needs the next look's seeds, which were not run.  A cell inconclusive at the cap with
    2.3 ± 2.6850 (t(0.9875, 9), se 1) reads 2.3 ± 2.048: above 0, holds.  A seed a diverged run left out
    lowers n (and the df) the interval was read at."""
    import importlib.util

    from scipy import stats

    from fedbench.results.sequential import Design

    spec = importlib.util.spec_from_file_location("reread_claims", Path(__file__).parents[1] / "benchmarks" / "reread_claims.py")
    reread = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reread)
    design = Design((3, 5, 7, 10), 0.05)
    c4 = stats.t.ppf(1 - 0.0125, 4)
    early = reread.cell_reading(f"+3.70 [{3.7 - c4:+.4f}, {3.7 + c4:+.4f}]", "0, 1, 2, 3, 4, 5, 6 (7 of 10); look 2 of 4",
                                "holds", "the direction the paper reports", design.looks)
    assert (early["n"], early["look"]) == (5, 1)  # the look's 5 seeds, not the claim's 7
    result = reread.reread(early, design, 0.0, False)
    assert result["after"] == reread.NOT_RUN and result["c_new"] == pytest.approx(design.critical[1], abs=1e-9)
    assert result["low_new"] == pytest.approx(3.7 - design.critical[1], abs=1e-3)
    c9 = stats.t.ppf(1 - 0.0125, 9)
    cap = reread.cell_reading(f"+2.30 [{2.3 - c9:+.4f}, {2.3 + c9:+.4f}]; detectable: ±3.57",
                              "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (10 of 10); look 4 of 4", "inconclusive", "", design.looks)
    result = reread.reread(cap, design, 0.0, False)
    assert result["after"] == HOLDS and result["low_new"] == pytest.approx(2.3 - design.critical[3], abs=1e-3)
    left_out = reread.cell_reading("+2.30 [-0.50, +5.10]", "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (10 of 10); look 4 of 4",
                                   "inconclusive", "the seeds cannot tell; left out: b diverged (seed 3, 7)", design.looks)
    assert left_out["n"] == 8


# ---- sigma_d read back from a report's intervals (benchmarks/claims_spread.py) ----


def test_claims_spread_reads_sigma_d_back_from_an_interval_at_either_boundary():
    """Per-seed differences 1, 3, 2, 4, 5 (n = 5, sigma_d = sqrt(2.5) = 1.5811) read at the second look of
    3/5/7/10: the interval is 3 +- c se with se = sigma_d / sqrt(5) and c the look's critical t -- the
    spending boundary's c_2 in a section with its mark, Bonferroni's t(1 - 0.05/4, 4) = 3.4954 in one
    decided before it.  Both sections give sigma_d back (to the report's 2 decimals), a threshold claim
    (no pair) is left out, and the ratio of two equal spreads is 1."""
    import importlib.util
    import math

    from scipy import stats

    from fedbench.results.claims import BOUNDARY_MARK, LOOKS_MARK
    from fedbench.results.sequential import Design

    spec = importlib.util.spec_from_file_location("claims_spread", Path(__file__).parents[1] / "benchmarks" / "claims_spread.py")
    spread = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spread)
    sd, se = math.sqrt(2.5), math.sqrt(2.5) / math.sqrt(5)
    c_boundary = Design((3, 5, 7, 10), 0.05).critical[1]
    c_bonferroni = stats.t.ppf(1 - 0.05 / 4, 4)
    assert c_bonferroni == pytest.approx(3.4954, abs=1e-4)

    def section(name: str, mark: str, c: float) -> str:
        head = "| claim | source | cell | comparison | paper's margin | at the paper's setting | seeds | verdict | reading |"
        seeds = "0, 1, 2, 3, 4, 5, 6 (7 of 10); look 2 of 4"
        return "\n".join([f"## {name}", LOOKS_MARK, mark, "", head, "|:--|:--|:--|:--|:--|:--|:--|:--|:--|",
                          f"| a_beats_b | s | e / d / p / m | a − b (accuracy) | | +3.00 [{3 - c * se:+.2f}, {3 + c * se:+.2f}] "
                          f"| {seeds} | **holds** | r |",
                          f"| a_recovers | s | e / d / p / m | a ≥ 0.9 (ari) | | +0.95 [+0.90, +1.00] | {seeds} | **holds** | r |", ""])

    now = section("FeMAM", f"{BOUNDARY_MARK}looks=3,5,7,10 alpha=0.05 spending=hsd(-2) -->", c_boundary)
    before = section("FeMAM", "", c_bonferroni)
    after, earlier = spread.spreads(now, "FeMAM"), spread.spreads(before, "FeMAM")
    assert list(after["claim"]) == ["a_beats_b"] and int(after["n"].iloc[0]) == 5
    assert after["sigma_d"].iloc[0] == pytest.approx(sd, abs=0.01 * math.sqrt(5) / c_boundary)
    assert earlier["sigma_d"].iloc[0] == pytest.approx(sd, abs=0.01 * math.sqrt(5) / c_bonferroni)
    assert spread.compare(after, earlier)["ratio"].iloc[0] == pytest.approx(1.0, abs=0.01)
