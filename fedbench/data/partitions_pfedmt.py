"""pFedMT's MNIST data: pFedMe's "2 labels per user" generator (code notes §3.1, §3.3) and
PerMFL_1's ``read_Mnist_data`` (§3.2), the reader behind pFedMT Table 1's MNIST columns.

pFedMT (paper §4: "MNIST in a non-iid manner into two teams, each containing 10 devices",
train:test 3:1) adopts pFedMe's data; ``data/Mnist/generate_niid_20users.py`` of
CharlieDinh/pFedMe pools MNIST's 70,000 images, gives user u the labels (u + j) mod 10 for
j < 2, fills every (user, label) slot with a consecutive run of that class of a random size,
shuffles each user's samples and keeps the first 75% for training.  The teams are the
common ``teams: {count: 2, assign: sequential}`` option (PerMFL ``group_division = 0``).

The per-pixel z-scoring of the generator belongs to the data source, not to the partition.
"""

from __future__ import annotations

import random

import numpy as np

from fedbench.data.partition import PARTITIONERS, ClientSamples, Partition
from fedbench.data.sources import ArrayDataset


def random_split_sizes(total: int, parts: int, rng: np.random.Generator) -> list[int]:
    """pFedMe's ``ram_dom_gen``: ``parts − 1`` times draw v ∈ [⌊T/(parts+1)⌋, ⌊T/2⌋) from what is
    left (T) and take it away; the last part gets the remainder — sizes sum to ``total``."""
    sizes = []
    for _ in range(parts - 1):
        lo, hi = total // (parts + 1), total // 2
        v = int(rng.integers(lo, max(hi, lo + 1)))
        sizes.append(v)
        total -= v
    return sizes + [total]


def _slots(num_users: int, num_labels: int, num_classes: int) -> list[tuple[int, int]]:
    """(user, label) slots in the generator's order: user u holds labels (u + j) mod C, j < num_labels."""
    return [(u, (u + j) % num_classes) for u in range(num_users) for j in range(num_labels)]


def _split_sizes(slots, class_sizes, rng) -> list[int]:
    """Intended reading (every class split at random among the slots holding it, all samples used):
    the i-th slot holding label l gets part i of ``random_split_sizes`` of class l."""
    holders = {l: [k for k, (_, m) in enumerate(slots) if m == l] for l in range(len(class_sizes))}
    sizes = [0] * len(slots)
    for l, ks in holders.items():
        if ks:
            for k, n in zip(ks, random_split_sizes(class_sizes[l], len(ks), rng)):
                sizes[k] = n
    return sizes


def _script_sizes(slots, class_sizes, rng, num_users: int, num_labels: int) -> list[int]:
    """The released script's bookkeeping (CharlieDinh/pFedMe HEAD, after the 2021 fix), replayed:
    it counts label occurrences with ``(u·NUM_USERS + j) mod 10`` — for 20 users only labels 0
    and 1, 20 times each — so only classes 0 and 1 are split (into ``num_users`` parts each by
    ``random_split_sizes``); the parts are interleaved and the k-th slot takes the k-th entry, so
    slot j of user u gets part u of class j's split whatever its own label; a slot whose class
    would run out (``idx + n >= N_l``) gets nothing.  Users 0–9 get thousands of samples, users
    10–19 the small tail, ~15k of the 70k images are used."""
    num_classes = len(class_sizes)
    counted = [(u * num_users + j) % num_classes for u in range(num_users) for j in range(num_labels)]
    _, counts = np.unique(counted, return_counts=True)
    splits = [random_split_sizes(n, int(c), rng) for n, c in zip(class_sizes, counts)]
    if len({len(s) for s in splits}) != 1:
        raise ValueError("sizes: script needs num_users a multiple of the number of classes (pFedMe: 'should be multiple of 10')")
    drawn = [s[i] for i in range(len(splits[0])) for s in splits]
    used = [0] * num_classes
    sizes = []
    for (_, l), n in zip(slots, drawn):
        take = n if used[l] + n < class_sizes[l] else 0
        used[l] += take
        sizes.append(take)
    return sizes


@PARTITIONERS.register("pfedme_mnist_labels", bounds={"num_users": ">= 1", "num_labels": ">= 1", "sizes": ("split", "script")}, feasible=lambda p, d: None if p["num_labels"] <= d.num_classes else f"num_labels {p['num_labels']} exceeds the dataset's {d.num_classes} classes")
def partition_pfedme_mnist_labels(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_users: int = 20,
    num_labels: int = 2,
    sizes: str = "split",
) -> ClientSamples:
    """pFedMe's MNIST generator (notes §3.1) over ``pool`` (all 70,000 images with the default
    ``test_set: local``; keep the default ``test_fraction`` 0.25 for its 75/25 per-user split).

    User u gets labels (u + j) mod C, j < ``num_labels``; each slot is a consecutive run of its
    class in dataset order.  ``sizes``: ``split`` (default: each class is split at random by
    ``random_split_sizes`` among the slots holding it — 4 for 20 users × 2 labels — so every
    sample is used once; the generator's stated intent and the notes' reading) or ``script``
    (the released script's size bookkeeping with its label-count bug, see ``_script_sizes``).
    ``groups["label_set"]``: u mod C (users u and u + C hold the same labels).
    """
    if not 1 <= num_labels <= dataset.num_classes:
        raise ValueError(f"num_labels must be between 1 and {dataset.num_classes}, got {num_labels}")
    labels = dataset.y[pool]
    members = [pool[labels == l] for l in range(dataset.num_classes)]
    slots = _slots(num_users, num_labels, dataset.num_classes)
    class_sizes = [len(m) for m in members]
    if sizes == "split":
        counts = _split_sizes(slots, class_sizes, rng)
    elif sizes == "script":
        counts = _script_sizes(slots, class_sizes, rng, num_users, num_labels)
    else:
        raise ValueError(f"sizes must be 'split' or 'script', got {sizes!r}")
    runs: list[list[np.ndarray]] = [[] for _ in range(num_users)]
    used = [0] * dataset.num_classes
    for (u, l), n in zip(slots, counts):
        runs[u].append(members[l][used[l]:used[l] + n])
        used[l] += n
    clients = [np.sort(np.concatenate(r)) for r in runs]
    small = [u for u, c in enumerate(clients) if len(c) < 2]
    if small:
        raise ValueError(
            f"pfedme_mnist_labels(sizes={sizes!r}) left user(s) {small} with fewer than 2 samples for this seed "
            f"(the script's sizes shrink geometrically); use another seed or sizes: split"
        )
    return ClientSamples(
        clients,
        groups={"label_set": [u % dataset.num_classes for u in range(num_users)]},
    )


# ----------------------------------------------------------------------------- PerMFL's reader

PERMFL_CODE_SEEDS = (5, 9)  # read_Mnist_data: random.seed(5), np.random.seed(9)


def permfl_slot_sizes(
    class_sizes: list[int], num_users: int, num_labels: int, py_rng: random.Random, np_rng: np.random.RandomState
) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """PerMFL_1's ``read_Mnist_data`` sizes (notes §3.2).  Returns the (user, label) slots in the
    code's order, the 10 first samples of each and its extra samples.

    Every slot first takes 10 samples of its class (all slots, in order); then P ~ lognormal(0, 2)
    of shape [C, U, L] is scaled per class to sum to N_l − U, and slot (u, j) of label l draws
    ``extra = int(P[l, u // (U // C), j]) + randint(300, 600)``, doubled when U <= 20, and takes
    it only when ``used_l + extra < N_l`` (strict, as the code), else it keeps its 10 samples.
    ``U // C`` is the code's ``int(NUM_USERS / 10)``: only the first rows of P are ever read."""
    num_classes = len(class_sizes)
    slots = _slots(num_users, num_labels, num_classes)
    used = [0] * num_classes
    for _, l in slots:
        used[l] += 10
    props = np_rng.lognormal(0, 2.0, (num_classes, num_users, num_labels))
    props = (np.asarray(class_sizes, dtype=float) - num_users)[:, None, None] * props / props.sum((1, 2), keepdims=True)
    per_row = num_users // num_classes
    extra = []
    for u, l in slots:
        j = (l - u) % num_classes
        n = int(props[l, u // per_row, j]) + py_rng.randint(300, 600)
        if num_users <= 20:
            n *= 2
        take = n if used[l] + n < class_sizes[l] else 0
        used[l] += take
        extra.append(take)
    return slots, [10] * len(slots), extra


@PARTITIONERS.register(
    "permfl_mnist", bounds={"num_users": ">= 1", "num_labels": ">= 1", "seeds": ("code", "run")},
    feasible=lambda p, d: (
        f"num_labels {p['num_labels']} exceeds the dataset's {d.num_classes} classes" if p["num_labels"] > d.num_classes
        else f"num_users {p['num_users']} is below the dataset's {d.num_classes} classes (the reader indexes its "
             f"proportions by user // (num_users // classes))" if p["num_users"] < d.num_classes else None),
)
def partition_permfl_mnist(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_users: int = 20,
    num_labels: int = 2,
    seeds: str = "code",
) -> Partition:
    """PerMFL_1's ``read_Mnist_data`` (notes §3.2): the data of pFedMT Table 1's MNIST columns.

    ``pool`` in dataset order (all 70,000 images, train then test, with the default
    ``test_set: local``); user u holds labels (u + j) mod C, j < ``num_labels``; each slot is a
    consecutive run of its class (first the 10-sample runs of all slots, then the extra runs),
    sizes by :func:`permfl_slot_sizes`.  Each user's list (its slots' runs in the code's order)
    is shuffled and the **first** ``n − int(0.75 n)`` samples are its test set, the rest train.
    ``seeds``: ``code`` (default: ``random.seed(5)``, ``np.random.seed(9)`` as the reader, so
    every run seed gets the authors' one partition) or ``run`` (both generators seeded from the
    run's seed).  Teams come from the common ``teams`` option (PerMFL ``group_division = 0``:
    ``assign: sequential``); ``groups["label_set"]`` = u mod C.
    """
    if not 1 <= num_labels <= dataset.num_classes:
        raise ValueError(f"num_labels must be between 1 and {dataset.num_classes}, got {num_labels}")
    if num_users < dataset.num_classes:
        raise ValueError(f"num_users must be at least the {dataset.num_classes} classes, got {num_users}")
    if seeds == "code":
        py_seed, np_seed = PERMFL_CODE_SEEDS
    elif seeds == "run":
        py_seed, np_seed = (int(s) for s in rng.integers(2**31, size=2))
    else:
        raise ValueError(f"seeds must be 'code' or 'run', got {seeds!r}")
    py_rng, np_rng = random.Random(py_seed), np.random.RandomState(np_seed)
    labels = dataset.y[pool]
    members = [pool[labels == l] for l in range(dataset.num_classes)]
    holders = np.bincount([l for _, l in _slots(num_users, num_labels, dataset.num_classes)], minlength=dataset.num_classes)
    short = [l for l, m in enumerate(members) if len(m) < 10 * holders[l]]
    if short:
        raise ValueError(f"permfl_mnist: class(es) {short} hold fewer samples than 10 per slot holding them")
    slots, first, extra = permfl_slot_sizes([len(m) for m in members], num_users, num_labels, py_rng, np_rng)
    runs: list[list[np.ndarray]] = [[] for _ in range(num_users)]
    used = [0] * dataset.num_classes
    for sizes in (first, extra):
        for (u, l), n in zip(slots, sizes):
            runs[u].append(members[l][used[l]:used[l] + n])
            used[l] += n
    train, test = [], []
    for r in runs:
        samples = list(np.concatenate(r))
        py_rng.shuffle(samples)  # the code's random.shuffle of the user's (x, y) pairs
        test_len = len(samples) - int(0.75 * len(samples))
        test.append(np.sort(np.asarray(samples[:test_len], dtype=np.int64)))
        train.append(np.sort(np.asarray(samples[test_len:], dtype=np.int64)))
    return Partition(train=train, test=test, groups={"label_set": [u % dataset.num_classes for u in range(num_users)]})
