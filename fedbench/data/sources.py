"""Dataset sources: one small function each, registered by name.

A source is called as ``DATASETS[name](root, **params)`` with the data root directory
(``data_root`` in the config; offline sources ignore it) and returns an
:class:`ArrayDataset`: all samples in memory, the official train and test sets pooled
with ``test_mask`` marking the test samples.  Sources with a natural notion of users
(Synthetic, LEAF writers) also return the user of every sample, which the ``natural``
partitioner uses.

A source that reads files registers how to check them (``DATASETS.register(name, files=check)``,
``check(root, params)`` raising :class:`FileNotFoundError` with the message its loader raises), so
planning finds a missing dataset before any job (:func:`missing_files`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.registry.core import Registry


@dataclass(frozen=True)
class ArrayDataset:
    """Samples ``x`` (float32, ``[N, *shape]``), labels ``y`` (int64, ``[N]``), and optionally the
    user of every sample (``users``) and which samples form the official test set (``test_mask``;
    ``None``: the dataset has no official split)."""

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    users: np.ndarray | None = None
    test_mask: np.ndarray | None = None

    def __post_init__(self):
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} samples but y has {len(self.y)}")
        if self.test_mask is not None and len(self.test_mask) != len(self.y):
            raise ValueError(f"test_mask has {len(self.test_mask)} entries for {len(self.y)} samples")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def train_indices(self) -> np.ndarray:
        """Indices of the official training samples (all samples when there is no official split)."""
        return np.arange(len(self.y)) if self.test_mask is None else np.flatnonzero(~self.test_mask)

    def test_indices(self) -> np.ndarray:
        """Indices of the official test samples (none when there is no official split)."""
        return np.zeros(0, np.int64) if self.test_mask is None else np.flatnonzero(self.test_mask)


DATASETS: Registry = Registry("dataset source", requires=("facts",))  # planning sizes every cell from them


@dataclass(frozen=True)
class DatasetFacts:
    """What is known of a source's dataset without loading it (planning-time feasibility checks):
    classes, samples (train + test; ``None``: depends on files), whether samples have users
    (and how many, where the parameters say), whether there is an official test set, and the
    shape of one sample (``input_shape``; what the cost model sizes models with before any data)
    and the official test set's size (``test_samples``, where known: what a partition that keeps
    the official split holds out).  A dataset whose size depends on its files or its draws gives its
    typical ``samples_per_user`` instead, and, where the parameters do not fix the users, the users
    expected (``expected_users``): the cost model's size of it before a partition exists.
    Registered with the source: ``DATASETS.register(name, facts=lambda params: DatasetFacts(...))``
    where ``params`` are the entry's parameters with the source's defaults."""

    num_classes: int
    num_samples: int | None = None
    has_users: bool = False
    num_users: int | None = None
    official_test: bool = True
    input_shape: tuple[int, ...] | None = None
    test_samples: int | None = None
    samples_per_user: float | None = None
    expected_users: float | None = None


@DATASETS.register(
    "digits", bounds={"size": ">= 1", "test_fraction": "(0, 1)"},
    facts=lambda p: DatasetFacts(10, 1797, official_test=p["test_fraction"] is not None, input_shape=(1, p["size"], p["size"])),
)
def load_digits_dataset(root=None, *, size: int = 8, test_fraction: float | None = None) -> ArrayDataset:
    """scikit-learn's handwritten digits: 1,797 8x8 grey images, 10 classes, pixels scaled to [0, 1].

    ``size``: upsample to ``size x size`` (bilinear), e.g. 28 for models made for MNIST such as
    FLT's ConvAE.  ``test_fraction``: hold out a stratified official test split of that share
    (``test_mask``; fixed, ``random_state=0``); ``None``: no official split.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    if size != 8:
        import torch
        import torch.nn.functional as F

        x = F.interpolate(torch.from_numpy(x), size=(size, size), mode="bilinear", align_corners=False).numpy()
    test_mask = None
    if test_fraction is not None:
        from sklearn.model_selection import train_test_split

        _, test = train_test_split(np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=0)
        test_mask = np.zeros(len(y), dtype=bool)
        test_mask[test] = True
    return ArrayDataset(x=np.ascontiguousarray(x), y=y, num_classes=10, test_mask=test_mask)


SYNTHETIC_SAMPLES_PER_USER = 2265  # E[(floor(lognormal(4, 2)) + 50) x 5], pFedMe's sizes (max_user_samples aside)


@DATASETS.register(
    "synthetic",
    bounds={"alpha": ">= 0", "beta": ">= 0", "num_users": ">= 1", "dimension": ">= 1", "num_classes": ">= 2", "seed": ">= 0", "max_user_samples": ">= 1"},
    facts=lambda p: DatasetFacts(p["num_classes"], None, has_users=True, num_users=p["num_users"], official_test=False,
                                 input_shape=(p["dimension"],), samples_per_user=SYNTHETIC_SAMPLES_PER_USER),
)
def generate_synthetic(
    root=None,
    *,
    alpha: float = 0.5,
    beta: float = 0.5,
    num_users: int = 100,
    dimension: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    max_user_samples: int | None = None,
) -> ArrayDataset:
    """Synthetic(alpha, beta) of Shamir et al./Li et al. as generated by pFedMe.

    Per user k: n_k = (floor(lognormal(4, 2)) + 50) * 5 samples; u_k ~ N(0, alpha),
    B_k ~ N(0, beta); v_k ~ N(B_k, 1)^d; x ~ N(v_k, diag(j^-1.2)); W_k ~ N(u_k, 1)^{d x C},
    b_k ~ N(u_k, 1)^C; y = argmax(x W_k + b_k).  Draws follow pFedMe's order from a
    legacy ``RandomState(seed)`` (pFedMe: seed 0, 100 users), so the data are reproducible.
    The lognormal sizes are heavy-tailed (one user can hold >10^4 samples); ``max_user_samples``
    caps n_k for quick suites (a deviation from pFedMe; ``None`` keeps its sizes).
    """
    rng = np.random.RandomState(seed)
    samples_per_user = (rng.lognormal(4, 2, num_users).astype(int) + 50) * 5
    if max_user_samples is not None:
        samples_per_user = np.minimum(samples_per_user, max_user_samples)
    mean_w = rng.normal(0, alpha, num_users)
    mean_b = mean_w
    shift = rng.normal(0, beta, num_users)
    covariance = np.diag(np.arange(1, dimension + 1, dtype=np.float64) ** -1.2)
    mean_x = np.stack([rng.normal(shift[k], 1, dimension) for k in range(num_users)])
    xs, ys, users = [], [], []
    for k in range(num_users):
        weights = rng.normal(mean_w[k], 1, (dimension, num_classes))
        bias = rng.normal(mean_b[k], 1, num_classes)
        x = rng.multivariate_normal(mean_x[k], covariance, samples_per_user[k])
        xs.append(x)
        ys.append(np.argmax(x @ weights + bias, axis=1))  # argmax of softmax == argmax of logits
        users.append(np.full(samples_per_user[k], k))
    return ArrayDataset(
        x=np.concatenate(xs).astype(np.float32),
        y=np.concatenate(ys).astype(np.int64),
        num_classes=num_classes,
        users=np.concatenate(users).astype(np.int64),
    )


#: keys of a dataset entry that load_dataset handles for every source
COMMON_KEYS = ("source", "classes")


def select_classes(dataset: ArrayDataset, classes: list[int]) -> ArrayDataset:
    """Only the samples of ``classes``, relabelled 0..len(classes)-1 in the order given
    (e.g. FLT's encoder sets, or client classes disjoint from an encoder's)."""
    classes = list(classes)
    if len(set(classes)) != len(classes) or not all(0 <= c < dataset.num_classes for c in classes):
        raise ValueError(f"classes must be distinct ids in 0..{dataset.num_classes - 1}, got {classes}")
    keep = np.isin(dataset.y, classes)
    relabel = np.full(dataset.num_classes, -1, dtype=np.int64)
    relabel[classes] = np.arange(len(classes))
    return ArrayDataset(
        x=dataset.x[keep], y=relabel[dataset.y[keep]], num_classes=len(classes),
        users=None if dataset.users is None else dataset.users[keep],
        test_mask=None if dataset.test_mask is None else dataset.test_mask[keep],
    )


def missing_files(spec: dict, root: str | Path = "data") -> str | None:
    """Why a dataset entry's files are not under ``root`` (its loader's own message), or ``None``:
    they are there, the job downloads them (``download: true``), or the source reads no file."""
    params = DATASETS.with_defaults(spec["source"], {k: v for k, v in spec.items() if k not in COMMON_KEYS})
    check = DATASETS.extra(spec["source"], "files")
    if check is None or params.get("download"):
        return None
    try:
        check(Path(root), params)
    except FileNotFoundError as error:
        return str(error)
    return None


def load_dataset(spec: dict, root: str | Path = "data") -> ArrayDataset:
    """Build the dataset that a config entry ``{source: NAME, classes: [...], **params}`` describes,
    reading files under ``root``; ``classes`` keeps (and relabels) a subset of the classes."""
    params = {k: v for k, v in spec.items() if k not in COMMON_KEYS}
    dataset = DATASETS[spec["source"]](Path(root), **params)
    return dataset if spec.get("classes") is None else select_classes(dataset, spec["classes"])
