"""What a partition is, and how a config entry becomes one.

A partitioner is a pure function ``(dataset, pool, rng, **params)`` registered in
:data:`PARTITIONERS`, optionally with planning-time checks as registered facts:
``feasible=(params, facts) -> problem or None`` (against the source's
:class:`~fedbench.data.sources.DatasetFacts`) and ``validate_spec=(params) -> client count``
(an entry checked on its own, e.g. an index file).
``pool`` holds the sample indices it may hand out.  It returns either

* :class:`ClientSamples` — each client's samples (and ground-truth groups); every client's
  samples are then split at random into its own train / validation / test parts by
  ``test_fraction`` and ``val_fraction``; or
* a complete :class:`Partition` — when the scheme fixes the test sets itself (FLT's
  cluster test sets, FeMAM's per-class splits, LEAF's per-writer split).

Options every partition entry may carry (handled here, not by the partitioner):

* ``test_fraction`` (0.25), ``val_fraction`` (0): per-client split of :class:`ClientSamples`;
* ``test_set``: ``local`` (default; clients split their own samples, drawn from all of
  the dataset's samples) or ``global`` (clients are drawn from the official training set
  and every client is tested on the whole official test set, as FedMR does);
* ``teams``: ``{count: M, assign: sequential|random}`` groups the clients into M teams
  (pFedMT), recorded as the ground-truth level ``team``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import train_test_split

from fedbench.data.sources import ArrayDataset
from fedbench.registry.core import Registry

PARTITIONERS: Registry = Registry("partition kind")

#: keys of a partition entry that partition_dataset handles for every kind
COMMON_KEYS = ("kind", "test_fraction", "val_fraction", "test_set", "teams")


@dataclass(frozen=True)
class ClientSamples:
    """Each client's samples, before the per-client train/validation/test split."""

    clients: list[np.ndarray]
    groups: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Partition:
    """Per-client global sample indices of the train, validation and test parts.

    ``groups`` maps a ground-truth level (e.g. ``cluster``, ``level1``, ``team``) to each
    client's group id.  ``shared`` names the parts that may repeat samples across clients
    by design (e.g. ``("test",)`` when clients share a cluster's or the global test set);
    all other parts are disjoint across clients.
    """

    train: list[np.ndarray]
    test: list[np.ndarray]
    val: list[np.ndarray] | None = None
    groups: dict[str, list[int]] = field(default_factory=dict)
    shared: tuple[str, ...] = ()

    def __post_init__(self):
        if len(self.test) != len(self.train) or (self.val is not None and len(self.val) != len(self.train)):
            raise ValueError("train, test and val must list the same clients")
        for level, ids in self.groups.items():
            if len(ids) != len(self.train):
                raise ValueError(f"groups[{level!r}] has {len(ids)} entries for {len(self.train)} clients")

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def parts(self) -> dict[str, list[np.ndarray]]:
        out = {"train": self.train, "test": self.test}
        if self.val is not None:
            out["val"] = self.val
        return out


def class_subsample(dataset: ArrayDataset, pool: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """``fraction`` of every class's samples in ``pool``, drawn at random separately from its official
    training and test samples (so the split sizes keep their ratio); the whole pool for 1.0 (no draw).
    Our addition, to scale a partition down to a CPU budget (the offline analogues: FeMAM's
    partitions, FedMR's Dirichlet split)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"sample_fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return pool
    test = dataset.test_mask if dataset.test_mask is not None else np.zeros(len(dataset.y), dtype=bool)
    keep = []
    for k in np.unique(dataset.y[pool]):
        for official_test in (False, True):
            members = pool[(dataset.y[pool] == k) & (test[pool] == official_test)]
            if len(members):
                keep.append(rng.choice(members, max(1, round(fraction * len(members))), replace=False))
    return np.sort(np.concatenate(keep))


def split_clients(samples: ClientSamples, test_fraction: float, val_fraction: float, rng: np.random.Generator) -> Partition:
    """Split every client's samples at random: ``test_fraction`` to test, then ``val_fraction``
    of the rest to validation (scikit-learn's ``train_test_split``, as FeMAM's code does)."""
    train, val, test = [], [], []
    for k, indices in enumerate(samples.clients):
        if len(indices) < 2:
            raise ValueError(
                f"client {k} has {len(indices)} sample(s): too few to split into train and test; "
                f"use fewer clients or a larger min_size"
            )
        rest, te = train_test_split(indices, test_size=test_fraction, random_state=int(rng.integers(2**31)))
        if val_fraction:
            rest, va = train_test_split(rest, test_size=val_fraction, random_state=int(rng.integers(2**31)))
            val.append(np.sort(va))
        train.append(np.sort(rest))
        test.append(np.sort(te))
    return Partition(train=train, test=test, val=val if val_fraction else None, groups=dict(samples.groups))


def hold_out_validation(partition: Partition, fraction: float, seed: int) -> Partition:
    """Hold out ``fraction`` of every client's training rows as its validation rows (a tuning
    trial's selection data, :mod:`fedbench.tuning.trials`); test rows are untouched.  A partition that has
    validation rows already keeps them.  scikit-learn's ``train_test_split``, seeded from ``seed``;
    a client with fewer than 2 training rows keeps them all and has no validation row."""
    if partition.val is not None or not fraction:
        return partition
    if not 0 < fraction < 1:
        raise ValueError(f"holdout must be in (0, 1), got {fraction}")
    rng = np.random.default_rng([seed, 7])  # a stream of its own: the partition's draws are not repeated
    train, val = [], []
    for rows in partition.train:
        if len(rows) < 2:
            train.append(rows)
            val.append(rows[:0])
            continue
        kept, held = train_test_split(rows, test_size=fraction, random_state=int(rng.integers(2**31)))
        train.append(np.sort(kept))
        val.append(np.sort(held))
    return Partition(train=train, test=partition.test, val=val, groups=dict(partition.groups), shared=partition.shared)


def assign_teams(num_clients: int, count: int, assign: str, rng: np.random.Generator) -> list[int]:
    """pFedMT's teams: ``sequential`` blocks of clients (PerMFL ``group_division=0``) or a seeded
    ``random`` assignment into near-equal teams (the code's option 1 seeds with the clock)."""
    if not 1 <= count <= num_clients:
        raise ValueError(f"teams.count must be between 1 and the number of clients ({num_clients}), got {count}")
    blocks = np.concatenate([np.full(len(b), t) for t, b in enumerate(np.array_split(np.arange(num_clients), count))])
    if assign == "sequential":
        return blocks.tolist()
    if assign == "random":
        return rng.permutation(blocks).tolist()
    raise ValueError(f"teams.assign must be 'sequential' or 'random', got {assign!r}")


def partition_dataset(dataset: ArrayDataset, spec: dict, seed: int) -> Partition:
    """Apply the partition entry ``spec`` (``kind``, its parameters and the common options above)
    with the generator ``numpy.random.default_rng(seed)``."""
    params = {k: v for k, v in spec.items() if k not in COMMON_KEYS}
    rng = np.random.default_rng(seed)
    test_set = spec.get("test_set", "local")
    if test_set == "global":
        if dataset.test_mask is None:
            raise ValueError("test_set: global needs a dataset with an official test set")
        pool = dataset.train_indices()
    elif test_set == "local":
        pool = np.arange(len(dataset.y))
    else:
        raise ValueError(f"test_set must be 'local' or 'global', got {test_set!r}")

    result = PARTITIONERS[spec["kind"]](dataset, pool, rng, **params)
    if isinstance(result, ClientSamples):
        if test_set == "global":
            test = dataset.test_indices()
            result = Partition(
                train=[np.sort(c) for c in result.clients], test=[test] * len(result.clients),
                groups=dict(result.groups), shared=("test",),
            )
        else:
            result = split_clients(result, spec.get("test_fraction", 0.25), spec.get("val_fraction", 0.0), rng)
    elif "test_fraction" in spec or "val_fraction" in spec or test_set != "local":
        raise ValueError(f"partition kind {spec['kind']!r} fixes its own test sets: drop test_fraction/val_fraction/test_set")
    if "teams" in spec:
        teams = spec["teams"]
        groups = {**result.groups, "team": assign_teams(result.num_clients, teams["count"], teams.get("assign", "sequential"), rng)}
        result = Partition(result.train, result.test, result.val, groups, result.shared)
    return result
