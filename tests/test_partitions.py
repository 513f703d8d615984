import numpy as np
import pytest

from fedbench.data import partition_dataset
from fedbench.data.partition_file import load_partition, save_partition
from fedbench.data.sources import ArrayDataset, generate_synthetic, load_digits_dataset


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def label_skew(dataset, parts):
    """Mean over clients of the share of the client's most frequent label."""
    return np.mean([np.bincount(dataset.y[p]).max() / len(p) for p in parts])


def test_digits_source_is_sklearn_digits(digits):
    assert digits.x.shape == (1797, 1, 8, 8) and digits.x.dtype == np.float32
    assert digits.x.min() == 0.0 and digits.x.max() == 1.0
    assert sorted(np.unique(digits.y)) == list(range(10))


@pytest.mark.parametrize("spec", [
    {"kind": "iid", "num_clients": 7},
    {"kind": "dirichlet", "num_clients": 10, "alpha": 0.3},
    {"kind": "dirichlet", "num_clients": 10, "alpha": 100.0},
])
def test_every_sample_assigned_exactly_once(digits, spec):
    part = partition_dataset(digits, {**spec, "test_fraction": 0.25}, seed=3)
    assert part.num_clients == spec["num_clients"]
    everything = np.concatenate(part.train + part.test)
    assert len(everything) == len(digits.y)
    assert np.array_equal(np.sort(everything), np.arange(len(digits.y)))
    for tr, te in zip(part.train, part.test):
        n = len(tr) + len(te)
        assert len(te) == int(np.ceil(0.25 * n))  # train_test_split rounds the test share up


def test_dirichlet_is_reproducible_per_seed(digits):
    spec = {"kind": "dirichlet", "num_clients": 10, "alpha": 0.3, "test_fraction": 0.25}
    a, b, c = (partition_dataset(digits, spec, seed=s) for s in (1, 1, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.test, b.train + b.test))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_dirichlet_alpha_controls_label_skew(digits):
    skewed = partition_dataset(digits, {"kind": "dirichlet", "num_clients": 10, "alpha": 0.1}, 0)
    uniform = partition_dataset(digits, {"kind": "dirichlet", "num_clients": 10, "alpha": 1000.0}, 0)
    assert label_skew(digits, skewed.train) > 0.4
    assert label_skew(digits, uniform.train) < 0.2  # ~1/10 when near-uniform


def test_dirichlet_respects_min_size(digits):
    part = partition_dataset(digits, {"kind": "dirichlet", "num_clients": 20, "alpha": 0.1, "min_size": 30, "test_fraction": 0.2}, 0)
    assert min(len(a) + len(b) for a, b in zip(part.train, part.test)) >= 30


def test_dirichlet_sample_fraction_keeps_that_share_of_every_class(digits):
    """``sample_fraction`` (the FedMR claims analogue's scaling): the clients hold round(f * n_k) samples of
    class k, all distinct; 1.0 draws nothing, so the split equals the one without the key."""
    spec = {"kind": "dirichlet", "num_clients": 10, "alpha": 0.5, "min_size": 5}
    part = partition_dataset(digits, {**spec, "sample_fraction": 0.3}, seed=4)
    held = np.concatenate(part.train + part.test)
    assert len(np.unique(held)) == len(held)
    classes, sizes = np.unique(digits.y, return_counts=True)
    assert np.array_equal(np.bincount(digits.y[held], minlength=len(classes)), np.round(0.3 * sizes).astype(int))
    whole, same = (partition_dataset(digits, s, seed=4) for s in (spec, {**spec, "sample_fraction": 1.0}))
    assert all(np.array_equal(x, y) for x, y in zip(whole.train + whole.test, same.train + same.test))


def test_natural_partition_follows_users():
    ds = ArrayDataset(x=np.zeros((7, 2), np.float32), y=np.array([0, 1, 0, 1, 0, 1, 0]), num_classes=2,
                      users=np.array([2, 2, 0, 0, 0, 1, 1]))
    part = partition_dataset(ds, {"kind": "natural", "test_fraction": 0.34}, 0)
    owned = [sorted(np.concatenate([a, b]).tolist()) for a, b in zip(part.train, part.test)]
    assert owned == [[2, 3, 4], [5, 6], [0, 1]]  # client k = user k


def test_client_too_small_to_split_is_named():
    ds = ArrayDataset(x=np.zeros((3, 2), np.float32), y=np.array([0, 1, 0]), num_classes=2, users=np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="client 1 has 1 sample"):
        partition_dataset(ds, {"kind": "natural", "test_fraction": 0.25}, 0)


def test_natural_partition_needs_users(digits):
    with pytest.raises(ValueError, match="natural"):
        partition_dataset(digits, {"kind": "natural"}, 0)


def test_synthetic_follows_pfedme_generator():
    ds = generate_synthetic(alpha=0.5, beta=0.5, num_users=8, seed=0)
    sizes = np.bincount(ds.users)
    assert ds.x.shape == (sizes.sum(), 60) and ds.num_classes == 10
    assert (sizes % 5 == 0).all() and (sizes >= 250).all()  # (floor(lognormal) + 50) * 5
    again = generate_synthetic(alpha=0.5, beta=0.5, num_users=8, seed=0)
    assert np.array_equal(ds.x, again.x) and np.array_equal(ds.y, again.y)
    capped = generate_synthetic(num_users=8, seed=0, max_user_samples=300)
    assert np.bincount(capped.users).max() == 300


def test_partition_file_roundtrip(tmp_path, digits):
    part = partition_dataset(digits, {"kind": "dirichlet", "num_clients": 5, "alpha": 0.5}, 0)
    save_partition(part, digits.y, 10, tmp_path / "p.npz", tmp_path / "p.json", {"seed": 0})
    back = load_partition(tmp_path / "p.npz")
    assert all(np.array_equal(a, b) for a, b in zip(part.train + part.test, back.train + back.test))
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave no temporary files


def test_dataset_entries_can_keep_a_subset_of_classes(digits):
    from fedbench.data import load_dataset

    subset = load_dataset({"source": "digits", "classes": [7, 2]})
    assert subset.num_classes == 2
    assert len(subset.y) == (digits.y == 7).sum() + (digits.y == 2).sum()
    assert np.array_equal(subset.x[subset.y == 0], digits.x[digits.y == 7])  # relabelled in the order given
    with pytest.raises(ValueError, match="distinct ids"):
        load_dataset({"source": "digits", "classes": [3, 3]})


def _labelled(counts_per_class):
    from fedbench.data.sources import ArrayDataset

    y = np.concatenate([np.full(c, k) for k, c in enumerate(counts_per_class)]).astype(np.int64)
    return ArrayDataset(np.zeros((len(y), 1), np.float32), y, len(counts_per_class))


def test_dirichlet_remainders_by_hand():
    """Shares (0.26, 0.37, 0.37) of 10 samples: floor cuts at floor(2.6) = 2 and floor(6.3) = 6 ->
    (2, 4, 4); largest remainder floors (2, 3, 3) and gives the two spare samples to the largest
    fractional parts (.6 then .7, .7 -> the two .7s) -> (2, 4, 4); shares (0.15, 0.15, 0.7) of 10:
    floor -> cuts 1, 3 -> (1, 2, 7); largest -> (1.5, 1.5, 7) floors (1, 1, 7), one spare to the
    first .5 -> (2, 1, 7)."""
    from fedbench.data.partitioners import _class_counts

    assert _class_counts(np.array([0.26, 0.37, 0.37]), 10, "floor").tolist() == [2, 4, 4]
    assert _class_counts(np.array([0.26, 0.37, 0.37]), 10, "largest").tolist() == [2, 4, 4]
    assert _class_counts(np.array([0.15, 0.15, 0.7]), 10, "floor").tolist() == [1, 2, 7]
    assert _class_counts(np.array([0.15, 0.15, 0.7]), 10, "largest").tolist() == [2, 1, 7]


def test_dirichlet_at_tiny_alpha_assigns_every_sample_without_nan():
    """alpha = 1e-4: the draws are (numerically) one-hot or vanish; every sample still lands on
    exactly one client, for both remainder rules."""
    from fedbench.data.partitioners import partition_dirichlet

    data = _labelled([40, 30, 20, 10])
    pool = np.arange(len(data.y))
    for remainder in ("floor", "largest"):
        parts = partition_dirichlet(data, pool, np.random.default_rng(0), num_clients=6, alpha=1e-4,
                                    min_size=0, remainder=remainder)
        together = np.sort(np.concatenate(parts.clients))
        assert together.tolist() == pool.tolist()


def test_dirichlet_infeasible_request_fails_fast_naming_the_constraint():
    """alpha = 0.01, 500 clients, min_size 10 on 60,000 samples in 10 classes: out of reach, said
    in well under a second (no retries); 5 clients x min_size 10 on 30 samples: too few samples."""
    import time

    from fedbench.data.partitioners import partition_dirichlet

    data = _labelled([6000] * 10)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="min_size 10 for all 500 clients is out of reach"):
        partition_dirichlet(data, np.arange(60000), np.random.default_rng(0), num_clients=500, alpha=0.01)
    assert time.perf_counter() - started < 1.0
    with pytest.raises(ValueError, match="samples needed, the pool holds 30"):
        partition_dirichlet(_labelled([10, 10, 10]), np.arange(30), np.random.default_rng(0), num_clients=5, alpha=1.0)
    with pytest.raises(ValueError, match="remainder"):
        partition_dirichlet(data, np.arange(60000), np.random.default_rng(0), num_clients=5, alpha=1.0, remainder="x")
