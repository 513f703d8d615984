"""The on-disk form of a partition: ``.npz`` with ragged index arrays + ``.json`` summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from fedbench.data.partitioners import Partition


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


def save_partition(partition: Partition, labels: np.ndarray, num_classes: int, npz_path, json_path, meta: dict) -> None:
    """Write indices (``npz_path``) and a human-readable summary with per-class counts (``json_path``)."""
    train_flat, train_offsets = _ragged(partition.train)
    test_flat, test_offsets = _ragged(partition.test)
    atomic_write(
        npz_path,
        lambda p: np.savez_compressed(
            p, train_index=train_flat, train_offsets=train_offsets, test_index=test_flat, test_offsets=test_offsets
        ),
    )
    train_counts = class_counts(partition.train, labels, num_classes)
    test_counts = class_counts(partition.test, labels, num_classes)
    summary = {
        **meta,
        "num_clients": partition.num_clients,
        "num_classes": num_classes,
        "train_samples": int(train_counts.sum()),
        "test_samples": int(test_counts.sum()),
        "train_class_counts": train_counts.tolist(),
        "test_class_counts": test_counts.tolist(),
    }
    atomic_write(json_path, lambda p: Path(p).write_text(json.dumps(summary, indent=1)))


def load_partition(npz_path) -> Partition:
    with np.load(npz_path) as f:
        return Partition(
            train=_unragged(f["train_index"], f["train_offsets"]),
            test=_unragged(f["test_index"], f["test_offsets"]),
        )
