"""The training job of one cell (:func:`run_cell`): a sequence of stages, each a function a test can
call on its own: :func:`prepare` (data, model, federation, algorithm on the job's device),
:func:`resume` (from a checkpoint or round 1), :func:`train_round`, :func:`evaluate` (the history
row of :func:`~fedbench.run.scoring.score_round`), :func:`checkpoint` and
:func:`fedbench.run.outputs.write` (the three output files).  The job (:class:`fedbench.run.job.CellJob`)
says what to run and where; the run derives nothing from the config."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from fedbench.algorithms import ALGORITHMS, Federation
from fedbench.config.cells import results_settings
from fedbench.data import load_dataset
from fedbench.data.partition import hold_out_validation
from fedbench.data.partition_file import load_partition
from fedbench.engine.device import resolve_device
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import Numerics
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.models import build_model
from fedbench.registry.plugins import load_plugins
from fedbench.run.checkpoint import capture_rng, fingerprint, load_checkpoint, restore_rng, save_checkpoint
from fedbench.run.job import CellJob
from fedbench.run.outputs import write
from fedbench.run.provenance import CELL_SCRIPTS, cell_roots, provenance
from fedbench.run.scoring import score_round
from fedbench.run.state import CellRun, Progress
from fedbench.run.tracking import TensorBoardLog, tensorboard_dir

log = logging.getLogger("fedbench")

TRAINERS = {"vectorised": VectorisedTrainer, "reference": ReferenceTrainer}


def prepare(job: CellJob, partition_npz, out_dir) -> CellRun:
    """Load the job's data and partition onto its device, build its model (seeded with the cell's
    seed), federation and algorithm, and fingerprint its settings and code."""
    started = time.perf_counter()
    load_plugins(job.plugins)  # a plugin's algorithm, model or dataset source
    spec = job.spec
    dev = resolve_device(job.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    data, groups = _load_data(job, partition_npz, dev)
    fed = _federation(job, data, groups)
    algorithm_spec = spec["algorithm"]
    algorithm = ALGORITHMS[algorithm_spec["method"]](**{k: v for k, v in algorithm_spec.items() if k != "method"})
    code = provenance(cell_roots(spec), CELL_SCRIPTS)  # version, commit, hash of the code that runs
    return CellRun(job=job, out=Path(out_dir), device=dev, fed=fed, algorithm=algorithm, groups=groups, code=code,
                   fingerprint=fingerprint(results_settings(spec), code["code_hash"]), started=started)


def _load_data(job: CellJob, partition_npz, dev: torch.device) -> tuple[FederatedData, dict]:
    """The cell's dataset split by the partition file, on ``dev``, and the partition's groupings; a
    tuning trial's ``training.holdout`` share of each client's training rows held out for validation."""
    dataset = load_dataset(job.spec["dataset"], job.data_root)
    partition = hold_out_validation(load_partition(partition_npz), job.spec["training"].get("holdout", 0.0), job.cell.seed)
    return FederatedData.build(dataset, partition, dev), partition.groups


def _federation(job: CellJob, data: FederatedData, groups: dict) -> Federation:
    """The federation of one cell: the model (built after seeding torch with the cell's seed), the
    trainer of ``training.engine``, local SGD, client sampling seeded with the cell's seed."""
    cell, spec = job.cell, job.spec
    training = spec["training"]
    torch.manual_seed(cell.seed)
    model = build_model(spec["model"], data.input_shape, data.num_classes).to(data.x.device)
    memory_mb = training["memory_mb"]
    numerics = Numerics.from_training(training)
    local = LocalSGD(
        epochs=training["local_epochs"],
        batch_size=training["batch_size"],
        lr=training["lr"],
        momentum=training["momentum"],
        weight_decay=training["weight_decay"],
    )
    return Federation(
        model=model,
        data=data,
        trainer=TRAINERS[training["engine"]](model, data, chunk_size=training["client_chunk"], memory_mb=memory_mb,
                                             numerics=numerics),
        local=local,
        participation=training["participation"],
        generator=torch.Generator().manual_seed(cell.seed),
        seed=cell.seed,
        encoders=Path(job.encoders),
        cache=Path(job.results) / "cache",
        teams=None if "team" not in groups else np.asarray(groups["team"]),
        clusters=None if "cluster" not in groups else np.asarray(groups["cluster"]),
        bn_aggregation=training["bn_aggregation"],
        numerics=numerics,
    )


def resume(run: CellRun, state: dict) -> Progress:
    """Where the run continues: from its checkpoint when one of this run's settings and code is on
    disk (model template and random streams restored, from the saved round + 1), else from round 1
    with ``state`` (the algorithm's initial state)."""
    resumed = None
    if run.training["checkpoint_every"]:
        resumed = load_checkpoint(run.checkpoint_path, run.fingerprint, map_location=run.device)
    if resumed is None:
        return Progress(state)
    run.fed.model.load_state_dict(resumed["model"])
    restore_rng(run.fed.generator, resumed["rng"])
    log.info("resuming from %s after round %d", run.checkpoint_path, resumed["round"])
    return Progress(state=resumed["state"], history=resumed["history"], per_client=resumed["per_client"],
                    losses=resumed["losses"], first=resumed["round"] + 1, spent_before=resumed["wall_time_s"],
                    sent=resumed.get("sent"), window=resumed.get("window", [0, 0]))


def train_round(run: CellRun, progress: Progress, round_: int) -> bool:
    """One round of the algorithm; its mean training loss joins ``progress.losses`` and the bytes it
    sent (the algorithm's ``communication`` hook) the running totals.  A loss that is not finite ends
    the run (False): the round, the mean loss and the bytes go to the history, nothing else."""
    before = progress.state
    run.fed.sampled = None  # the hook's default reads the clients this round samples
    run.fed.begin_round(round_)  # the round's shared streams (common random numbers across methods)
    progress.state, loss = run.algorithm.round(run.fed, before, round_)
    progress.count(run.algorithm.communication(run.fed, before, progress.state, round_))
    progress.losses.append(float(loss.mean()))
    if torch.isfinite(loss).all():
        return True
    progress.diverged = round_  # no model worth scoring from here on
    progress.history.append({"round": round_, "train_loss": float(np.mean(progress.losses)), **progress.bytes_row()})
    log.warning("cell %s diverged at round %d (training loss %s)", run.name, round_, progress.losses[-1])
    return False


def due(round_: int, every: int | None, rounds: int) -> bool:
    """Round ``round_`` is a multiple of ``every`` (None: every round) or the last one."""
    return every is None or round_ % every == 0 or round_ == rounds


def evaluate(run: CellRun, progress: Progress, round_: int) -> None:
    """Score round ``round_`` (:func:`~fedbench.run.scoring.score_round`, training scores every ``train_eval_every``
    rounds) and record it: a history row, the clients' scores, the loss window emptied."""
    training = run.training
    row, personal = score_round(
        run.fed, run.algorithm, progress.state, round_, float(np.mean(progress.losses)), run.groups.get("cluster"),
        training["memory_mb"], due(round_, training["train_eval_every"], training["rounds"]),
    )
    progress.losses.clear()
    row.update(progress.bytes_row())
    progress.history.append(row)
    progress.per_client[round_] = personal
    log.info(
        "round %d/%d train_loss %.4f acc_mean %.4f acc_var %.5f global_acc %.4f",
        round_, training["rounds"], row["train_loss"], row["acc_mean"], row["acc_var"], row["global_acc"],
    )


def checkpoint(run: CellRun, progress: Progress, round_: int) -> None:
    """Save the run's whole state after every ``checkpoint_every``-th round and after the last one
    (a job killed while writing its outputs then retrains nothing); nothing when checkpoints are off."""
    every = run.training["checkpoint_every"]
    if not (every and due(round_, every, run.training["rounds"])):
        return
    save_checkpoint(run.checkpoint_path, {
        "round": round_, "fingerprint": run.fingerprint, "state": progress.state, "model": run.fed.model.state_dict(),
        "rng": capture_rng(run.fed.generator), "history": progress.history, "per_client": progress.per_client,
        "losses": progress.losses, "wall_time_s": progress.wall_time(run.started),
        "sent": progress.sent, "window": progress.window,
    })


def run_cell(job: CellJob, partition_npz, out_dir) -> dict:
    """Train and evaluate the job's cell; write ``metrics.json``, ``history.csv`` and ``clients.csv`` to ``out_dir``.

    Every ``training.checkpoint_every`` rounds the run's whole state goes to ``out_dir/checkpoint.pt``
    (:mod:`fedbench.run.checkpoint`); a rerun continues from there and ends with the same numbers.  A
    round whose training loss is NaN or infinite ends the run: ``metrics.json`` says
    ``status: diverged`` and the round, with no final numbers."""
    run = prepare(job, partition_npz, out_dir)
    with run.fed.numerics.backends():  # TF32 and cuDNN flags of the run, restored when it ends
        return _rounds(run)


def _rounds(run: CellRun) -> dict:
    """The round loop of :func:`run_cell` from where :func:`resume` continues: train, evaluate when
    due (each history row to TensorBoard with ``tensorboard``), checkpoint; then the outputs."""
    cell, job = run.cell, run.job
    progress = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    rounds, every = run.training["rounds"], run.training["eval_every"]
    log.info("cell %s on %s: %d clients, %d rounds", run.name, run.device, run.fed.num_clients, rounds)
    board = TensorBoardLog(tensorboard_dir(job.results, run.out, run.code["code_hash"])) if job.tensorboard else None
    try:
        for t in tqdm(range(progress.first, rounds + 1), desc=f"{cell.algorithm} seed{cell.seed}", unit="round", mininterval=5):
            if not train_round(run, progress, t):
                break
            if due(t, every, rounds):
                evaluate(run, progress, t)
                if board is not None:
                    board.add_row(progress.history[-1])
            checkpoint(run, progress, t)
    finally:
        if board is not None:
            board.close()
    return write(run, progress)
