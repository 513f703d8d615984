"""A cell's run in two halves: what is fixed once it is prepared (:class:`CellRun`: settings,
federation, algorithm, ground truth, what a checkpoint must match) and what it has done so far
(:class:`Progress`: the algorithm's state, the history, the bytes sent -- what a checkpoint saves)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fedbench.algorithms import Algorithm, Federation
from fedbench.config.cells import Cell
from fedbench.engine.evaluate import Scores
from fedbench.engine.traffic import Traffic
from fedbench.run.checkpoint import CHECKPOINT_NAME
from fedbench.run.job import CellJob


@dataclass
class CellRun:
    """The fixed parts of one cell's run, built once by :func:`fedbench.run.stages.prepare`: its job
    (cell, settings, device and why), the federation (model template, data, trainer, client sampling)
    on ``device``, the algorithm, the partition's ground-truth groupings, and what a checkpoint must
    match to be resumed."""

    job: CellJob
    out: Path
    device: torch.device
    fed: Federation
    algorithm: Algorithm
    groups: dict  # the partition's ground-truth groupings (``cluster``, ``team``, ...)
    code: dict  # provenance of the code that runs
    fingerprint: str
    started: float  # time.perf_counter() when the run began

    @property
    def cell(self) -> Cell:
        return self.job.cell

    @property
    def spec(self) -> dict:
        """:func:`fedbench.config.cells.resolve_cell`'s entries, as the job gives them."""
        return self.job.spec

    @property
    def training(self) -> dict:
        return self.spec["training"]

    @property
    def checkpoint_path(self) -> Path:
        return self.out / CHECKPOINT_NAME

    @property
    def name(self) -> str:
        return self.cell.run_dir("").lstrip("/")


@dataclass
class Progress:
    """What a run has done so far, saved in every checkpoint: the algorithm's state, the history
    rows, the per-client scores of the evaluated rounds, the training losses since the last
    evaluation, the round to train next, the wall time of earlier attempts, the round whose
    training loss was not finite (None: none), and the bytes sent: per client since round 1
    (``sent``) and in all since the last history row (``window``: downlink, uplink)."""

    state: dict
    history: list[dict] = field(default_factory=list)
    per_client: dict[int, Scores] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    first: int = 1
    spent_before: float = 0.0
    diverged: int | None = None
    sent: Traffic | None = None
    window: list[int] = field(default_factory=lambda: [0, 0])

    def count(self, traffic: Traffic) -> None:
        """Add one round's bytes to the running totals and to the window of the next history row."""
        self.sent = traffic if self.sent is None else self.sent + traffic
        self.window = [self.window[0] + traffic.down_total, self.window[1] + traffic.up_total]

    def bytes_row(self) -> dict:
        """The history row's bytes: sent since the previous row (per round where every round is
        evaluated) and since round 1; the window emptied."""
        total = self.sent or Traffic.none(0)
        row = {"downlink_bytes": self.window[0], "uplink_bytes": self.window[1],
               "downlink_bytes_total": total.down_total, "uplink_bytes_total": total.up_total}
        self.window = [0, 0]
        return row

    def wall_time(self, started: float) -> float:
        """Seconds spent on the run, earlier attempts included."""
        return self.spent_before + time.perf_counter() - started
