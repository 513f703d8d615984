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
