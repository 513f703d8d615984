"""Planning refuses what the jobs would hit (``fedbench.planning.preflight``, run by ``validate_config``
given the workplace): a results folder where outputs do not belong, a dataset that is not on
disk, a cell that would run for more than 7 days; each in one line that names the key, with
nothing written.  The checks are called as the Snakefile calls them; the dry runs that show the
wiring: test_paper_partitions (a missing dataset, ``check_data: false``), test_workflow (the estimate)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import Workplace, validate_config
from fedbench.planning.preflight import check_workplace, duration, plan_device, results_problem
from test_workflow import REPO, TINY_CONFIG

TINY = yaml.safe_load(TINY_CONFIG.read_text())


def tree(root: Path) -> set[str]:
    """Every path under ``root`` but Snakemake's own ``.snakemake/``."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".snakemake" not in p.relative_to(root).parts}


def refusal(config: dict, place: Workplace) -> str:
    """The one line ``validate_config`` refuses ``config`` with at ``place``; nothing is written there."""
    before = tree(place.workdir)
    with pytest.raises(ConfigError) as caught:
        validate_config(config, workplace=place)
    assert tree(place.workdir) == before
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def tiny(**changes) -> dict:
    config = copy.deepcopy(TINY)
    config.update(changes)
    return config


# ---- where results go ----------------------------------------------------------------------


@pytest.mark.parametrize("results, problem", [
    ("/", "is the filesystem root"),
    ("HOME", "is a home directory"),
    (str(REPO), "is the repository root"),
    (str(REPO.parent), "contains the repository"),
    pytest.param(str(REPO / "docs"), "holds the repository's own files (docs/",
                 marks=pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")),
    ("afile", "is an existing file"),
    ("afile/results", "lies under"),
])
def test_results_where_outputs_do_not_belong_is_refused(tmp_path, monkeypatch, results, problem):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "afile").write_text("not a folder\n")
    results = str(tmp_path / "home") if results == "HOME" else results
    message = refusal(tiny(results=results), Workplace(REPO, tmp_path))
    assert message.startswith(f"results: {results!r} {problem}") and "a folder of its own" in message, message


def test_results_in_a_folder_of_its_own_plans(tmp_path):
    for results in ("results", "tests/data/not_yet_there"):  # inside the repository, a folder of its own
        assert results_problem(REPO / results, REPO) is None
    assert results_problem(tmp_path / "a" / "b", REPO) is None
    assert validate_config(tiny(results="out"), workplace=Workplace(REPO, tmp_path)) is not None


# ---- whether the data is there -------------------------------------------------------------


def with_datasets(**datasets) -> dict:
    """The tiny config whose one grid block also reads ``datasets`` (name -> entry)."""
    config = tiny(data_root="data")
    config["datasets"].update(datasets)
    config["experiments"]["tiny"]["grid"][0]["datasets"] += list(datasets)
    return config


def test_every_missing_dataset_is_named_at_once_with_its_loaders_message(tmp_path):
    config = with_datasets(cifar=dict(source="cifar10"), letters=dict(source="emnist", split="letters"))
    config["datasets"]["unused"] = {"source": "cifar100"}  # declared, read by no cell: not checked
    message = refusal(config, Workplace(REPO, tmp_path))
    data = tmp_path / "data"
    assert message.startswith(f"datasets.cifar: dataset 'cifar10' not found: expected in {data / 'cifar-10-batches-py'}: ")
    assert f"; datasets.letters: dataset 'emnist' not found: expected in {data / 'EMNIST' / 'raw'}: " in message
    assert "emnist-letters-train-images-idx3-ubyte" in message and "unused" not in message and "digits" not in message
    assert message.endswith("set check_data: false")


def test_data_on_disk_download_true_or_check_data_false_plans(tmp_path):
    place = Workplace(REPO, tmp_path)
    assert validate_config(with_datasets(cifar=dict(source="cifar10", download=True)), workplace=place)
    unchecked = with_datasets(cifar=dict(source="cifar10"))
    unchecked["check_data"] = False  # a cluster whose compute nodes see other disks
    assert validate_config(unchecked, workplace=place)
    raw = tmp_path / "data" / "MNIST" / "raw"  # IDX files left gzip-compressed count: the job decompresses them
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (raw / f"{name}.gz").write_bytes(b"")
    assert validate_config(with_datasets(mnist=dict(source="mnist")), workplace=place)
    assert sorted(p.name for p in raw.iterdir())[0].endswith(".gz")  # planning decompressed nothing


def test_an_encoders_dataset_is_checked(tmp_path):
    config = tiny(encoders={"enc": {"dataset": "fmnist", "epochs": 1}})
    config["datasets"]["fmnist"] = {"source": "fashion_mnist"}  # (tests never see Debian's copy: conftest)
    assert refusal(config, Workplace(REPO, tmp_path)).startswith("datasets.fmnist: dataset 'fashion_mnist' not found")


# ---- whether the run can end ---------------------------------------------------------------


def long_config(**training) -> dict:
    config = tiny()
    config["experiments"]["tiny"]["training"].update(training)
    return config


def test_a_cell_over_seven_days_is_refused_naming_the_setting_that_drives_it(tmp_path):
    place = Workplace(REPO, tmp_path)
    message = refusal(long_config(rounds=10_000_000_000), place)
    assert message.startswith("experiments.tiny.training.rounds = 10000000000: the largest cell, tiny/digits/")
    assert "years on the CPU, over the 7-day limit per cell" in message and message.endswith("set allow_long: true")
    message = refusal(long_config(rounds=10, local_epochs=1_000_000_000), place)  # rounds at the default would be longer
    assert message.startswith("experiments.tiny.training.local_epochs = 1000000000:"), message
    allowed = long_config(rounds=10_000_000_000)
    allowed["allow_long"] = True
    estimate = validate_config(allowed, workplace=place)
    assert estimate.largest_seconds > 365 * 86400 and "years" in estimate.line()


def test_the_estimate_is_one_line_on_the_device_the_jobs_use(tmp_path):
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    line = check_workplace({**default, "device": "cpu"}, Workplace(REPO, tmp_path)).line()
    assert line.startswith("fedbench plan: 57 training jobs, ≈ ") and "CPU-hours (one CPU per job)" in line
    assert "; the largest cell, default/" in line and "\n" not in line
    on_gpu = check_workplace({**TINY, "device": "auto"}, Workplace(REPO, tmp_path, train_gpus=1))  # the SLURM profile: gpu 1
    assert "GPU-hours (one GPU per job)" in on_gpu.line()
    assert plan_device("auto", train_gpus=1) == "cuda" and plan_device("cuda:1") == "cuda" and plan_device("cpu", 1) == "cpu"
    assert [duration(s) for s in (59, 600, 7200, 8 * 86400, 3e9)] == ["59 s", "10 min", "2.0 h", "8.0 days", "95 years"]
    tuned = copy.deepcopy(TINY)  # 4 cells; tuned: 3 trials x 4 entries-and-cells, 4 tuned runs on seed 0
    tuned["experiments"]["tiny"]["tune"] = {"trials": 3, "seeds": [50]}
    assert check_workplace({**tuned, "device": "cpu"}, Workplace(REPO, tmp_path)).jobs == 4 + 12 + 4


def test_the_switches_are_booleans_of_the_schema():
    validate_config(tiny(check_data=False, allow_long=True))
    with pytest.raises(ValueError, match="check_data"):
        validate_config(tiny(check_data="no"))
