"""FLT's partitions (Jamali-Rad et al., "Federated Learning with Taskonomy for Non-IID Data").

Every kind here fixes its own test sets, so it returns a complete :class:`Partition`:
clients are contiguous blocks of a cluster (``groups["cluster"]``), train sets come from
the official training set, and each client's test set is **all official test samples of
its cluster's labels** (code notes §4.2 ``cluster_testdata_dict``; clients of one cluster
share one test set, hence ``shared=("test",)``).

* ``flt_scenario1`` — paper §4.2 Scenario 1: M = 100 clients, C = 5 clusters of 2 labels.
* ``flt_scenario2`` — paper §4.2 Scenario 2: 3-label clusters on a ring, neighbours share one label.
* ``flt_structured_femnist`` — paper §4.2 Scenario 4 / App. D.1 Algorithm 4: EMNIST-balanced,
  10 clusters of 5 classes (the last of the 2 remaining classes 45, 46), power-law client sizes.

Scenario 3 (FEMNIST, paper §4.2) needs no kind of its own: it is the generic ``natural``
kind over the LEAF ``femnist`` source — one client per writer, each writer's own LEAF test
split, no ground-truth clusters ("there are no predefined clusters in FEMNIST").  The FLT
code reads only the LEAF files ``all_data_0`` and ``all_data_1`` (~200 writers; paper:
M = 200): ``dataset: {source: femnist, shards: [0, 1]}`` with ``partition: {kind: natural}``.
Participation ρ = 1 (original Scenario 3 config, notes §4.5/§4.7.5) is a federation
setting, not a partition one.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from fedbench.data.partition import PARTITIONERS, Partition
from fedbench.data.sources import ArrayDataset

SAMPLINGS = ("even", "shards")


# ---------------------------------------------------------------------------------------------
# shared helpers


def _flt_feasible(classes_needed):
    """Planning-time check of an FLT partition (``feasible=`` of its registration): an official
    test set, at most one cluster per client, whole clusters for Scenario 4, and the classes the
    scheme needs (``classes_needed(params)``: exactly that many; ``None``: classes_per_cluster fits)."""
    def feasible(p: dict, d) -> str | None:
        if not d.official_test:
            return "FLT partitions need a dataset with an official test set"
        if p["num_clusters"] > p["num_clients"]:
            return f"num_clusters ({p['num_clusters']}) exceeds num_clients ({p['num_clients']})"
        if classes_needed is None:
            if p["num_clients"] % p["num_clusters"]:
                return f"num_clients ({p['num_clients']}) must be a multiple of num_clusters ({p['num_clusters']})"
            if p["classes_per_cluster"] > d.num_classes:
                return f"classes_per_cluster {p['classes_per_cluster']} exceeds the dataset's {d.num_classes} classes"
            return None
        needed = classes_needed(p)
        return None if needed == d.num_classes else f"these parameters need exactly {needed} classes; the dataset has {d.num_classes}"

    return feasible


def _train_pool(dataset: ArrayDataset, pool: np.ndarray, kind: str) -> np.ndarray:
    """The official training samples inside ``pool`` (FLT partitions only the training set)."""
    if dataset.test_mask is None:
        raise ValueError(f"partition kind {kind!r} needs a dataset with an official test set (test_mask)")
    return np.intersect1d(pool, dataset.train_indices())


def _cluster_blocks(num_clients: int, num_clusters: int) -> np.ndarray:
    """Cluster of every client: contiguous near-equal blocks (code: client i in cluster i // (M/C))."""
    if not 1 <= num_clusters <= num_clients:
        raise ValueError(f"need 1 <= num_clusters <= num_clients, got {num_clusters} clusters for {num_clients} clients")
    return np.concatenate([np.full(len(b), c) for c, b in enumerate(np.array_split(np.arange(num_clients), num_clusters))])


def _cluster_test_sets(dataset: ArrayDataset, cluster_labels: list[np.ndarray], clusters: np.ndarray) -> list[np.ndarray]:
    """Each client's test set: every official test sample whose label is one of its cluster's labels."""
    test = dataset.test_indices()
    per_cluster = [test[np.isin(dataset.y[test], labels)] for labels in cluster_labels]
    return [per_cluster[c] for c in clusters]


def _overlaps(parts: list[np.ndarray]) -> bool:
    everything = np.concatenate(parts)
    return len(np.unique(everything)) < len(everything)


def _complete(train: list[np.ndarray], test: list[np.ndarray], clusters: np.ndarray) -> Partition:
    shared = ("test", "train") if _overlaps(train) else ("test",)
    return Partition(train=[np.sort(t) for t in train], test=test, groups={"cluster": clusters.tolist()}, shared=shared)


# ---------------------------------------------------------------------------------------------
# Scenarios 1 and 2: label clusters over MNIST / CIFAR-10


def _even_split(dataset, train_pool, cluster_labels, clusters, rng) -> list[np.ndarray]:
    """Paper reading ("the training data samples will be evenly distributed among these
    clients"): every label's training samples are shuffled and split evenly over all clients
    holding that label; train sets are disjoint and use the whole training set."""
    parts: list[list[np.ndarray]] = [[] for _ in clusters]
    for label in np.unique(np.concatenate(cluster_labels)):
        holders = [k for k, c in enumerate(clusters) if label in cluster_labels[c]]
        members = rng.permutation(train_pool[dataset.y[train_pool] == label])
        for k, chunk in zip(holders, np.array_split(members, len(holders))):
            parts[k].append(chunk)
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]


def _code_shards(dataset, train_pool, cluster_labels, clusters, samples_per_client) -> list[np.ndarray]:
    """The released code (notes §4.2, ``mnist_noniid_cluster``/``cifar_noniid_cluster``): client of
    rank r in its cluster takes positions [r·s, (r+1)·s) of each of its labels' index lists
    (original order), s = ⌊samples_per_client / #labels⌋.  Positions past a label's end read the
    code's padding −1, i.e. the last training image; clients of clusters sharing a label receive
    identical samples of it (Scenario 2)."""
    per_label = {int(l): train_pool[dataset.y[train_pool] == l] for l in np.unique(np.concatenate(cluster_labels))}
    last = train_pool[-1]
    rank = np.zeros(len(clusters), np.int64)
    for c in np.unique(clusters):
        members = np.flatnonzero(clusters == c)
        rank[members] = np.arange(len(members))
    parts = []
    for k, c in enumerate(clusters):
        s = samples_per_client // len(cluster_labels[c])
        positions = np.arange(rank[k] * s, (rank[k] + 1) * s)
        chunks = []
        for label in cluster_labels[c]:
            idx = per_label[int(label)]
            chunks.append(np.where(positions < len(idx), idx[np.minimum(positions, len(idx) - 1)], last))
        parts.append(np.concatenate(chunks))
    return parts


def _label_clusters(dataset, pool, rng, kind, cluster_labels, num_clients, sampling, samples_per_client) -> Partition:
    """Common body of Scenarios 1 and 2 once each cluster's labels are fixed."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"{kind}: sampling must be one of {SAMPLINGS}, got {sampling!r}")
    train_pool = _train_pool(dataset, pool, kind)
    clusters = _cluster_blocks(num_clients, len(cluster_labels))
    if sampling == "even":
        if samples_per_client is not None:
            raise ValueError(f"{kind}: samples_per_client applies to sampling: shards only")
        train = _even_split(dataset, train_pool, cluster_labels, clusters, rng)
    else:
        spc = samples_per_client if samples_per_client is not None else len(train_pool) // num_clients
        train = _code_shards(dataset, train_pool, cluster_labels, clusters, spc)
    if min(len(t) for t in train) == 0:
        raise ValueError(f"{kind}: some client received no training samples; use fewer clients")
    return _complete(train, _cluster_test_sets(dataset, cluster_labels, clusters), clusters)


def _random_labels(dataset: ArrayDataset, rng: np.random.Generator, needed: int, kind: str) -> np.ndarray:
    """``np.random.permutation(10)`` of the code (cluster_array / lst), over the dataset's classes."""
    if dataset.num_classes != needed:
        raise ValueError(f"{kind} with these parameters needs {needed} classes, the dataset has {dataset.num_classes}")
    return rng.permutation(dataset.num_classes)


@PARTITIONERS.register("flt_scenario1", bounds={"num_clients": ">= 1", "num_clusters": ">= 1", "labels_per_cluster": ">= 1", "sampling": SAMPLINGS, "samples_per_client": ">= 1"}, feasible=_flt_feasible(lambda p: p["num_clusters"] * p["labels_per_cluster"]))
def partition_flt_scenario1(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_clients: int = 100,
    num_clusters: int = 5,
    labels_per_cluster: int = 2,
    sampling: str = "even",
    samples_per_client: int | None = None,
) -> Partition:
    """FLT Scenario 1 (paper §4.2; notes §4.2): a random permutation of the classes is cut into
    ``num_clusters`` disjoint groups of ``labels_per_cluster`` labels (needs exactly
    num_clusters × labels_per_cluster classes); clients are contiguous blocks of M/C per cluster.

    ``sampling``: ``even`` (default, paper: all training data evenly distributed, 600 per client on
    MNIST at 6,000 per class; disjoint) or ``shards`` (the code's fixed positions, ⌊60000/100⌋/2 =
    300 per label, ``samples_per_client`` overrides 600/500; MNIST classes under 6,000 images
    make the last clients repeat the last training image — then ``shared`` includes ``train``).
    """
    perm = _random_labels(dataset, rng, num_clusters * labels_per_cluster, "flt_scenario1")
    cluster_labels = [perm[c * labels_per_cluster:(c + 1) * labels_per_cluster] for c in range(num_clusters)]
    return _label_clusters(dataset, pool, rng, "flt_scenario1", cluster_labels, num_clients, sampling, samples_per_client)


@PARTITIONERS.register("flt_scenario2", bounds={"num_clients": ">= 1", "num_clusters": ">= 1", "sampling": SAMPLINGS, "samples_per_client": ">= 1"}, feasible=_flt_feasible(lambda p: 2 * p["num_clusters"]))
def partition_flt_scenario2(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_clients: int = 100,
    num_clusters: int = 5,
    sampling: str = "even",
    samples_per_client: int | None = None,
) -> Partition:
    """FLT Scenario 2 (paper §4.2; notes §4.2): ring of 3-label clusters over a random permutation
    l of the 2C classes: cluster c holds l[2c], l[2c+1], l[2c+2 mod 2C], so clusters c and c+1
    (cyclically) share exactly one label and the others none.

    ``sampling``: ``even`` (default; each label's samples split evenly over the clients of the
    clusters holding it — disjoint train sets of 150 + 300 + 150 = 600 on MNIST at 6,000 per
    class) or ``shards`` (the code: ⌊600/3⌋ = 200 per label at fixed positions, so clients of two
    neighbouring clusters receive *identical* samples of their shared label; ``shared``
    includes ``train``).
    """
    perm = _random_labels(dataset, rng, 2 * num_clusters, "flt_scenario2")
    cluster_labels = [perm[[2 * c, 2 * c + 1, (2 * c + 2) % (2 * num_clusters)]] for c in range(num_clusters)]
    return _label_clusters(dataset, pool, rng, "flt_scenario2", cluster_labels, num_clients, sampling, samples_per_client)


# ---------------------------------------------------------------------------------------------
# Scenario 4: Structured Non-IID FEMNIST


def power_law_beta(total: int, num_clients: int, alpha: float, delta: float) -> float:
    """β with Σ_{m=1..M} (α + e^{β m^δ}) = total (App. D.1 Algorithm 4 line 3; the code solves the
    same equation with ``scipy.optimize.fsolve``).  Solved in log space, so no overflow."""
    target = total - num_clients * alpha
    if target <= 0:
        raise ValueError(f"power law: {num_clients} clients x alpha={alpha} already exceed the {total} samples")
    powers = np.arange(1, num_clients + 1, dtype=np.float64) ** delta
    lo, hi = min(0.0, np.log(target / num_clients)) - 1.0, abs(np.log(target)) + 1.0
    return brentq(lambda b: logsumexp(b * powers) - np.log(target), lo, hi, xtol=1e-15, rtol=1e-14)


def power_law_sizes(total: int, num_clients: int, alpha: int, delta: float, rounding: str = "paper") -> np.ndarray:
    """Client sizes n_m = α + e^{β m^δ} summing to ``total``.

    ``paper``: floors plus the deficit one by one to the largest remainders, listed largest
    first — non-increasing and ≥ α.  ``code``: ⌊α + e^{β m^δ}⌋ for m = 1..M in that order, the
    whole rounding deficit added to the first client (notes §4.2: M = 2400 gives 26…259, first 124).
    """
    beta = power_law_beta(total, num_clients, alpha, delta)
    raw = alpha + np.exp(beta * np.arange(1, num_clients + 1, dtype=np.float64) ** delta)
    sizes = np.floor(raw).astype(np.int64)
    deficit = int(total - sizes.sum())  # in [0, M) up to float error in Σ raw
    if rounding == "paper" and deficit < 0:
        sizes[np.argsort(raw - sizes, kind="stable")[:-deficit]] -= 1
        deficit = 0
    if rounding == "code":
        sizes[0] += deficit
    elif rounding == "paper":
        order = np.argsort(-(raw - sizes), kind="stable")
        sizes[order[:deficit]] += 1
        sizes = np.sort(sizes)[::-1].copy()
    else:
        raise ValueError(f"sizes must be 'paper' or 'code', got {rounding!r}")
    if sizes.min() < 1 or sizes.sum() != total:
        raise ValueError(f"power law gave sizes {sizes.min()}..{sizes.max()} summing to {sizes.sum()} for {total} samples")
    return sizes


def _femnist_cluster_labels(num_classes: int, num_clusters: int, classes_per_cluster: int, order: np.ndarray) -> list[np.ndarray]:
    """Cluster c < C−1 gets classes [c·k, (c+1)·k) of ``order``; the last gets the remaining
    (EMNIST balanced: 9 × 5 + the 2 classes 45, 46 = 47; code: ``np.arange``, paper §4.2)."""
    if not (num_clusters - 1) * classes_per_cluster < num_classes <= num_clusters * classes_per_cluster:
        raise ValueError(
            f"{num_classes} classes do not fill {num_clusters} clusters of up to {classes_per_cluster} classes "
            f"(need (C-1)·k < classes <= C·k)"
        )
    return [order[c * classes_per_cluster:(c + 1) * classes_per_cluster] for c in range(num_clusters)]


@PARTITIONERS.register("flt_structured_femnist", bounds={
    "num_clients": ">= 1", "num_clusters": ">= 1", "classes_per_cluster": ">= 1", "alpha": ">= 0", "delta": "> 0", "sizes": ("paper", "code"),
}, feasible=_flt_feasible(None))
def partition_flt_structured_femnist(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    num_clients: int,
    num_clusters: int = 10,
    classes_per_cluster: int = 5,
    alpha: int | None = None,
    delta: float = 2.0,
    sizes: str = "paper",
    shuffle_labels: bool = False,
    pad_test_labels: bool = False,
) -> Partition:
    """FLT Scenario 4, Structured Non-IID FEMNIST (paper §4.2, App. D.1 Algorithm 4; notes §4.2
    ``emnist_noniid_cluster``), over EMNIST balanced (47 classes, 2,400 train per class).

    Clusters of ``classes_per_cluster`` classes in class order (``shuffle_labels``: a random
    order instead); the last cluster holds the remaining classes (EMNIST: 45, 46 → 4,800
    samples vs 12,000).  Each cluster has M/C clients (``num_clients`` must be a multiple of
    C; paper: 2400 for MLP, 600 for CNN; Fig. 6: 240).  Per cluster: its training samples are
    shuffled and cut into consecutive slices of power-law sizes n_m = α + e^{β m^δ} with β solved
    so they sum to the cluster's data (``power_law_sizes``; ``sizes``: ``paper`` = non-increasing,
    ``code`` = the code's order and rounding).  ``alpha`` None: the code's ⌊|D_c| / (2 M_c)⌋ per
    cluster; δ = 2 as hard-coded in the code.  ``pad_test_labels``: reproduce the code's quirk
    that the short last cluster's padded label row adds class 0 to its clients' test sets.
    """
    if num_clients % num_clusters:
        raise ValueError(f"flt_structured_femnist: num_clients ({num_clients}) must be a multiple of num_clusters ({num_clusters})")
    train_pool = _train_pool(dataset, pool, "flt_structured_femnist")
    order = rng.permutation(dataset.num_classes) if shuffle_labels else np.arange(dataset.num_classes)
    cluster_labels = _femnist_cluster_labels(dataset.num_classes, num_clusters, classes_per_cluster, order)
    per_cluster = num_clients // num_clusters
    train: list[np.ndarray] = []
    for labels in cluster_labels:
        members = rng.permutation(train_pool[np.isin(dataset.y[train_pool], labels)])
        a = len(members) // (2 * per_cluster) if alpha is None else alpha
        cuts = np.cumsum(power_law_sizes(len(members), per_cluster, a, delta, sizes))[:-1]
        train.extend(np.split(members, cuts))
    clusters = np.repeat(np.arange(num_clusters), per_cluster)
    test_labels = list(cluster_labels)
    if pad_test_labels and len(test_labels[-1]) < classes_per_cluster:
        test_labels[-1] = np.union1d(test_labels[-1], [0])
    return _complete(train, _cluster_test_sets(dataset, test_labels, clusters), clusters)
