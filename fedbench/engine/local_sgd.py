"""Hyper-parameters of one round of local SGD, shared by both engines."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalSGD:
    """E epochs of minibatch SGD (PyTorch semantics: ``torch.optim.SGD`` with dampening 0, no
    Nesterov), momentum buffers fresh every round, plus an optional proximal term
    mu/2 ||theta - theta_center||^2 (FedProx, Li et al. 2020, Eq. 2)."""

    epochs: int
    batch_size: int
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
