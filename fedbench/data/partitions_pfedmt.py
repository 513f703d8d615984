"""pFedMT's MNIST data: pFedMe's "2 labels per user" generator (code notes §3.1, §3.3).

pFedMT (paper §4: "MNIST in a non-iid manner into two teams, each containing 10 devices",
train:test 3:1) adopts pFedMe's data; ``data/Mnist/generate_niid_20users.py`` of
CharlieDinh/pFedMe pools MNIST's 70,000 images, gives user u the labels (u + j) mod 10 for
j < 2, fills every (user, label) slot with a consecutive run of that class of a random size,
shuffles each user's samples and keeps the first 75% for training.  The teams are the
common ``teams: {count: 2, assign: sequential}`` option (PerMFL ``group_division = 0``).

The per-pixel z-scoring of the generator belongs to the data source, not to the partition.
"""

from __future__ import annotations

import numpy as np

from fedbench.data.partition import PARTITIONERS, ClientSamples
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
