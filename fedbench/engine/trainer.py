"""What a federation trains its clients with (:class:`Trainer`): the interface every local trainer
has, :class:`~fedbench.engine.vectorised.VectorisedTrainer` and
:class:`~fedbench.engine.reference.ReferenceTrainer` alike, so that the run reads what a trainer
ran with (:attr:`Trainer.numerics_used`) as an attribute, never by name."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from fedbench.engine.batches import BatchPlan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import FP32, Numerics
from fedbench.engine.weights import Weights


class Trainer(ABC):
    """Local SGD of many clients from stacked weights (:meth:`train`).  ``numerics``: the precision,
    layout and compilation it trains with; ``step_kind``: the name of its training step;
    ``frozen_levels``: the table of FeMAM's frozen levels where the trainer keeps one
    (:mod:`fedbench.engine.frozen_levels`; it then takes ``frozen_key`` in :meth:`train`), else None."""

    numerics: Numerics = FP32
    step_kind: str = "custom"
    frozen_levels = None

    @property
    def numerics_used(self) -> dict:
        """What the training steps ran with (``metrics.json``'s ``numerics``): the settings, the step,
        and whether the step ran compiled (never, unless a trainer that compiles says otherwise)."""
        return {**self.numerics.record(), "compiled": False, "trainer_step": self.step_kind}

    @abstractmethod
    def train(self, start: Weights, clients: torch.Tensor, plan: BatchPlan, hp: LocalSGD,
              center: Weights | None = None) -> tuple[Weights, torch.Tensor]:
        """Run ``plan`` from the stacked ``start`` weights of ``clients`` (``center``: the proximal
        term's anchor, default ``start``); the trained stacked weights and every client's mean loss."""
