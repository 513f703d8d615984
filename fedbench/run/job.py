"""The job a training run receives (:class:`CellJob`): one cell as the plan resolved it -- its settings
with a tuning trial's or the chosen setting applied, the device it trains on and why, and where its
inputs are -- so that the run derives nothing from the config.  The workflow's plan
(:mod:`fedbench.planning`) makes the jobs, choosing each one's device under ``device: auto`` with the
cost model; :func:`cell_job` makes one without a plan (tests, the extension contract, benchmarks)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from fedbench.config.cells import Cell, resolve_cell


@dataclass(frozen=True)
class CellJob:
    """One training job as the plan resolved it: the cell, everything its run needs (``spec``:
    :func:`fedbench.config.cells.resolve_cell`'s entries, with a tuning trial's or the chosen setting
    already applied), the device it trains on (``cpu``, ``cuda``, ``cuda:N``; never ``auto``) and why,
    and where its inputs are: the datasets (``data_root``), FLT's pretrained encoders (``encoders``),
    the plugin modules to import (``plugins``: a plugin's algorithm, model or dataset source) and,
    with ``tensorboard``, the results folder its TensorBoard run goes under (``results``)."""

    cell: Cell
    spec: dict
    device: str
    device_reason: str
    data_root: str = "data"
    encoders: str = "results/encoders"
    plugins: tuple[str, ...] = ()
    tensorboard: bool = False
    results: str = "results"

    def __post_init__(self):
        if self.device == "auto":
            raise ValueError("a job trains on a resolved device (cpu, cuda, cuda:N), not auto: the plan chooses it")
        object.__setattr__(self, "plugins", tuple(self.plugins))

    def as_params(self) -> dict:
        """The job as plain JSON-able values (a Snakemake rule's ``params``); :meth:`from_params` reads it back."""
        return {**asdict(self), "plugins": list(self.plugins)}

    @classmethod
    def from_params(cls, params: dict) -> CellJob:
        return cls(**{**params, "cell": Cell(**params["cell"])})


def cell_job(config: dict, cell: Cell, device: str | None = None, reason: str | None = None) -> CellJob:
    """The job of ``cell`` under ``config``: on ``device`` (default: the config's) for ``reason``.  The workflow's
    plan passes the device it chose (:meth:`fedbench.planning.workflow.WorkflowPlan.training_job`); for callers
    without a plan (tests, the extension contract, benchmarks) ``auto`` becomes the GPU where CUDA is
    available, else the CPU, without the cost model."""
    requested = device or config.get("device", "auto")
    if requested != "auto":
        chosen, why = requested, f"device: {requested} (the config's)"
    elif torch.cuda.is_available():
        chosen, why = "cuda", "device auto: cuda (CUDA available; no plan, so no cost estimate)"
    else:
        chosen, why = "cpu", "device auto: no CUDA available"
    results = config.get("results", "results")
    return CellJob(cell=cell, spec=resolve_cell(config, cell), device=chosen, device_reason=reason or why,
                   data_root=config.get("data_root", "data"), encoders=str(Path(results) / "encoders"),
                   plugins=tuple(config.get("plugins") or ()), tensorboard=bool(config.get("tensorboard")),
                   results=results)
