"""The two jobs the workflow runs per cell: build a partition, and train + evaluate one cell."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from tqdm.auto import tqdm

import fedbench
from fedbench.algorithms import ALGORITHMS, Federation
from fedbench.checkpoint import CHECKPOINT_NAME, capture_rng, fingerprint, load_checkpoint, restore_rng, save_checkpoint
from fedbench.config import Cell, resolve_cell, results_settings
from fedbench.data.partition_file import atomic_write, load_partition, save_partition
from fedbench.data import partition_dataset
from fedbench.data import load_dataset
from fedbench.engine.device import peak_memory_mb, resolve_device
from fedbench.engine.evaluate import evaluate_clients, evaluate_pooled
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.models import build_model
from fedbench.protocols import PROTOCOLS
from fedbench.provenance import CELL_SCRIPTS, PARTITION_SCRIPTS, cell_roots, partition_roots, provenance

log = logging.getLogger("fedbench")

TRAINERS = {"vectorised": VectorisedTrainer, "reference": ReferenceTrainer}


def build_partition(config: dict, dataset: str, partition: str, seed: int, npz_path, json_path) -> None:
    """Partition ``dataset`` with the config's ``partition`` entry and generator seed ``seed``."""
    data = load_dataset(config["datasets"][dataset], config.get("data_root", "data"))
    spec = config["partitions"][partition]
    parts = partition_dataset(data, spec, seed)
    meta = {"dataset": dataset, "partition": partition, "seed": seed, "spec": spec, "input_shape": list(data.input_shape),
            "provenance": provenance(partition_roots(config["datasets"][dataset], spec), PARTITION_SCRIPTS)}
    save_partition(parts, data.y, data.num_classes, npz_path, json_path, meta)
    log.info("partition %s/%s seed %d: %d clients", dataset, partition, seed, parts.num_clients)


def _cluster_scores(recovered, truth) -> dict[str, float]:
    """Adjusted Rand index and NMI of the recovered client clusters against the ground truth."""
    if recovered is None or truth is None:
        return {}
    return {
        "ari": float(adjusted_rand_score(truth, recovered)),
        "nmi": float(normalized_mutual_info_score(truth, recovered)),
    }


def structure_scores(levels: dict[str, np.ndarray], truth: dict[str, list]) -> dict[str, dict[str, dict[str, float]]]:
    """ARI and NMI of every discovered level's grouping against every ground-truth grouping of the
    partition: ``{level: {truth_name: {"ari", "nmi"}}}``.  Clients that dropped a level (group -1)
    count as one group of their own ("no model at this level")."""
    return {
        level: {name: _cluster_scores(np.asarray(groups), np.asarray(ids)) for name, ids in truth.items()}
        for level, groups in levels.items()
    }


def adjacency_scores(adjacency, truth) -> dict[str, float]:
    """An FLT-style relatedness graph against the ground truth: ``adj_density`` = linked share of
    the M (M - 1) ordered off-diagonal pairs; ``adj_cross_group`` = share of those links whose two
    clients belong to different ground-truth groups (NaN without links or without a truth)."""
    if adjacency is None:
        return {}
    a = np.asarray(adjacency) != 0
    off = ~np.eye(len(a), dtype=bool)
    links = a & off
    m = len(a)
    out = {"adj_density": float(links.sum() / max(m * (m - 1), 1))}
    if truth is not None:
        t = np.asarray(truth)
        cross = links & (t[:, None] != t[None, :])
        out["adj_cross_group"] = float(cross.sum() / links.sum()) if links.any() else float("nan")
    return out


def save_artifacts(artifacts: dict, out_dir: Path) -> list[str]:
    """Write an algorithm's artifacts: arrays as ``.npy``, DataFrames as ``.csv``, dicts as ``.json``."""
    written = []
    for name, value in artifacts.items():
        if isinstance(value, pd.DataFrame):
            path, write = out_dir / f"{name}.csv", (lambda p, v=value: v.to_csv(p, index=False))
        elif isinstance(value, dict):
            path, write = out_dir / f"{name}.json", (lambda p, v=value: Path(p).write_text(json.dumps(v, indent=1)))
        else:
            path, write = out_dir / f"{name}.npy", (lambda p, v=value: np.save(p, np.asarray(v)))
        atomic_write(path, write)
        written.append(path.name)
    return written


def _history_row(round_: int, train_loss: float, personal, pooled) -> dict:
    row = {"round": round_, "train_loss": train_loss, **personal.summary()}
    if pooled is None:
        row.update(global_acc=np.nan, global_f1=np.nan, global_loss=np.nan)
    else:
        row.update(global_acc=float(pooled.accuracy[0]), global_f1=float(pooled.macro_f1[0]), global_loss=float(pooled.loss[0]))
    return row


def _train_scores(model, models, global_weights, data: FederatedData, everyone, memory_mb, global_model=None) -> dict:
    """The clients' models (modules ``model``) and the global model (``global_model``, default
    ``model``) on the training rows: train accuracy (FLT's appendix tables) and the pooled training
    losses (pFedMe/pFedMT's loss curves)."""
    on_train = evaluate_clients(model, models, data, data.train, everyone, memory_mb=memory_mb)
    global_model = model if global_model is None else global_model
    global_train = None if global_weights is None else evaluate_pooled(global_model, global_weights, data, data.train, memory_mb)
    return {
        "train_acc_mean": float(on_train.accuracy.mean()),
        "train_acc_var": float(on_train.accuracy.var()),
        "train_loss_pooled": on_train.pooled_loss,
        "global_train_loss": np.nan if global_train is None else global_train.pooled_loss,
    }


def run_cell(config: dict, cell: Cell, partition_npz, out_dir, device: str | None = None) -> dict:
    """Train and evaluate one cell; write ``metrics.json``, ``history.csv`` and ``clients.csv`` to ``out_dir``.

    Every ``training.checkpoint_every`` rounds the run's whole state goes to ``out_dir/checkpoint.pt``
    (:mod:`fedbench.checkpoint`); a rerun continues from there and ends with the same numbers.  A
    round whose training loss is NaN or infinite ends the run: ``metrics.json`` says
    ``status: diverged`` and the round, with no final numbers."""
    started = time.perf_counter()
    spec = resolve_cell(config, cell)
    training = spec["training"]
    out = Path(out_dir)
    dev = resolve_device(device or config.get("device", "auto"))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    dataset = load_dataset(spec["dataset"], config.get("data_root", "data"))
    partition = load_partition(partition_npz)
    truth = partition.groups.get("cluster")
    data = FederatedData.build(dataset, partition, dev)
    torch.manual_seed(cell.seed)
    model = build_model(spec["model"], data.input_shape, data.num_classes).to(dev)
    memory_mb = training["memory_mb"]
    local = LocalSGD(
        epochs=training["local_epochs"],
        batch_size=training["batch_size"],
        lr=training["lr"],
        momentum=training["momentum"],
        weight_decay=training["weight_decay"],
    )
    fed = Federation(
        model=model,
        data=data,
        trainer=TRAINERS[training["engine"]](model, data, chunk_size=training["client_chunk"], memory_mb=memory_mb),
        local=local,
        participation=training["participation"],
        generator=torch.Generator().manual_seed(cell.seed),
        seed=cell.seed,
        encoders=Path(config.get("results", "results")) / "encoders",
        teams=None if "team" not in partition.groups else np.asarray(partition.groups["team"]),
        bn_aggregation=training["bn_aggregation"],
    )
    algorithm_spec = spec["algorithm"]
    algorithm = ALGORITHMS[algorithm_spec["method"]](**{k: v for k, v in algorithm_spec.items() if k != "method"})
    state = algorithm.init(fed, model_weights(model))

    everyone = torch.arange(data.num_clients, device=dev)
    rounds, every, train_every = training["rounds"], training["eval_every"], training["train_eval_every"]
    history, per_client = [], {}
    losses = []
    code = provenance(cell_roots(spec), CELL_SCRIPTS)  # version, commit, hash of the code that runs
    checkpoint_path, checkpoint_every = out / CHECKPOINT_NAME, training["checkpoint_every"]
    run_fingerprint = fingerprint(results_settings(spec), code["code_hash"])
    first, spent_before, diverged = 1, 0.0, None
    resumed = load_checkpoint(checkpoint_path, run_fingerprint, map_location=dev) if checkpoint_every else None
    if resumed is not None:
        state, history, per_client, losses = resumed["state"], resumed["history"], resumed["per_client"], resumed["losses"]
        model.load_state_dict(resumed["model"])
        restore_rng(fed.generator, resumed["rng"])
        first, spent_before = resumed["round"] + 1, resumed["wall_time_s"]
        log.info("resuming from %s after round %d", checkpoint_path, resumed["round"])
    log.info("cell %s on %s: %d clients, %d rounds", cell.run_dir("").lstrip("/"), dev, data.num_clients, rounds)
    for t in tqdm(range(first, rounds + 1), desc=f"{cell.algorithm} seed{cell.seed}", unit="round", mininterval=5):
        state, loss = algorithm.round(fed, state, t)
        losses.append(float(loss.mean()))
        if not torch.isfinite(loss).all():  # diverged: no model worth scoring from here on
            diverged = t
            history.append({"round": t, "train_loss": float(np.mean(losses))})
            log.warning("cell %s diverged at round %d (training loss %s)", cell.run_dir("").lstrip("/"), t, losses[-1])
            break
        if t % every == 0 or t == rounds:
            models = algorithm.client_models(fed, state, t)
            scoring = algorithm.scoring_model(fed, state)  # e.g. FeMAM's additive levels
            scoring = model if scoring is None else scoring
            personal = evaluate_clients(scoring, models, data, data.test, everyone, memory_mb=memory_mb)
            global_weights = algorithm.global_model(fed, state)
            pooled = None if global_weights is None else evaluate_pooled(model, global_weights, data, data.test, memory_mb)
            row = _history_row(t, float(np.mean(losses)), personal, pooled)
            if data.val is not None:  # the clients' models on their validation rows (FeMAM's model selection)
                row.update(evaluate_clients(scoring, models, data, data.val, everyone, memory_mb=memory_mb).summary("val_"))
            if train_every is None or t % train_every == 0 or t == rounds:
                row.update(_train_scores(scoring, models, global_weights, data, everyone, memory_mb, model))
            row.update(_cluster_scores(algorithm.clusters(fed, state), truth))
            row.update(adjacency_scores(algorithm.adjacency(fed, state), truth))
            row.update(algorithm.diagnostics(fed, state))  # per-round scalars (CFL's norms, splits)
            losses.clear()
            history.append(row)
            per_client[t] = personal
            log.info(
                "round %d/%d train_loss %.4f acc_mean %.4f acc_var %.5f global_acc %.4f",
                t, rounds, row["train_loss"], row["acc_mean"], row["acc_var"], row["global_acc"],
            )
        # the last round too: a job killed while writing its outputs then retrains nothing
        if checkpoint_every and (t % checkpoint_every == 0 or t == rounds):
            save_checkpoint(checkpoint_path, {
                "round": t, "fingerprint": run_fingerprint, "state": state, "model": model.state_dict(),
                "rng": capture_rng(fed.generator), "history": history, "per_client": per_client, "losses": losses,
                "wall_time_s": spent_before + time.perf_counter() - started,
            })

    wall_time_s = round(spent_before + time.perf_counter() - started, 3)
    if diverged is not None:
        return _write_diverged(spec, cell, data, dev, out, history, diverged, wall_time_s, code, checkpoint_path, training)
    history_df = pd.DataFrame(history)
    protocol = PROTOCOLS[spec["protocol"]]
    final = protocol.final(history_df)
    train_accuracy = history_df.set_index("round").loc[final["round"], "train_acc_mean"]
    final["train_accuracy"] = None if pd.isna(train_accuracy) else float(train_accuracy)  # unscored round
    chosen = per_client[final["round"]]
    clients_df = pd.DataFrame(
        {
            "client": np.arange(data.num_clients),
            "train_samples": data.train.counts.cpu().numpy(),
            "test_samples": chosen.samples,
            "accuracy": chosen.accuracy,
            "macro_f1": chosen.macro_f1,
            "loss": chosen.loss,
        }
    )
    last = history_df.iloc[-1]
    metrics = {
        "cell": cell.as_dict(),
        "protocol": spec["protocol"],
        "final": final,
        "global": {
            k: (None if pd.isna(last[c]) else float(last[c]))
            for k, c in (("accuracy", "global_acc"), ("macro_f1", "global_f1"), ("loss", "global_loss"))
        },
        "status": "completed",
        **_run_record(spec, cell, data, dev, wall_time_s, code),  # wall time summed over resumed attempts
    }
    if "ari" in history_df:
        metrics["clustering"] = {k: float(history_df[k].iloc[-1]) for k in ("ari", "nmi")}
    level_clusters = algorithm.level_clusters(fed, state)
    if level_clusters is not None:  # FeMAM: every level's groups against every ground-truth grouping
        metrics["structure_scores"] = structure_scores(level_clusters, partition.groups)
    for column in ("adj_density", "adj_cross_group"):
        if column in history_df:
            metrics.setdefault("clustering", {})[column] = float(history_df[column].iloc[-1])
    summary = algorithm.summary(fed, state)  # per-run facts (CFL's split rounds)
    if summary is not None:
        metrics["summary"] = summary
        if "warning" in metrics["summary"]:
            log.warning("cell %s: %s", cell.run_dir("").lstrip("/"), metrics["summary"]["warning"])
    artifacts = algorithm.artifacts(fed, state)
    if artifacts is not None:
        metrics["artifacts"] = save_artifacts(artifacts, out)
    atomic_write(out / "history.csv", lambda p: history_df.to_csv(p, index=False))
    atomic_write(out / "clients.csv", lambda p: clients_df.to_csv(p, index=False))
    atomic_write(out / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))
    if not training["keep_checkpoint"]:
        checkpoint_path.unlink(missing_ok=True)
    log.info("final (%s, round %d): accuracy %.4f", spec["protocol"], final["round"], final["accuracy"] or float("nan"))
    return metrics


def _run_record(spec, cell, data, dev, wall_time_s, code) -> dict:
    """What every ``metrics.json`` records of the run itself: settings, versions, device, cost, code."""
    return {
        "hyperparameters": results_settings(spec),
        "num_clients": data.num_clients,
        "seed": cell.seed,
        "fedbench_version": fedbench.__version__,
        "torch_version": torch.__version__,
        "device": str(dev),
        "wall_time_s": wall_time_s,
        "peak_memory": peak_memory_mb(dev),
        "provenance": code,
    }


def _write_diverged(spec, cell, data, dev, out: Path, history: list, round_: int, wall_time_s, code, checkpoint_path, training) -> dict:
    """The outputs of a cell whose training loss became NaN or infinite at ``round_``: the history
    up to that round (its last row has only the loss), no client scores, ``status: diverged``."""
    history_df = pd.DataFrame(history)
    clients_df = pd.DataFrame({
        "client": np.arange(data.num_clients), "train_samples": data.train.counts.cpu().numpy(),
        "test_samples": np.nan, "accuracy": np.nan, "macro_f1": np.nan, "loss": np.nan,
    })
    metrics = {
        "cell": cell.as_dict(),
        "protocol": spec["protocol"],
        "status": "diverged",
        "diverged_round": round_,
        "final": {"round": round_, "accuracy": None, "macro_f1": None, "loss": None, "variance": None, "train_accuracy": None},
        "global": {"accuracy": None, "macro_f1": None, "loss": None},
        **_run_record(spec, cell, data, dev, wall_time_s, code),
    }
    atomic_write(out / "history.csv", lambda p: history_df.to_csv(p, index=False))
    atomic_write(out / "clients.csv", lambda p: clients_df.to_csv(p, index=False))
    atomic_write(out / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))
    if not training["keep_checkpoint"]:
        checkpoint_path.unlink(missing_ok=True)
    return metrics
