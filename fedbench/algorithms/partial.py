"""Training only part of a model on the engine, without engine changes.

A part of a model is frozen by holding its parameters as buffers of the same name
(:func:`fedbench.models.frozen.freeze_parameters`); the engine's vectorised step then only
differentiates and updates the parameters that are left.  Used by FedRep
(head / body phases) and FeMAM (earlier levels frozen while the newest one trains).
"""

from __future__ import annotations

import torch
from torch import nn

from fedbench.algorithms.base import Federation
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import Weights
from fedbench.models.frozen import freeze_parameters, frozen_copy  # noqa: F401  (re-exported)


def trainer_for(fed: Federation, module: nn.Module, data: FederatedData | None = None):
    """A trainer of ``fed``'s kind for ``module`` on ``data`` (default ``fed.data``; the hand-written
    Linear/ReLU step is switched off: it would take a frozen Linear for a trainable one)."""
    data = fed.data if data is None else data
    if isinstance(fed.trainer, VectorisedTrainer):
        trainer = fed.trainer
        return VectorisedTrainer(module, data, chunk_size=trainer.chunk_size, fused_mlp=False, memory_mb=trainer.memory_mb,
                                 numerics=trainer.numerics)
    return type(fed.trainer)(module, data, numerics=fed.trainer.numerics)


def train_module(
    fed: Federation,
    trainer,
    start: Weights,
    clients: torch.Tensor,
    hp: LocalSGD,
    center: Weights | None = None,
    generator: torch.Generator | None = None,
    frozen_key=None,
) -> tuple[Weights, torch.Tensor]:
    """``fed.train_clients`` with another trainer: the same batch plan (:meth:`Federation.batch_plan`'s, or
    drawn from ``generator`` where one is given) for ``clients`` from the stacked ``start`` (keys of the trainer's module).
    ``frozen_key``: identifies the frozen levels of FeMAM's additive model (passed to a trainer
    that tabulates them, :mod:`fedbench.engine.frozen_levels`)."""
    if generator is None:
        plan = fed.batch_plan(clients, hp.epochs, hp.batch_size)
    else:
        plan = make_batch_plan(fed.data.train.counts[clients], hp.epochs, hp.batch_size, generator)
    if frozen_key is not None and trainer.frozen_levels is not None:
        return trainer.train(start, clients, plan, hp, center, frozen_key=frozen_key)
    return trainer.train(start, clients, plan, hp, center)
