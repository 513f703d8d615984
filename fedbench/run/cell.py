"""The training job of one cell: train and evaluate it, write its outputs.

:func:`run_cell` is a sequence of stages, each a function a test can call on its own:
:func:`prepare` (data, model, federation, algorithm), :func:`resume` (from a checkpoint or round 1),
:func:`train_round`, :func:`evaluate` (:func:`score_round` gives the history row),
:func:`checkpoint` and :func:`write` (the three output files)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from tqdm.auto import tqdm

import fedbench
from fedbench.algorithms import ALGORITHMS, Algorithm, Federation
from fedbench.run.checkpoint import (
    CHECKPOINT_NAME, capture_rng, fingerprint, load_checkpoint, restore_rng, save_checkpoint,
)
from fedbench.config.cells import Cell, resolve_cell, results_settings
from fedbench.data.partition_file import atomic_write, load_partition
from fedbench.data.partition import hold_out_validation
from fedbench.data import load_dataset
from fedbench.engine.device import peak_memory_mb, resolve_device
from fedbench.engine.evaluate import Scores, evaluate_clients, evaluate_pooled
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import Numerics
from fedbench.engine.traffic import Traffic
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.models import build_model
from fedbench.registry.plugins import load_plugins
from fedbench.registry.protocols import PROTOCOLS
from fedbench.run.provenance import CELL_SCRIPTS, cell_roots, provenance
from fedbench.run.tracking import TensorBoardLog, tensorboard_dir

log = logging.getLogger("fedbench")

TRAINERS = {"vectorised": VectorisedTrainer, "reference": ReferenceTrainer}




def _cluster_scores(recovered, truth) -> dict[str, float]:
    """Adjusted Rand index and NMI of the recovered client clusters against the ground truth."""
    if recovered is None or truth is None:
        return {}
    return {
        "ari": float(adjusted_rand_score(truth, recovered)),
        "nmi": float(normalized_mutual_info_score(truth, recovered)),
    }


def _planted_scores(fed: Federation, algorithm: Algorithm, state: dict, truth) -> dict[str, float]:
    """``ari_planted``: the ARI of the algorithm's clusters with their number set to the planted one
    (FLT: Ward's tree cut at the true C, beside ``ari`` at HC's own C); nothing where the algorithm
    has no such reading or there is no ground truth."""
    if truth is None:
        return {}
    truth = np.asarray(truth)
    planted = algorithm.planted_clusters(fed, state, len(np.unique(truth)))
    return {} if planted is None else {"ari_planted": float(adjusted_rand_score(truth, planted))}


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


# ---- the stages of one cell's run ------------------------------------------------------------


@dataclass
class CellRun:
    """The fixed parts of one cell's run, built once by :func:`prepare`: its settings, the
    federation (model template, data, trainer, client sampling), the algorithm, the partition's
    ground-truth groupings, and what a checkpoint must match to be resumed."""

    cell: Cell
    spec: dict  # resolve_cell's entries
    out: Path
    device: torch.device
    fed: Federation
    algorithm: Algorithm
    groups: dict  # the partition's ground-truth groupings (``cluster``, ``team``, ...)
    code: dict  # provenance of the code that runs
    fingerprint: str
    started: float  # time.perf_counter() when the run began
    device_reason: str = ""  # why the run is on ``device`` (:func:`choose_device`)

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


def prepare(config: dict, cell: Cell, partition_npz, out_dir, device: str | None = None) -> CellRun:
    """Load the cell's data and partition onto the device, build its model (seeded with the cell's
    seed), federation and algorithm, and fingerprint its settings and code."""
    started = time.perf_counter()
    load_plugins(config.get("plugins") or ())  # a plugin's algorithm, model or dataset source
    spec = resolve_cell(config, cell)
    dev, reason = choose_device(device or config.get("device", "auto"), spec, partition_npz)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    data, groups = _load_data(config, spec, partition_npz, dev, cell.seed)
    fed = _federation(config, cell, spec, data, groups)
    algorithm_spec = spec["algorithm"]
    algorithm = ALGORITHMS[algorithm_spec["method"]](**{k: v for k, v in algorithm_spec.items() if k != "method"})
    code = provenance(cell_roots(spec), CELL_SCRIPTS)  # version, commit, hash of the code that runs
    return CellRun(cell=cell, spec=spec, out=Path(out_dir), device=dev, fed=fed, algorithm=algorithm,
                   groups=groups, code=code, fingerprint=fingerprint(results_settings(spec), code["code_hash"]),
                   started=started, device_reason=reason)


def choose_device(requested: str, spec: dict, partition_npz) -> tuple[torch.device, str]:
    """The device a cell trains on and why.  ``cpu``/``cuda[:N]`` as the config names it; ``auto``: the
    CPU without CUDA, and with CUDA the device :func:`fedbench.cost.model.choose_device` estimates faster for
    this cell (the cost model's seconds on each, from ``config/throughputs.yaml``; a tiny model's rounds
    can be slower on a GPU than on the CPU), the cell's shape from its partition's summary ``.json``
    beside ``partition_npz`` where present, else from the dataset's facts."""
    if requested != "auto":
        return resolve_device(requested), f"device: {requested} (the config's)"
    if not torch.cuda.is_available():
        return resolve_device("cpu"), "device auto: no CUDA available"
    from fedbench.cost import model as cost

    try:
        summary = Path(partition_npz).with_suffix(".json")
        recorded = json.loads(summary.read_text()) if summary.exists() else {}
        shape = (cost.summary_shape(recorded) if "input_shape" in recorded
                 else cost.estimated_shape(spec["dataset"], spec["partition"]))
        kind, reason = cost.choose_device(spec, shape)
    except (KeyError, ValueError, TypeError) as error:  # no estimate: the GPU, as before
        return resolve_device("cuda"), f"device auto: cuda (no cost estimate: {error})"
    return resolve_device(kind), reason


def _load_data(config: dict, spec: dict, partition_npz, dev: torch.device, seed: int) -> tuple[FederatedData, dict]:
    """The cell's dataset split by the partition file, on ``dev``, and the partition's groupings; a
    tuning trial's ``training.holdout`` share of each client's training rows held out for validation."""
    dataset = load_dataset(spec["dataset"], config.get("data_root", "data"))
    partition = hold_out_validation(load_partition(partition_npz), spec["training"].get("holdout", 0.0), seed)
    return FederatedData.build(dataset, partition, dev), partition.groups


def _federation(config: dict, cell: Cell, spec: dict, data: FederatedData, groups: dict) -> Federation:
    """The federation of one cell: the model (built after seeding torch with the cell's seed), the
    trainer of ``training.engine``, local SGD, client sampling seeded with the cell's seed."""
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
        encoders=Path(config.get("results", "results")) / "encoders",
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


def score_round(fed: Federation, algorithm: Algorithm, state: dict, round_: int, train_loss: float,
                truth=None, memory_mb: float | None = None, train_scores: bool = True) -> tuple[dict, Scores]:
    """The history row of an evaluated round and the clients' test scores: ``train_loss``, the
    clients' models on their test rows (and validation rows, where the partition has them), the
    global model on the pooled test rows, with ``train_scores`` both on the training rows, the
    recovered clusters and relatedness graph against ``truth``, and the algorithm's diagnostics."""
    data, model = fed.data, fed.model
    everyone = torch.arange(data.num_clients, device=fed.device)
    models = algorithm.client_models(fed, state, round_)
    scoring = algorithm.scoring_model(fed, state)  # e.g. FeMAM's additive levels
    scoring = model if scoring is None else scoring
    personal = evaluate_clients(scoring, models, data, data.test, everyone, memory_mb=memory_mb)
    global_weights = algorithm.global_model(fed, state)
    pooled = None if global_weights is None else evaluate_pooled(model, global_weights, data, data.test, memory_mb)
    row = _history_row(round_, train_loss, personal, pooled)
    if data.val is not None:  # the clients' models on their validation rows (FeMAM's model selection)
        row.update(evaluate_clients(scoring, models, data, data.val, everyone, memory_mb=memory_mb).summary("val_"))
    if train_scores:
        row.update(_train_scores(scoring, models, global_weights, data, everyone, memory_mb, model))
    row.update(_cluster_scores(algorithm.clusters(fed, state), truth))
    row.update(_planted_scores(fed, algorithm, state, truth))
    row.update(adjacency_scores(algorithm.adjacency(fed, state), truth))
    row.update(algorithm.diagnostics(fed, state))  # per-round scalars (CFL's norms, splits)
    return row, personal


def evaluate(run: CellRun, progress: Progress, round_: int) -> None:
    """Score round ``round_`` (:func:`score_round`, training scores every ``train_eval_every``
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
        "device_reason": run.device_reason,
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
    trainer) and, on CUDA, the TF32 flags in force (the run's own while :func:`run_cell` runs)."""
    used = getattr(run.fed.trainer, "numerics_used", None) or {**run.fed.numerics.record(), "compiled": False}
    if run.device.type == "cuda":
        used.update(tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32)
    return used


def run_cell(config: dict, cell: Cell, partition_npz, out_dir, device: str | None = None) -> dict:
    """Train and evaluate one cell; write ``metrics.json``, ``history.csv`` and ``clients.csv`` to ``out_dir``.

    Every ``training.checkpoint_every`` rounds the run's whole state goes to ``out_dir/checkpoint.pt``
    (:mod:`fedbench.run.checkpoint`); a rerun continues from there and ends with the same numbers.  A
    round whose training loss is NaN or infinite ends the run: ``metrics.json`` says
    ``status: diverged`` and the round, with no final numbers."""
    run = prepare(config, cell, partition_npz, out_dir, device)
    with run.fed.numerics.backends():  # TF32 and cuDNN flags of the run, restored when it ends
        return _run(config, run)


def _run(config: dict, run: CellRun) -> dict:
    cell = run.cell
    progress = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    rounds, every = run.training["rounds"], run.training["eval_every"]
    log.info("cell %s on %s: %d clients, %d rounds", run.name, run.device, run.fed.num_clients, rounds)
    board = TensorBoardLog(tensorboard_dir(config, run.out, run.code["code_hash"])) if config.get("tensorboard") else None
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
