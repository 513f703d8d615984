"""LEAF's FEMNIST (Caldas et al. 2018) read from the JSON files LEAF's ``preprocess.sh`` writes.

Layout: ``<root>/leaf/femnist/data/{train,test}/*.json``, each file
``{"users": [...], "num_samples": [...], "user_data": {writer: {"x": [[784 floats]], "y": [ints]}}}``
(``preprocess.sh -t sample`` splits every writer's samples into train and test, e.g. files
``all_data_0_niid_0_keep_0_train_9.json`` / ``..._test_9.json``).  One user per writer.

Pixel values: LEAF stores ``grey / 255`` of the NIST scans without inversion (``data_to_json.py``), so the
background is ~1 and the strokes ~0 (the opposite polarity of MNIST).  FLT feeds these values unchanged
(notes §4.2: ToTensor of a float image does not rescale); FedMR maps x -> (0.5 - x) / 0.5 (notes §2.2),
i.e. ``invert: true, normalize: half``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedbench.data.sources import DATASETS, ArrayDataset, DatasetFacts
from fedbench.data.vision import resolve_normalization

FEMNIST_CLASSES = 62  # digits, upper- and lower-case letters (LEAF relabel_class)

_LEAF_HOW = ("Generate them with LEAF (github.com/TalwalkarLab/leaf, data/femnist: e.g. "
             "`./preprocess.sh -s niid --sf 0.05 -k 0 -t sample`) on a machine with network access and copy "
             "data/train and data/test there (the data root is the config key `data_root`).")


def _leaf_files(directory: Path, shards: Sequence[int] | None) -> list[Path]:
    """The JSON files of one split, sorted; ``shards`` keeps only LEAF's ``all_data_<k>_*`` files."""
    files = sorted(directory.glob("*.json"))
    if shards is not None:
        files = [f for f in files if any(f.name.startswith(f"all_data_{k}_") for k in shards)]
    return files


def _read_split(files: Sequence[Path]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """writer -> (x float32 [n, 1, 28, 28], y int64 [n]); one file at a time so the JSON text is freed early."""
    writers: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for path in files:
        with open(path) as handle:
            content = json.load(handle)
        for writer, data in content["user_data"].items():
            x = np.asarray(data["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
            writers.setdefault(writer, []).append((x, np.asarray(data["y"], dtype=np.int64)))
        del content
    return {w: (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
            for w, parts in writers.items()}


def _kept_writers(train: dict, test: dict, min_samples: int, max_users: int | None) -> list[str]:
    """Writers (sorted) with at least ``min_samples`` train + test samples (LEAF's ``-k`` rule), first ``max_users``."""
    def count(split, w):
        return len(split[w][1]) if w in split else 0

    writers = [w for w in sorted(set(train) | set(test)) if count(train, w) + count(test, w) >= min_samples]
    return writers if max_users is None else writers[:max_users]


def _femnist_splits(root: Path, shards: Sequence[int] | None) -> list[list[Path]]:
    """The train and the test JSON files; :class:`FileNotFoundError` naming both patterns if either has none."""
    base = Path(root) / "leaf" / "femnist" / "data"
    splits = [_leaf_files(base / name, shards) for name in ("train", "test")]
    if not splits[0] or not splits[1]:
        pattern = "*.json" if shards is None else ", ".join(f"all_data_{k}_*.json" for k in shards)
        raise FileNotFoundError(
            f"dataset 'femnist' not found: expected in {base.resolve()}: train/{pattern} and test/{pattern} "
            f"(LEAF JSON). {_LEAF_HOW}"
        )
    return splits


FEMNIST_SHARDS = 35  # LEAF's FEMNIST: 805,263 samples of 3,550 writers in 35 shards (all_data_<k>_*.json)
FEMNIST_SAMPLES_PER_WRITER = 227
FEMNIST_WRITERS_PER_SHARD = 3550 / 35


@DATASETS.register(
    "femnist", bounds={"min_samples": ">= 0", "max_users": ">= 1", "shards": ">= 0"},
    facts=lambda p: DatasetFacts(62, None, has_users=True, num_users=p["max_users"], input_shape=(1, 28, 28),
                                 samples_per_user=FEMNIST_SAMPLES_PER_WRITER,
                                 expected_users=FEMNIST_WRITERS_PER_SHARD * len(p["shards"] or range(FEMNIST_SHARDS))),
    files=lambda root, p: _femnist_splits(root, p["shards"]),
)
def load_femnist(root: Path = Path("data"), *, min_samples: int = 0, max_users: int | None = None,
                 shards: list[int] | None = None, invert: bool = False, normalize="none") -> ArrayDataset:
    """FEMNIST from LEAF JSON: 62 classes, 28x28 grey images ``[N, 1, 28, 28]``, ``users`` = writer index in
    sorted writer order, ``test_mask`` = LEAF's per-writer test split (train samples first, then test).

    * ``min_samples``: keep writers with >= this many samples (train + test; LEAF's ``-k``).  Default 0 =
      keep all, as LEAF's ``-k 0`` data used by FLT/IFCA; FedMR's "180 users with > 100 samples" is
      ``min_samples: 101`` on its (unpublished) LEAF subsample.
    * ``max_users``: keep only the first writers (after ``min_samples``) in sorted order.
    * ``shards``: read only ``all_data_<k>_*`` files; FLT Scenario 3 uses ``[0, 1]`` (~200 writers,
      notes §4.2, IFCA README).
    * ``invert``: x -> 1 - x (MNIST polarity); ``normalize``: ``none``/``half``/... as in :mod:`vision`.
    """
    train, test = (_read_split(files) for files in _femnist_splits(root, shards))
    writers = _kept_writers(train, test, min_samples, max_users)
    xs, ys, users, is_test = [], [], [], []
    for flag, split in ((False, train), (True, test)):
        for uid, writer in enumerate(writers):
            if writer in split:
                xs.append(split[writer][0])
                ys.append(split[writer][1])
                users.append(np.full(len(split[writer][1]), uid, dtype=np.int64))
                is_test.append(np.full(len(split[writer][1]), flag))
    x = np.concatenate(xs) if xs else np.zeros((0, 1, 28, 28), np.float32)
    if invert:
        np.subtract(1.0, x, out=x)
    stats = resolve_normalization(normalize)
    if stats is not None:
        mean, std = stats
        if len(mean) != 1 or len(std) != 1:
            raise ValueError(f"femnist has one grey channel; normalize {normalize!r} has {len(mean)} channels")
        mean, std = mean[0], std[0]
        x -= mean
        x /= std
    return ArrayDataset(
        x=x, y=np.concatenate(ys) if ys else np.zeros(0, np.int64), num_classes=FEMNIST_CLASSES,
        users=np.concatenate(users) if users else np.zeros(0, np.int64),
        test_mask=np.concatenate(is_test) if is_test else np.zeros(0, bool),
    )
