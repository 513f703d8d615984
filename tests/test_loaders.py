"""Dataset sources read TINY files written in each real on-disk format (IDX, CIFAR pickles, Tiny ImageNet
JPEG folders, LEAF JSON) through the same code paths as the full datasets (torchvision's, JSON, and for the
MNIST family's IDX files fedbench's own parser, checked against torchvision's)."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedbench.data import DATASETS, load_dataset
from fedbench.data.sources import missing_files
from fedbench.data.vision import (
    CIFAR_FILES,
    FLT_CIFAR20_EXTRA_CLASSES,
    FLT_CIFAR100_SUBSET20_CLASSES,
    IDX_NAMES,
)

# ----------------------------------------------------------------------------- writers of the real formats


def write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    """IDX (ubyte): magic 0x0000 08 <ndim>, big-endian dims, then the bytes (optionally gzip-compressed)."""
    payload = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload += np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(f"{path}.gz", "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


def idx_images(n: int, seed: int) -> np.ndarray:
    images = np.random.default_rng(seed).integers(0, 256, (n, 28, 28), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 5] = 0, 255  # known pixels: top-left black, (row 0, col 5) white
    return images


def write_mnist(raw: Path, names: list[str], n_train: int, n_test: int, compress: bool) -> dict:
    """Four IDX files named ``names`` (train images, train labels, test images, test labels)."""
    arrays = {
        names[0]: idx_images(n_train, 0), names[1]: np.arange(n_train, dtype=np.uint8) % 10,
        names[2]: idx_images(n_test, 1), names[3]: (np.arange(n_test, dtype=np.uint8) + 3) % 10,
    }
    for name, array in arrays.items():
        write_idx(raw / name, array, compress)
    return arrays


MNIST_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


def cifar_rows(labels: list[int]) -> np.ndarray:
    """CIFAR rows: 3072 bytes = R plane, G plane, B plane (32x32 each); R = 255, G = 0, B = label."""
    rows = np.zeros((len(labels), 3, 1024), dtype=np.uint8)
    rows[:, 0] = 255
    rows[:, 2] = np.asarray(labels, dtype=np.uint8)[:, None]
    return rows.reshape(len(labels), 3072)


def write_cifar10(root: Path) -> None:
    folder = root / "cifar-10-batches-py"
    for b in range(1, 6):
        labels = [(2 * b) % 10, (2 * b + 1) % 10]
        dump(folder / f"data_batch_{b}", {"batch_label": f"batch {b}", "labels": labels, "data": cifar_rows(labels)})
    dump(folder / "test_batch", {"labels": [7, 8, 9], "data": cifar_rows([7, 8, 9])})
    dump(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": 2})


def coarse_of(fine: np.ndarray) -> np.ndarray:
    return (np.asarray(fine) * 7) % 20


def write_cifar100(root: Path) -> None:
    """One train and one test image of every fine class (test in reverse order)."""
    folder = root / "cifar-100-python"
    for name, fine in (("train", list(range(100))), ("test", list(range(99, -1, -1)))):
        dump(folder / name, {"fine_labels": fine, "coarse_labels": coarse_of(fine).tolist(), "data": cifar_rows(fine)})
    dump(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)],
                           "coarse_label_names": [f"g{i}" for i in range(20)]})


def write_tiny_imagenet(root: Path) -> None:
    """wnids listed unsorted; 2 train images per class (one grey JPEG) + 3 val images."""
    from PIL import Image

    base = root / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("n0200\nn0100\n")
    colours = {"n0100": (250, 5, 5), "n0200": (5, 5, 250)}
    for wnid, colour in colours.items():
        folder = base / "train" / wnid / "images"
        folder.mkdir(parents=True)
        Image.new("RGB", (64, 64), colour).save(folder / f"{wnid}_0.JPEG")
        Image.new("L", (64, 64), 128).save(folder / f"{wnid}_1.JPEG")
    lines = []
    for i, wnid in enumerate(["n0200", "n0100", "n0200"]):
        Image.new("RGB", (64, 64), colours[wnid]).save(base / "val" / "images" / f"val_{i}.JPEG")
        lines.append(f"val_{i}.JPEG\t{wnid}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")


def write_leaf(root: Path) -> None:
    """LEAF FEMNIST JSON: shard 0 holds writers f_b (3 train, 1 test) and f_a (1 train, 1 test);
    shard 1 holds f_c (1 train, 1 test).  Pixel value = 0.1 * label."""
    def user(labels):
        return {"x": [[0.1 * lab] * 784 for lab in labels], "y": labels}

    shards = {0: {"train": {"f_b": [1, 2, 3], "f_a": [4]}, "test": {"f_b": [5], "f_a": [6]}},
              1: {"train": {"f_c": [7]}, "test": {"f_c": [8]}}}
    for k, splits in shards.items():
        for split, users in splits.items():
            path = root / "leaf" / "femnist" / "data" / split / f"all_data_{k}_niid_0_keep_0_{split}_9.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            content = {"users": list(users), "num_samples": [len(v) for v in users.values()],
                       "user_data": {w: user(v) for w, v in users.items()}}
            path.write_text(json.dumps(content))


# ----------------------------------------------------------------------------- tests


def check_common(ds, n: int, shape: tuple, n_test: int, num_classes: int) -> None:
    assert ds.x.shape == (n, *shape) and ds.x.dtype == np.float32
    assert ds.y.shape == (n,) and ds.y.dtype == np.int64
    assert ds.num_classes == num_classes and 0 <= ds.y.min() and ds.y.max() < num_classes
    assert ds.test_mask.dtype == bool and ds.test_mask.sum() == n_test
    assert not ds.test_mask[: n - n_test].any()  # train samples first


def test_mnist_reads_gzipped_idx_and_normalises_half(tmp_path):
    arrays = write_mnist(tmp_path / "MNIST" / "raw", MNIST_NAMES, 6, 4, compress=True)
    ds = load_dataset({"source": "mnist"}, tmp_path)
    check_common(ds, 10, (1, 28, 28), 4, 10)
    assert ds.x[:, 0, 0, 0].tolist() == [-1.0] * 10 and ds.x[:, 0, 0, 5].tolist() == [1.0] * 10
    np.testing.assert_array_equal(ds.y, np.concatenate([arrays[MNIST_NAMES[1]], arrays[MNIST_NAMES[3]]]))
    expected = arrays[MNIST_NAMES[0]][2] / 255.0 * 2 - 1
    np.testing.assert_allclose(ds.x[2, 0], expected, atol=1e-6)


def test_gzipped_idx_appears_under_its_name_only_once_whole(tmp_path, monkeypatch):
    """Two jobs of one dataset (two partitions, say) may start together: while one decompresses a
    file for torchvision's reader (EMNIST's), the other must not find a half-written file under the
    real name (it did, and torchvision failed on its empty header).  Each file is decompressed
    elsewhere and moved into place whole."""
    import torchvision.datasets.utils as tv_utils

    from fedbench.data import vision

    raw = tmp_path / "MNIST" / "raw"
    write_mnist(raw, MNIST_NAMES, 6, 4, compress=True)
    extract = tv_utils.extract_archive
    visible_while_writing = []

    def watched(from_path, to_path=None, *args, **kwargs):
        out = extract(from_path, to_path, *args, **kwargs)
        visible_while_writing.append((raw / Path(from_path).stem).exists())
        return out

    monkeypatch.setattr(tv_utils, "extract_archive", watched)
    vision._prepare_idx("emnist", raw, MNIST_NAMES)
    assert visible_while_writing == [False] * 4
    assert sorted(p.name for p in raw.iterdir()) == sorted(MNIST_NAMES + [f"{n}.gz" for n in MNIST_NAMES])


def test_mnist_is_read_in_place_from_a_read_only_linked_copy(tmp_path):
    """A user who keeps datasets in one place links the data root's ``MNIST/raw`` to that copy (here
    read-only, gzipped, as the distributed files): the files are read where they are, nothing is
    written beside them, and the numbers are the files' own."""
    store = tmp_path / "datasets" / "mnist"
    arrays = write_mnist(store, MNIST_NAMES, 6, 4, compress=True)
    store.chmod(0o555)
    try:
        (tmp_path / "data" / "MNIST").mkdir(parents=True)
        (tmp_path / "data" / "MNIST" / "raw").symlink_to(store)
        ds = load_dataset({"source": "mnist", "normalize": "none"}, tmp_path / "data")
        assert sorted(p.name for p in store.iterdir()) == sorted(f"{n}.gz" for n in MNIST_NAMES)
    finally:
        store.chmod(0o755)
    check_common(ds, 10, (1, 28, 28), 4, 10)
    np.testing.assert_allclose(ds.x[:6, 0], arrays[MNIST_NAMES[0]] / 255.0, atol=1e-6)
    np.testing.assert_array_equal(ds.y[6:], arrays[MNIST_NAMES[3]])


def test_fashion_mnist_reads_uncompressed_idx_without_normalisation(tmp_path):
    arrays = write_mnist(tmp_path / "FashionMNIST" / "raw", MNIST_NAMES, 5, 3, compress=False)
    ds = DATASETS["fashion_mnist"](tmp_path)
    check_common(ds, 8, (1, 28, 28), 3, 10)
    np.testing.assert_allclose(ds.x[5, 0], arrays[MNIST_NAMES[2]][0] / 255.0, atol=1e-6)
    mnist_stats = DATASETS["fashion_mnist"](tmp_path, normalize={"mean": [0.25], "std": [0.5]})
    np.testing.assert_allclose(mnist_stats.x, (ds.x - 0.25) / 0.5, atol=1e-6)


def test_fashion_mnist_falls_back_to_the_debian_package_layout(tmp_path, monkeypatch):
    """An empty data root reads the four gzipped IDX files from the system directory, laid out as Debian's
    ``dataset-fashion-mnist`` lays them out (/usr/share/datasets/fashion-mnist/*.gz, no sub-folders)."""
    from fedbench.data import vision

    system = tmp_path / "usr" / "share" / "datasets" / "fashion-mnist"
    arrays = write_mnist(system, MNIST_NAMES, 6, 4, compress=True)
    assert sorted(p.name for p in system.iterdir()) == sorted(f"{name}.gz" for name in MNIST_NAMES)
    monkeypatch.setattr(vision, "DEBIAN_FASHION_MNIST", system)
    ds = load_dataset({"source": "fashion_mnist"}, tmp_path / "empty-root")
    check_common(ds, 10, (1, 28, 28), 4, 10)
    np.testing.assert_array_equal(ds.y, np.concatenate([arrays[MNIST_NAMES[1]], arrays[MNIST_NAMES[3]]]))
    np.testing.assert_allclose(ds.x[:6, 0], arrays[MNIST_NAMES[0]] / 255.0, atol=1e-6)
    np.testing.assert_allclose(ds.x[6:, 0], arrays[MNIST_NAMES[2]] / 255.0, atol=1e-6)
    assert not (tmp_path / "empty-root").exists()  # nothing written: the system copy is read in place
    # files in the data root take precedence over the system copy
    own = write_mnist(tmp_path / "root" / "FashionMNIST" / "raw", MNIST_NAMES, 5, 3, compress=False)
    ds_root = DATASETS["fashion_mnist"](tmp_path / "root")
    assert len(ds_root.y) == 8 and ds_root.y.tolist()[:5] == own[MNIST_NAMES[1]].tolist()
    # and the fallback can be switched off
    with pytest.raises(FileNotFoundError, match="system_copy: false"):
        DATASETS["fashion_mnist"](tmp_path / "empty-root", system_copy=False)


def test_missing_fashion_mnist_names_the_debian_package(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        DATASETS["fashion_mnist"](tmp_path / "nowhere")
    message = str(error.value)
    assert "apt-get install dataset-fashion-mnist" in message and "FashionMNIST" in message


def test_emnist_split_files_and_transpose(tmp_path):
    names = [f"emnist-balanced-{p}-{k}" for p in ("train", "test") for k in ("images-idx3-ubyte", "labels-idx1-ubyte")]
    raw = tmp_path / "EMNIST" / "raw"
    write_mnist(raw, names, 4, 2, compress=True)
    write_idx(raw / names[1], np.array([0, 46, 5, 12], dtype=np.uint8), compress=False)  # 47 classes
    ds = DATASETS["emnist"](tmp_path)
    check_common(ds, 6, (1, 28, 28), 2, 47)
    assert ds.y[:4].tolist() == [0, 46, 5, 12]
    assert (ds.x[:, 0, 5, 0] == 1.0).all()  # stored (row 0, col 5) -> upright (row 5, col 0)
    raw_orientation = DATASETS["emnist"](tmp_path, transpose=False)
    assert (raw_orientation.x[:, 0, 0, 5] == 1.0).all()
    with pytest.raises(FileNotFoundError, match="emnist-byclass-train-images-idx3-ubyte"):
        DATASETS["emnist"](tmp_path, split="byclass")


def test_cifar10_pickles_channel_order_and_md5_check(tmp_path):
    write_cifar10(tmp_path)
    with pytest.raises(RuntimeError, match="corrupted"):  # torchvision checks the official MD5s by default
        DATASETS["cifar10"](tmp_path)
    ds = DATASETS["cifar10"](tmp_path, check_md5=False)
    check_common(ds, 13, (3, 32, 32), 3, 10)
    assert ds.y.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 7, 8, 9]
    assert (ds.x[:, 0] == 1.0).all() and (ds.x[:, 1] == -1.0).all()  # R = 255, G = 0 under Normalize(0.5, 0.5)
    np.testing.assert_allclose(ds.x[:, 2, 0, 0], ds.y / 255.0 * 2 - 1, atol=1e-6)


def test_cifar100_fine_and_coarse_labels(tmp_path):
    write_cifar100(tmp_path)
    fine = DATASETS["cifar100"](tmp_path, check_md5=False)
    check_common(fine, 200, (3, 32, 32), 100, 100)
    assert fine.y[:100].tolist() == list(range(100)) and fine.y[100:].tolist() == list(range(99, -1, -1))
    np.testing.assert_allclose(fine.x[0, 0, 0, 0], (1.0 - 0.5071) / 0.2675, rtol=1e-5)  # FeMAM statistics
    coarse = DATASETS["cifar100"](tmp_path, labels="coarse", normalize="cifar10", check_md5=False)
    check_common(coarse, 200, (3, 32, 32), 100, 20)
    np.testing.assert_array_equal(coarse.y, coarse_of(fine.y))
    with pytest.raises(ValueError, match="fine' or 'coarse"):
        DATASETS["cifar100"](tmp_path, labels="medium", check_md5=False)


def test_flt_cifar20_and_cifar100_subset20(tmp_path):
    write_cifar10(tmp_path)
    write_cifar100(tmp_path)
    c20 = DATASETS["cifar20_flt"](tmp_path, check_md5=False)
    check_common(c20, 10 + 10 + 10 + 3, (3, 32, 32), 13, 20)
    # CIFAR-100 part first (ascending fine id -> 10..19), then CIFAR-10; the B channel stores the original label
    assert c20.y[:10].tolist() == list(range(10, 20))
    original = np.rint((c20.x[:, 2, 0, 0] + 1) / 2 * 255).astype(int)
    assert original[:10].tolist() == list(FLT_CIFAR20_EXTRA_CLASSES)
    assert c20.y[10:20].tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert c20.y[20:30].tolist() == list(range(19, 9, -1)) and c20.y[30:].tolist() == [7, 8, 9]

    sub = DATASETS["cifar100_subset20"](tmp_path, check_md5=False)
    check_common(sub, 40, (3, 32, 32), 20, 20)
    assert sub.y[:20].tolist() == list(range(20))
    original = np.rint((sub.x[:, 2, 0, 0] + 1) / 2 * 255).astype(int)
    assert original[:20].tolist() == list(FLT_CIFAR100_SUBSET20_CLASSES)
    assert sub.y[20:].tolist() == list(range(19, -1, -1))


def test_tiny_imagenet_folder(tmp_path):
    write_tiny_imagenet(tmp_path)
    ds = DATASETS["tiny_imagenet"](tmp_path, normalize="none")
    check_common(ds, 7, (3, 64, 64), 3, 2)
    assert ds.y.tolist() == [0, 0, 1, 1, 1, 0, 1]  # sorted wnids: n0100 -> 0, n0200 -> 1; val by file name
    assert ds.x[0, 0].mean() > 0.9 and ds.x[0, 2].mean() < 0.1  # red n0100 image
    np.testing.assert_allclose(ds.x[1].mean(axis=(1, 2)), [128 / 255] * 3, atol=0.02)  # grey JPEG -> RGB
    assert ds.x[4, 2].mean() > 0.9  # val_0 is blue n0200


def test_femnist_leaf_json(tmp_path):
    write_leaf(tmp_path)
    ds = DATASETS["femnist"](tmp_path)
    check_common(ds, 8, (1, 28, 28), 3, 62)
    # sorted writers f_a, f_b, f_c -> 0, 1, 2; train block then test block
    assert ds.users.tolist() == [0, 1, 1, 1, 2, 0, 1, 2]
    assert ds.y.tolist() == [4, 1, 2, 3, 7, 6, 5, 8]
    np.testing.assert_allclose(ds.x[:, 0, 3, 3], 0.1 * ds.y, atol=1e-6)

    fedmr = DATASETS["femnist"](tmp_path, invert=True, normalize="half")  # FedMR: (0.5 - x) / 0.5
    np.testing.assert_allclose(fedmr.x, (0.5 - ds.x) / 0.5, atol=1e-6)

    big = DATASETS["femnist"](tmp_path, min_samples=3)  # only f_b (4 samples); f_a and f_c have 2
    assert big.users.tolist() == [0, 0, 0, 0] and big.test_mask.sum() == 1
    first = DATASETS["femnist"](tmp_path, max_users=2)
    assert sorted(set(first.users.tolist())) == [0, 1] and len(first.y) == 6
    shard1 = DATASETS["femnist"](tmp_path, shards=[1])
    assert shard1.y.tolist() == [7, 8] and shard1.users.tolist() == [0, 0]


@pytest.mark.parametrize(
    "name, folder, expected_file",
    [
        ("mnist", "MNIST/raw", "train-images-idx3-ubyte"),
        ("fashion_mnist", "FashionMNIST/raw", "t10k-labels-idx1-ubyte"),
        ("emnist", "EMNIST/raw", "emnist-balanced-train-images-idx3-ubyte"),
        ("cifar10", "cifar-10-batches-py", "data_batch_1"),
        ("cifar100", "cifar-100-python", "meta"),
        ("cifar20_flt", "cifar-100-python", "train"),
        ("cifar100_subset20", "cifar-100-python", "test"),
        ("tiny_imagenet", "tiny-imagenet-200", "val/val_annotations.txt"),
        ("femnist", "leaf/femnist/data", "train/*.json"),
    ],
)
def test_missing_dataset_names_dataset_directory_and_files(tmp_path, name, folder, expected_file):
    with pytest.raises(FileNotFoundError) as error:
        DATASETS[name](tmp_path / "nowhere")
    message = str(error.value)
    assert name in message and expected_file in message
    assert str((tmp_path / "nowhere" / folder).resolve()) in message
    assert "download" in message.lower() or "copy" in message.lower()
    # planning finds it before any job, with the loader's own message (fedbench.planning.preflight)
    assert missing_files({"source": name}, tmp_path / "nowhere") == message
    assert not (tmp_path / "nowhere").exists()


def test_planning_spells_torchvisions_file_names():
    """Planning checks the files without importing torchvision: the names it spells are torchvision's."""
    import torchvision.datasets as tvd

    for cls in (tvd.CIFAR10, tvd.CIFAR100):
        assert CIFAR_FILES[cls.base_folder] == tuple(name for name, _ in cls.train_list + cls.test_list) + (cls.meta["filename"],)
    assert [tvd.MNIST.__name__, tvd.FashionMNIST.__name__, tvd.EMNIST.__name__] == ["MNIST", "FashionMNIST", "EMNIST"]
    assert list(IDX_NAMES) == MNIST_NAMES


# ----------------------------------------------------------------------------- the MNIST family without torchvision


@pytest.mark.parametrize("kind, dtype, shape", [(8, ">u1", (5, 3, 4)), (9, ">i1", (7,)), (11, ">i2", (2, 3)),
                                                (12, ">i4", (6,)), (13, ">f4", (2, 2, 2)), (14, ">f8", (3, 1))])
def test_idx_files_are_parsed_as_torchvision_parses_them(tmp_path, kind, dtype, shape):
    """``read_idx`` (what the MNIST family's loaders read with, so that a job does not import torchvision)
    gives the array torchvision's ``read_sn3_pascalvincent_tensor`` gives, for every IDX element type."""
    from torchvision.datasets.mnist import read_sn3_pascalvincent_tensor

    from fedbench.data.vision import read_idx

    array = (np.random.default_rng(kind).normal(size=shape) * 100).astype(dtype)
    payload = struct.pack(">BBBB", 0, 0, kind, len(shape)) + struct.pack(f">{len(shape)}I", *shape) + array.tobytes()
    (tmp_path / "f").write_bytes(payload)
    ours = read_idx(payload)
    theirs = read_sn3_pascalvincent_tensor(str(tmp_path / "f")).numpy()
    assert ours.shape == theirs.shape and np.array_equal(ours.astype(theirs.dtype), theirs)
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(b"\x01\x02\x03\x04")


def test_mnist_family_reads_the_same_floats_as_torchvision(tmp_path):
    """Fashion-MNIST and MNIST read from their IDX files equal the images and labels torchvision's dataset
    classes read, scaled by torchvision's ``to_dtype(scale=True)`` and normalised by its ``normalize``,
    bit for bit (every uint8 value among the pixels)."""
    import torch
    import torchvision.datasets as tvd
    import torchvision.transforms.v2.functional as TF

    from fedbench.data.vision import to_float_images

    every_value = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)
    assert torch.equal(torch.from_numpy(to_float_images(every_value, None)), TF.to_dtype(every_value, torch.float32, scale=True))
    for source, cls, normalize in (("fashion_mnist", tvd.FashionMNIST, "none"), ("mnist", tvd.MNIST, "half")):
        write_mnist(tmp_path / cls.__name__ / "raw", MNIST_NAMES, 9, 4, compress=False)
        ds = load_dataset({"source": source, "normalize": normalize}, tmp_path)
        parts = [cls(str(tmp_path), train=train) for train in (True, False)]
        x = torch.cat([TF.to_dtype(p.data[:, None], torch.float32, scale=True) for p in parts])
        if normalize == "half":
            x = TF.normalize(x, [0.5], [0.5])
        assert np.array_equal(ds.x, x.numpy()) and ds.x.dtype == np.float32
        assert np.array_equal(ds.y, torch.cat([p.targets for p in parts]).numpy()) and ds.y.dtype == np.int64


def test_reading_fashion_mnist_imports_no_torchvision(tmp_path):
    """A training job reads Fashion-MNIST without importing torchvision (which imports torch._dynamo: 2 CPU s)."""
    import subprocess
    import sys

    write_mnist(tmp_path / "FashionMNIST" / "raw", MNIST_NAMES, 5, 3, compress=False)
    code = ("import sys; from fedbench.data import load_dataset; "
            f"ds = load_dataset({{'source': 'fashion_mnist'}}, {str(tmp_path)!r}); "
            "print(len(ds.y), 'torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["8", "False"]
