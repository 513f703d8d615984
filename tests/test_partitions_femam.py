"""FeMAM partitions: cluster-wise, multi-level (fedbench.data.partitions_femam) and client-wise
(the generic dirichlet kind with FeMAM's settings).  Invariants derived by hand from the paper
(App. C.1, Table C.1) and the code notes (docs/original_code_notes.md §1.2)."""

import numpy as np
import pytest

from fedbench.data import PARTITIONERS, ArrayDataset, partition_dataset
from fedbench.data.partition_file import load_partition, save_partition
from fedbench.data.partitions_femam import (
    balanced_runs,
    code_cluster_sizes,
    dirichlet_counts,
    multilevel_tree,
    refilling_picker,
    table_c1_classes,
)

TRAIN, TEST = 60, 10  # per class: 5 val (half the test set) + 55 train >= 50 holders: every holder gets >= 1 train sample

# Table C.1 (paper), typed in by hand: structure -> classes per cluster per level, top->bottom
TABLE_C1 = {(2, 5, 9): [19, 7, 3], (3, 6, 11): [14, 6, 2], (4, 13, 21): [20, 6, 2], (9, 15, 22): [9, 5, 2]}


def make_dataset(num_classes: int, train: int = TRAIN, test: int = TEST, seed: int = 0) -> ArrayDataset:
    """``train`` official training + ``test`` official test samples per class, random features."""
    y = np.concatenate([np.repeat(np.arange(num_classes), train), np.repeat(np.arange(num_classes), test)])
    mask = np.r_[np.zeros(num_classes * train, bool), np.ones(num_classes * test, bool)]
    x = np.random.default_rng(seed).normal(size=(len(y), 2)).astype(np.float32)
    return ArrayDataset(x=x, y=y.astype(np.int64), num_classes=num_classes, test_mask=mask)


@pytest.fixture(scope="module")
def cifar_like():
    return make_dataset(100)


@pytest.fixture(scope="module")
def tiny_like():
    return make_dataset(200)


def train_labels(ds, part):
    return [set(ds.y[t].tolist()) for t in part.train]


def check_disjoint_and_official(ds, part):
    """Indices in range; train/val/test disjoint across clients and from each other; val from the
    official training set, test = official test samples (of the held classes)."""
    everything = np.concatenate(part.train + part.val + part.test)
    assert everything.min() >= 0 and everything.max() < len(ds.y)
    assert len(np.unique(everything)) == len(everything)  # nothing reused: shared == ()
    assert part.shared == ()
    assert not ds.test_mask[np.concatenate(part.train + part.val)].any()
    assert ds.test_mask[np.concatenate(part.test)].all()


def check_labels_follow_classes(ds, part):
    """Each client holds a sample of every class of its set, and of nothing else, in train, val and test."""
    labels = train_labels(ds, part)
    for k in range(part.num_clients):
        assert set(ds.y[part.val[k]].tolist()) <= labels[k]
        assert set(ds.y[part.test[k]].tolist()) <= labels[k]


# --- cluster-wise ---------------------------------------------------------------------------------


def test_refilling_picker_is_consecutive_permutations():
    picks = refilling_picker(100, 5 * 30, np.random.default_rng(0))
    assert len(picks) == 150
    assert sorted(picks[:100]) == list(range(100))  # first round: every class once
    assert len(set(picks[100:])) == 50  # refill: no repeats within a round


@pytest.mark.parametrize("cluster_sizes", ["even", "code"])
@pytest.mark.parametrize("c", [30, 80])
def test_cluster_wise_invariants(cifar_like, cluster_sizes, c):
    spec = {"kind": "femam_cluster", "classes_per_cluster": c, "num_clusters": 5, "num_clients": 50, "cluster_sizes": cluster_sizes}
    part = partition_dataset(cifar_like, spec, seed=1)
    assert part.num_clients == 50 and set(part.groups) == {"cluster"}
    cluster = np.array(part.groups["cluster"])
    sizes = np.bincount(cluster)
    assert len(sizes) == 5 and sizes.sum() == 50
    assert np.all(np.diff(cluster) >= 0)  # contiguous client blocks
    if cluster_sizes == "even":
        assert sizes.max() - sizes.min() <= 1
    else:
        assert sizes.min() >= 2
    check_disjoint_and_official(cifar_like, part)
    check_labels_follow_classes(cifar_like, part)
    labels = train_labels(cifar_like, part)
    for g in range(5):  # all clients of a cluster hold exactly the cluster's classes (<= c: repeats possible)
        members = np.flatnonzero(cluster == g)
        assert all(labels[i] == labels[members[0]] for i in members)
        assert len(labels[members[0]]) <= c  # c draws; the cluster straddling a refill may repeat some
    assert set().union(*labels) == set(range(100))  # every class used
    # sizes: half as many validation samples per class as it has test samples (paper, App. C.1), taken
    # from its official training set; the official test set cut alike
    assert sum(map(len, part.val)) == 100 * 5 and sum(map(len, part.train)) == 100 * 55
    assert sum(map(len, part.test)) == 100 * TEST


def test_code_cluster_sizes_at_least_two_and_sum():
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = code_cluster_sizes(50, 5, rng)
        assert sizes.sum() == 50 and sizes.min() >= 2
    assert code_cluster_sizes(10, 5, rng).tolist() == [2] * 5


def test_same_dirichlet_proportions_for_train_val_test():
    """One class, one draw p: counts of each split follow round(n * p) with the code's fix-ups."""
    ds = make_dataset(5, train=1000, test=500)
    part = partition_dataset(ds, {"kind": "femam_cluster", "classes_per_cluster": 5, "num_clusters": 1, "num_clients": 4}, 3)
    train = np.array([len(t) for t in part.train]) / 750  # 1000 - 250 validation (half the 500 test samples)
    val = np.array([len(v) for v in part.val]) / 250
    test = np.array([len(t) for t in part.test]) / 500
    assert np.abs(train - test).max() < 0.02 and np.abs(train - val).max() < 0.05


def test_dirichlet_counts_follow_code_rule():
    assert dirichlet_counts(10, np.array([0.26, 0.26, 0.48])).tolist() == [3, 3, 4]  # round -> [3,3,5], -1 at argmax
    assert dirichlet_counts(3, np.array([0.9, 0.05, 0.05])).tolist() == [1, 1, 1]  # every holder >= 1
    assert dirichlet_counts(1, np.array([0.9, 0.1])).sum() == 1  # too few samples: some holders get none


def test_cluster_wise_reproducible_per_seed(cifar_like):
    spec = {"kind": "femam_cluster", "classes_per_cluster": 30, "cluster_sizes": "code"}
    a, b, c = (partition_dataset(cifar_like, spec, seed=s) for s in (4, 4, 5))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.val + a.test, b.train + b.val + b.test))
    assert a.groups == b.groups
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_cluster_wise_rejects_bad_parameters(cifar_like):
    with pytest.raises(ValueError, match="classes_per_cluster"):
        partition_dataset(cifar_like, {"kind": "femam_cluster", "classes_per_cluster": 10}, 0)  # 5 x 10 < 100
    with pytest.raises(ValueError, match="cluster_sizes"):
        partition_dataset(cifar_like, {"kind": "femam_cluster", "classes_per_cluster": 30, "cluster_sizes": "odd"}, 0)
    with pytest.raises(ValueError, match="fixes its own test sets"):
        partition_dataset(cifar_like, {"kind": "femam_cluster", "classes_per_cluster": 30, "val_fraction": 0.1}, 0)


# --- multi-level ----------------------------------------------------------------------------------


@pytest.mark.parametrize("structure", list(TABLE_C1))
def test_table_c1_lookup(structure):
    num_classes = 100 if structure[0] < 4 else 200
    assert table_c1_classes(list(structure), num_classes) == TABLE_C1[structure]


def test_table_c1_lookup_rejects_unknown_or_mismatched():
    with pytest.raises(ValueError, match="not in"):
        table_c1_classes([2, 4, 8], 100)
    with pytest.raises(ValueError, match="does not fit"):
        table_c1_classes([2, 5, 9], 200)


@pytest.mark.parametrize("cluster_sizes", ["even", "code"])
@pytest.mark.parametrize("structure", list(TABLE_C1))
def test_multilevel_invariants(cifar_like, tiny_like, structure, cluster_sizes):
    ds = cifar_like if structure[0] < 4 else tiny_like
    spec = {"kind": "femam_multilevel", "structure": list(structure), "cluster_sizes": cluster_sizes}
    part = partition_dataset(ds, spec, seed=2)
    assert part.num_clients == 50 and list(part.groups) == ["level1", "level2", "level3"]
    levels = [np.array(part.groups[f"level{l}"]) for l in (1, 2, 3)]
    for ids, count in zip(levels, structure):  # per-level cluster counts exactly as Table C.1
        assert sorted(set(ids.tolist())) == list(range(count))
        assert np.all(np.diff(ids) >= 0)  # contiguous blocks
    assert np.bincount(levels[2]).min() >= 2  # >= 2 clients per bottom cluster
    for lower, upper in ((2, 1), (1, 0)):  # nesting: a cluster's clients share every cluster above it
        assert all(len(set(levels[upper][levels[lower] == g])) == 1 for g in range(structure[lower]))
    check_disjoint_and_official(ds, part)
    check_labels_follow_classes(ds, part)

    # each class is held by exactly the clients of one cluster; count the classes per cluster
    labels = train_labels(ds, part)
    holders = {k: frozenset(i for i in range(50) if k in labels[i]) for k in range(ds.num_classes)}
    assert all(holders.values())  # all classes used
    expected: dict[frozenset, int] = {}  # client set -> classes it should hold (a cluster may equal its only child)
    for l, (count, c) in enumerate(zip(structure, TABLE_C1[structure])):
        for g in range(count):
            key = frozenset(np.flatnonzero(levels[l] == g).tolist())
            expected[key] = expected.get(key, 0) + c
    found: dict[frozenset, int] = {}
    for s in holders.values():
        found[s] = found.get(s, 0) + 1
    assert found == expected  # so classes are disjoint across clusters and levels, Table C.1 counts
    for i in range(50):  # a client's classes = the union of its three clusters' classes
        assert len(labels[i]) == sum(c for s, c in expected.items() if i in s)


def test_balanced_runs_least_squares():
    # target 25: cutting after four 6s gives 24/26 (cost 2), after five 30/20 (cost 50)
    assert balanced_runs(np.array([6, 6, 6, 6, 6, 5, 5, 5, 5]), 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert balanced_runs(np.array([1, 1, 1, 1, 10]), 2).tolist() == [0, 0, 0, 0, 1]  # 4/10 beats 3/11
    assert balanced_runs(np.array([3, 3, 3]), 3).tolist() == [0, 1, 2]  # every run non-empty


def test_multilevel_even_tree_balances_each_level():
    levels = multilevel_tree([2, 5, 9], 50, 2, "even", np.random.default_rng(0))
    assert np.bincount(levels[2]).tolist() == [6, 6, 6, 6, 6, 5, 5, 5, 5]  # 50 clients over 9: evenly
    middle = np.bincount(levels[1])
    # 9 bottom clusters in 5 runs: one single (5 or 6 clients, >= 16 from the target 10) and pairs of
    # 6+6 (4), 6+5 (1) or 5+5 (0): the least cost is 16 + 4 + 4 = 24
    assert ((middle - 10) ** 2).sum() == 24
    assert all(len(set(levels[2][levels[1] == g])) >= 1 for g in range(5))


def test_multilevel_explicit_classes_and_leftover_classes(cifar_like):
    part = partition_dataset(cifar_like, {"kind": "femam_multilevel", "structure": [1, 2, 4], "classes_per_cluster": [10, 5, 3],
                                          "num_clients": 12}, 0)
    labels = train_labels(cifar_like, part)
    assert len(set().union(*labels)) == 10 + 2 * 5 + 4 * 3  # the other 68 classes are unused
    assert all(len(s) == 10 + 5 + 3 for s in labels)


def test_multilevel_reproducible_per_seed(tiny_like):
    spec = {"kind": "femam_multilevel", "structure": [9, 15, 22], "cluster_sizes": "code"}
    a, b, c = (partition_dataset(tiny_like, spec, seed=s) for s in (7, 7, 8))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.val + a.test, b.train + b.val + b.test))
    assert a.groups == b.groups and a.groups != c.groups


def test_multilevel_rejects_bad_parameters(cifar_like):
    with pytest.raises(ValueError, match="non-decreasing"):
        partition_dataset(cifar_like, {"kind": "femam_multilevel", "structure": [5, 2, 9], "classes_per_cluster": [1, 1, 1]}, 0)
    with pytest.raises(ValueError, match="more than"):
        partition_dataset(cifar_like, {"kind": "femam_multilevel", "structure": [2, 5, 9], "classes_per_cluster": [20, 7, 3]}, 0)
    with pytest.raises(ValueError, match="bottom clusters"):
        partition_dataset(cifar_like, {"kind": "femam_multilevel", "structure": [2, 5, 9], "num_clients": 17}, 0)


def test_partition_file_keeps_groups(tmp_path, cifar_like):
    part = partition_dataset(cifar_like, {"kind": "femam_multilevel", "structure": [3, 6, 11]}, 0)
    save_partition(part, cifar_like.y, 100, tmp_path / "p.npz", tmp_path / "p.json", {"seed": 0})
    back = load_partition(tmp_path / "p.npz")
    assert back.groups == part.groups
    assert all(np.array_equal(a, b) for a, b in zip(part.val, back.val))


def test_registered_parameters_are_keyword_only():
    assert set(PARTITIONERS.parameters("femam_cluster")) == {
        "classes_per_cluster", "num_clusters", "num_clients", "cluster_sizes", "concentration", "val_ratio", "test_ratio", "sample_fraction"}
    assert set(PARTITIONERS.parameters("femam_multilevel")) == {
        "structure", "classes_per_cluster", "num_clients", "min_clients", "cluster_sizes", "concentration", "val_ratio", "test_ratio", "sample_fraction"}


# --- client-wise: the generic dirichlet kind with FeMAM's settings (notes §1.2 (a)) ------------------


@pytest.mark.parametrize("num_classes, test, test_fraction, sizes", [
    (100, 100, 1 / 6, (45_000, 5_000, 10_000)),  # CIFAR-100 (matches the paper)
    (200, 50, 1 / 11, (90_000, 10_000, 10_000)),  # Tiny-ImageNet (code; the paper says 95k/5k/10k)
])
def test_client_wise_dirichlet_femam_settings(num_classes, test, test_fraction, sizes):
    ds = make_dataset(num_classes, train=500, test=test)  # the real per-class counts, labels only matter
    spec = {"kind": "dirichlet", "num_clients": 50, "alpha": 0.1, "min_size": num_classes,
            "test_set": "local", "test_fraction": test_fraction, "val_fraction": 0.1}
    part = partition_dataset(ds, spec, seed=0)
    everything = np.concatenate(part.train + part.val + part.test)
    assert np.array_equal(np.sort(everything), np.arange(len(ds.y)))  # pooled train + test, each sample once
    per_client = [len(a) + len(b) + len(c) for a, b, c in zip(part.train, part.val, part.test)]
    assert min(per_client) >= num_classes
    totals = [sum(map(len, p)) for p in (part.train, part.val, part.test)]
    assert np.allclose(totals, sizes, rtol=0.01)


def test_without_official_split_test_ratio_holds_out_each_class():
    ds = make_dataset(10, train=60, test=0)
    ds = ArrayDataset(x=ds.x, y=ds.y, num_classes=10)  # no test_mask
    part = partition_dataset(ds, {"kind": "femam_cluster", "classes_per_cluster": 4, "num_clusters": 3, "num_clients": 9,
                                  "test_ratio": 0.25, "val_ratio": 0.0}, 0)
    assert part.val is None
    assert sum(map(len, part.test)) == 10 * 15 and sum(map(len, part.train)) == 10 * 45
    everything = np.concatenate(part.train + part.test)
    assert np.array_equal(np.sort(everything), np.arange(600))


def test_sample_fraction_keeps_that_share_of_every_class_and_split():
    from fedbench.data.partition import class_subsample

    data = make_dataset(4, train=40, test=10)
    pool = np.arange(len(data.y))
    kept = class_subsample(data, pool, 0.25, np.random.default_rng(0))
    for k in range(4):
        in_class = data.y[kept] == k
        assert (data.test_mask[kept] & in_class).sum() == round(0.25 * ((data.y == k) & data.test_mask).sum())
        assert (~data.test_mask[kept] & in_class).sum() == round(0.25 * ((data.y == k) & ~data.test_mask).sum())
    assert class_subsample(data, pool, 1.0, np.random.default_rng(0)) is pool
    with pytest.raises(ValueError, match="sample_fraction"):
        class_subsample(data, pool, 0.0, np.random.default_rng(0))
