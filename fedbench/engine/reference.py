"""Reference local training: one client after another, ``torch.optim.SGD``, plain autograd.

This is what peers do and what the vectorised engine must reproduce (tests hold the
two to the same parameters on the same :class:`~fedbench.engine.batches.BatchPlan`).
``numerics`` (:class:`~fedbench.engine.numerics.Numerics`): the forward in bfloat16 autocast
under ``bf16`` (the loss from FP32 logits), the model and its 4-D inputs channels-last under
``channels_last``; ``compile`` is the vectorised engine's and is refused here.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from fedbench.engine.batches import BatchPlan
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import FP32, Numerics
from fedbench.engine.trainer import Trainer
from fedbench.engine.weights import Weights


class ReferenceTrainer(Trainer):
    step_kind = "reference"

    def __init__(self, model: nn.Module, data: FederatedData, chunk_size: int | None = None, memory_mb: float | None = None,
                 numerics: Numerics | None = None):
        self.numerics = numerics or FP32
        if self.numerics.compile:
            raise ValueError("compile: the reference engine runs eagerly (compile is the vectorised engine's); "
                             "set training.compile: false or training.engine: vectorised")
        self.model = copy.deepcopy(model).to(data.x.device).train()
        if self.numerics.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.data = data

    def train(self, start: Weights, clients: torch.Tensor, plan: BatchPlan, hp: LocalSGD, center: Weights | None = None):
        out: dict[str, list[torch.Tensor]] = {k: [] for k in start}
        losses = []
        for c, client in enumerate(clients.tolist()):
            self.model.load_state_dict({k: v[c] for k, v in start.items()})
            anchor = {k: (center or start)[k][c] for k, _ in self.model.named_parameters()}
            optimizer = torch.optim.SGD(
                self.model.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay
            )
            own = self.data.train.index[client]
            batch_losses = []
            for local in plan.client_batches(c):
                rows = own[local.to(own.device)]
                optimizer.zero_grad()
                with self.numerics.autocast(own.device):
                    logits = self.model(self.numerics.layout(self.data.x[rows]))
                loss = F.cross_entropy(logits.float(), self.data.y[rows])
                loss.backward()
                if hp.prox_mu:
                    for name, p in self.model.named_parameters():
                        p.grad.add_(p.detach() - anchor[name], alpha=hp.prox_mu)
                optimizer.step()
                batch_losses.append(loss.detach())
            losses.append(torch.stack(batch_losses).mean() if batch_losses else torch.zeros((), device=own.device))
            for k, v in self.model.state_dict().items():
                out[k].append(v.detach().clone())
        return {k: torch.stack(v) for k, v in out.items()}, torch.stack(losses)
