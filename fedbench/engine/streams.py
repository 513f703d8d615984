"""Common random numbers: one random stream per purpose, keyed by the run's seed and its position.

Two methods run on one seed compare best when they differ only in the method: the same clients
sampled in round t, the same batches in each client's epochs.  A single generator shared by every
draw cannot give that -- as soon as one method draws one number more (an initialisation, a shuffle),
every later draw shifts.  Instead each shared draw comes from a stream of its own, seeded by
``(seed, purpose, position...)`` through :class:`numpy.random.SeedSequence` (its hash of the whole
key: streams of neighbouring keys are independent):

* ``sample`` (round t, draw k): the clients sampled in round t;
* ``batches`` (round t, pass k, client c): client c's batch order in the k-th local-training pass
  of round t, all its epochs (:func:`fedbench.engine.batches.make_batch_plan`);
* ``minibatches`` (round t, draw k, client c): client c's minibatches with replacement, the
  Moreau-envelope family's oracle (:meth:`fedbench.engine.device_gradient.MinibatchGradients.draw`);
* ``finetune`` (round t, client c): the fine-tuning before evaluation ("+" variants);
* ``torch`` (round t): torch's global generator at the start of round t (dropout masks, ``vmap``
  randomness), so a method's other use of it cannot shift the next round's masks.

A method's own randomness (IFCA's and FeSEM's initialisations, FedMR's shuffles, FedGen's noise,
FedMut's coefficients) draws from ``Federation.generator``, which no shared draw touches.  Keys
name the client by its index in the federation, never by its place among the sampled clients.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

PURPOSES = {"sample": 1, "batches": 2, "minibatches": 3, "finetune": 4, "torch": 5}
"""Each shared purpose's number in the key (fixed: a new purpose takes a new number)."""


def stream_seed(seed: int, purpose: str, *position: int) -> int:
    """The 63-bit seed of the stream ``(seed, purpose, *position)``; every part a non-negative integer."""
    key = [int(seed), PURPOSES[purpose], *(int(p) for p in position)]
    if min(key) < 0:
        raise ValueError(f"a stream key is non-negative integers, got {key}")
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def stream(seed: int, purpose: str, *position: int) -> torch.Generator:
    """A fresh CPU generator on the stream ``(seed, purpose, *position)``."""
    return torch.Generator().manual_seed(stream_seed(seed, purpose, *position))


def client_streams(seed: int, purpose: str, position: Sequence[int], clients) -> list[torch.Generator]:
    """One stream per client of ``clients`` (federation indices): ``(seed, purpose, *position, client)``."""
    return [stream(seed, purpose, *position, int(c)) for c in torch.as_tensor(clients).tolist()]


__all__ = ["PURPOSES", "stream_seed", "stream", "client_streams"]
