"""Non-IID partitioners: pure functions of (dataset, seeded generator, parameters).

Each returns one array of sample indices per client (every index at most once);
:func:`partition_dataset` then splits every client's samples into its own
train/test parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split

from fedbench.data.sources import ArrayDataset
from fedbench.registry import Registry

PARTITIONERS: Registry = Registry("partition kind")


@PARTITIONERS.register("iid")
def partition_iid(dataset: ArrayDataset, rng: np.random.Generator, *, num_clients: int) -> list[np.ndarray]:
    """Shuffle all samples and deal them into ``num_clients`` near-equal shards."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(dataset.y)), num_clients)]


@PARTITIONERS.register("dirichlet")
def partition_dirichlet(
    dataset: ArrayDataset,
    rng: np.random.Generator,
    *,
    num_clients: int,
    alpha: float,
    min_size: int = 10,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Label-skew Dirichlet split (Hsu et al. 2019; the NIID-Bench/PFLlib routine FeMAM's code uses).

    For every class k: shuffle its samples, draw p ~ Dir(alpha * 1_K), zero the share of
    clients already holding >= N/K samples, renormalise, and cut at the cumulative
    proportions.  Repeat until every client holds at least ``min_size`` samples.
    """
    labels = dataset.y
    n = len(labels)
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for k in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == k))
            p = rng.dirichlet(np.full(num_clients, alpha))
            sizes = np.array([len(part) for part in parts])
            p = np.where(sizes < n / num_clients, p, 0.0)
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(members, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_size:
            return [np.sort(np.array(part, dtype=np.int64)) for part in parts]
    raise ValueError(
        f"dirichlet(alpha={alpha}) found no split giving all {num_clients} clients >= {min_size} "
        f"samples in {max_tries} tries; lower min_size or num_clients"
    )


@PARTITIONERS.register("natural")
def partition_natural(dataset: ArrayDataset, rng: np.random.Generator) -> list[np.ndarray]:
    """One client per generating user of the dataset (e.g. Synthetic's users, LEAF writers)."""
    if dataset.users is None:
        raise ValueError("partition kind 'natural' needs a dataset with users (e.g. source: synthetic)")
    return [np.flatnonzero(dataset.users == u) for u in np.unique(dataset.users)]


@dataclass(frozen=True)
class Partition:
    """Per-client global sample indices of the train and test parts."""

    train: list[np.ndarray]
    test: list[np.ndarray]

    @property
    def num_clients(self) -> int:
        return len(self.train)


def partition_dataset(dataset: ArrayDataset, spec: dict, seed: int) -> Partition:
    """Apply the partition ``{kind, test_fraction, **params}`` with generator seed ``seed``.

    Each client's samples are split at random into train and ``test_fraction`` test
    (scikit-learn's ``train_test_split``), so a client's test set follows its own distribution.
    """
    params = {k: v for k, v in spec.items() if k not in ("kind", "test_fraction")}
    rng = np.random.default_rng(seed)
    clients = PARTITIONERS[spec["kind"]](dataset, rng, **params)
    test_fraction = spec.get("test_fraction", 0.25)
    train, test = [], []
    for k, indices in enumerate(clients):
        if len(indices) < 2:
            raise ValueError(
                f"client {k} has {len(indices)} sample(s): too few to split into train and test; "
                f"use fewer clients or a larger min_size"
            )
        tr, te = train_test_split(indices, test_size=test_fraction, random_state=int(rng.integers(2**31)))
        train.append(np.sort(tr))
        test.append(np.sort(te))
    return Partition(train=train, test=test)
