"""The workflow as a cluster user drives it: per-cell resources through the SLURM profile, an
all-diverged experiment, results tables merged across ``only_experiments`` invocations, and a
rule-script edit that retrains nothing.

One tiny config, two experiments of one cell each (digits, 4 IID clients, MLR, FedAvg, 3 rounds):
``tiny`` and ``blowup`` (lr 10^38: the MLR's weights overflow float32, every cell diverges; its
cross-entropy gradient is bounded, so a merely large rate such as 10^6 or 10^30 stays finite); run
once per module, one experiment per invocation.
"""

from __future__ import annotations

import json
import os
import re
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from test_workflow import REPO, TINY_CONFIG, planned_jobs, snakemake, write_config

from fedbench.config.cells import Cell, resolve_cell
from fedbench.cost import cell_cost, runtime_minutes, summary_shape


def two_experiments() -> dict:
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["partitions"] = {"iid": config["partitions"]["iid"]}
    config["algorithms"] = {"fedavg": {"method": "fedavg"}}
    grid = [{"datasets": ["digits"], "partitions": ["iid"], "models": ["mlr"], "algorithms": ["fedavg"]}]
    training = {**config["experiments"]["tiny"]["training"], "rounds": 3, "eval_every": 1}
    config["experiments"] = {
        "tiny": {"training": {**training, "memory_mb": 1000}, "grid": grid},
        "blowup": {"training": {**training, "lr": 1.0e38}, "grid": grid},
    }
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("two_experiments")
    configfile = write_config(workdir / "config.yaml", two_experiments())
    for experiment in ("tiny", "blowup"):  # one invocation each: the second must keep the first's rows
        snakemake(workdir, "--cores", "2", "--config", f"only_experiments=[{experiment}]", configfile=configfile)
    return workdir


@pytest.mark.slow  # the module's two workflow runs (~85 s); CI runs them in .ci/run's slow step
def test_an_all_diverged_experiment_builds_its_table_figure_and_report(runs):
    run = runs / "results" / "runs" / "blowup" / "digits" / "iid" / "mlr" / "fedavg" / "seed0"
    assert json.loads((run / "metrics.json").read_text())["status"] == "diverged"
    table = pd.read_csv(runs / "results" / "tables" / "results.csv").set_index("experiment")
    assert table.loc["blowup", "accuracy"] == "diverged" and table.loc["blowup", "diverged"] == 1
    assert (runs / "results" / "figures" / "curves_blowup.png").stat().st_size > 0
    report = runs / "report.html"
    snakemake(runs, "--report", str(report), "--config", "only_experiments=[blowup]", configfile=runs / "config.yaml")
    assert "curves_blowup.png" in report.read_text(errors="replace")


@pytest.mark.slow  # the module's two workflow runs (~85 s); CI runs them in .ci/run's slow step
def test_results_table_merges_the_experiments_on_disk(runs):
    markdown = (runs / "results" / "tables" / "results.md").read_text()
    assert "## tiny" in markdown and "## blowup" in markdown
    table = pd.read_csv(runs / "results" / "tables" / "results.csv")
    assert list(table["experiment"]) == ["tiny", "blowup"]
    assert 30 < table.set_index("experiment").loc["tiny", "accuracy_mean"] <= 100


@pytest.mark.slow  # the module's two workflow runs (~85 s); CI runs them in .ci/run's slow step
def test_editing_the_train_script_plans_no_retraining(runs):
    """Snakemake's ``code`` trigger compares a script's mtime with its outputs'; the workflow profile
    leaves it off, so a newer ``train.py`` (touched, content unchanged) plans nothing (the same
    invocation as the last run: a different ``only_experiments`` would redo the merged table)."""
    script = REPO / "workflow" / "scripts" / "train.py"
    stat = script.stat()
    future = time.time() + 60
    os.utime(script, (future, future))
    try:
        process = snakemake(runs, "-n", "--config", "only_experiments=[blowup]", configfile=runs / "config.yaml")
    finally:
        os.utime(script, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planned_jobs(process.stdout) == {}, process.stdout[-3000:]


def slurm_profile_without_executor(directory) -> str:
    """profiles/slurm with everything but ``executor: slurm`` (the plugin is not installed here)."""
    directory.mkdir()
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    (directory / "config.yaml").write_text(re.sub(r"(?m)^executor: slurm\n", "", text))
    return str(directory)


@pytest.mark.slow  # the module's two workflow runs (~85 s); CI runs them in .ci/run's slow step
def test_slurm_profile_requests_each_cells_own_memory_and_runtime(runs, tmp_path, monkeypatch):
    from snakemake.cli import get_argument_parser

    monkeypatch.setenv("FEDBENCH_SLURM_PARTITION", "cpu_part")
    monkeypatch.setenv("FEDBENCH_SLURM_GPU_PARTITION", "gpu_part")
    profile = slurm_profile_without_executor(tmp_path / "profile")
    args = get_argument_parser(profiles=[profile]).parse_args([])  # Snakemake's own parsing of the profile
    assert set(args.set_resources["train_cell"]) == {"slurm_partition", "gpu"}  # no mem_mb or runtime replaces the cells'

    config = yaml.safe_load((runs / "config.yaml").read_text())
    process = snakemake(runs, "-n", "--profile", profile, "--forcerun", "train_cell", configfile=runs / "config.yaml")
    requested = {}
    for block in process.stdout.split("rule train_cell:")[1:]:
        experiment = re.search(r"wildcards: experiment=(\w+)", block)[1]
        line = re.search(r"resources: (.*)", block)[1]  # the job's own line (later rules follow in the block)
        requested[experiment] = dict(re.findall(r"\b(mem_mb|runtime|gpu|slurm_partition)=([\w.]+)", line))
    assert set(requested) == {"tiny", "blowup"}
    summary = json.loads((runs / "results" / "partitions" / "digits" / "iid" / "seed0.json").read_text())
    for experiment, resources in requested.items():
        cost = cell_cost(resolve_cell(config, Cell(experiment, "digits", "iid", "mlr", "fedavg", 0)), summary_shape(summary), "cpu")
        assert resources == {"mem_mb": str(cost.mem_mb), "runtime": str(runtime_minutes(cost)), "gpu": "1",
                             "slurm_partition": "gpu_part"}, experiment
    # tiny's 1,000 MB working budget against blowup's default 2,048 MB: each cell asks for its own
    assert int(requested["blowup"]["mem_mb"]) - int(requested["tiny"]["mem_mb"]) == 1048


def test_a_diverged_curve_is_marked_with_its_round(saved_figures, tmp_path):
    from fedbench.results.figures import Curve, plot_training_curves

    rows = [{"round": 1, "train_loss": 2.0, "acc_mean": 0.4, "seed": 0, "algorithm": "fedavg", "diverged_round": np.nan},
            {"round": 2, "train_loss": 1.5, "acc_mean": 0.5, "seed": 0, "algorithm": "fedavg", "diverged_round": np.nan},
            {"round": 1, "train_loss": np.inf, "seed": 0, "algorithm": "wild", "diverged_round": 1.0}]
    histories = pd.DataFrame(rows).assign(experiment="e", dataset="d", partition="p", model="m")
    curves = [Curve("fedavg", "FedAvg", "acc_mean", "train_loss_pooled"), Curve("wild", "Wild", "acc_mean", "train_loss_pooled")]
    plot_training_curves(histories, tmp_path / "c.png", curves)
    figure = saved_figures[-1]
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["FedAvg", "Wild (1/1 diverged)"]
    accuracy = figure.axes[1]
    assert len([line for line in accuracy.get_lines() if list(line.get_xdata()) == [1, 1]]) == 1  # the dotted line at round 1
    assert any(t.get_text() == "diverged (round 1)" for t in accuracy.texts)
    plot_training_curves(histories[histories["algorithm"] == "wild"], tmp_path / "only_diverged.png", curves[1:])
    assert any(t.get_text() == "diverged (round 1)" for t in saved_figures[-1].axes[1].texts)


def test_a_train_script_edit_is_listed_by_provenance():
    from fedbench.run.provenance import CELL_SCRIPTS, changed_files, code_files

    roots = ["fedbench.run.stages"]
    now = code_files(roots, CELL_SCRIPTS)
    assert set(CELL_SCRIPTS) <= set(now)
    edited = {**now, "workflow/scripts/train.py": "0" * 16}
    assert changed_files({"code_files": edited}, roots, CELL_SCRIPTS) == ["workflow/scripts/train.py"]
    older = {k: v for k, v in now.items() if k not in CELL_SCRIPTS}  # recorded before scripts were hashed
    assert changed_files({"code_files": older}, roots, CELL_SCRIPTS) == []
