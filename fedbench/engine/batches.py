"""Minibatch order for one round of local training, shared by both engines.

Client c with n_c training samples runs E epochs; each epoch is a fresh random
permutation cut into ceil(n_c / B) batches, the last one possibly short
(``DataLoader(shuffle=True, drop_last=False)`` semantics).  A ``batch_size`` larger than every
client's data is a full batch: the plan's batch is :func:`effective_batch`, so memory estimates,
step counts and BatchNorm sub-steps all see the batch a client can actually form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class BatchPlan:
    order: torch.Tensor  # [C, E, n_max] local sample positions; row prefix [:n_c] is a permutation
    counts: torch.Tensor  # [C] samples per client
    batch_size: int

    @property
    def epochs(self) -> int:
        return self.order.shape[1]

    @property
    def steps_per_epoch(self) -> torch.Tensor:
        """``[C]`` ceil(n_c / B)."""
        return (self.counts + self.batch_size - 1) // self.batch_size

    def client_batches(self, c: int) -> list[torch.Tensor]:
        """Client ``c``'s minibatches in order, as local positions (the reference loop's view)."""
        n = int(self.counts[c])
        out = []
        for e in range(self.epochs):
            perm = self.order[c, e, :n]
            out.extend(perm[i : i + self.batch_size] for i in range(0, n, self.batch_size))
        return out


def effective_batch(batch_size: int, counts) -> int:
    """min(batch_size, the largest client's samples), at least 1: the largest batch any of the
    clients with ``counts`` samples can form (``DataLoader`` gives a client with fewer samples
    than the batch one batch of all of them)."""
    largest = max((int(c) for c in counts), default=0)
    return max(1, min(int(batch_size), largest))


def make_batch_plan(counts: torch.Tensor, epochs: int, batch_size: int,
                    generator: torch.Generator | Sequence[torch.Generator]) -> BatchPlan:
    """Draw independent per-client, per-epoch permutations (on the CPU, so the plan is the same
    whatever device trains); the plan's batch is :func:`effective_batch`.  ``generator``: one for
    every client's draws, or one per client (:func:`fedbench.engine.streams.client_streams`), so
    that a client's order depends on its own stream only, not on which other clients train."""
    counts = counts.cpu()
    n_max = max(int(counts.max()) if len(counts) else 0, 1)
    if isinstance(generator, torch.Generator):
        keys = torch.rand(len(counts), epochs, n_max, generator=generator, dtype=torch.float64)
    else:
        if len(generator) != len(counts):
            raise ValueError(f"{len(generator)} generators for {len(counts)} clients")
        keys = torch.ones(len(counts), epochs, n_max, dtype=torch.float64)
        for c, (g, n) in enumerate(zip(generator, counts.tolist())):  # (epochs, n_c): nothing of n_max
            keys[c, :, :n] = torch.rand(epochs, n, generator=g, dtype=torch.float64)
    keys.masked_fill_(torch.arange(n_max) >= counts[:, None, None], 2.0)  # padding sorts last
    order = torch.argsort(keys, dim=2, stable=True)
    return BatchPlan(order=order, counts=counts, batch_size=effective_batch(batch_size, counts.tolist()))
