"""A cell's estimate: its work, its time on a device and its host memory (:func:`cell_cost`), and the
``runtime`` a job requests (:func:`runtime_minutes`).

Time = FLOPs (:mod:`fedbench.cost.work`) / the measured throughput of the model's family on the device
(:mod:`fedbench.cost.rates`), plus the work FLOPs do not count (:mod:`fedbench.cost.server`) and the fixed
costs (:data:`fedbench.cost.rates.OVERHEADS`): per job (start-up, loading), per round, per local minibatch
step (the vectorised engine steps a round's clients together: one client's steps, :func:`fedbench.cost.work.local_steps`)
and per evaluated round; ``python -m fedbench.planning.cost_report --fit`` fits them to finished runs.  A job
requests ``safety_factor`` x that.  Where the file has no measured figure for the family on the device (or the
model declares no family), the device's ``assumed`` throughput stands in and the estimate is uncalibrated."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fedbench.cost import rates
from fedbench.cost.families import UNDECLARED, model_family
from fedbench.cost.memory import cell_job_mb
from fedbench.cost.server import clustering_seconds, relatedness_seconds, server_average_seconds
from fedbench.cost.shape import CellShape
from fedbench.cost.work import cell_work, evaluation_finetune, evaluations, local_steps
from fedbench.registry.workload import declared_workload
from fedbench.engine.numerics import Numerics


@dataclass(frozen=True)
class CellCost:
    train_flops: float
    eval_flops: float
    family: str  # the model's throughput family (fedbench.cost.families; UNDECLARED: none)
    seconds: float  # estimated run time, before the safety factor
    calibrated: bool  # the family's throughput on the device was measured, at the cell's input size
    mem_mb: int
    throughput: str = ""  # which figure the time rests on (:func:`fedbench.cost.rates.family_rate`, ``setting_rate``)
    flop_seconds: float = 0.0  # the work's share of ``seconds``: train FLOPs / train rate + eval FLOPs / eval rate
    # + the work FLOPs do not count (fedbench.cost.server) at their measured rates
    rounds: int = 0
    steps: float = 0.0  # local minibatch steps of the run (:func:`fedbench.cost.work.local_steps` x rounds)
    evaluations: int = 0  # evaluated rounds (:func:`fedbench.cost.work.evaluations`)

    def counts(self) -> dict[str, float]:
        """How many times each of :data:`~fedbench.cost.rates.OVERHEADS` is paid: once per job, per round,
        per local step, per evaluation."""
        return {"job_overhead_s": 1.0, "round_overhead_s": float(self.rounds), "step_overhead_s": float(self.steps),
                "eval_overhead_s": float(self.evaluations)}


def cell_cost(spec: dict, shape: CellShape, device: str, table: dict | None = None) -> CellCost:
    """Work, estimated seconds (before the safety factor) and host memory of one cell on ``device`` (cpu or cuda).

    seconds = training FLOPs / the family's training rate + evaluation FLOPs / its evaluation rate
    + the relatedness step, the in-place average and the clustering (:mod:`fedbench.cost.server`)
    + ``job_overhead_s`` + rounds x ``round_overhead_s`` + local steps x ``step_overhead_s``
    + evaluations x ``eval_overhead_s`` (local steps: rounds x :func:`fedbench.cost.work.local_steps`
    and the fine-tuning's before evaluations)."""
    table = table or rates.throughputs()
    family = model_family(spec["model"]["arch"])
    training = spec["training"]
    workload = declared_workload(spec["algorithm"], training)
    figures, calibrated, note = rates.family_rate(table, device, family, shape.input_shape)
    figures, calibrated, note = rates.setting_rate(figures, calibrated, note, Numerics.from_training(training).label)
    rate = figures or {"train": table[device]["assumed"], "eval": table[device]["assumed"]}
    train, evaluate = cell_work(spec, shape, workload)
    server = (relatedness_seconds, server_average_seconds, clustering_seconds)
    flop_seconds = (train / rate["train"] + evaluate / rate["eval"]
                    + sum(seconds(spec, shape, table, device, workload) for seconds in server))
    steps = training["rounds"] * local_steps(workload, training, shape)
    steps += evaluation_finetune(workload, training, shape)[1]
    mem = cell_job_mb(spec["model"], shape, training)
    cost = CellCost(train, evaluate, family or UNDECLARED, flop_seconds, calibrated, mem, note, flop_seconds,
                    training["rounds"], steps, evaluations(training))
    seconds = flop_seconds + sum(rates.overhead(table, device, name) * n for name, n in cost.counts().items())
    return dataclasses.replace(cost, seconds=seconds)


def runtime_minutes(cost: CellCost, attempt: int = 1, table: dict | None = None) -> int:
    """The ``runtime`` a job requests: ``safety_factor`` x the estimate, x the attempt (a job
    resubmitted after its time limit resumes from its checkpoint and gets longer)."""
    table = table or rates.throughputs()
    return max(1, math.ceil(table["safety_factor"] * attempt * cost.seconds / 60))
