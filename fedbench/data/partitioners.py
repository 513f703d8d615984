"""Generic partitioners: IID, Dirichlet label skew, natural users.

Each is a pure function of (dataset, pool of sample indices, seeded generator,
parameters); see :mod:`fedbench.data.partition` for the contract.
"""

from __future__ import annotations

import numpy as np

from fedbench.data.partition import PARTITIONERS, ClientSamples, Partition
from fedbench.data.sources import ArrayDataset


@PARTITIONERS.register("iid", bounds={"num_clients": ">= 1", "samples_per_client": ">= 1"}, feasible=lambda p, d: None if p["samples_per_client"] is None or d.num_samples is None or p["samples_per_client"] * p["num_clients"] <= d.num_samples else f"{p['num_clients']} clients x {p['samples_per_client']} samples exceed the dataset's {d.num_samples}")
def partition_iid(dataset: ArrayDataset, pool: np.ndarray, rng: np.random.Generator, *, num_clients: int,
                  samples_per_client: int | None = None) -> ClientSamples:
    """Shuffle the pool and deal it into ``num_clients`` near-equal shards (or shards of exactly
    ``samples_per_client``, e.g. FedMR's 500, leaving the rest unused)."""
    shuffled = rng.permutation(pool)
    if samples_per_client is not None:
        if samples_per_client * num_clients > len(pool):
            raise ValueError(f"iid: {num_clients} x {samples_per_client} samples exceed the {len(pool)} available")
        shuffled = shuffled[: samples_per_client * num_clients]
    return ClientSamples([np.sort(part) for part in np.array_split(shuffled, num_clients)])


@PARTITIONERS.register("dirichlet", bounds={"num_clients": ">= 1", "alpha": "> 0", "min_size": ">= 0", "max_tries": ">= 1"})
def partition_dirichlet(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_clients: int,
    alpha: float,
    min_size: int = 10,
    max_tries: int = 1000,
) -> ClientSamples:
    """Label-skew Dirichlet split (Hsu et al. 2019; the NIID-Bench/PFLlib routine FeMAM's code uses).

    For every class k: shuffle its samples, draw p ~ Dir(alpha * 1_K), zero the share of
    clients already holding >= N/K samples, renormalise, and cut at the cumulative
    proportions.  Repeat until every client holds at least ``min_size`` samples.
    """
    labels = dataset.y[pool]
    n = len(pool)
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for k in np.unique(labels):
            members = rng.permutation(pool[labels == k])
            p = rng.dirichlet(np.full(num_clients, alpha))
            sizes = np.array([len(part) for part in parts])
            p = np.where(sizes < n / num_clients, p, 0.0)
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(members, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_size:
            return ClientSamples([np.sort(np.array(part, dtype=np.int64)) for part in parts])
    raise ValueError(
        f"dirichlet(alpha={alpha}) found no split giving all {num_clients} clients >= {min_size} "
        f"samples in {max_tries} tries; lower min_size or num_clients"
    )


@PARTITIONERS.register("natural", feasible=lambda p, d: None if d.has_users else "kind 'natural' needs a dataset whose samples have users (synthetic, femnist)")
def partition_natural(dataset: ArrayDataset, pool: np.ndarray, rng: np.random.Generator) -> ClientSamples | Partition:
    """One client per user of the dataset (Synthetic's users, LEAF writers).  Where the dataset
    has an official per-user split (LEAF), it is kept: the user's test samples are its test set."""
    if dataset.users is None:
        raise ValueError("partition kind 'natural' needs a dataset with users (e.g. source: synthetic)")
    users = np.unique(dataset.users)
    if dataset.test_mask is None:
        return ClientSamples([np.flatnonzero(dataset.users == u) for u in users])
    train = [np.flatnonzero((dataset.users == u) & ~dataset.test_mask) for u in users]
    test = [np.flatnonzero((dataset.users == u) & dataset.test_mask) for u in users]
    return Partition(train=train, test=test)


@PARTITIONERS.register("shards", bounds={"num_clients": ">= 1", "shards_per_client": ">= 1"}, feasible=lambda p, d: None if d.num_samples is None or p["num_clients"] * p["shards_per_client"] <= d.num_samples else f"{p['num_clients']} x {p['shards_per_client']} shards exceed the dataset's {d.num_samples} samples")
def partition_shards(dataset: ArrayDataset, pool: np.ndarray, rng: np.random.Generator, *, num_clients: int,
                     shards_per_client: int = 2) -> ClientSamples:
    """Pathological label shards (McMahan et al. 2017, §3: sort the data by label, cut it into
    200 shards of 300 and give each of 100 clients 2 at random).  The pool is sorted by label
    (stable: dataset order within a label), cut into ``num_clients × shards_per_client``
    near-equal shards (every sample used once), and the shards are dealt at random,
    ``shards_per_client`` to each client."""
    num_shards = num_clients * shards_per_client
    if not 1 <= num_shards <= len(pool):
        raise ValueError(f"shards: {num_clients} x {shards_per_client} shards do not fit {len(pool)} samples")
    ordered = pool[np.argsort(dataset.y[pool], kind="stable")]
    shards = np.array_split(ordered, num_shards)
    dealt = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return ClientSamples([np.sort(np.concatenate([shards[s] for s in row])) for row in dealt])
