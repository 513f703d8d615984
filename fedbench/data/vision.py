"""Image datasets read from their official on-disk formats with torchvision's dataset classes, but
MNIST's and Fashion-MNIST's IDX files by :func:`read_idx` (torchvision's parsing, without importing
torchvision: 2 CPU s of every training job's start-up).

Every source pools the official train and test sets into one :class:`ArrayDataset` (train
samples first, then test samples, ``test_mask`` marking the latter) with images as float32
``[N, C, H, W]``: pixels scaled to [0, 1] as ``ToTensor`` does, then optionally normalised
per channel (``normalize``; see :data:`NORMALIZATIONS`).  No augmentation: none of the four
papers' released code augments (notes §1.2, §2.2, §3.2, §4.2).

Files are read from the data root (config ``data_root``) in the layout torchvision itself
downloads to (``<root>/MNIST/raw/...``, ``<root>/cifar-10-batches-py/...``, ...).  With
``download: true`` torchvision fetches them (needs network); otherwise missing files raise
:class:`FileNotFoundError` naming the dataset, the directory and the files expected there.
Every source registers that check as its ``files`` (``files(root, params)``, the names spelt
here so that planning checks them without importing torchvision); the loader runs the same
check, so planning and a job print the same message.
Fashion-MNIST alone has a second, offline home: when the data root lacks it, the four
gzip-compressed IDX files that Debian's package ``dataset-fashion-mnist`` installs in
:data:`DEBIAN_FASHION_MNIST` are read instead.

Memory (float32): MNIST-like 70k x 1x28x28 = 220 MB; EMNIST balanced 131.6k = 413 MB
(byclass 814k = 2.6 GB); CIFAR 60k x 3x32x32 = 737 MB; Tiny ImageNet 110k x 3x64x64 = 5.4 GB.
"""

from __future__ import annotations

import importlib
import os
import pickle
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from fedbench.data.sources import DATASETS, ArrayDataset, DatasetFacts


class _OnFirstUse:
    """A module imported when one of its attributes is first read.  Every workflow plan imports
    this file through the registries; torchvision (which pulls in torch._dynamo) is a quarter of
    that plan's start-up and only a job that reads a dataset needs it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)


tvd = _OnFirstUse("torchvision.datasets")
TF = _OnFirstUse("torchvision.transforms.v2.functional")


# name -> (mean, std) per channel (a single value is broadcast over all channels); None = [0, 1] only.
NORMALIZATIONS: dict[str, tuple[Sequence[float], Sequence[float]] | None] = {
    "none": None,  # ToTensor only: FLT for MNIST/FMNIST/EMNIST (notes §4.2)
    "half": ((0.5,), (0.5,)),  # Normalize(0.5, 0.5) -> [-1, 1]: PerMFL MNIST (§3.2), FedMR CIFAR-10 (§2.2), FLT CIFAR (§4.2)
    "mnist": ((0.1307,), (0.3081,)),  # the usual MNIST statistics (FLT main_nn.py), for convenience
    "fashion_mnist": ((0.2860,), (0.3530,)),  # the usual Fashion-MNIST statistics, for convenience
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),  # FedMR's CIFAR-100-coarse stats (§2.2)
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),  # FeMAM CIFAR-100 (§1.2)
    "tiny_imagenet": ((0.4802, 0.4481, 0.3975), (0.2302, 0.2265, 0.2262)),  # FeMAM Tiny ImageNet (§1.2)
}

# FLT's "CIFAR20" encoder set (paper §4 "Encoders", Enc1 for CIFAR-10; code name "CIFAR110"):
# CIFAR-10 plus these ten CIFAR-100 fine classes, hjraad/FLT manifold_approximation/utils/load_datasets.py
# (commit da09bfd, `selected_dict` of 'CIFAR110'): boy, chair, clock, elephant, house, mushroom,
# orchid, rabbit, telephone, train.  All ids are > 9, so the original kept the raw CIFAR-100 ids next
# to CIFAR-10's 0..9; here they become 10..19 in this (ascending) order.
FLT_CIFAR20_EXTRA_CLASSES = (11, 20, 22, 31, 37, 51, 54, 65, 86, 90)

# FLT's 20-class CIFAR-100 subset (Enc2 for CIFAR-10; code name "CIFAR100", same file, `selected_dict`
# of 'CIFAR100'): bear, bicycle, bus, camel, chair, clock, couch, dinosaur, elephant, house, lion, man,
# mushroom, orchid, rabbit, table, tank, telephone, train, tulip -> labels 0..19 in this order
# (the original kept the raw ids; its autoencoder ignores labels).
FLT_CIFAR100_SUBSET20_CLASSES = (3, 8, 13, 15, 20, 22, 25, 29, 31, 37, 43, 46, 51, 54, 65, 84, 85, 86, 90, 92)

_HOW_TO_GET = (
    "Set `download: true` in the dataset config on a machine with network access, "
    "or copy the files there (the data root is the config key `data_root`)."
)


# ----------------------------------------------------------------------------- helpers


def require_files(dataset: str, directory: Path, expected: Sequence[str], how: str = _HOW_TO_GET,
                  exists=lambda path: path.exists()) -> None:
    """Raise :class:`FileNotFoundError` unless every ``expected`` path (relative to ``directory``) exists
    (``exists``: the test of one path)."""
    directory = Path(directory).resolve()
    missing = [name for name in expected if not exists(directory / name)]
    if missing:
        raise FileNotFoundError(
            f"dataset {dataset!r} not found: expected in {directory}: {', '.join(expected)} "
            f"(missing: {', '.join(missing)}). {how}"
        )


def to_float_images(images: np.ndarray | torch.Tensor, normalize, chunk: int = 8192) -> np.ndarray:
    """uint8 ``[N, C, H, W]`` -> float32 scaled to [0, 1] (as ``ToTensor``) and normalised (as ``Normalize``),
    converted in chunks so the peak memory stays near the size of the float result."""
    stats = resolve_normalization(normalize)
    images = torch.as_tensor(images)
    out = np.empty(tuple(images.shape), dtype=np.float32)
    for start in range(0, len(images), chunk):
        part = images[start : start + chunk]
        if part.dtype == torch.uint8:  # torchvision's to_dtype(scale=True) for uint8, without importing it
            part = part.to(torch.float32).mul_(1.0 / 255)
        else:
            part = TF.to_dtype(part, torch.float32, scale=True)
        if stats is not None:
            mean, std = stats
            channels = part.shape[1]
            part = TF.normalize(part, _per_channel(mean, channels), _per_channel(std, channels))
        out[start : start + chunk] = part.numpy()
    return out


def resolve_normalization(normalize) -> tuple[Sequence[float], Sequence[float]] | None:
    """``normalize`` is a name of :data:`NORMALIZATIONS`, ``None`` (= "none") or ``{mean: [...], std: [...]}``."""
    if normalize is None:
        return None
    if isinstance(normalize, dict):
        if set(normalize) != {"mean", "std"}:
            raise ValueError(f"normalize mapping needs exactly the keys 'mean' and 'std', got {sorted(normalize)}")
        return tuple(normalize["mean"]), tuple(normalize["std"])
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"unknown normalize {normalize!r}; valid: {', '.join(NORMALIZATIONS)} or {{mean, std}}")
    return NORMALIZATIONS[normalize]


def _per_channel(values: Sequence[float], channels: int) -> list[float]:
    values = list(values)
    if len(values) == 1:
        return values * channels
    if len(values) != channels:
        raise ValueError(f"normalisation has {len(values)} values for {channels} channels")
    return values


def _pool(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], num_classes: int,
          normalize) -> ArrayDataset:
    """Official train then test samples (uint8 NCHW images, labels) -> one dataset with ``test_mask``."""
    images = np.concatenate([np.asarray(train[0]), np.asarray(test[0])])
    labels = np.concatenate([np.asarray(train[1]), np.asarray(test[1])]).astype(np.int64)
    mask = np.zeros(len(labels), dtype=bool)
    mask[len(train[1]) :] = True
    return ArrayDataset(x=to_float_images(images, normalize), y=labels, num_classes=num_classes, test_mask=mask)


# ----------------------------------------------------------------------------- MNIST family (IDX files)


_IDX_HOW = _HOW_TO_GET + " IDX files may also be left gzip-compressed (NAME.gz)."
IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def require_idx(dataset: str, raw: Path, names: Sequence[str], how: str = _IDX_HOW) -> None:
    """Raise :class:`FileNotFoundError` unless every IDX file ``name`` is in ``raw``, plain or as ``name.gz``."""
    require_files(dataset, raw, names, how, exists=lambda path: path.exists() or path.with_name(f"{path.name}.gz").exists())


def _prepare_idx(dataset: str, raw: Path, names: Sequence[str], how: str = _IDX_HOW) -> None:
    """torchvision reads the *uncompressed* IDX files in ``raw``: require them all (plain or ``.gz``),
    then decompress any that exist only as ``.gz`` (what torchvision's own download does).  Each file
    is decompressed into a scratch directory beside it and moved into place at once, so a job that
    starts while another decompresses (two partitions of one dataset, say) never reads a half-written file."""
    require_idx(dataset, raw, names, how)
    for name in names:
        if not (raw / name).exists() and (raw / f"{name}.gz").exists():
            with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=raw) as scratch:
                tvd.utils.extract_archive(str(raw / f"{name}.gz"), scratch)
                os.replace(Path(scratch) / name, raw / name)


# IDX element types (the third byte of the magic number), big-endian as the format stores them
IDX_TYPES = {8: ">u1", 9: ">i1", 11: ">i2", 12: ">i4", 13: ">f4", 14: ">f8"}


def read_idx(data: bytes) -> np.ndarray:
    """The array an IDX file's bytes hold, as torchvision's ``read_sn3_pascalvincent_tensor`` parses them
    (magic: two zero bytes, the type, the number of dimensions; the big-endian sizes; the elements)."""
    kind, dims = data[2], data[3]
    if data[:2] != b"\x00\x00" or kind not in IDX_TYPES or not 1 <= dims <= 3:
        raise ValueError(f"not an IDX file (magic {data[:4].hex()})")
    shape = [int.from_bytes(data[4 * (i + 1) : 4 * (i + 2)], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=IDX_TYPES[kind], offset=4 * (dims + 1), count=int(np.prod(shape))).reshape(shape)


MNIST_CLASSES = 10  # MNIST's and Fashion-MNIST's (torchvision's ``classes`` of both)


def _read_mnist_files(directory: Path, normalize) -> ArrayDataset:
    """MNIST or Fashion-MNIST from the four files of :data:`IDX_NAMES` in ``directory``, each read
    plain or, where only ``<name>.gz`` is there, decompressed in memory."""
    import gzip

    def read(name: str) -> np.ndarray:
        plain = directory / name
        return read_idx(plain.read_bytes() if plain.exists() else gzip.decompress((directory / f"{name}.gz").read_bytes()))

    x_train, y_train, x_test, y_test = (read(name) for name in IDX_NAMES)
    return _pool((x_train[:, None], y_train), (x_test[:, None], y_test), MNIST_CLASSES, normalize)


def _raw(root: Path, cls_name: str) -> Path:
    """Where torchvision's MNIST-family class ``cls_name`` reads its IDX files: ``<root>/<cls_name>/raw``."""
    return Path(root) / cls_name / "raw"


def _read_idx_pair(cls, dataset: str, root: Path, names: Sequence[str], download: bool, **kwargs):
    """Train and test ``cls`` datasets (MNIST/FashionMNIST/EMNIST) from ``<root>/<cls name>/raw``."""
    if not download:
        _prepare_idx(dataset, _raw(root, cls.__name__), names)
    return [cls(str(root), train=train, download=download, **kwargs) for train in (True, False)]


def _mnist_like(name: str, dataset: str, root: Path, download: bool, normalize, how: str = _IDX_HOW) -> ArrayDataset:
    """MNIST or Fashion-MNIST (torchvision's class ``name``) from ``<root>/<name>/raw``, read in place: a
    ``.gz`` is decompressed in memory and nothing is written there, so the folder may be a link to a
    read-only copy kept elsewhere; torchvision is imported only to download the files."""
    if download:
        _read_idx_pair(getattr(tvd, name), dataset, root, IDX_NAMES, download)
    require_idx(dataset, _raw(root, name), IDX_NAMES, how)
    return _read_mnist_files(_raw(root, name), normalize)


@DATASETS.register("mnist", facts=lambda p: DatasetFacts(10, 70000, input_shape=(1, 28, 28), test_samples=10000),
                   files=lambda root, p: require_idx("mnist", _raw(root, "MNIST"), IDX_NAMES))
def load_mnist(root: Path = Path("data"), *, normalize="half", download: bool = False) -> ArrayDataset:
    """MNIST, 70,000 28x28 digits (60k train + 10k test), 10 classes, from ``<root>/MNIST/raw``.

    Default ``normalize: half`` = Normalize(0.5, 0.5) as PerMFL's MNIST reader (pFedMT, notes §3.2);
    FLT uses ToTensor only (``normalize: none``, §4.2)."""
    return _mnist_like("MNIST", "mnist", root, download, normalize)


# Debian's package ``dataset-fashion-mnist`` (``apt-get install dataset-fashion-mnist``, 30 MB) installs the
# real Fashion-MNIST here: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, the files of the official release.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def _has_idx(directory: Path, names: Sequence[str]) -> bool:
    return all((directory / name).exists() or (directory / f"{name}.gz").exists() for name in names)


def _fashion_mnist_system_copy(root: Path, system_copy: bool) -> bool:
    """Whether Fashion-MNIST is read from Debian's copy: allowed, absent from the data root, present there."""
    return system_copy and not _has_idx(_raw(root, "FashionMNIST"), IDX_NAMES) and _has_idx(DEBIAN_FASHION_MNIST, IDX_NAMES)


def _fashion_mnist_how(system_copy: bool) -> str:
    return (f"{_IDX_HOW} Offline: `apt-get install dataset-fashion-mnist` (Debian's package) puts them in "
            f"{DEBIAN_FASHION_MNIST}" + ("" if system_copy else " (not read: `system_copy: false`)") + ".")


def _require_fashion_mnist(root: Path, params: dict) -> None:
    """Fashion-MNIST's IDX files in the data root, or Debian's copy where ``system_copy`` allows it."""
    if not _fashion_mnist_system_copy(root, params["system_copy"]):
        require_idx("fashion_mnist", _raw(root, "FashionMNIST"), IDX_NAMES, _fashion_mnist_how(params["system_copy"]))


@DATASETS.register("fashion_mnist", facts=lambda p: DatasetFacts(10, 70000, input_shape=(1, 28, 28), test_samples=10000),
                   files=_require_fashion_mnist)
def load_fashion_mnist(root: Path = Path("data"), *, normalize="none", download: bool = False,
                       system_copy: bool = True) -> ArrayDataset:
    """Fashion-MNIST, 70,000 28x28 images (60k + 10k), 10 classes, from ``<root>/FashionMNIST/raw``, or,
    when that folder lacks the files and ``system_copy`` is on, from Debian's ``dataset-fashion-mnist``
    (:data:`DEBIAN_FASHION_MNIST`, the same four IDX files gzip-compressed).

    Default ``normalize: none``: FLT pretrains its Enc2 autoencoder on it with ToTensor only (notes §4.2-4.3)."""
    if not download and _fashion_mnist_system_copy(root, system_copy):
        return _read_mnist_files(DEBIAN_FASHION_MNIST, normalize)  # read in place (read-only), .gz in memory
    return _mnist_like("FashionMNIST", "fashion_mnist", root, download, normalize, _fashion_mnist_how(system_copy))


# EMNIST split -> (classes, train + test samples) of the official files (letters: label 0 unused)
EMNIST_FACTS = {"balanced": (47, 131600), "byclass": (62, 814255), "bymerge": (47, 814255),
                "digits": (10, 280000), "letters": (27, 145600), "mnist": (10, 70000)}


def _emnist_names(split: str) -> list[str]:
    """EMNIST's four IDX files of ``split``."""
    return [f"emnist-{split}-{part}-{kind}" for part in ("train", "test") for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")]


@DATASETS.register("emnist", facts=lambda p: DatasetFacts(*EMNIST_FACTS.get(p["split"], (1, None)), input_shape=(1, 28, 28)),
                   files=lambda root, p: require_idx("emnist", _raw(root, "EMNIST"), _emnist_names(p["split"])))
def load_emnist(root: Path = Path("data"), *, split: str = "balanced", transpose: bool = True,
                normalize="none", download: bool = False) -> ArrayDataset:
    """EMNIST ``split`` (balanced: 112,800 + 18,800 images, 47 classes; byclass 62; bymerge 47; letters 27
    with label 0 unused; digits/mnist 10) from ``<root>/EMNIST/raw/emnist-<split>-{train,test}-*-idx?-ubyte``.

    The EMNIST files store every image transposed; ``transpose: true`` makes them upright like MNIST,
    which is what FLT's rotate(-90) + hflip transform does (notes §4.2; Structured Non-IID FEMNIST and
    the Enc1 encoder).  Default ``normalize: none`` (FLT: ToTensor only)."""
    if split not in tvd.EMNIST.splits:
        raise ValueError(f"emnist: unknown split {split!r}; valid: {', '.join(tvd.EMNIST.splits)}")
    train, test = _read_idx_pair(tvd.EMNIST, "emnist", root, _emnist_names(split), download, split=split)
    images = [ds.data.transpose(1, 2) if transpose else ds.data for ds in (train, test)]
    return _pool((images[0][:, None], train.targets), (images[1][:, None], test.targets), len(train.classes), normalize)


# ----------------------------------------------------------------------------- CIFAR (python pickles)


def _without_md5(cls):
    """Subclass of a torchvision CIFAR class whose file checks test existence only.

    torchvision verifies the official MD5 of every pickle (``_check_integrity``, ``_load_meta``) through
    ``check_integrity(path, md5)``, which only tests existence when ``md5`` is ``None``; this subclass sets
    the class-level checksums to ``None`` and changes nothing else (same files, same parsing)."""
    return type(f"{cls.__name__}AnyChecksum", (cls,), {
        "train_list": [[name, None] for name, _ in cls.train_list],
        "test_list": [[name, None] for name, _ in cls.test_list],
        "meta": {**cls.meta, "md5": None},
    })


CIFAR10, CIFAR100 = "cifar-10-batches-py", "cifar-100-python"  # torchvision's folders (``base_folder``)
# folder -> its pickles (train, test, meta): what torchvision's CIFAR10 / CIFAR100 read
CIFAR_FILES = {
    CIFAR10: ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch", "batches.meta"),
    CIFAR100: ("train", "test", "meta"),
}


def require_cifar(dataset: str, root: Path, folder: str) -> None:
    """Raise :class:`FileNotFoundError` unless every pickle of the CIFAR ``folder`` is in the data root."""
    require_files(dataset, Path(root) / folder, CIFAR_FILES[folder])


def _require_cifar_parts(root: Path, parts: Sequence[tuple[str, str]]) -> None:
    """Every (dataset, folder) part present; otherwise one :class:`FileNotFoundError` naming each missing part."""
    problems = []
    for dataset, folder in parts:
        try:
            require_cifar(dataset, root, folder)
        except FileNotFoundError as error:
            problems.append(str(error))
    if problems:
        raise FileNotFoundError("; ".join(problems))


def _read_cifar(cls, dataset: str, root: Path, download: bool, check_md5: bool):
    """Train and test ``cls`` datasets (CIFAR10/CIFAR100) from ``<root>/<cls.base_folder>``."""
    if not download:
        require_cifar(dataset, root, cls.base_folder)
    reader = cls if check_md5 else _without_md5(cls)
    return [reader(str(root), train=train, download=download) for train in (True, False)]


def _nchw(dataset) -> np.ndarray:
    """torchvision CIFAR images are uint8 HWC; return NCHW."""
    return np.ascontiguousarray(dataset.data.transpose(0, 3, 1, 2))


def _pickle_labels(path: Path, key: str) -> np.ndarray:
    with open(path, "rb") as handle:
        return np.asarray(pickle.load(handle, encoding="latin1")[key], dtype=np.int64)


@DATASETS.register("cifar10", facts=lambda p: DatasetFacts(10, 60000, input_shape=(3, 32, 32), test_samples=10000),
                   files=lambda root, p: require_cifar("cifar10", root, CIFAR10))
def load_cifar10(root: Path = Path("data"), *, normalize="half", download: bool = False,
                 check_md5: bool = True) -> ArrayDataset:
    """CIFAR-10, 60,000 32x32 RGB images (50k + 10k), 10 classes, from ``<root>/cifar-10-batches-py``.

    Default ``normalize: half``: FedMR (notes §2.2) and FLT (§4.2) both use Normalize((0.5,)*3, (0.5,)*3).
    ``check_md5: false`` accepts pickles whose MD5 differs from the official archive (e.g. re-pickled copies)."""
    train, test = _read_cifar(tvd.CIFAR10, "cifar10", root, download, check_md5)
    return _pool((_nchw(train), train.targets), (_nchw(test), test.targets), 10, normalize)


@DATASETS.register("cifar100", bounds={"labels": ("fine", "coarse")}, facts=lambda p: DatasetFacts(100 if p["labels"] == "fine" else 20, 60000, input_shape=(3, 32, 32), test_samples=10000),
                   files=lambda root, p: require_cifar("cifar100", root, CIFAR100))
def load_cifar100(root: Path = Path("data"), *, labels: str = "fine", normalize="cifar100", download: bool = False,
                  check_md5: bool = True) -> ArrayDataset:
    """CIFAR-100, 60,000 32x32 RGB images (50k + 10k), from ``<root>/cifar-100-python``.

    ``labels: fine`` -> 100 classes (FeMAM, notes §1.2); ``labels: coarse`` -> the 20 super-classes stored in
    the pickles' ``coarse_labels`` (FedMR's "CIFAR-100", §2.2).  Default ``normalize: cifar100`` is FeMAM's;
    FedMR normalises its coarse CIFAR-100 with ``normalize: cifar10`` statistics."""
    if labels not in ("fine", "coarse"):
        raise ValueError(f"cifar100: labels must be 'fine' or 'coarse', got {labels!r}")
    train, test = _read_cifar(tvd.CIFAR100, "cifar100", root, download, check_md5)
    if labels == "fine":
        return _pool((_nchw(train), train.targets), (_nchw(test), test.targets), 100, normalize)
    folder = Path(root) / tvd.CIFAR100.base_folder
    coarse = [_pickle_labels(folder / name, "coarse_labels") for name in ("train", "test")]
    return _pool((_nchw(train), coarse[0]), (_nchw(test), coarse[1]), 20, normalize)


def _select_classes(dataset, classes: Sequence[int], first_label: int) -> tuple[np.ndarray, np.ndarray]:
    """Images of ``classes`` (CIFAR-100 fine ids) in file order, relabelled ``first_label + position in classes``."""
    targets = np.asarray(dataset.targets)
    keep = np.flatnonzero(np.isin(targets, classes))
    relabel = np.full(100, -1, dtype=np.int64)
    relabel[list(classes)] = np.arange(len(classes)) + first_label
    return np.ascontiguousarray(dataset.data[keep].transpose(0, 3, 1, 2)), relabel[targets[keep]]


CIFAR20_FLT_PARTS = (("cifar20_flt (CIFAR-100 part)", CIFAR100), ("cifar20_flt (CIFAR-10 part)", CIFAR10))


@DATASETS.register("cifar20_flt", facts=lambda p: DatasetFacts(20, 66000, input_shape=(3, 32, 32)),
                   files=lambda root, p: _require_cifar_parts(root, CIFAR20_FLT_PARTS))
def load_cifar20_flt(root: Path = Path("data"), *, normalize="half", download: bool = False,
                     check_md5: bool = True) -> ArrayDataset:
    """FLT's "CIFAR20" (code: "CIFAR110"), the Enc1 encoder set for CIFAR-10: the ten CIFAR-100 classes of
    :data:`FLT_CIFAR20_EXTRA_CLASSES` (labels 10..19) followed by all of CIFAR-10 (labels 0..9), in the
    original ConcatDataset order; 55,000 train + 11,000 test images.  Normalize(0.5, 0.5) as FLT."""
    if not download:
        _require_cifar_parts(root, CIFAR20_FLT_PARTS)
    (part100, _), (part10, _) = CIFAR20_FLT_PARTS
    c100 = _read_cifar(tvd.CIFAR100, part100, root, download, check_md5)
    c10 = _read_cifar(tvd.CIFAR10, part10, root, download, check_md5)
    parts = []
    for extra, base in zip(c100, c10):
        x100, y100 = _select_classes(extra, FLT_CIFAR20_EXTRA_CLASSES, first_label=10)
        parts.append((np.concatenate([x100, _nchw(base)]), np.concatenate([y100, np.asarray(base.targets)])))
    return _pool(parts[0], parts[1], 20, normalize)


@DATASETS.register("cifar100_subset20", facts=lambda p: DatasetFacts(20, 12000, input_shape=(3, 32, 32)),
                   files=lambda root, p: require_cifar("cifar100_subset20", root, CIFAR100))
def load_cifar100_subset20(root: Path = Path("data"), *, normalize="half", download: bool = False,
                           check_md5: bool = True) -> ArrayDataset:
    """FLT's 20-class CIFAR-100 subset (code: "CIFAR100"), the Enc2 encoder set for CIFAR-10: the classes of
    :data:`FLT_CIFAR100_SUBSET20_CLASSES` relabelled 0..19; 10,000 train + 2,000 test images.
    Normalize(0.5, 0.5) as FLT.  (The paper says it has no overlap with CIFAR-10's classes.)"""
    train, test = _read_cifar(tvd.CIFAR100, "cifar100_subset20", root, download, check_md5)
    parts = [_select_classes(ds, FLT_CIFAR100_SUBSET20_CLASSES, first_label=0) for ds in (train, test)]
    return _pool(parts[0], parts[1], 20, normalize)


# ----------------------------------------------------------------------------- Tiny ImageNet (JPEG folders)


_TINY_HOW = ("Download http://cs231n.stanford.edu/tiny-imagenet-200.zip on a machine with network access and unzip "
             "it into the data root (config key `data_root`); torchvision has no downloader for it.")


TINY_IMAGENET_FOLDER = "tiny-imagenet-200"


def _require_tiny_imagenet(root: Path, params: dict | None = None) -> None:
    """The class list, the train folder and the validation images and labels in ``<root>/tiny-imagenet-200``
    (every class's images are counted when the dataset is read)."""
    require_files("tiny_imagenet", Path(root) / TINY_IMAGENET_FOLDER,
                  ["wnids.txt", "train", "val/images", "val/val_annotations.txt"], _TINY_HOW)


def _tiny_imagenet_files(base: Path) -> tuple[list[str], list[tuple[Path, int]], list[tuple[Path, int]]]:
    """(wnids, train (path, label), val (path, label)) with labels = position in ``sorted(wnids.txt)``."""
    _require_tiny_imagenet(base.parent)
    wnids = sorted((base / "wnids.txt").read_text().split())
    label = {wnid: i for i, wnid in enumerate(wnids)}
    train = []
    for wnid in wnids:
        images = sorted((base / "train" / wnid / "images").glob("*.JPEG"))
        if not images:
            raise FileNotFoundError(f"dataset 'tiny_imagenet' incomplete: no train/{wnid}/images/*.JPEG in "
                                    f"{base.resolve()} (wnids.txt lists {wnid}). {_TINY_HOW}")
        train += [(path, label[wnid]) for path in images]
    val = []
    for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
        if line.strip():
            name, wnid = line.split("\t")[:2]
            val.append((base / "val" / "images" / name, label[wnid]))
    return wnids, train, sorted(val)


def _decode_rgb(paths: Sequence[Path], desc: str) -> np.ndarray:
    """Decode images with PIL (grey JPEGs converted to RGB, as ``ImageFolder``'s loader does) -> uint8 NCHW."""
    from PIL import Image
    from tqdm import tqdm

    out = None
    for i, path in enumerate(tqdm(paths, desc=desc, unit="img", disable=None)):
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        if out is None:
            out = np.empty((len(paths), 3, *pixels.shape[:2]), dtype=np.uint8)
        out[i] = pixels.transpose(2, 0, 1)
    return out if out is not None else np.zeros((0, 3, 64, 64), dtype=np.uint8)


@DATASETS.register("tiny_imagenet", facts=lambda p: DatasetFacts(200, 110000, input_shape=(3, 64, 64), test_samples=10000),
                   files=_require_tiny_imagenet)
def load_tiny_imagenet(root: Path = Path("data"), *, normalize="tiny_imagenet") -> ArrayDataset:
    """Tiny ImageNet, 200 classes of 64x64 RGB images: 100,000 train (``train/<wnid>/images/*.JPEG``) + the
    10,000 official validation images used as the test set (``val/images``, labels in
    ``val/val_annotations.txt``), from ``<root>/tiny-imagenet-200`` (FeMAM, notes §1.2).

    Class ids follow ``sorted(wnids.txt)``.  FeMAM numbers the classes by iterating a Python ``set`` of
    wnids, whose order changes with the hash seed, so its ids are not reproducible; sorted order is.
    Default ``normalize: tiny_imagenet`` (FeMAM's mean/std).  The float32 result is about 5.4 GB."""
    base = Path(root) / TINY_IMAGENET_FOLDER
    wnids, train, val = _tiny_imagenet_files(base)
    x_train = _decode_rgb([path for path, _ in train], "tiny_imagenet train")
    x_val = _decode_rgb([path for path, _ in val], "tiny_imagenet val")
    y_train = np.array([lab for _, lab in train], dtype=np.int64)
    y_val = np.array([lab for _, lab in val], dtype=np.int64)
    return _pool((x_train, y_train), (x_val, y_val), len(wnids), normalize)
