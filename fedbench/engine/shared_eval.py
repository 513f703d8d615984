"""Scoring every client when all of them hold the same model (a global model: FedMR and its
baselines, FedAvg, ...): the model runs once over the distinct rows the clients need, and each
client's numbers are gathered from those predictions.

The result equals :func:`~fedbench.engine.evaluate.evaluate_clients` (tested); evaluating 100
identical copies of a CNN on 10,000 shared test images (``test_set: global``) would cost 100 times
the work and, with vmap over the copies, more memory than a 2-core machine has.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fedbench.engine.evaluate import Scores, cross_entropy_per_row, eval_mode, evaluate_clients, macro_f1_from_confusion
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.weights import Weights


def _all_rows_equal(t: torch.Tensor) -> bool:
    return bool(torch.equal(t, t[:1].expand_as(t)))


def evaluate_clients_shared(model: nn.Module, stacked: Weights, data: FederatedData, index: ClientIndex,
                            clients: torch.Tensor, block: int = 8192, **kwargs) -> Scores:
    """:func:`evaluate_clients`, with one forward pass per distinct row when every row of ``stacked``
    is the same model; otherwise :func:`evaluate_clients` itself."""
    if len(clients) < 2 or not all(_all_rows_equal(v) for v in stacked.values()):
        return evaluate_clients(model, stacked, data, index, clients, **kwargs)
    single = {k: v[0] for k, v in stacked.items()}
    counts = index.counts[clients]
    width = max(int(counts.max()), 1)
    rows = index.index[clients, :width]
    valid = torch.arange(width, device=rows.device) < counts[:, None]
    needed, where = torch.unique(rows[valid], return_inverse=True)
    num_classes = data.num_classes
    with torch.no_grad(), eval_mode(model):
        preds, losses = [], []
        for start in range(0, len(needed), block):
            r = needed[start : start + block]
            logits = functional_call(model, single, (data.x[r],))
            losses.append(cross_entropy_per_row(logits, data.y[r]))
            preds.append(logits.argmax(-1))
    pred = torch.cat(preds) if preds else torch.zeros(0, dtype=torch.long, device=rows.device)
    loss = torch.cat(losses) if losses else torch.zeros(0, device=rows.device)
    owner = torch.arange(len(clients), device=rows.device)[:, None].expand_as(rows)[valid]
    y = data.y[rows[valid]]
    p = pred[where]
    n = len(clients)
    correct = torch.zeros(n, dtype=torch.long, device=rows.device).index_add_(0, owner, (p == y).long())
    loss_sum = torch.zeros(n, dtype=torch.float64, device=rows.device).index_add_(0, owner, loss[where].double())
    cell = (owner * num_classes + y) * num_classes + p
    confusion = torch.bincount(cell, minlength=n * num_classes**2).view(n, num_classes, num_classes)
    return Scores(counts.cpu().numpy(), correct.cpu().numpy(), loss_sum.cpu().numpy(), macro_f1_from_confusion(confusion))
