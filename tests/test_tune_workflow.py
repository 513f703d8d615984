"""Tuning and the claims' looks through the workflow (workflow/rules/tune.smk, claims.smk): what a plan
schedules, and (slow) a whole tuned run whose claims are read at the paper's setting and tuned."""

import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from fedbench.planning.workflow import WorkflowPlan
from test_workflow import REPO, TINY_CONFIG, planned_jobs, snakemake, write_config


def tuned_config(path, looks=(2, 3)) -> dict:
    """The tiny suite on one partition with 2 pilot seeds, 3 trials per method on seed 50, one claim."""
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["seeds"] = [0, 1]
    config["claims_design"] = {"looks": list(looks), "alpha": 0.05}
    experiment = config["experiments"]["tiny"]
    experiment["grid"][0]["partitions"] = ["dir0.5"]
    experiment["tune"] = {"trials": 3, "seeds": [50]}
    config["claims"] = {"fedavg_beats_local": {"source": "hand-made", "experiment": "tiny", "better": "fedavg",
                                               "than": "local"}}
    write_config(path, config)
    return config


def test_a_tuned_plan_schedules_trials_choices_tuned_runs_and_the_first_looks(tmp_path):
    """Per method 3 trials x 1 tuning seed, one choice, the tuned runs on the 2 pilot seeds; the claims'
    first look at each setting (a checkpoint: later looks are planned once it has run)."""
    configfile = tmp_path / "tuned.yaml"
    tuned_config(configfile)
    jobs = planned_jobs(snakemake(tmp_path, "-n", configfile=configfile).stdout)
    assert {k: jobs.get(k) for k in ("train_cell", "tune_trial", "tune_select", "train_tuned", "tuning_figure",
                                     "claims_look", "paper_claims", "partition")} == {
        "train_cell": 4, "tune_trial": 6, "tune_select": 2, "train_tuned": 4, "tuning_figure": 1,
        "claims_look": 2, "paper_claims": 1, "partition": 3}  # partitions: seeds 0, 1 and the tuning seed 50


def test_the_claims_target_plans_only_what_the_claims_read(tmp_path):
    """``snakemake claims``: the claimed algorithms' runs, trials and tuned runs, and the looks; an
    algorithm no claim compares (FedProx here) is neither run nor tuned, no other table or figure is made,
    and the one sensitivity figure draws the compared methods' trials (FedProx's would be 3 more trials)."""
    configfile = tmp_path / "tuned.yaml"
    config = tuned_config(configfile)
    config["algorithms"]["fedprox"] = {"method": "fedprox"}
    config["experiments"]["tiny"]["grid"][0]["algorithms"].append("fedprox")
    write_config(configfile, config)
    process = snakemake(tmp_path, "-n", configfile=configfile)
    everything = planned_jobs(process.stdout)
    assert (everything["train_cell"], everything["tune_trial"], everything["train_tuned"]) == (6, 9, 6)
    assert "fedbench plan: 21 training jobs, ≈ " in process.stdout  # the estimate counts what the target runs
    process = snakemake(tmp_path, "-n", "claims", configfile=configfile)
    assert "fedbench plan (target claims): 14 training jobs, ≈ " in process.stdout
    jobs = planned_jobs(process.stdout)
    assert jobs == {"partition": 3, "train_cell": 4, "tune_trial": 6, "tune_select": 2, "train_tuned": 4,
                    "claims_look": 2, "paper_claims": 1, "claims_tuning_figure": 1, "claims": 1}, jobs


def job_priorities(output: str) -> dict[tuple, int]:
    """(rule, algorithm, seed, trial) -> priority of every training job a dry run lists (0 where it prints none)."""
    priorities = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        rule = re.match(r"(?:local)?rule (\w+):", block.strip())
        wildcards = re.search(r"wildcards: (.*)", block)
        if rule and wildcards and rule[1] in ("train_cell", "tune_trial", "train_tuned"):
            w = dict(item.split("=") for item in wildcards[1].split(", "))
            priority = re.search(r"priority: (\d+)", block)
            priorities[(rule[1], w["algorithm"], int(w["seed"]), w.get("trial"))] = int(priority[1]) if priority else 0
    return priorities


def test_the_runs_an_open_claim_waits_for_run_first(tmp_path):
    """Priorities: the claimed methods' runs of the next look and their trials above FedProx's (no claim
    reads it), paper-setting runs above tuned ones; once a look closes the claim, its runs lose the lead,
    and a look that leaves it open gives the next look's seed the lead, below a first look's."""
    configfile = tmp_path / "tuned.yaml"
    config = tuned_config(configfile)
    config["algorithms"]["fedprox"] = {"method": "fedprox"}
    config["experiments"]["tiny"]["grid"][0]["algorithms"].append("fedprox")
    write_config(configfile, config)
    first = job_priorities(snakemake(tmp_path, "-n", configfile=configfile).stdout)
    assert first[("train_cell", "fedavg", 0, None)] == first[("train_cell", "local", 1, None)] == 1 + 10 + 2
    assert first[("train_cell", "fedprox", 0, None)] == 1
    assert first[("tune_trial", "fedavg", 50, "0")] == 10 + 2 + 1 and first[("tune_trial", "fedprox", 50, "0")] == 0
    assert first[("train_tuned", "local", 0, None)] == 10 + 2 and first[("train_tuned", "fedprox", 0, None)] == 0
    looks = tmp_path / "results" / "claims" / "default"
    (looks / "paper").mkdir(parents=True)
    (looks / "paper" / "look0.json").write_text(json.dumps({"done": True, "open": [], "seeds": [0, 1]}))
    (looks / "tuned").mkdir(parents=True)
    (looks / "tuned" / "look0.json").write_text(json.dumps({"done": False, "open": ["fedavg_beats_local"], "seeds": [0, 1]}))
    later = job_priorities(snakemake(tmp_path, "-n", configfile=configfile).stdout)
    assert later[("train_cell", "fedavg", 0, None)] == 1  # the paper-setting claim is decided
    # the second look's seed (planned once the look's checkpoint has run: asked of the plan directly)
    plan = WorkflowPlan({**config, "results": str(tmp_path / "results")}, REPO)
    tuned = plan.run_priority("tuned")
    assert tuned(SimpleNamespace(experiment="tiny", dataset="digits", partition="dir0.5", model="mlr",
                                 algorithm="fedavg", seed="2")) == 10 + 1  # below a first look's
    assert plan.run_priority("train")(SimpleNamespace(experiment="tiny", dataset="digits", partition="dir0.5",
                                                      model="mlr", algorithm="fedavg", seed="0")) == 1


@pytest.mark.slow
def test_a_tuned_run_reads_each_claim_at_both_settings(tmp_path):
    """The whole DAG: trials, selection on validation rows, tuned runs, looks adding seeds to an open
    claim, the claims table with both settings side by side and the sensitivity figure."""
    configfile = tmp_path / "tuned.yaml"
    tuned_config(configfile)
    snakemake(tmp_path, "--cores", "2", configfile=configfile)
    results = tmp_path / "results"
    table = pd.read_csv(results / "tables" / "default" / "claims.csv")
    assert sorted(table["setting"]) == ["paper", "tuned"]
    for setting in ("paper", "tuned"):
        looks = sorted((results / "claims" / "default" / setting).glob("look*.json"))
        last = json.loads(looks[-1].read_text())
        assert last["done"]
        row = table[table["setting"] == setting].iloc[0]
        assert row["seeds_run"] == last["seeds"].__len__() if row["verdict"] == "inconclusive" else True
        if len(looks) > 1:  # a look added seed 2 to the open claim: its runs exist
            root = results / ("runs" if setting == "paper" else "tuned/runs")
            assert (root / "tiny" / "digits" / "dir0.5" / "mlr" / "fedavg" / "seed2" / "metrics.json").exists()
    chosen = json.loads((results / "tuning" / "tiny" / "digits" / "dir0.5" / "mlr" / "fedavg" / "chosen.json").read_text())
    assert chosen["trials"] == 3 and chosen["seeds"] == [50] and chosen["metric"] == "val_acc_mean"
    assert (results / "figures" / "tuning_tiny.png").stat().st_size > 0
    assert "survives tuning" in (results / "tables" / "default" / "claims.md").read_text()
