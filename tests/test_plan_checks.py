"""Issue 58: what the last round added (tuning, claims, tracking, plugins, paths, YAML, data) is checked
when the workflow plans, through the command line as a user runs it (``snakemake -n``): a bad config
stops with one line naming the config path, the value and what is accepted; the unusual but valid keeps
planning.  Every dry run of the module runs once, two at a time (:func:`dry_runs`), and each test reads
its own: one per category and every case that depends on the command line; the other values are checked
as ``workflow/rules/common.smk`` checks them, in this process (:data:`VALUES`)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fedbench.config.files import normalise_config
from fedbench.planning.validate import Workplace, validate_config
from fedbench.tuning.trials import trial_settings
from test_workflow import REPO, SNAKEMAKE, TINY_CONFIG, planned_jobs

TINY = yaml.safe_load(TINY_CONFIG.read_text())
REFUSED = "Invalid fedbench config: "


def tiny(**changes) -> dict:
    config = copy.deepcopy(TINY)
    config.update(changes)
    return config


def tuned(**tune) -> dict:
    """The tiny suite on one partition, tuned with 3 trials on seed 50 (``tune`` over that)."""
    config = tiny()
    config["experiments"]["tiny"]["grid"][0]["partitions"] = ["dir0.5"]
    config["experiments"]["tiny"]["tune"] = {"trials": 3, "seeds": [50], **tune}
    return config


def with_ifca(config: dict, **entry) -> dict:
    config["algorithms"]["ifca"] = {"method": "ifca", **entry}
    config["experiments"]["tiny"]["grid"][0]["algorithms"].append("ifca")
    return config


def claimed(config: dict | None = None, **claim) -> dict:
    config = tiny() if config is None else config
    config["claims"] = {"c": {"source": "hand-made", "experiment": "tiny", **claim}}
    return config


def clustered_claim() -> dict:
    """ARI of two clustering methods, on the iid partition, which plants no clusters."""
    config = with_ifca(tiny())
    config["algorithms"]["cfl"] = {"method": "cfl"}
    config["experiments"]["tiny"]["grid"][0]["algorithms"].append("cfl")
    return claimed(config, better="ifca", than="cfl", metric="ari", cells={"partitions": ["iid"]})


def left_out_claim() -> dict:
    """A claim on experiment ``tiny`` while only_experiments runs ``other`` alone."""
    config = claimed(better="fedavg", than="local")
    config["experiments"]["other"] = copy.deepcopy(config["experiments"]["tiny"])
    config["only_experiments"] = ["other"]
    return config


def with_design(looks) -> dict:
    config = claimed(better="fedavg", than="local")
    config["claims_design"] = {"looks": looks}
    return config


def keeps_planning() -> dict:
    """Valid but unusual, in one config: one tuning trial, looks equal to the seeds, a time-to-target
    claim, channels_last on an MLP."""
    config = tuned(trials=1)
    config["experiments"]["tiny"]["training"]["channels_last"] = True
    config["claims_design"] = {"looks": [1]}
    config["claims"] = {"faster": {"source": "hand-made", "experiment": "tiny", "better": "fedavg", "than": "local",
                                   "metric": "rounds_to_target", "target": 50}}
    return config


EXITING_PLUGIN = "import argparse\n\nparser = argparse.ArgumentParser()\nparser.add_argument('--beta')\nparser.parse_args()\n"

# case -> (config or YAML text, extra command-line arguments, the key the one line names, a fragment of it):
# through ``snakemake -n``, one case per category and every case that depends on the command line
STOPS = {
    "misspelt_knob": (tuned(knobs={"momentun": [0.1, 0.9]}), (), "experiments.tiny.tune.knobs.momentun", "did you mean 'momentum'"),
    "left_out_claim": (left_out_claim(), ("claims",), "claims.c.experiment", "left out by only_experiments"),
    "tensorboard_missing": (tiny(tensorboard=True), (), "tensorboard", "pip install -e '.[tensorboard]'"),
    "exiting_plugin": (tiny(plugins=["exiting_plugin"]), (), "plugins", "plugin 'exiting_plugin'"),
    "recursive_anchor": ("loop: &loop [0, *loop]\n", (), "loop[1]", "recursive YAML anchor"),
    # data: FLT's grid with only its MNIST table names only the MNIST family, never CIFAR
    "flt_mnist_without_data": (REPO / "config" / "experiments" / "flt.yaml",
                               ("--replace-workflow-config", "--config", "only_experiments=[table1_mnist]", "data_root=nodata"),
                               "datasets.emnist_balanced", "set missing_data: skip"),
}

# the same for the other tuning and claims values, checked as workflow/rules/common.smk checks them
# (normalise_config, then validate_config at the workplace), without a process each
VALUES = {
    "momentum_over_one": (tuned(knobs={"momentum": [0.5, 1.5]}), "experiments.tiny.tune.knobs.momentum", "1.5"),
    "negative_lr": (tuned(knobs={"lr": [-0.1, 0.1]}), "experiments.tiny.tune.knobs.lr", "-0.1"),
    "batch_size_zero": (tuned(knobs={"batch_size": [0, 10]}), "experiments.tiny.tune.knobs.batch_size", "minimum of 1"),
    "fractional_epochs": (tuned(knobs={"local_epochs": [0.5, 1]}), "experiments.tiny.tune.knobs.local_epochs", "integer"),
    "clusters_over_clients": (with_ifca(tuned(knobs={"num_clusters": [2, 500]})),
                              "experiments.tiny.tune.knobs.num_clusters", "exceed the 4 clients"),
    "entry_clusters_over_clients": (with_ifca(tiny(), num_clusters=500), "algorithms.ifca.num_clusters", "at most 4"),
    "holdout_near_one": (tuned(holdout=0.999), "experiments.tiny.tune.holdout", "maximum of 0.5"),
    "reversed_range": (tuned(knobs={"momentum": {"log": [0.9, 0.1]}}), "experiments.tiny.tune.knobs.momentum",
                       "needs 0 < low < high"),
    "relative_of_zero": (tuned(knobs={"weight_decay": {"relative": [0.5, 2.0]}}),
                         "experiments.tiny.tune.knobs.weight_decay", "needs a positive configured value"),
    "relative_over_bound": (tuned(knobs={"momentum": {"relative": [0.5, 4.0]}}), "experiments.tiny.tune.knobs.momentum",
                            "high end"),
    "ari_of_fedavg": (claimed(better="fedavg", than="local", metric="ari"), "claims.c.metric", "algorithms.fedavg"),
    "huge_seed_cap": (with_design([1, 10_000_000]), "claims_design.looks[1]", "maximum of 1000"),
    "plugin_registers_nothing": (tiny(plugins=["json"]), "plugins", "plugin 'json'"),
    "global_of_local": (claimed(better="fedavg", than="local", metric="global_accuracy"), "claims.c.metric", "algorithms.local"),
    "ari_on_iid": (clustered_claim(), "claims.c.metric", "partitions.iid (kind 'iid') plants none"),
    "itself": (claimed(better="fedavg", than="fedavg"), "claims.c.than", "two different algorithm entries"),
    "unreachable": (claimed(algorithm="fedavg", at_least=150), "claims.c.at_least", "[0, 100]"),
    "check_data_as_a_word": (tiny(check_data="maybe"), "check_data", "write true or false"),
}

# case -> (config, extra command-line arguments, what the plan's output holds)
PLANS = {
    "unusual_but_valid": (keeps_planning(), (), "fedbench plan: "),
    "check_data_false_string": (tiny(datasets={"digits": {"source": "mnist"}}, data_root="nodata"),
                                ("--config", "check_data=false"), "fedbench plan: "),  # MNIST's files are not there
    "results_in_home": (tiny(results="~/fedbench-results"), (), "HOME/fedbench-results/runs/tiny"),
    "results_outside": (tiny(results="../outside"), (), "outside the repository and the working directory"),
    "only_mnist_on_disk": (REPO / "config" / "experiments" / "flt.yaml",
                           ("--replace-workflow-config", "--config", "only_experiments=[table1_mnist]", "missing_data=skip",
                            "data_root=mnist_only"), "left_out"),
}


def dry_run(workdir: Path, config, args=(), env=None) -> subprocess.CompletedProcess:
    """``snakemake -n`` in ``workdir`` on ``config`` (a dict, YAML text or a file); stdout and stderr merged."""
    workdir.mkdir(parents=True, exist_ok=True)
    if isinstance(config, Path):
        configfile = config
    else:
        configfile = workdir / "config.yaml"
        configfile.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    command = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "-n", *args,
               "--configfile", str(configfile)]  # last: --configfile takes every word after it
    return subprocess.run(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600, env=env)


def mnist_only(root: Path) -> None:
    """MNIST's four IDX files (empty: planning looks for them, never reads them) and nothing else."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (raw / name).touch()


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every case's dry run, two at a time: case -> (its working directory, the finished process)."""
    root = tmp_path_factory.mktemp("plan_checks")
    home, plugins = root / "home", root / "plugins"
    home.mkdir()
    plugins.mkdir()
    (plugins / "exiting_plugin.py").write_text(EXITING_PLUGIN)
    no_tensorboard = plugins / "no_tensorboard" / "tensorboard"  # the package, made unimportable whether installed or not
    no_tensorboard.mkdir(parents=True)
    (no_tensorboard / "__init__.py").write_text("raise ImportError('No module named tensorboard (hidden by the test)')\n")
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join(
        [str(plugins), str(no_tensorboard.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    jobs = {}
    for case, (config, args, *_) in {**STOPS, **PLANS}.items():
        workdir = root / case / "work"
        jobs[case] = (workdir, config, args)
    mnist_only(jobs["only_mnist_on_disk"][0] / "mnist_only")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case: pool.submit(dry_run, workdir, config, args, env) for case, (workdir, config, args) in jobs.items()}
        return {case: (jobs[case][0], future.result()) for case, future in futures.items()}


def refusal(process: subprocess.CompletedProcess) -> str:
    """The one line planning refused the config with (no traceback, nothing before the plan)."""
    assert process.returncode != 0, process.stdout[-3000:]
    lines = [line for line in process.stdout.splitlines() if REFUSED in line]
    assert len(lines) == 1, process.stdout[-3000:]
    assert "Traceback" not in process.stdout and "RecursionError" not in process.stdout, process.stdout[-3000:]
    assert "Building DAG of jobs" not in process.stdout  # stopped before any job was planned
    return lines[0].split(REFUSED, 1)[1]


@pytest.mark.parametrize("case", list(STOPS))
def test_a_bad_config_stops_planning_with_one_line_naming_the_key(dry_runs, case):
    _, process = dry_runs[case]
    line = refusal(process)
    _, _, key, fragment = STOPS[case]
    assert line.startswith(f"{key}:") or line.startswith(f"{key} "), line
    assert fragment in line, line


@pytest.mark.parametrize("case", list(VALUES))
def test_a_bad_value_stops_planning_with_one_line_naming_the_key(tmp_path, case):
    config, key, fragment = copy.deepcopy(VALUES[case][0]), *VALUES[case][1:]
    with pytest.raises(ValueError) as caught:
        normalise_config(config)
        validate_config(config, workplace=Workplace(REPO, tmp_path))
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{key}:"), line
    assert fragment in line, line


def test_booleans_and_paths_read_as_the_command_line_meant(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = normalise_config({"check_data": "false", "allow_long": "Yes", "tensorboard": "off",
                               "results": "$HOME/r", "data_root": "~/d"})
    assert config == {"check_data": False, "allow_long": True, "tensorboard": False,
                      "results": f"{tmp_path}/r", "data_root": f"{tmp_path}/d"}


def test_integer_knobs_are_drawn_as_integers_inside_their_bounds():
    config = tuned(trials=9, knobs={"batch_size": {"relative": [0.5, 2.0]}, "local_epochs": {"log": [1, 4]}})
    for algorithm in ("fedavg", "local"):
        for setting in trial_settings(config, "tiny", algorithm)[1:]:
            batch, epochs = setting["training"]["batch_size"], setting["training"]["local_epochs"]
            assert type(batch) is int and 10 <= batch <= 40 and type(epochs) is int and 1 <= epochs <= 4, setting


def test_the_flt_mnist_table_asks_for_the_mnist_family_only(dry_runs):
    line = refusal(dry_runs["flt_mnist_without_data"][1])
    assert "datasets.mnist:" in line and "cifar" not in line.lower(), line


def test_a_plugin_exiting_at_import_is_named_and_its_usage_line_hidden(dry_runs):
    process = dry_runs["exiting_plugin"][1]
    line = refusal(process)
    assert "exits when imported" in line and "usage:" not in process.stdout.replace(line, ""), process.stdout[-2000:]


@pytest.mark.parametrize("case", list(PLANS))
def test_the_unusual_but_valid_keeps_planning(dry_runs, case):
    workdir, process = dry_runs[case]
    assert process.returncode == 0, process.stdout[-3000:]
    expected = PLANS[case][2].replace("HOME", str(workdir.parents[1] / "home"))
    assert expected in process.stdout, process.stdout[-3000:]


def test_one_trial_equal_looks_time_to_target_and_channels_last_plan_their_jobs(dry_runs):
    jobs = planned_jobs(dry_runs["unusual_but_valid"][1].stdout)
    assert jobs["tune_trial"] == 2 and jobs["train_tuned"] == 2 and jobs["claims_look"] == 2, jobs  # 1 trial per method


def test_only_the_cells_whose_data_is_there_are_planned_and_the_rest_listed(dry_runs):
    process = dry_runs["only_mnist_on_disk"][1]
    jobs = planned_jobs(process.stdout)
    assert jobs["left_out"] == 1 and jobs["train_cell"] < 24, jobs  # 8 algorithms x 3 seeds in the whole table
    assert "results/flt/tables/left_out.md" in process.stdout


def test_a_yaml_file_with_a_tab_is_one_line_with_its_line_number(tmp_path):
    """``make cost`` reads the file itself: one line with the line number.  A ``--configfile`` is read by
    Snakemake first, which stops with its own message (docs/configuration.md)."""
    configfile = tmp_path / "tab.yaml"
    configfile.write_text("seeds: [0]\nexperiments:\n\ttiny: {}\n")
    process = subprocess.run([sys.executable, "-m", "fedbench.planning.cost_report", str(configfile)], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 2 and process.stdout == ""
    assert process.stderr.strip() == (f"fedbench cost: {configfile}: line 3: not valid YAML (found character '\\t' that "
                                      "cannot start any token); YAML indents with spaces, never tabs"), process.stderr
