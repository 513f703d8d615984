"""Minibatch order for one round of local training, shared by both engines.

Client c with n_c training samples runs E epochs; each epoch is a fresh random
permutation cut into ceil(n_c / B) batches, the last one possibly short
(``DataLoader(shuffle=True, drop_last=False)`` semantics).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def make_batch_plan(counts: torch.Tensor, epochs: int, batch_size: int, generator: torch.Generator) -> BatchPlan:
    """Draw independent per-client, per-epoch permutations from ``generator`` (on the CPU, so
    the plan is the same whatever device trains)."""
    counts = counts.cpu()
    n_max = max(int(counts.max()) if len(counts) else 0, 1)
    keys = torch.rand(len(counts), epochs, n_max, generator=generator, dtype=torch.float64)
    keys.masked_fill_(torch.arange(n_max) >= counts[:, None, None], 2.0)  # padding sorts last
    order = torch.argsort(keys, dim=2, stable=True)
    return BatchPlan(order=order, counts=counts, batch_size=batch_size)
