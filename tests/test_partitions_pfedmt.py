"""pFedMe's "2 labels per user" MNIST generator (pfedme_mnist_labels) and pFedMT's teams.

The generator returns each user's samples; the common 25% per-user test split then makes
train and test parts, all disjoint across users (no part is shared).
"""

import numpy as np
import pytest

from fedbench.data import partition_dataset
from fedbench.data.partitions_pfedmt import _script_sizes, _slots, random_split_sizes
from fedbench.data.sources import ArrayDataset


@pytest.fixture(scope="module")
def mnist_like():
    """70,000 label-only samples: 6,000 train + 1,000 test per class, classes in blocks."""
    y = np.concatenate([np.repeat(np.arange(10), 6000), np.repeat(np.arange(10), 1000)]).astype(np.int64)
    mask = np.r_[np.zeros(60000, bool), np.ones(10000, bool)]
    return ArrayDataset(np.zeros((70000, 1), np.float32), y, 10, test_mask=mask)


def user_samples(part):
    return [np.concatenate([tr, te]) for tr, te in zip(part.train, part.test)]


def test_each_user_holds_labels_u_and_u_plus_1(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels"}, seed=0)
    assert part.num_clients == 20 and part.shared == ()
    for u, samples in enumerate(user_samples(part)):
        assert set(np.unique(mnist_like.y[samples])) == {u % 10, (u + 1) % 10}
    assert part.groups["label_set"] == [u % 10 for u in range(20)]


def test_all_pooled_samples_used_once_with_75_25_split(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels"}, seed=1)
    everything = np.concatenate(user_samples(part))
    assert np.array_equal(np.sort(everything), np.arange(70000))  # train + test pooled, each once
    for tr, te in zip(part.train, part.test):
        n = len(tr) + len(te)
        assert len(tr) == int(0.75 * n)  # the generator's train_len = int(0.75 * n)


def test_each_class_is_split_into_four_slots(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels"}, seed=2)
    users = user_samples(part)
    for label in range(10):
        holders = [label, label + 10, (label - 1) % 20, (label + 9) % 20]  # slot 0 of u = l, l+10; slot 1 of u = l-1, l+9
        counts = [np.count_nonzero(mnist_like.y[users[u]] == label) for u in holders]
        assert sum(counts) == 7000 and min(counts) > 0
        first = np.count_nonzero(mnist_like.y[users[label - 1 if label else 0]] == label)  # first slot in (u, j) order
        assert 7000 // 5 <= first < 7000 // 2  # first part drawn from [N/(4+1), N/2)


def test_random_split_sizes_bounds():
    rng = np.random.default_rng(0)
    for total, parts in [(7000, 4), (6903, 20), (10, 3), (1, 2)]:
        sizes = random_split_sizes(total, parts, rng)
        assert len(sizes) == parts and sum(sizes) == total and min(sizes) >= 0
        left = total
        for v in sizes[:-1]:
            assert left // (parts + 1) <= v <= max(left // 2 - 1, left // (parts + 1))
            left -= v


def test_script_sizes_replay_the_label_count_bug():
    class_sizes = [7000] * 10
    slots = _slots(20, 2, 10)
    got = _script_sizes(slots, class_sizes, np.random.default_rng(5), 20, 2)
    rng = np.random.default_rng(5)
    split0, split1 = random_split_sizes(7000, 20, rng), random_split_sizes(7000, 20, rng)  # only classes 0, 1
    assert got == [n for u in range(20) for n in (split0[u], split1[u])]


def test_script_sizes_partition(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels", "sizes": "script"}, seed=0)
    sizes = [len(s) for s in user_samples(part)]
    assert sizes[0] > sizes[19] and sum(sizes) < 70000
    everything = np.concatenate(user_samples(part))
    assert len(np.unique(everything)) == len(everything)


def test_reproducible_per_seed(mnist_like):
    a, b, c = (partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels"}, seed=s) for s in (3, 3, 4))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.test, b.train + b.test))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train))


def test_pfedmt_teams_are_sequential_blocks(mnist_like):
    spec = {"kind": "pfedme_mnist_labels", "teams": {"count": 2, "assign": "sequential"}}
    part = partition_dataset(mnist_like, spec, seed=0)
    assert part.groups["team"] == [0] * 10 + [1] * 10
    assert part.groups["label_set"] == [u % 10 for u in range(20)]


def test_global_test_set_draws_from_training_set(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels", "test_set": "global"}, seed=0)
    assert np.array_equal(np.sort(np.concatenate(part.train)), mnist_like.train_indices())
    assert part.shared == ("test",) and all(np.array_equal(t, mnist_like.test_indices()) for t in part.test)


def test_invalid_options(mnist_like):
    with pytest.raises(ValueError, match="sizes must be"):
        partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels", "sizes": "paper"}, 0)
    with pytest.raises(ValueError, match="num_labels"):
        partition_dataset(mnist_like, {"kind": "pfedme_mnist_labels", "num_labels": 11}, 0)


# ---- PerMFL_1's read_Mnist_data (permfl_mnist), the data of pFedMT Table 1's MNIST columns ----


def by_label(dataset, samples):
    return {int(l): int(n) for l, n in zip(*np.unique(dataset.y[samples], return_counts=True))}


def test_permfl_users_hold_labels_u_and_u_plus_1_starting_with_ten_per_slot(mnist_like):
    part = partition_dataset(mnist_like, {"kind": "permfl_mnist"}, seed=0)
    assert part.num_clients == 20 and part.shared == () and part.val is None
    users = user_samples(part)
    for u, samples in enumerate(users):
        counts = by_label(mnist_like, samples)
        assert set(counts) == {u % 10, (u + 1) % 10} and min(counts.values()) >= 10
    everything = np.concatenate(users)
    assert len(np.unique(everything)) == len(everything)  # no sample twice
    # class 0 (rows 0..5999 of the fixture) is held, in the code's (user, j) order, by slots
    # (0, j=0), (9, j=1), (10, j=0), (19, j=1): their first ten-sample runs are rows 0-9, 10-19, 20-29, 30-39
    for u, rows in [(0, range(0, 10)), (9, range(10, 20)), (10, range(20, 30)), (19, range(30, 40))]:
        assert set(rows) <= set(users[u].tolist())
        assert not set(rows) & set(np.concatenate(users[:u] + users[u + 1:]).tolist())
    assert part.groups["label_set"] == [u % 10 for u in range(20)]


def test_permfl_first_quarter_is_test():
    """Each user's list is shuffled and the first n - int(0.75 n) samples are its test set."""
    y = np.repeat(np.arange(10), 7000).astype(np.int64)
    data = ArrayDataset(np.zeros((len(y), 1), np.float32), y, 10)
    part = partition_dataset(data, {"kind": "permfl_mnist"}, seed=0)
    for tr, te in zip(part.train, part.test):
        n = len(tr) + len(te)
        assert len(te) == n - int(0.75 * n) and not set(tr) & set(te)


def test_permfl_replays_the_readers_seeds_for_user_0(mnist_like):
    """User 0 by the reader's text, with random.seed(5) and np.random.seed(9): labels 0 and 1,
    40 slots (20 users x 2), every class held by 4 slots and 7,000 samples; its extra count for
    label l is 2 (int(P[l, 0, l]) + randint(300, 600)) (doubled: 20 users), P scaled per class to
    7000 - 20; user 0's list is [rows 0-9 of class 0, 0-9 of class 1, extra of 0, extra of 1],
    shuffled, the first quarter test."""
    import random

    p = np.random.RandomState(9).lognormal(0, 2.0, (10, 20, 2))
    p = (7000 - 20) * p / p.sum((1, 2), keepdims=True)
    py = random.Random(5)
    r0, r1 = py.randint(300, 600), py.randint(300, 600)  # slots (0, 0) and (0, 1) come first
    n0, n1 = 2 * (int(p[0, 0, 0]) + r0), 2 * (int(p[1, 0, 1]) + r1)
    assert 40 + n0 < 7000 and 40 + n1 < 7000  # taken: no class has run out after the 4 x 10 first samples
    for _ in range(38):
        py.randint(300, 600)  # the other 38 slots' draws precede the shuffles
    class0, class1 = np.r_[0:6000, 60000:61000], np.r_[6000:12000, 61000:62000]
    listed = list(np.concatenate([class0[:10], class1[:10], class0[40:40 + n0], class1[40:40 + n1]]))
    py.shuffle(listed)
    test_len = len(listed) - int(0.75 * len(listed))
    part = partition_dataset(mnist_like, {"kind": "permfl_mnist"}, seed=3)
    np.testing.assert_array_equal(part.test[0], np.sort(listed[:test_len]))
    np.testing.assert_array_equal(part.train[0], np.sort(listed[test_len:]))


def test_permfl_slot_whose_class_runs_out_keeps_its_ten():
    """Class 3 has exactly 40 samples, 10 for each of its 4 slots: every extra run would pass the
    class's end (40 + n >= 40), so the users holding 3 (users 2, 3, 12, 13) have 10 of it each."""
    sizes = [3000] * 10
    sizes[3] = 40
    y = np.concatenate([np.full(n, l) for l, n in enumerate(sizes)]).astype(np.int64)
    data = ArrayDataset(np.zeros((len(y), 1), np.float32), y, 10)
    users = user_samples(partition_dataset(data, {"kind": "permfl_mnist"}, seed=0))
    for u in (2, 3, 12, 13):
        assert by_label(data, users[u])[3] == 10
    assert sum(by_label(data, s).get(3, 0) for s in users) == 40


def test_permfl_code_seeds_fix_one_partition_run_seeds_vary(mnist_like):
    a, b = (partition_dataset(mnist_like, {"kind": "permfl_mnist"}, seed=s) for s in (0, 1))
    assert all(np.array_equal(x, y) for x, y in zip(a.train + a.test, b.train + b.test))
    c, d = (partition_dataset(mnist_like, {"kind": "permfl_mnist", "seeds": "run"}, seed=s) for s in (0, 1))
    assert not all(np.array_equal(x, y) for x, y in zip(c.train, d.train))


def test_permfl_teams_and_bad_requests(mnist_like):
    spec = {"kind": "permfl_mnist", "teams": {"count": 2, "assign": "sequential"}}
    assert partition_dataset(mnist_like, spec, seed=0).groups["team"] == [0] * 10 + [1] * 10
    with pytest.raises(ValueError, match="num_users must be at least the 10 classes"):
        partition_dataset(mnist_like, {"kind": "permfl_mnist", "num_users": 5}, 0)
    with pytest.raises(ValueError, match="seeds must be"):
        partition_dataset(mnist_like, {"kind": "permfl_mnist", "seeds": "paper"}, 0)
    with pytest.raises(ValueError, match="fixes its own test sets"):
        partition_dataset(mnist_like, {"kind": "permfl_mnist", "test_fraction": 0.25}, 0)
