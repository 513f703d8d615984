"""What every algorithm sees (:class:`Federation`) and provides (:class:`Algorithm`), plus the
server-side steps they share: client sampling, one round of local SGD, weighted averaging."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from fedbench.engine.batches import make_batch_plan
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import Weights, broadcast, parameter_names, rows, weighted_average
from fedbench.registry import Registry

ALGORITHMS: Registry = Registry("algorithm")

# what of BatchNorm stays with each client at aggregation (``training.bn_aggregation``)
BN_AGGREGATION = {
    "average": "nothing: BatchNorm parameters and running statistics are averaged like every weight "
    "(what FedAvg, FedMR's and FeMAM's code do)",
    "local_stats": "the running statistics (running_mean, running_var, num_batches_tracked) stay local",
    "local": "every BatchNorm parameter and statistic stays local (FedBN, Li et al. 2021, Algorithm 1)",
}


@dataclass
class Federation:
    """The simulated federation of one cell: model template, data, trainer, and the round's randomness.

    ``generator`` drives client sampling and batch order of training; ``eval_generator(t)``
    gives evaluation-time randomness (e.g. FedAvg+'s fine-tuning) that does not perturb training.
    """

    model: nn.Module
    data: FederatedData
    trainer: Any  # VectorisedTrainer or ReferenceTrainer
    local: LocalSGD
    participation: float
    generator: torch.Generator
    seed: int
    encoders: Path = Path("results/encoders")  # where pretrained encoders (``{name}.pt``) are read from
    teams: np.ndarray | None = None  # team of every client where the partition defines teams (pFedMT's tiers)
    bn_aggregation: str = "average"  # a key of BN_AGGREGATION

    def __post_init__(self):
        if self.bn_aggregation not in BN_AGGREGATION:
            raise ValueError(f"bn_aggregation {self.bn_aggregation!r}; valid choices: {', '.join(BN_AGGREGATION)}")

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def device(self) -> torch.device:
        return self.data.x.device

    def eval_generator(self, round_: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + round_)

    def sample_clients(self) -> torch.Tensor:
        """max(1, round(rho * K)) distinct clients, uniformly at random, in increasing order."""
        m = max(1, round(self.participation * self.num_clients))
        chosen = torch.randperm(self.num_clients, generator=self.generator)[:m]
        return chosen.sort().values.to(self.device)

    def train_clients(
        self,
        start: Weights,
        clients: torch.Tensor,
        hp: LocalSGD | None = None,
        center: Weights | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Weights, torch.Tensor]:
        """Local SGD from stacked ``start`` for ``clients`` (all at once); returns weights and mean losses."""
        hp = hp or self.local
        counts = self.data.train.counts[clients]
        plan = make_batch_plan(counts, hp.epochs, hp.batch_size, generator or self.generator)
        return self.trainer.train(start, clients, plan, hp, center)

    def minibatch_gradients(self, single: Weights, split: str = "train") -> MinibatchGradients:
        """The per-client minibatch gradient oracle on ``split`` (batch size and L2 weight decay from
        ``local``), reading buffers from the model ``single`` (the Moreau-envelope family)."""
        params = set(parameter_names(self.model))
        buffers = {k: v for k, v in single.items() if k not in params}
        index = getattr(self.data, split)
        return MinibatchGradients(self.model, self.data, index, self.local.batch_size, self.local.weight_decay, buffers)

    def sgd_steps(self, start: Weights, clients: torch.Tensor, steps: int) -> tuple[Weights, torch.Tensor]:
        """``steps`` plain SGD steps (lr ``local.lr``), one fresh minibatch each, from stacked ``start``
        for ``clients`` -- local work counted in minibatch steps, as the pFedMe/PerMFL code's FedAvg."""
        if self.local.momentum:
            raise ValueError("local work in minibatch steps (local_steps) is plain SGD; set training.momentum to 0")
        oracle = self.minibatch_gradients({k: v[0] for k, v in start.items()})
        names = parameter_names(self.model)
        theta = {n: start[n].clone() for n in names}
        batches = oracle.draw(steps, clients, self.generator)
        loss_sum = torch.zeros(len(clients), device=self.device)
        with torch.no_grad():
            for s in range(steps):
                grads, loss = oracle(theta, batches[s], clients)
                torch._foreach_add_(list(theta.values()), [grads[n] for n in theta], alpha=-self.local.lr)
                loss_sum += loss
        return {**start, **theta}, loss_sum / max(steps, 1)

    def finetune(self, models: Weights, epochs: int, round_: int) -> Weights:
        """Every client fine-tunes its row of ``models`` for ``epochs`` local epochs on a copy, with
        evaluation-time randomness (the "+" variants: FedAvg+, FeSEM+; FeMAM Sec. 5)."""
        if not epochs:
            return models
        everyone = torch.arange(self.num_clients, device=self.device)
        hp = self.with_local(epochs=epochs, prox_mu=0.0)
        tuned, _ = self.train_clients(models, everyone, hp=hp, generator=self.eval_generator(round_))
        return tuned

    def average(self, stacked: Weights, clients: torch.Tensor) -> Weights:
        """Sample-weighted average sum_i n_i theta_i / sum_i n_i of the clients' models."""
        return weighted_average(stacked, self.data.train.counts[clients])

    @functools.cached_property
    def local_names(self) -> list[str]:
        """The state entries that ``bn_aggregation`` keeps with each client (none by default)."""
        if self.bn_aggregation == "average":
            return []
        stats = ("running_mean", "running_var", "num_batches_tracked")
        names = []
        for prefix, module in self.model.named_modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                kept = [n for n, _ in module.named_buffers(recurse=False)]
                kept = [n for n in kept if n in stats]
                if self.bn_aggregation == "local":
                    kept += [n for n, _ in module.named_parameters(recurse=False)]
                names += [f"{prefix}.{n}" if prefix else n for n in kept]
        return names

    def local_state(self, initial: Weights) -> Weights | None:
        """Every client's copy of the entries kept local, from ``initial`` (None when nothing is)."""
        return broadcast({k: initial[k] for k in self.local_names}, self.num_clients) if self.local_names else None

    def with_local_state(self, stacked: Weights, clients: torch.Tensor, kept: Weights | None) -> Weights:
        """``stacked`` (one row per client of ``clients``) with those clients' own local entries."""
        return stacked if kept is None else {**stacked, **rows(kept, clients)}

    def keep_local_state(self, kept: Weights | None, trained: Weights, clients: torch.Tensor) -> Weights | None:
        """``kept`` with the rows of ``clients`` taken from their ``trained`` models."""
        if kept is None:
            return None
        out = {k: v.clone() for k, v in kept.items()}
        for k in out:
            out[k][clients] = trained[k]
        return out

    def with_local(self, **changes) -> LocalSGD:
        return replace(self.local, **changes)


class Algorithm(Protocol):
    """Plain-state algorithm: ``init`` -> state; ``round`` -> (state, per-client train loss);
    ``client_models`` -> the stacked model each client is scored with; ``global_model`` -> the
    server model or None.

    Clustering algorithms may also provide ``clusters(fed, state) -> np.ndarray | None`` (the
    recovered cluster of every client, scored against the partition's ground truth with ARI
    and NMI at every evaluated round) and ``artifacts(fed, state) -> dict`` (name -> numpy array
    saved as ``{name}.npy``, pandas DataFrame saved as ``{name}.csv``, or JSON-able dict saved
    as ``{name}.json`` in the run directory, e.g. the FLT adjacency matrix).
    """

    def init(self, fed: Federation, initial: Weights) -> dict: ...

    def round(self, fed: Federation, state: dict, round_: int) -> tuple[dict, torch.Tensor]: ...

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights: ...

    def global_model(self, fed: Federation, state: dict) -> Weights | None: ...
