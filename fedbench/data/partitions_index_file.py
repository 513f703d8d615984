"""Partitions read from an index file: the authors' exact client splits.

The FedMut repository ships its CIFAR-10/100 partitions as JSON files
(``data/{cifar10,cifar100}_100_{iid,noniidCase5_beta0.1,...}.json``; FedMR notes §2.2) whose key
``train_data`` maps every client to its indices into the torchvision *training* set.  Kind
``index_file`` reads such a file: client k (in increasing order of the numeric client keys)
receives ``pool[indices]`` — with ``test_set: global`` the pool is the dataset's official
training set in file order, so the indices mean what they meant to the authors.

The file is validated before anything is trained: it must parse, hold ``key`` as a mapping of
clients to lists of non-negative integers, no index may appear twice (within or across
clients), and every index must lie within the pool.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedbench.data.partition import PARTITIONERS, ClientSamples
from fedbench.data.sources import ArrayDataset


def read_index_file(path: str | Path, key: str = "train_data", pool_size: int | None = None) -> list[np.ndarray]:
    """Every client's indices from ``path`` (clients in numeric key order), validated; a
    ``ValueError`` naming the file and the first problem otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"index_file: {path} does not exist")
    try:
        content = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"index_file: {path} is not valid JSON ({error})") from None
    if not isinstance(content, dict) or key not in content:
        raise ValueError(f"index_file: {path} has no key {key!r} (keys: {', '.join(map(str, content)) if isinstance(content, dict) else 'none'})")
    clients = content[key]
    if isinstance(clients, list):
        clients = dict(enumerate(clients))
    if not isinstance(clients, dict) or not clients:
        raise ValueError(f"index_file: {path}[{key!r}] must map clients to index lists")

    def order(name):
        try:
            return (0, int(name), "")
        except (TypeError, ValueError):
            return (1, 0, str(name))

    out, seen = [], {}
    for client in sorted(clients, key=order):
        values = clients[client]
        if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ValueError(f"index_file: {path}, client {client}: indices must be a list of integers")
        indices = np.asarray(values, dtype=np.int64)
        bad = indices[(indices < 0) | ((indices >= pool_size) if pool_size is not None else False)]
        if len(bad):
            limit = f"[0, {pool_size})" if pool_size is not None else ">= 0"
            raise ValueError(f"index_file: {path}, client {client}: index {int(bad[0])} out of range (must lie in {limit})")
        for i in indices.tolist():
            if i in seen:
                where = "twice in its list" if seen[i] == client else f"also in client {seen[i]}"
                raise ValueError(f"index_file: {path}, client {client}: index {i} duplicated ({where})")
            seen[i] = client
        out.append(indices)
    return out


def validate_spec(params: dict) -> int:
    """Config-time check of an ``index_file`` entry (everything but the pool's size); returns the number of clients."""
    return len(read_index_file(params["path"], params.get("key", "train_data")))


@PARTITIONERS.register("index_file", validate_spec=validate_spec)
def partition_index_file(dataset: ArrayDataset, pool: np.ndarray, rng: np.random.Generator, *, path: str,
                         key: str = "train_data") -> ClientSamples:
    """The clients of the JSON index file ``path`` (``key``: the mapping client -> indices into the pool)."""
    clients = read_index_file(path, key, pool_size=len(pool))
    return ClientSamples([np.sort(pool[indices]) for indices in clients])
