"""FeMAM's server-side decisions as plain functions of recorded numbers (Chen et al., Sec. 3.4,
App. B; the released code: notes §1.4): when a level has converged, which clients keep a level,
and how a cluster level groups the clients.  Each rule has the paper's reading and the code's.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.cluster import KMeans

CONVERGENCE = ("accuracy_variance", "loss_std")
PRUNING = ("eq9", "window")
FEATURES = ("parameters", "last_layer")
CLUSTER_FIT = ("sem", "refit")


def converged(
    val_loss: list[float], val_acc: list[float], round_: int, *,
    rule: str, init_rounds: int, window: int, threshold: float,
) -> bool:
    """Has the newest level converged?  ``val_loss``/``val_acc``: the mean over clients of the
    validation loss / accuracy (in [0, 1]) at every round since the level was added.

    Never before round ``init_rounds`` nor before ``window`` rounds of the level (the code's queue
    starts full of 999s and is reset when a level is added).  ``accuracy_variance`` (paper,
    Sec. 5.1: "variance of the overall accuracy in the latest 50 rounds < 1"; accuracy in percent):
    np.var(100 * acc[-window:]) < threshold; ``loss_std`` (code ``server.eval``):
    np.std(loss[-window:]) < threshold."""
    if rule not in CONVERGENCE:
        raise ValueError(f"convergence must be one of {CONVERGENCE}, got {rule!r}")
    if round_ < init_rounds or len(val_loss) < window:
        return False
    if rule == "accuracy_variance":
        return float(np.var(100.0 * np.asarray(val_acc[-window:]))) < threshold
    return float(np.std(np.asarray(val_loss[-window:]))) < threshold


def earliest_schedule(levels: int, rounds: int, *, init_rounds: int, window: int) -> list[int]:
    """Rounds each of ``levels`` levels trains in the earliest schedule :func:`converged` allows: the first
    level until round max(``init_rounds``, ``window``), every later one ``window`` rounds (the test needs
    ``window`` rounds of the level), the last level the rest of ``rounds``.  Exact when the test fires as
    soon as it may (the offline analogues' huge ``threshold``); otherwise levels come later."""
    first = max(init_rounds, window)
    ends = [min(first + level * window, rounds) for level in range(levels - 1)] + [rounds]
    return [end - start for start, end in zip([0, *ends[:-1]], ends)]


def keep_eq9(loss_without: np.ndarray, loss_with: np.ndarray, epsilon: float) -> np.ndarray:
    """Eq. (9): a client keeps the newest level unless it lowers its validation loss by <= epsilon,
    i.e. keeps iff loss_without - loss_with > epsilon."""
    return np.asarray(loss_without) - np.asarray(loss_with) > epsilon


def keep_window(
    losses: np.ndarray, levels: np.ndarray, kept: np.ndarray, newest: int, window: int, epsilon: float
) -> np.ndarray:
    """The released code's test (``server.add_layer``): per client, a = mean of its last <= ``window``
    validation losses while level ``newest`` trained, b = the same while the most recent level it
    kept before trained; keeps iff b - a > epsilon (clients with no earlier kept level keep).

    ``losses`` ``[rounds, clients]``, ``levels`` ``[rounds]`` the newest level at each round,
    ``kept`` ``[clients, levels]`` bool."""
    losses, levels = np.asarray(losses), np.asarray(levels)
    keep = np.ones(losses.shape[1], dtype=bool)
    now = losses[levels == newest][-window:]
    for i in range(losses.shape[1]):
        earlier = [l for l in range(newest) if kept[i, l]]
        if not earlier or not len(now):
            continue
        before = losses[levels == earlier[-1], i][-window:]
        if len(before):
            keep[i] = before.mean() - now[:, i].mean() > epsilon
    return keep


def cluster_features(flat_params: torch.Tensor, last_layer: torch.Tensor, kind: str) -> np.ndarray:
    """What a cluster level groups by: ``parameters`` (paper, Eq. 4: the full flattened level
    model) or ``last_layer`` (code ``compute_diff_structure``: the last Linear's weight and bias,
    divided by the absolute value of their signed sum)."""
    if kind == "parameters":
        return flat_params.double().cpu().numpy()
    if kind == "last_layer":
        f = last_layer.double()
        scale = f.sum(1, keepdim=True).abs()
        return (f / torch.where(scale > 0, scale, torch.ones_like(scale))).cpu().numpy()
    raise ValueError(f"cluster_features must be one of {FEATURES}, got {kind!r}")


def kmeans_groups(features: np.ndarray, k: int, *, fit: str, seed: int, centres: np.ndarray | None = None) -> np.ndarray:
    """Group of every client at a cluster level.

    ``sem`` (paper, Eq. B.3, FeSEM's E-step): each client joins the nearest of the level's current
    centres ``centres``; without centres yet (the level's first round) k-means++ (n_init=1) forms
    the first grouping.  ``refit`` (code ``server.aggregate_id``): scikit-learn
    ``KMeans(k, init="random", n_init=10)`` fitted from scratch every round."""
    k = min(k, len(features))
    if fit not in CLUSTER_FIT:
        raise ValueError(f"cluster_fit must be one of {CLUSTER_FIT}, got {fit!r}")
    if fit == "sem" and centres is not None:
        d = ((features[:, None, :] - centres[None, :, :]) ** 2).sum(-1)
        return d.argmin(1)
    if fit == "sem":
        model = KMeans(k, init="k-means++", n_init=1, random_state=seed)
    else:
        model = KMeans(k, init="random", n_init=10, max_iter=300, tol=1e-4, random_state=seed)
    return model.fit_predict(features)
