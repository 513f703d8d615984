"""Evaluation of many client models at once, each on its own test split, and of one model on a pooled set."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.memory import budget_bytes, clients_per_pass, evaluation_bytes_per_row
from fedbench.engine.weights import Weights, is_shared
from fedbench.engine.wide_model import group_forward


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

    @property
    def pooled_loss(self) -> float:
        """Sum of losses / sum of samples over all clients (pFedMe's training-loss curves)."""
        return float(self.loss_sum.sum() / max(self.samples.sum(), 1))

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Unweighted mean and population variance over clients, plus pooled accuracy (Sum correct / Sum n)."""
        return {
            f"{prefix}acc_mean": float(self.accuracy.mean()),
            f"{prefix}acc_var": float(self.accuracy.var()),
            f"{prefix}f1_mean": float(self.macro_f1.mean()),
            f"{prefix}loss_mean": float(self.loss.mean()),
            f"{prefix}acc_pooled": float(self.correct.sum() / max(self.samples.sum(), 1)),
        }


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
    """Run ``evaluate(model, ...)`` in inference mode and with ``model`` in eval mode."""

    @functools.wraps(evaluate)
    def wrapped(model: nn.Module, *args, **kwargs):
        with torch.inference_mode(), eval_mode(model):
            return evaluate(model, *args, **kwargs)

    return wrapped


def cross_entropy_per_row(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``F.cross_entropy(logits, y, reduction="none")`` for logits ``[..., C]`` as logsumexp minus
    the target logit (on the CPU ~3x faster than the log_softmax inside ``F.cross_entropy`` for
    few classes; equal up to rounding, tested)."""
    return torch.logsumexp(logits, -1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def size_buckets(counts: torch.Tensor, max_clients: int | None = None, slack: float = 2.0) -> list[torch.Tensor]:
    """Positions of ``counts`` grouped so that padding each group to its largest count costs at
    most ``slack`` times its real rows (clients sorted by count; a group starts where a count
    exceeds ``slack`` x the group's smallest), at most ``max_clients`` per group."""
    order = torch.argsort(counts.cpu(), stable=True)
    sizes = counts.cpu()[order].tolist()
    groups, start = [], 0
    for i in range(1, len(sizes) + 1):
        full = max_clients is not None and i - start >= max_clients
        if i == len(sizes) or full or sizes[i] > slack * max(sizes[start], 1):
            groups.append(order[start:i])
            start = i
    return groups


def macro_f1_from_confusion(confusion: torch.Tensor) -> np.ndarray:
    """Macro-F1 of every confusion matrix ``[n, C, C]`` (rows true, columns predicted), as
    ``sklearn.metrics.f1_score(average="macro", zero_division=0)``: the mean over the labels present
    in the true or predicted labels; NaN for an empty matrix.  (Vectorised over clients; tested
    against scikit-learn.)"""
    confusion = confusion.double()
    tp = confusion.diagonal(dim1=1, dim2=2)
    true, predicted = confusion.sum(2), confusion.sum(1)
    present = (true + predicted) > 0
    f1 = torch.where(present, 2 * tp / (true + predicted).clamp_min(1), torch.zeros_like(tp))
    labels = present.sum(1)
    return torch.where(labels > 0, f1.sum(1) / labels.clamp_min(1), torch.full_like(labels, float("nan"), dtype=tp.dtype)).cpu().numpy()


@_in_eval_mode
def evaluate_clients(
    model: nn.Module,
    stacked: Weights,
    data: FederatedData,
    index: ClientIndex,
    clients: torch.Tensor,
    chunk_size: int | None = None,
    memory_mb: float | None = None,
) -> Scores:
    """Client ``clients[c]``'s model (row c of ``stacked``) on that client's rows of ``index``.

    When every client holds the same model (a global model: FedAvg, FedMR, ...), the model runs
    once over the distinct rows the clients need (:func:`_evaluate_shared_model`); so does every
    model that several clients hold, bit for bit (:func:`identical_models`: IFCA's and CFL's
    cluster models, FLT's and PCA+kM+HC's cluster averages), over the distinct rows of its clients
    (clients of one cluster share its test rows).  The other clients are evaluated in groups of
    similar size (:func:`size_buckets`), so padding never
    costs more than the real rows; a group runs as one wide model (:mod:`fedbench.engine.wide_model`;
    ``vmap`` for models that do not fold) over blocks of rows.  Groups (at most ``chunk_size``
    clients; convolutional models on the CPU: one) and blocks are sized so that a pass stays
    within the memory budget (:mod:`fedbench.engine.memory`): the group's weights plus its
    block's activations.  An additive model with ``level_logits`` (FeMAM) runs level by level and
    reads the levels unchanged since they were last evaluated on these rows
    (:class:`~fedbench.engine.frozen_levels.LevelLogits`; its clients are not grouped by model).
    Either way a client's numbers are its model's on its rows, equal up to float rounding
    (``loss_sum``; a prediction only where two logits tie to rounding) to scoring the client alone
    (tests/test_evaluate.py).
    """
    n = len(clients)
    budget = budget_bytes(data.x.device, memory_mb)
    row_bytes = evaluation_bytes_per_row(model, data.input_shape)
    weight_bytes = sum(v[0].numel() * v.element_size() for v in stacked.values()) if n else 0
    if n > 1 and (is_shared(stacked) or all(torch.equal(v, v[:1].expand_as(v)) for v in stacked.values())):
        groups = [torch.arange(n)]
    elif getattr(model, "level_logits", None) is None:
        groups = identical_models(stacked)
    else:
        groups = []
    if not groups:
        return _evaluate_own_models(model, stacked, data, index, clients, chunk_size, budget, row_bytes, weight_bytes)
    clients_per_pass(weight_bytes + row_bytes, budget, 1, "evaluation")  # one model and one row fit
    block = max(1, (budget - weight_bytes) // row_bytes)
    parts = [(group, _evaluate_shared_model(model, {k: v[group[0]] for k, v in stacked.items()}, data, index,
                                            clients[group.to(clients.device)], block)) for group in groups]
    alone = torch.ones(n, dtype=torch.bool)
    for group in groups:
        alone[group] = False
    alone = torch.nonzero(alone).flatten()
    if len(alone):
        own = {k: v[alone.to(v.device)] for k, v in stacked.items()}
        parts.append((alone, _evaluate_own_models(model, own, data, index, clients[alone.to(clients.device)],
                                                  chunk_size, budget, row_bytes, weight_bytes)))
    out = Scores(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n))
    for positions, scores in parts:
        for field in fields(Scores):
            getattr(out, field.name)[positions.numpy()] = getattr(scores, field.name)
    return out


def _evaluate_own_models(model: nn.Module, stacked: Weights, data: FederatedData, index: ClientIndex,
                         clients: torch.Tensor, chunk_size: int | None, budget: int, row_bytes: int,
                         weight_bytes: int) -> Scores:
    """:func:`evaluate_clients` for clients with a model each: groups of similar size, each a wide model."""
    n, num_classes = len(clients), data.num_classes
    counts_all = index.counts[clients]
    typical_rows = min(max(int(counts_all.max()) if n else 1, 1), 256)
    if chunk_size is None and data.x.device.type == "cpu" and _has_conv(model):
        # on the CPU a convolution over one client's whole block already runs at the GEMM rate;
        # grouping clients only shrinks its tiles (measured: benchmarks/README.md, evaluation)
        chunk_size = 1
    max_clients = clients_per_pass(2 * weight_bytes + typical_rows * row_bytes, budget, chunk_size or n, "evaluation")
    levels = getattr(model, "level_logits", None)  # an additive model evaluated level by level (FeMAM)
    levels = levels.begin(model, stacked, data, index, clients) if levels is not None else None
    forward = group_forward(model, data.x) if levels is None else None
    samples = counts_all.cpu().numpy()
    correct = np.zeros(n, dtype=np.int64)
    loss_sum = np.zeros(n)
    confusion = torch.zeros(n, num_classes, num_classes, dtype=torch.long, device=counts_all.device)
    for group in size_buckets(counts_all, max_clients):
        g = group.to(counts_all.device)
        counts = counts_all[g]
        width = max(int(counts.max()), 1)
        weights = {k: v[g] for k, v in stacked.items()}
        block = max(1, (budget - 2 * len(g) * weight_bytes) // (len(g) * row_bytes))
        rows = index.index[clients[g], :width]
        preds, losses = [], []
        y = data.y[rows]
        for start in range(0, width, block):
            part = rows[:, start : start + block]
            logits = forward(weights, part) if levels is None else levels.logits(weights, part, g, start)
            losses.append(cross_entropy_per_row(logits, y[:, start : start + block]))
            preds.append(logits.argmax(-1))
        pred, loss = torch.cat(preds, 1), torch.cat(losses, 1)
        valid = torch.arange(width, device=rows.device) < counts[:, None]
        correct[group.numpy()] = ((pred == y) & valid).sum(1).cpu().numpy()
        loss_sum[group.numpy()] = (loss * valid).sum(1).double().cpu().numpy()
        cell = (torch.arange(len(g), device=rows.device)[:, None] * num_classes + y) * num_classes + pred
        confusion[g] = torch.bincount(cell[valid], minlength=len(g) * num_classes**2).view(len(g), num_classes, num_classes)
    if levels is not None:
        levels.keep()
    return Scores(samples, correct, loss_sum, macro_f1_from_confusion(confusion))


KEY_ENTRIES = 16  # entries of every tensor whose bytes sort the models into candidate groups


def identical_models(stacked: Weights) -> list[torch.Tensor]:
    """Positions (CPU, ascending) of the rows of ``stacked`` that equal another row in every tensor, bit for
    bit, one group per distinct model held by two or more rows (rows of a unique model in none).

    Rows are first sorted by the bytes of :data:`KEY_ENTRIES` entries of every tensor (spread over it),
    then every candidate's tensors are compared byte for byte with its group's first row; a
    candidate that differs somewhere else is compared with the group's other models.  One pass
    over the weights, a few milliseconds for 100 MLP clients."""
    values = list(stacked.values())
    n = len(values[0]) if values else 0
    if n < 2:
        return []
    flat = [v.reshape(n, -1) for v in values]
    key = torch.cat([torch.zeros(n, 1, dtype=torch.uint8)] + [
        f[:, torch.linspace(0, f.shape[1] - 1, min(KEY_ENTRIES, f.shape[1])).long().to(f.device)]
        .contiguous().view(torch.uint8).reshape(n, -1).cpu() for f in flat if f.shape[1]], 1)
    _, candidate, sizes = torch.unique(key, dim=0, return_inverse=True, return_counts=True)

    def same(a: int, b: int) -> bool:
        return all(torch.equal(f[a].contiguous().view(torch.uint8), f[b].contiguous().view(torch.uint8)) for f in flat)

    groups = []
    for c in torch.nonzero(sizes > 1).flatten().tolist():
        models: list[list[int]] = []  # rows of each distinct model among the candidates
        for row in torch.nonzero(candidate == c).flatten().tolist():
            for members in models:
                if same(members[0], row):
                    members.append(row)
                    break
            else:
                models.append([row])
        groups += [torch.tensor(members) for members in models if len(members) > 1]
    return sorted(groups, key=lambda g: int(g[0]))


def _evaluate_shared_model(model, single: Weights, data: FederatedData, index: ClientIndex, clients, block: int) -> Scores:
    """:func:`evaluate_clients` when every client holds ``single``: one forward pass per distinct row
    the clients need (``block`` rows at a time), each client's numbers gathered from it (100 clients
    sharing a 10,000-image test set: 100 times less work)."""
    counts = index.counts[clients]
    width = max(int(counts.max()), 1)
    rows = index.index[clients, :width]
    valid = torch.arange(width, device=rows.device) < counts[:, None]
    needed, where = torch.unique(rows[valid], return_inverse=True)
    preds, losses = [], []
    for start in range(0, len(needed), block):
        r = needed[start : start + block]
        logits = functional_call(model, single, (data.x[r],))
        losses.append(cross_entropy_per_row(logits, data.y[r]))
        preds.append(logits.argmax(-1))
    pred, loss = torch.cat(preds)[where], torch.cat(losses)[where]
    n, num_classes = len(clients), data.num_classes
    owner = torch.arange(n, device=rows.device)[:, None].expand_as(rows)[valid]
    y = data.y[rows[valid]]
    correct = torch.zeros(n, dtype=torch.long, device=rows.device).index_add_(0, owner, (pred == y).long())
    loss_sum = torch.zeros(n, dtype=torch.float64, device=rows.device).index_add_(0, owner, loss.double())
    confusion = torch.bincount((owner * num_classes + y) * num_classes + pred, minlength=n * num_classes**2)
    return Scores(
        counts.cpu().numpy(), correct.cpu().numpy(), loss_sum.cpu().numpy(),
        macro_f1_from_confusion(confusion.view(n, num_classes, num_classes)),
    )


def _has_conv(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


@_in_eval_mode
def evaluate_pooled(
    model: nn.Module, single: Weights, data: FederatedData, index: ClientIndex, memory_mb: float | None = None
) -> Scores:
    """One model on the union of every client's rows of ``index`` (the global test set), in blocks
    of rows within the memory budget."""
    rows = index.union  # clients may share test samples (global or cluster test sets)
    block = max(1, budget_bytes(data.x.device, memory_mb) // evaluation_bytes_per_row(model, data.input_shape))
    num_classes = data.num_classes
    confusion = torch.zeros(num_classes * num_classes, dtype=torch.long, device=rows.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=rows.device)
    for start in range(0, len(rows), block):
        r = rows[start : start + block]
        logits, y = functional_call(model, single, (data.x[r],)), data.y[r]
        loss_sum += cross_entropy_per_row(logits, y).sum()
        confusion += torch.bincount(y * num_classes + logits.argmax(-1), minlength=num_classes**2)
    confusion = confusion.view(1, num_classes, num_classes)
    return Scores(
        samples=np.array([len(rows)]),
        correct=confusion.diagonal(dim1=1, dim2=2).sum(1).cpu().numpy(),
        loss_sum=np.array([float(loss_sum)]),
        macro_f1=macro_f1_from_confusion(confusion),
    )
