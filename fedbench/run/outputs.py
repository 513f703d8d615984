"""The outputs of a cell's run (:func:`write`): ``history.csv`` (one row per evaluated round),
``clients.csv`` (every client's scores at the protocol's final round) and ``metrics.json`` (the final
and global numbers, clustering and structure scores, the algorithm's summary and artifacts, and the
records of the run itself: bytes sent, settings, versions, device, numerics, cost, provenance)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedbench
from fedbench.config.cells import results_settings
from fedbench.data.partition_file import atomic_write
from fedbench.engine.device import peak_memory_mb
from fedbench.engine.evaluate import Scores
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.traffic import Traffic
from fedbench.registry.protocols import PROTOCOLS
from fedbench.run.scoring import structure_scores
from fedbench.run.state import CellRun, Progress

log = logging.getLogger("fedbench")


def write(run: CellRun, progress: Progress) -> dict:
    """Write ``history.csv``, ``clients.csv`` and ``metrics.json`` (each atomically: a failed write
    leaves no partial file, and the checkpoint stays for the rerun), then remove the checkpoint
    unless ``keep_checkpoint``; returns the metrics."""
    wall_time_s = round(progress.wall_time(run.started), 3)  # summed over resumed attempts
    if progress.diverged is not None:
        history, clients, metrics = _diverged_outputs(run, progress, wall_time_s)
    else:
        history, clients, metrics = _completed_outputs(run, progress, wall_time_s)
    atomic_write(run.out / "history.csv", lambda p: history.to_csv(p, index=False))
    atomic_write(run.out / "clients.csv", lambda p: clients.to_csv(p, index=False))
    atomic_write(run.out / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))
    if not run.training["keep_checkpoint"]:
        run.checkpoint_path.unlink(missing_ok=True)
    if progress.diverged is None:
        final = metrics["final"]
        log.info("final (%s, round %d): accuracy %.4f", run.spec["protocol"], final["round"], final["accuracy"] or float("nan"))
    return metrics


def _completed_outputs(run: CellRun, progress: Progress, wall_time_s: float) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """History, per-client table and metrics of a run that trained every round: the protocol's
    final round, the clients' scores there, the global model's last scores, the structure scores
    and what the algorithm reports of the run (its summary, its artifacts, written here)."""
    history = pd.DataFrame(progress.history)
    final = PROTOCOLS[run.spec["protocol"]].final(history)
    train_accuracy = history.set_index("round").loc[final["round"], "train_acc_mean"]
    final["train_accuracy"] = None if pd.isna(train_accuracy) else float(train_accuracy)  # unscored round
    last = history.iloc[-1]
    metrics = {
        "cell": run.cell.as_dict(),
        "protocol": run.spec["protocol"],
        "final": final,
        "global": {
            k: (None if pd.isna(last[c]) else float(last[c]))
            for k, c in (("accuracy", "global_acc"), ("macro_f1", "global_f1"), ("loss", "global_loss"))
        },
        "status": "completed",
        "communication": communication_record(run, progress),
        **_run_record(run, wall_time_s),
    }
    _add_clustering(metrics, history, run.algorithm.level_clusters(run.fed, progress.state), run.groups)
    _add_algorithm_report(metrics, run, progress.state)
    return history, _client_table(run.fed.data, progress.per_client[final["round"]]), metrics


def _client_table(data: FederatedData, chosen: Scores) -> pd.DataFrame:
    """``clients.csv``: every client's sample counts and its scores at the final round."""
    return pd.DataFrame(
        {
            "client": np.arange(data.num_clients),
            "train_samples": data.train.counts.cpu().numpy(),
            "test_samples": chosen.samples,
            "accuracy": chosen.accuracy,
            "macro_f1": chosen.macro_f1,
            "loss": chosen.loss,
        }
    )


def _add_clustering(metrics: dict, history: pd.DataFrame, level_clusters: dict | None, groups: dict) -> None:
    """The last round's clustering and relatedness scores (``clustering``) and, for algorithms with
    levels (FeMAM), every level's groups against every ground-truth grouping (``structure_scores``)."""
    if "ari" in history:
        metrics["clustering"] = {k: float(history[k].iloc[-1]) for k in ("ari", "nmi", "ari_planted") if k in history}
    if level_clusters is not None:
        metrics["structure_scores"] = structure_scores(level_clusters, groups)
    for column in ("adj_density", "adj_cross_group"):
        if column in history:
            metrics.setdefault("clustering", {})[column] = float(history[column].iloc[-1])


def _add_algorithm_report(metrics: dict, run: CellRun, state: dict) -> None:
    """The algorithm's per-run facts (``summary``; its ``warning`` is logged) and its artifacts,
    written to the run directory (``artifacts``: their file names)."""
    summary = run.algorithm.summary(run.fed, state)  # per-run facts (CFL's split rounds)
    if summary is not None:
        metrics["summary"] = summary
        if "warning" in summary:
            log.warning("cell %s: %s", run.name, summary["warning"])
    artifacts = run.algorithm.artifacts(run.fed, state)
    if artifacts is not None:
        metrics["artifacts"] = save_artifacts(artifacts, run.out)


def _diverged_outputs(run: CellRun, progress: Progress, wall_time_s: float) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The outputs of a run whose training loss became NaN or infinite: the history up to that
    round (its last row has only the loss), no client scores, ``status: diverged``."""
    data, round_ = run.fed.data, progress.diverged
    clients = pd.DataFrame({
        "client": np.arange(data.num_clients), "train_samples": data.train.counts.cpu().numpy(),
        "test_samples": np.nan, "accuracy": np.nan, "macro_f1": np.nan, "loss": np.nan,
    })
    metrics = {
        "cell": run.cell.as_dict(),
        "protocol": run.spec["protocol"],
        "status": "diverged",
        "diverged_round": round_,
        "final": {"round": round_, "accuracy": None, "macro_f1": None, "loss": None, "variance": None, "train_accuracy": None},
        "global": {"accuracy": None, "macro_f1": None, "loss": None},
        "communication": communication_record(run, progress),
        **_run_record(run, wall_time_s),
    }
    return pd.DataFrame(progress.history), clients, metrics


BN_BYTES = {
    "average": "counted: BatchNorm's weights and running statistics are averaged, so they travel",
    "local_stats": "running statistics not counted (they stay on the client); BatchNorm's weights counted",
    "local": "not counted: every BatchNorm entry stays on the client",
}


def communication_record(run: CellRun, progress: Progress) -> dict:
    """``metrics.json``'s ``communication``: the bytes sent down and up over the whole run (all
    clients), their sum per client (mean and largest), one model's bytes as exchanged, and whether
    BatchNorm's entries are in them (:data:`BN_BYTES`)."""
    sent = progress.sent or Traffic.none(run.fed.num_clients)
    per_client = sent.downlink + sent.uplink
    return {
        "downlink_bytes": sent.down_total, "uplink_bytes": sent.up_total, "bytes": sent.down_total + sent.up_total,
        "bytes_per_client": float(per_client.mean()) if len(per_client) else 0.0,
        "bytes_per_client_max": int(per_client.max()) if len(per_client) else 0,
        "model_bytes": run.fed.model_bytes(), "batchnorm": BN_BYTES[run.fed.bn_aggregation],
    }


def _run_record(run: CellRun, wall_time_s: float) -> dict:
    """What every ``metrics.json`` records of the run itself: settings, versions, device, cost, code.
    ``cpu_capability`` is the instruction set torch's CPU kernels dispatch to (AVX512, AVX2, ...): two
    machines that differ in it may round convolutions and matrix products differently, so a run
    repeated there can differ in the last bits and, over many rounds, in its numbers."""
    return {
        "hyperparameters": results_settings(run.spec),
        "num_clients": run.fed.data.num_clients,
        "seed": run.cell.seed,
        "fedbench_version": fedbench.__version__,
        "torch_version": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": str(run.device),
        "device_reason": run.job.device_reason,
        "wall_time_s": wall_time_s,
        "peak_memory": peak_memory_mb(run.device),
        "numerics": numerics_record(run),
        "provenance": run.code,
    }


def numerics_record(run: CellRun) -> dict:
    """``metrics.json``'s ``numerics``: the precision, layout, cuDNN autotuning and compilation the
    run's training used (:mod:`fedbench.engine.numerics`), whether the trainer's step stayed compiled
    and which step it is (``fused_mlp``, ``wide``, ``vmap``, ``reference``: methods with steps of
    their own, the minibatch-gradient oracle or a custom step, use it only where they call the
    trainer) and, on CUDA, the TF32 flags in force (the run's own while
    :func:`~fedbench.run.stages.run_cell` runs)."""
    used = dict(run.fed.trainer.numerics_used)
    if run.device.type == "cuda":
        used.update(tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32)
    return used


def save_artifacts(artifacts: dict, out_dir: Path) -> list[str]:
    """Write an algorithm's artifacts: arrays as ``.npy``, DataFrames as ``.csv``, dicts as ``.json``."""
    written = []
    for name, value in artifacts.items():
        if isinstance(value, pd.DataFrame):
            path, save = out_dir / f"{name}.csv", (lambda p, v=value: v.to_csv(p, index=False))
        elif isinstance(value, dict):
            path, save = out_dir / f"{name}.json", (lambda p, v=value: Path(p).write_text(json.dumps(v, indent=1)))
        else:
            path, save = out_dir / f"{name}.npy", (lambda p, v=value: np.save(p, np.asarray(v)))
        atomic_write(path, save)
        written.append(path.name)
    return written
