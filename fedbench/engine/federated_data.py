"""All clients' data as one tensor on the device plus padded per-client index matrices."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from fedbench.data.partition import Partition
from fedbench.data.sources import ArrayDataset


@dataclass(frozen=True)
class ClientIndex:
    """Client k's samples are ``index[k, :counts[k]]`` (global rows of ``FederatedData.x``); the rest is padding."""

    index: torch.Tensor  # [K, n_max] int64
    counts: torch.Tensor  # [K] int64

    @classmethod
    def from_lists(cls, lists: list[np.ndarray], device) -> "ClientIndex":
        counts = np.array([len(a) for a in lists], dtype=np.int64)
        padded = np.zeros((len(lists), max(int(counts.max(initial=0)), 1)), dtype=np.int64)
        for k, a in enumerate(lists):
            padded[k, : len(a)] = a
        return cls(torch.from_numpy(padded).to(device), torch.from_numpy(counts).to(device))

    @functools.cached_property
    def union(self) -> torch.Tensor:
        """The distinct global rows of all clients, sorted (computed once)."""
        return torch.unique(self.index[self.mask()])

    def mask(self) -> torch.Tensor:
        """``[K, n_max]`` bool: True where a row holds a real sample."""
        return torch.arange(self.index.shape[1], device=self.index.device) < self.counts[:, None]


@dataclass(frozen=True)
class FederatedData:
    x: torch.Tensor
    y: torch.Tensor
    train: ClientIndex
    test: ClientIndex
    num_classes: int
    val: ClientIndex | None = None  # per-client validation rows, where the partition has them

    @property
    def num_clients(self) -> int:
        return self.train.index.shape[0]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @classmethod
    def build(cls, dataset: ArrayDataset, partition: Partition, device) -> "FederatedData":
        return cls(
            x=torch.from_numpy(dataset.x).to(device),
            y=torch.from_numpy(dataset.y).to(device),
            train=ClientIndex.from_lists(partition.train, device),
            test=ClientIndex.from_lists(partition.test, device),
            num_classes=dataset.num_classes,
            val=None if partition.val is None else ClientIndex.from_lists(partition.val, device),
        )
