"""The job a training run receives: a cell resolved with its device and inputs (``CellJob``), passed
as plain values and read back unchanged, made without a plan by ``cell_job``; and the code a cell's
run imports, which holds no cost model and no config checks (the plan's, not the job's)."""

import glob
import json
from pathlib import Path

import pytest
import torch

from fedbench.config.cells import Cell, expand_cells, resolve_cell
from fedbench.config.files import load_yaml_strict
from fedbench.run.job import CellJob, cell_job
from fedbench.run.partition_job import build_partition
from fedbench.run.provenance import cell_roots, code_modules
from fedbench.run.stages import run_cell
from conftest import tiny_digits_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "config" / "config.yaml", *sorted(Path(p) for p in glob.glob(str(ROOT / "config" / "experiments" / "*.yaml")))]
CELL = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
# modules a run must not import: the cost model and the config's checks belong to the plan
NOT_RUN = ("fedbench.cost", "fedbench.config.checks", "fedbench.planning", "fedbench.tuning", "fedbench.results")


def test_cell_job_resolves_the_cell_and_its_inputs():
    config = {**tiny_digits_config(rounds=2), "results": "out", "data_root": "/data", "plugins": ["my_plugin"],
              "tensorboard": True}
    job = cell_job(config, CELL)
    assert job.spec == resolve_cell(config, CELL) and job.cell == CELL
    assert (job.device, job.device_reason) == ("cpu", "device: cpu (the config's)")
    assert (job.data_root, job.encoders, job.plugins, job.tensorboard, job.results) == ("/data", "out/encoders", ("my_plugin",), True, "out")
    defaults = cell_job({k: v for k, v in tiny_digits_config().items() if k not in ("results", "device")}, CELL)
    assert (defaults.data_root, defaults.encoders, defaults.plugins, defaults.tensorboard) == ("data", "results/encoders", (), False)


def test_cell_job_under_auto_takes_the_gpu_where_there_is_one_without_the_cost_model(monkeypatch):
    config = {**tiny_digits_config(), "device": "auto"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (cell_job(config, CELL).device, cell_job(config, CELL).device_reason) == ("cpu", "device auto: no CUDA available")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    job = cell_job(config, CELL)
    assert job.device == "cuda" and job.device_reason.startswith("device auto: cuda")
    planned = cell_job(config, CELL, "cpu", "device auto: the CPU is estimated faster: cpu 3 s vs cuda 80 s")
    assert (planned.device, planned.device_reason) == ("cpu", "device auto: the CPU is estimated faster: cpu 3 s vs cuda 80 s")


def test_a_job_never_trains_on_auto():
    with pytest.raises(ValueError, match="not auto"):
        CellJob(cell=CELL, spec={}, device="auto", device_reason="")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_cells_job_reads_back_from_plain_values_and_its_code_holds_no_plan(path):
    """Every cell of the shipped configs: its job through JSON (a Snakemake param) is the same job,
    and the code its run imports (what provenance hashes) has no cost model, config check, plan,
    tuning or results module."""
    config = load_yaml_strict(path)
    roots = set()
    for cell in expand_cells(config):
        job = cell_job(config, cell)
        assert CellJob.from_params(json.loads(json.dumps(job.as_params()))) == job
        roots.add(tuple(cell_roots(job.spec)))
    for entry in sorted(roots):
        assert entry[0] == "fedbench.run.stages"
        planning = [m for m in code_modules(*entry) if m.startswith(NOT_RUN)]
        assert not planning, f"a cell's run ({entry}) imports {planning}"


def test_a_job_read_back_from_its_params_runs_to_the_same_outputs(tmp_path):
    config = tiny_digits_config(rounds=3, batch_size=16, lr=0.1, participation=0.5, eval_every=1)
    build_partition(config, "digits", "dir", 0, tmp_path / "p.npz", tmp_path / "p.json")
    job = cell_job(config, CELL)
    direct = run_cell(job, tmp_path / "p.npz", tmp_path / "direct")
    read_back = run_cell(CellJob.from_params(json.loads(json.dumps(job.as_params()))), tmp_path / "p.npz", tmp_path / "read")
    run_only = ("wall_time_s", "peak_memory")
    assert {k: v for k, v in direct.items() if k not in run_only} == {k: v for k, v in read_back.items() if k not in run_only}
    for name in ("history.csv", "clients.csv"):
        assert (tmp_path / "direct" / name).read_bytes() == (tmp_path / "read" / name).read_bytes()
