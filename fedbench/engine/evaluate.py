"""Evaluation of many client models at once, each on its own test split, and of one model on a pooled set."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn
from torch.func import functional_call, vmap

from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.weights import Weights


@dataclass(frozen=True)
class Scores:
    """Per-client (or single-model) test results; arrays are aligned with the clients evaluated."""

    samples: np.ndarray
    correct: np.ndarray
    loss_sum: np.ndarray
    macro_f1: np.ndarray

    @property
    def accuracy(self) -> np.ndarray:
        return self.correct / np.maximum(self.samples, 1)

    @property
    def loss(self) -> np.ndarray:
        return self.loss_sum / np.maximum(self.samples, 1)

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Unweighted mean and population variance over clients, plus pooled accuracy (Sum correct / Sum n)."""
        return {
            f"{prefix}acc_mean": float(self.accuracy.mean()),
            f"{prefix}acc_var": float(self.accuracy.var()),
            f"{prefix}f1_mean": float(self.macro_f1.mean()),
            f"{prefix}loss_mean": float(self.loss.mean()),
            f"{prefix}acc_pooled": float(self.correct.sum() / max(self.samples.sum(), 1)),
        }


def _macro_f1(labels: np.ndarray, predictions: np.ndarray) -> float:
    if len(labels) == 0:
        return float("nan")
    return float(f1_score(labels, predictions, average="macro", zero_division=0))


@contextmanager
def eval_mode(model: nn.Module):
    """``model.eval()`` inside the block, the previous mode restored after (dropout, BatchNorm)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _in_eval_mode(evaluate):
    """Run ``evaluate(model, ...)`` without gradients and with ``model`` in eval mode."""

    @functools.wraps(evaluate)
    def wrapped(model: nn.Module, *args, **kwargs):
        with torch.no_grad(), eval_mode(model):
            return evaluate(model, *args, **kwargs)

    return wrapped


@_in_eval_mode
def evaluate_clients(
    model: nn.Module,
    stacked: Weights,
    data: FederatedData,
    index: ClientIndex,
    clients: torch.Tensor,
    chunk_size: int | None = None,
    block: int = 2048,
) -> Scores:
    """Client ``clients[c]``'s model (row c of ``stacked``) on that client's rows of ``index``."""
    forward = vmap(lambda w, x: functional_call(model, w, (x,)))
    n = len(clients)
    size = chunk_size or n
    samples, correct, loss_sum, f1 = [], [], [], []
    for lo in range(0, n, size):
        sl = slice(lo, min(lo + size, n))
        weights = {k: v[sl] for k, v in stacked.items()}
        rows, counts = index.index[clients[sl]], index.counts[clients[sl]]
        preds, losses = [], []
        for start in range(0, rows.shape[1], block):
            r = rows[:, start : start + block]
            logits = forward(weights, data.x[r])
            y = data.y[r]
            losses.append(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view_as(y))
            preds.append(logits.argmax(-1))
        pred, loss = torch.cat(preds, 1), torch.cat(losses, 1)
        y = data.y[rows]
        valid = torch.arange(rows.shape[1], device=rows.device) < counts[:, None]
        samples.append(counts.cpu().numpy())
        correct.append(((pred == y) & valid).sum(1).cpu().numpy())
        loss_sum.append((loss * valid).sum(1).double().cpu().numpy())
        pred_np, y_np, counts_np = pred.cpu().numpy(), y.cpu().numpy(), counts.cpu().numpy()
        f1.append(np.array([_macro_f1(y_np[c, : counts_np[c]], pred_np[c, : counts_np[c]]) for c in range(len(counts_np))]))
    return Scores(*(np.concatenate(a) for a in (samples, correct, loss_sum, f1)))


@_in_eval_mode
def evaluate_pooled(model: nn.Module, single: Weights, data: FederatedData, index: ClientIndex, block: int = 4096) -> Scores:
    """One model on the union of every client's rows of ``index`` (the global test set)."""
    rows = torch.unique(index.index[index.mask()])  # clients may share test samples (global or cluster test sets)
    preds, loss_sum = [], 0.0
    for start in range(0, len(rows), block):
        r = rows[start : start + block]
        logits = functional_call(model, single, (data.x[r],))
        loss_sum += float(F.cross_entropy(logits, data.y[r], reduction="sum"))
        preds.append(logits.argmax(-1))
    pred = torch.cat(preds).cpu().numpy()
    y = data.y[rows].cpu().numpy()
    return Scores(
        samples=np.array([len(y)]),
        correct=np.array([int((pred == y).sum())]),
        loss_sum=np.array([loss_sum]),
        macro_f1=np.array([_macro_f1(y, pred)]),
    )
