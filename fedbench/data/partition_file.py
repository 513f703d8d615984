"""The on-disk form of a partition: ``.npz`` with ragged index arrays + ``.json`` summary.

The ``.npz`` holds, per part (train, test and val if present), the concatenated client
index arrays and their offsets, plus the ground-truth groups per level.  The ``.json``
holds what a person (or the report) wants to read: sizes, class histograms, groups,
parameters, and a SHA-256 content hash of the indices and groups.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from fedbench.data.partition import Partition


def _ragged(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrays])
    flat = np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)
    return flat, offsets


def _unragged(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def class_counts(indices: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``[clients, classes]`` matrix of sample counts."""
    return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in indices])


def atomic_write(path: str | os.PathLike, write) -> None:
    """Write through ``write(tmp_path)`` then rename, so no half-written file is ever left at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def content_hash(partition: Partition) -> str:
    """SHA-256 over every part's indices and the groups: equal hashes, identical partitions."""
    digest = hashlib.sha256()
    for name, part in sorted(partition.parts().items()):
        for indices in part:
            digest.update(f"{name}:{len(indices)}:".encode())
            digest.update(np.ascontiguousarray(indices, dtype=np.int64).tobytes())
    digest.update(json.dumps(partition.groups, sort_keys=True).encode())
    return digest.hexdigest()


def save_partition(partition: Partition, labels: np.ndarray, num_classes: int, npz_path, json_path, meta: dict) -> None:
    """Write indices and groups (``npz_path``) and a human-readable summary (``json_path``)."""
    arrays = {}
    for name, part in partition.parts().items():
        arrays[f"{name}_index"], arrays[f"{name}_offsets"] = _ragged(part)
    for level, ids in partition.groups.items():
        arrays[f"group_{level}"] = np.asarray(ids, dtype=np.int64)
    arrays["shared"] = np.array(partition.shared, dtype=str)
    atomic_write(npz_path, lambda p: np.savez_compressed(p, **arrays))
    summary = {**meta, "num_clients": partition.num_clients, "num_classes": num_classes}
    for name, part in partition.parts().items():
        counts = class_counts(part, labels, num_classes)
        summary[f"{name}_samples"] = int(counts.sum())
        summary[f"{name}_client_sizes"] = counts.sum(1).tolist()
        summary[f"{name}_class_counts"] = counts.tolist()
    summary["groups"] = {level: [int(g) for g in ids] for level, ids in partition.groups.items()}
    summary["shared_parts"] = list(partition.shared)
    summary["content_hash"] = content_hash(partition)
    atomic_write(json_path, lambda p: Path(p).write_text(json.dumps(summary, indent=1)))


class PartitionFileError(RuntimeError):
    """A partition ``.npz`` that cannot be read: the message names the file and what to do."""


def load_partition(npz_path) -> Partition:
    """The partition stored at ``npz_path``; a truncated, corrupt or incomplete file raises
    :class:`PartitionFileError` naming it (not an error from deep inside numpy or training)."""
    try:
        with np.load(npz_path) as f:
            parts = {name: _unragged(f[f"{name}_index"], f[f"{name}_offsets"]) for name in ("train", "test", "val") if f"{name}_index" in f}
            groups = {key[len("group_"):]: f[key].tolist() for key in f.files if key.startswith("group_")}
            shared = tuple(f["shared"].tolist()) if "shared" in f else ()
        return Partition(train=parts["train"], test=parts["test"], val=parts.get("val"), groups=groups, shared=shared)
    except FileNotFoundError:
        raise
    except Exception as error:  # zip, zlib, pickle, missing-key errors of every kind: one message
        raise PartitionFileError(
            f"partition file {npz_path} cannot be read ({type(error).__name__}: {error}); it is corrupt, "
            f"truncated or from another fedbench version -- delete it and rerun to rebuild it"
        ) from None
