"""FLT's scenario partitions and the generic label shards, on label-only fake datasets.

Only labels matter to a partitioner, so the datasets have x of shape [N, 1].  Train sets are
disjoint across clients except where stated (the code's ``shards`` sampling); FLT's test sets
are shared by design: every client of a cluster is tested on the same official test samples.
"""

import numpy as np
import pytest

from fedbench.data import partition_dataset
from fedbench.data.partitions_flt import power_law_beta, power_law_sizes
from fedbench.data.sources import ArrayDataset


def fake(train_per_class, test_per_class):
    """Class k has train_per_class[k] training then test_per_class samples, classes in blocks."""
    k = len(train_per_class)
    y = np.concatenate([np.repeat(np.arange(k), train_per_class), np.repeat(np.arange(k), test_per_class)])
    mask = np.r_[np.zeros(sum(train_per_class), bool), np.ones(k * test_per_class, bool)]
    return ArrayDataset(np.zeros((len(y), 1), np.float32), y.astype(np.int64), k, test_mask=mask)


@pytest.fixture(scope="module")
def mnist_like():
    return fake([6000] * 10, 1000)  # paper scale: 60,000 train, 10,000 test


@pytest.fixture(scope="module")
def emnist_balanced():
    return fake([2400] * 47, 400)  # 112,800 train, 18,800 test


def labels_of(dataset, indices):
    return set(np.unique(dataset.y[indices]).tolist())


def assert_disjoint_train_from_official(dataset, part):
    everything = np.concatenate(part.train)
    assert len(np.unique(everything)) == len(everything)
    assert not dataset.test_mask[everything].any()
    assert np.array_equal(np.sort(everything), dataset.train_indices())  # the whole training set is used


def assert_cluster_test_sets(dataset, part):
    """Each client's test set is every official test sample of its cluster's (training) labels."""
    for c in set(part.groups["cluster"]):
        members = [k for k, g in enumerate(part.groups["cluster"]) if g == c]
        labels = set().union(*(labels_of(dataset, part.train[k]) for k in members))
        expected = np.flatnonzero(dataset.test_mask & np.isin(dataset.y, sorted(labels)))
        for k in members:
            assert np.array_equal(part.test[k], expected)


# ------------------------------------------------------------------------------ Scenario 1


def test_scenario1_paper_scale(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "flt_scenario1"}, seed=0)
    assert part.num_clients == 100 and part.shared == ("test",) and part.val is None
    assert part.groups["cluster"] == [c for c in range(5) for _ in range(20)]
    assert all(len(t) == 600 for t in part.train)
    for t in part.train:  # two labels, 300 each
        assert sorted(np.bincount(mnist_like.y[t], minlength=10)[list(labels_of(mnist_like, t))]) == [300, 300]
    cluster_labels = [labels_of(mnist_like, part.train[20 * c]) for c in range(5)]
    for c in range(5):
        assert all(labels_of(mnist_like, part.train[k]) == cluster_labels[c] for k in range(20 * c, 20 * c + 20))
    assert sorted(set().union(*cluster_labels)) == list(range(10))  # 5 disjoint pairs
    assert_disjoint_train_from_official(mnist_like, part)
    assert_cluster_test_sets(mnist_like, part)
    assert all(len(t) == 2000 for t in part.test)


def test_scenario1_code_shards_positions(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "flt_scenario1", "sampling": "shards"}, seed=0)
    for k, t in enumerate(part.train):
        rank = k % 20
        for label in labels_of(mnist_like, t):
            start = 6000 * label + 300 * rank  # label l occupies [6000 l, 6000 (l+1)) in the fake set
            assert np.array_equal(t[mnist_like.y[t] == label], np.arange(start, start + 300))
    assert part.shared == ("test",)  # 6,000 per class: the shards tile the training set
    assert_disjoint_train_from_official(mnist_like, part)


def test_scenario1_code_shards_short_class_repeats_last_training_image():
    data = fake([6000] * 9 + [5900], 1000)  # class 9 has 100 images too few
    # real MNIST keeps 60,000 // 100 = 600 per client while classes fall short; here 59,900 would give 599
    part = partition_dataset(data, {"kind": "flt_scenario1", "sampling": "shards", "samples_per_client": 600}, seed=1)
    last_train = data.train_indices()[-1]
    k = next(k for k, t in enumerate(part.train) if 9 in labels_of(data, t) and k % 20 == 19)
    assert len(part.train[k]) == 600
    assert np.count_nonzero(part.train[k] == last_train) == 101  # 100 padded reads + the image itself
    assert "train" in part.shared


def test_scenario1_scaled_down_and_shared_test():
    data = fake([40] * 10, 7)
    part = partition_dataset(data, {"kind": "flt_scenario1", "num_clients": 10}, seed=3)
    assert part.groups["cluster"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert all(len(t) == 40 and len(labels_of(data, t)) == 2 for t in part.train)
    assert_disjoint_train_from_official(data, part)
    assert_cluster_test_sets(data, part)
    assert all(len(t) == 14 for t in part.test)


def test_scenario1_reproducible_per_seed(mnist_like):
    a, b, c = (partition_dataset(mnist_like, {"kind": "flt_scenario1"}, seed=s) for s in (4, 4, 5))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.test, b.train + b.test))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_flt_kinds_need_an_official_split_and_fix_their_tests(mnist_like):
    no_split = ArrayDataset(mnist_like.x, mnist_like.y, 10)
    with pytest.raises(ValueError, match="official test set"):
        partition_dataset(no_split, {"kind": "flt_scenario1"}, 0)
    with pytest.raises(ValueError, match="fixes its own test sets"):
        partition_dataset(mnist_like, {"kind": "flt_scenario1", "test_fraction": 0.2}, 0)
    with pytest.raises(ValueError, match="needs 15 classes"):
        partition_dataset(mnist_like, {"kind": "flt_scenario1", "labels_per_cluster": 3}, 0)


def test_teams_on_top_of_scenario1(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "flt_scenario1", "teams": {"count": 4}}, seed=0)
    assert part.groups["team"] == [t for t in range(4) for _ in range(25)]
    assert part.groups["cluster"] == [c for c in range(5) for _ in range(20)]
    assert part.shared == ("test",)


# ------------------------------------------------------------------------------ Scenario 2


def test_scenario2_ring(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "flt_scenario2"}, seed=0)
    assert part.groups["cluster"] == [c for c in range(5) for _ in range(20)]
    sets = [labels_of(mnist_like, part.train[20 * c]) for c in range(5)]
    assert all(len(s) == 3 for s in sets)
    for c in range(5):
        assert all(labels_of(mnist_like, part.train[k]) == sets[c] for k in range(20 * c, 20 * c + 20))
        assert len(sets[c] & sets[(c + 1) % 5]) == 1  # neighbours share one label
        assert not sets[c] & sets[(c + 2) % 5]  # the others none
    held = np.bincount([l for s in sets for l in s], minlength=10)
    assert sorted(held) == [1] * 5 + [2] * 5
    for k, t in enumerate(part.train):  # shared labels split over 40 clients, own label over 20
        counts = {l: np.count_nonzero(mnist_like.y[t] == l) for l in labels_of(mnist_like, t)}
        assert sorted(counts.values()) == [150, 150, 300]
        assert all(counts[l] == (150 if held[l] == 2 else 300) for l in counts)
    assert_disjoint_train_from_official(mnist_like, part)
    assert_cluster_test_sets(mnist_like, part)
    assert all(len(t) == 3000 for t in part.test)


def test_scenario2_code_shards_duplicate_shared_label(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "flt_scenario2", "sampling": "shards"}, seed=0)
    assert all(len(t) == 600 for t in part.train) and part.shared == ("test", "train")
    for c in range(5):
        a, b = part.train[20 * c + 7], part.train[20 * ((c + 1) % 5) + 7]  # same rank, neighbouring clusters
        shared_label = labels_of(mnist_like, a) & labels_of(mnist_like, b)
        assert len(shared_label) == 1
        assert len(np.intersect1d(a, b)) == 200
        assert np.array_equal(np.intersect1d(a, b), a[mnist_like.y[a] == shared_label.pop()])


# ------------------------------------------------------------------------------ Scenario 4


@pytest.mark.parametrize("total, clients, alpha", [(12000, 240, 25), (4800, 240, 10), (12000, 60, 100), (100, 7, 3)])
def test_power_law_sizes(total, clients, alpha):
    sizes = power_law_sizes(total, clients, alpha, 2.0)
    assert sizes.sum() == total and sizes.min() >= alpha
    assert np.all(np.diff(sizes) <= 0)
    beta = power_law_beta(total, clients, alpha, 2.0)
    raw = alpha + np.exp(beta * np.arange(1, clients + 1) ** 2.0)
    assert np.isclose(raw.sum(), total)
    assert np.all(np.abs(sizes[::-1] - raw) < 1)


def test_power_law_code_rounding_matches_notes():
    sizes = power_law_sizes(12000, 240, 25, 2.0, "code")  # notes §4.2: M = 2400 gives 26…259, first 124
    assert sizes.sum() == 12000 and sizes[0] == 124 and sizes[1:].min() == 26 and sizes.max() == 259
    assert np.all(np.diff(sizes[1:]) >= 0)


def test_structured_femnist(emnist_balanced):
    data = emnist_balanced
    part = partition_dataset(data, {"kind": "flt_structured_femnist", "num_clients": 600}, seed=0)
    assert part.num_clients == 600 and part.shared == ("test",)
    assert part.groups["cluster"] == [c for c in range(10) for _ in range(60)]
    for c in range(10):
        block = part.train[60 * c:60 * c + 60]
        allowed = set(range(5 * c, min(5 * c + 5, 47)))
        assert set().union(*(labels_of(data, t) for t in block)) == allowed  # last cluster: 45, 46
        sizes = np.array([len(t) for t in block])
        total = 2400 * len(allowed)
        assert sizes.sum() == total and np.all(np.diff(sizes) <= 0)
        assert sizes.min() >= total // 120  # alpha = |D_c| / (2 M_c): 100, last cluster 40
        expected = np.flatnonzero(data.test_mask & np.isin(data.y, sorted(allowed)))
        assert all(np.array_equal(t, expected) for t in part.test[60 * c:60 * c + 60])
    assert_disjoint_train_from_official(data, part)


def test_structured_femnist_code_options(emnist_balanced):
    data = emnist_balanced
    part = partition_dataset(
        data, {"kind": "flt_structured_femnist", "num_clients": 2400, "sizes": "code", "pad_test_labels": True}, seed=1,
    )
    sizes = np.array([len(t) for t in part.train])
    assert list(sizes[[0, 1, 239]]) == [124, 26, 259] and sizes[:240].sum() == 12000
    assert sizes[2160] == 105 and sizes[2160:].sum() == 4800
    assert labels_of(data, part.test[-1]) == {0, 45, 46}  # the code's padded label row
    assert labels_of(data, part.test[0]) == {0, 1, 2, 3, 4}
    assert_disjoint_train_from_official(data, part)


def test_structured_femnist_reproducible_and_validated(emnist_balanced):
    spec = {"kind": "flt_structured_femnist", "num_clients": 240}
    a, b, c = (partition_dataset(emnist_balanced, spec, seed=s) for s in (2, 2, 3))
    assert all(np.array_equal(x, y) for x, y in zip(a.train, b.train))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))
    with pytest.raises(ValueError, match="multiple of num_clusters"):
        partition_dataset(emnist_balanced, {**spec, "num_clients": 245}, 0)
    with pytest.raises(ValueError, match="do not fill"):
        partition_dataset(emnist_balanced, {**spec, "classes_per_cluster": 4}, 0)


# ------------------------------------------------------------------------------ label shards


def test_shards_mcmahan_scale(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "shards", "num_clients": 100, "test_set": "global"}, seed=0)
    assert all(len(t) == 600 for t in part.train)
    assert np.array_equal(np.sort(np.concatenate(part.train)), mnist_like.train_indices())  # every sample once
    for t in part.train:  # 300-sample shards never straddle a class of 6,000
        assert 1 <= len(labels_of(mnist_like, t)) <= 2
        for label in labels_of(mnist_like, t):
            assert np.count_nonzero(mnist_like.y[t] == label) in (300, 600)
    assert all(np.array_equal(t, mnist_like.test_indices()) for t in part.test)


def test_shards_uneven_pool():
    data = fake([100, 101, 102, 100, 100, 100, 100, 100, 100, 100], 0)
    data = ArrayDataset(data.x, data.y, 10)  # 1003 samples, no official split
    part = partition_dataset(data, {"kind": "shards", "num_clients": 10, "shards_per_client": 3}, seed=2)
    sizes = [len(a) + len(b) for a, b in zip(part.train, part.test)]
    assert all(99 <= s <= 102 for s in sizes)  # three shards of 33 or 34
    everything = np.concatenate(part.train + part.test)
    assert np.array_equal(np.sort(everything), np.arange(1003))
    other = partition_dataset(data, {"kind": "shards", "num_clients": 10, "shards_per_client": 3}, seed=3)
    same = partition_dataset(data, {"kind": "shards", "num_clients": 10, "shards_per_client": 3}, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(part.train, same.train))
    assert not all(np.array_equal(x, y) for x, y in zip(part.train, other.train))
