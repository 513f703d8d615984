"""The workflow's plan (fedbench.planning.workflow): the device each training job is given, and the job
itself as the rule's params -- the cell resolved under its trial's setting, read back by the run unchanged."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import torch

import fedbench.cost.rates as rates
from fedbench.config.cells import Cell, resolve_cell
from fedbench.planning.workflow import WorkflowPlan
from fedbench.run.job import CellJob
from fedbench.tuning.trials import trial_config

CONFIG = {
    "results": "unused", "device": "auto", "seeds": [0],
    "datasets": {"digits": {"source": "digits"}, "cifar": {"source": "cifar10"}},
    "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 5, "test_fraction": 0.25},
                   "iid": {"kind": "iid", "num_clients": 50, "test_fraction": 0.2}},
    "models": {"mlp": {"arch": "mlp", "hidden": [16]}, "resnet9": {"arch": "resnet9"}},
    "algorithms": {"local": {"method": "local"}, "fedavg": {"method": "fedavg"}},
    "experiments": {
        "tiny": {"training": {"rounds": 4, "batch_size": 16, "lr": 0.1, "eval_every": 2},
                 "tune": {"trials": 2, "seeds": [100]},
                 "grid": [{"datasets": ["digits"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["local"]}]},
        "big": {"training": {"rounds": 100, "batch_size": 32, "lr": 0.1},
                "grid": [{"datasets": ["cifar"], "partitions": ["iid"], "models": ["resnet9"], "algorithms": ["fedavg"]}]},
    },
}
# a stub throughput table: the GPU fast on FLOPs, slow per round (launches, bookkeeping)
GPU_LOSES_SMALL = {"job_overhead_s": 60, "safety_factor": 2.0,
                   "cpu": {"assumed": 1e9, "round_overhead_s": 0.0, "families": {"mlp": {"train": 1e9, "eval": 1e9}}},
                   "cuda": {"assumed": 1e13, "round_overhead_s": 5.0, "families": {"resnet9": {"train": 1e13, "eval": 1e13}}}}


def wildcards(cell: Cell, **more) -> SimpleNamespace:
    return SimpleNamespace(**cell.as_dict(), **more)


def test_device_auto_goes_where_the_cost_model_says_faster(tmp_path, monkeypatch):
    """``device: auto`` with a GPU in reach: the tiny MLP cell to the CPU (4 rounds x 5 s on the GPU), the big
    ResNet-9 cell to the GPU, each with the estimates in its reason; without one, the CPU; a named device as named."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(rates, "throughputs", lambda path=None: GPU_LOSES_SMALL)
    summary = tmp_path / "seed0.json"
    summary.write_text("{}")  # no shape recorded yet: the dataset's facts
    plan = WorkflowPlan(copy.deepcopy(CONFIG), tmp_path)
    device, reason = plan.job_device(Cell("tiny", "digits", "dir", "mlp", "local", 0), str(summary))
    assert device == "cpu" and reason.startswith("device auto: the CPU is estimated faster: cpu ")
    assert "vs cuda 80 s (uncalibrated" in reason
    device, reason = plan.job_device(Cell("big", "cifar", "iid", "resnet9", "fedavg", 0), str(summary))
    assert device == "cuda" and "the GPU is estimated faster" in reason
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plan = WorkflowPlan(copy.deepcopy(CONFIG), tmp_path)
    assert plan.job_device(Cell("big", "cifar", "iid", "resnet9", "fedavg", 0), str(summary)) == (
        "cpu", "device auto: no CUDA available")
    plan = WorkflowPlan({**copy.deepcopy(CONFIG), "device": "cuda:1"}, tmp_path)
    assert plan.job_device(Cell("tiny", "digits", "dir", "mlp", "local", 0), str(summary)) == (
        "cuda:1", "device: cuda:1 (the config's)")


def test_a_trials_job_carries_the_trials_setting_and_reads_back_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    summary = tmp_path / "seed100.json"
    summary.write_text("{}")
    plan = WorkflowPlan(copy.deepcopy(CONFIG), tmp_path)
    cell = Cell("tiny", "digits", "dir", "mlp", "local", 100)
    params = plan.training_job("trial", wildcards(cell, trial="1"), SimpleNamespace(summary=str(summary)))
    job = CellJob.from_params(json.loads(json.dumps(params)))
    assert job.cell == cell and job.device == "cpu" and job.device_reason == "device auto: no CUDA available"
    assert job.spec == resolve_cell(trial_config(CONFIG, "tiny", "local", 1), cell) != resolve_cell(CONFIG, cell)
