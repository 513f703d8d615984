"""What the history row of an evaluated round holds (:func:`score_round`): the clients' models on
their test (and validation, and training) rows, the global model on the pooled rows, the recovered
clusters and relatedness graph against the partition's ground truth (ARI, NMI; FLT's ``ari_planted``
and adjacency scores), and the algorithm's diagnostics; and every discovered level's grouping
against every ground-truth grouping (:func:`structure_scores`, FeMAM)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from fedbench.algorithms import Algorithm, Federation
from fedbench.engine.evaluate import Scores, evaluate_clients, evaluate_pooled
from fedbench.engine.federated_data import FederatedData


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
