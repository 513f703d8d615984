"""What a round sends: bytes per client, down (server -> client) and up (client -> server).

Bytes are counted from the tensors themselves: ``numel * element_size`` of every entry a message
carries, in the dtype it is held in (float32 weights 4 bytes, BatchNorm's int64
``num_batches_tracked`` 8).  A message is a whole state-dict entry or nothing: no compression,
quantisation, sparsification or protocol overhead, and a client that already holds a tensor is
sent it again only when the method's round sends it again (see each algorithm's ``communication``
hook, :meth:`fedbench.algorithms.base.Algorithm.communication`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import torch

MEGABYTE = 1e6  # bytes; the report's MB are decimal megabytes


def tensor_bytes(tensor: torch.Tensor | np.ndarray) -> int:
    """Bytes of one tensor or array as held: elements x bytes per element of its dtype."""
    if isinstance(tensor, np.ndarray):
        return int(tensor.nbytes)
    return int(tensor.numel() * tensor.element_size())


def weights_bytes(weights: Mapping[str, torch.Tensor], exclude: Iterable[str] = (), stacked: bool = False) -> int:
    """Bytes of one model's entries (``stacked``: of one row of a stacked dict), less ``exclude``."""
    skip = set(exclude)
    total = 0
    for name, value in weights.items():
        if name in skip:
            continue
        total += tensor_bytes(value[0] if stacked else value)
    return total


@dataclass
class Traffic:
    """Bytes one round sent to (``downlink``) and from (``uplink``) every client: two int64 arrays of
    length K, the federation's clients (0 for a client that took no part)."""

    downlink: np.ndarray
    uplink: np.ndarray

    @classmethod
    def none(cls, num_clients: int) -> "Traffic":
        return cls(np.zeros(num_clients, dtype=np.int64), np.zeros(num_clients, dtype=np.int64))

    @classmethod
    def to(cls, num_clients: int, clients, down: int | np.ndarray, up: int | np.ndarray) -> "Traffic":
        """``down`` and ``up`` bytes (scalars, or one per entry of ``clients``) to and from each of
        ``clients``; a client listed twice (sampling with replacement) counts twice."""
        out = cls.none(num_clients)
        index = np.asarray(clients.cpu() if isinstance(clients, torch.Tensor) else clients, dtype=np.int64).reshape(-1)
        np.add.at(out.downlink, index, np.broadcast_to(np.asarray(down, dtype=np.int64), index.shape))
        np.add.at(out.uplink, index, np.broadcast_to(np.asarray(up, dtype=np.int64), index.shape))
        return out

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.downlink + other.downlink, self.uplink + other.uplink)

    @property
    def down_total(self) -> int:
        return int(self.downlink.sum())

    @property
    def up_total(self) -> int:
        return int(self.uplink.sum())


__all__ = ["MEGABYTE", "Traffic", "tensor_bytes", "weights_bytes"]
