"""FeMAM's class-structured partitions: cluster-wise ``(c, K)`` and multi-level ``[a, b, c]``.

FeMAM (000, §5.1 and App. C.1 "Data partition Settings"; released code ``loaddata.py``, see
``docs/original_code_notes.md`` §1.2 (b)/(c) and §1.7).  Both schemes fix the test sets themselves
and return a complete :class:`Partition`:

1. the official training set of every class is split into validation and training samples; the
   official test set is the test set.  ``val_ratio: half_test`` (default, the paper, App. C.1: the
   validation set "is set to have the half number of samples as the test set", 45k/5k/10k on
   CIFAR-100, 95k/5k/10k on Tiny ImageNet) takes half as many validation samples per class as the
   class has test samples; a number is the code's fraction of the class's training samples
   (``train2trainval``: 0.1, the same 45k/5k/10k on CIFAR-100 but 90k/10k/10k on Tiny ImageNet);
2. every class is held by a set of clients (those whose clusters contain it);
3. per class, one draw ``p ~ Dir(concentration * 1)`` over its holders (in client-id order) cuts
   the class's train, validation *and* test samples alike (the code seeds the draw with the
   class id; here it comes from the cell's generator, but the same ``p`` serves all three
   splits), so each client's validation/test distribution mirrors its training distribution.

Train, validation and test parts are disjoint across clients (nothing is shared).

The third FeMAM setting, client-wise Dirichlet (§1.2 (a)), is the generic ``dirichlet`` kind
with ``min_size: <num classes>``, ``test_fraction: 1/6`` (CIFAR-100) or ``1/11`` (Tiny),
``val_fraction: 0.1`` (CIFAR-100) or ``0.05`` (Tiny: the paper's 95k/5k/10k) and the default
``test_set: local`` (pooled official train + test); Table C.3's "IID" is the generic ``iid`` kind
with the same fractions (and, as the code's inferred reading, ``dirichlet`` with alpha 10).

Where the paper and the code differ, the paper is the default and the code a named option
(``cluster_sizes: even`` vs ``code``; ``val_ratio: half_test`` vs ``0.1``).
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np
from scipy.ndimage import uniform_filter1d

from fedbench.data.partition import PARTITIONERS, Partition, class_subsample
from fedbench.data.sources import ArrayDataset

#: Table C.1 of the FeMAM paper (a copy of shared/reference/femam_multilevel_structure.csv)
STRUCTURE_TABLE = Path(__file__).resolve().parents[2] / "config" / "femam_multilevel_structure.csv"

CLUSTER_SIZES = ("even", "code")
HALF_TEST = "half_test"
VAL_RATIO = ["[0, 1)", (HALF_TEST,)]  # registered bounds: a fraction (code) or the paper's rule


# --- helpers shared by both schemes ---------------------------------------------------------------


def even_sizes(total: int, parts: int) -> np.ndarray:
    """Paper (App. C.1): "each cluster is then evenly divided" -- sizes differ by at most one."""
    return np.array([len(b) for b in np.array_split(np.arange(total), parts)])


def code_cluster_sizes(num_clients: int, num_clusters: int, rng: np.random.Generator, minimum: int = 2) -> np.ndarray:
    """Released code (``produce_client_by_class(ran=True)``, notes §1.2 (b)): smoothed random shares
    ``uniform_filter1d(U(0,1)^K, size=3)`` scaled to ``num_clients`` and rounded, every size raised to
    ``minimum`` (2), then the sum fixed by decrementing the largest / incrementing the smallest."""
    if num_clients < minimum * num_clusters:
        raise ValueError(f"{num_clusters} clusters of >= {minimum} clients need >= {minimum * num_clusters} clients, got {num_clients}")
    shares = uniform_filter1d(rng.random(num_clusters), size=3)
    sizes = np.maximum(np.round(shares * num_clients / shares.sum()).astype(int), minimum)
    while sizes.sum() > num_clients:
        sizes[np.argmax(sizes)] -= 1
    while sizes.sum() < num_clients:
        sizes[np.argmin(sizes)] += 1
    return sizes


def dirichlet_counts(n: int, p: np.ndarray) -> np.ndarray:
    """The code's ``get_sample`` counts (notes §1.2 (b)): ``round(n * p)``, sum fixed to ``n`` one sample
    at a time (largest -1 / smallest +1), then -- where ``n`` allows -- every holder given >= 1."""
    counts = np.round(n * p).astype(int)
    while counts.sum() > n:
        counts[np.argmax(counts)] -= 1
    while counts.sum() < n:
        counts[np.argmin(counts)] += 1
    while n >= len(p) and counts.min() < 1:
        counts[np.argmax(counts)] -= 1
        counts[np.argmin(counts)] += 1
    return counts


def class_splits(dataset: ArrayDataset, pool: np.ndarray, k: int, rng: np.random.Generator,
                 val_ratio: float | str, test_ratio: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shuffled train, validation and test samples of class ``k``: validation = the first
    ``len(test) // 2`` (``val_ratio: half_test``, paper App. C.1) or ``int(val_ratio * n)`` (code
    ``train2trainval``) of the class's official training samples, test = its official test samples.  Without an official split, ``test_ratio`` of the class is
    held out as test first (our addition, for datasets such as digits)."""
    members = pool[dataset.y[pool] == k]
    if dataset.test_mask is not None:
        official_train = rng.permutation(members[~dataset.test_mask[members]])
        test = rng.permutation(members[dataset.test_mask[members]])
    else:
        shuffled = rng.permutation(members)
        cut = round(test_ratio * len(shuffled))
        test, official_train = shuffled[:cut], shuffled[cut:]
    n_val = len(test) // 2 if val_ratio == HALF_TEST else int(val_ratio * len(official_train))
    return official_train[n_val:], official_train[:n_val], test


def deal_classes(dataset: ArrayDataset, pool: np.ndarray, holders: dict[int, np.ndarray], num_clients: int,
                 rng: np.random.Generator, concentration: float, val_ratio: float | str, test_ratio: float) -> Partition:
    """Cut every held class among its holders (notes §1.2 (b) ``produce_client_by_data``): one
    ``p ~ Dir(concentration)`` per class, applied to its train, val and test splits; contiguous slices
    of each shuffled split go to the holders in client-id order.  Classes nobody holds are unused."""
    parts = {name: [[] for _ in range(num_clients)] for name in ("train", "val", "test")}
    for k, clients in sorted(holders.items()):
        p = rng.dirichlet(np.full(len(clients), float(concentration)))
        for name, samples in zip(("train", "val", "test"), class_splits(dataset, pool, k, rng, val_ratio, test_ratio)):
            bounds = np.cumsum(dirichlet_counts(len(samples), p))[:-1]
            for client, chunk in zip(clients, np.split(samples, bounds)):
                parts[name][client].append(chunk)
    out = {name: [np.sort(np.concatenate(c)) if c else np.zeros(0, np.int64) for c in lists] for name, lists in parts.items()}
    empty = [i for i, t in enumerate(out["train"]) if len(t) == 0]
    if empty:
        raise ValueError(f"client(s) {empty} received no training samples; use fewer clients or a larger dataset")
    return Partition(train=out["train"], test=out["test"], val=out["val"] if val_ratio else None)


def holders_of(client_classes: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Class -> sorted ids of the clients whose class set contains it (code ``class_by_client``)."""
    holders: dict[int, list[int]] = {}
    for client, classes in enumerate(client_classes):
        for k in np.unique(classes):
            holders.setdefault(int(k), []).append(client)
    return {k: np.array(v) for k, v in holders.items()}


def check_common(concentration: float, val_ratio: float | str, test_ratio: float) -> None:
    """Reject parameters no split can honour."""
    if concentration <= 0:
        raise ValueError(f"concentration must be > 0, got {concentration}")
    if val_ratio != HALF_TEST and (isinstance(val_ratio, str) or not 0 <= val_ratio < 1):
        raise ValueError(f"val_ratio must be {HALF_TEST!r} (the paper) or a fraction in [0, 1) (the code: 0.1), got {val_ratio!r}")
    if not 0 < test_ratio < 1:
        raise ValueError(f"test_ratio must be in (0, 1), got {test_ratio}")


# --- cluster-wise (c, K) ----------------------------------------------------------------------------


def refilling_picker(num_classes: int, total: int, rng: np.random.Generator) -> np.ndarray:
    """The code's ``randompicker`` (notes §1.2 (b)): uniform draws without replacement that refill the
    pool when it is empty -- i.e. consecutive random permutations of all classes, cut at ``total``."""
    rounds = -(-total // num_classes)
    return np.concatenate([rng.permutation(num_classes) for _ in range(rounds)])[:total]


@PARTITIONERS.register("femam_cluster", bounds={
    "classes_per_cluster": ">= 1", "num_clusters": ">= 1", "num_clients": ">= 1", "cluster_sizes": CLUSTER_SIZES,
    "concentration": "> 0", "val_ratio": VAL_RATIO, "test_ratio": "(0, 1)",
}, feasible=lambda p, d: None if 1 <= p["classes_per_cluster"] <= d.num_classes <= p["classes_per_cluster"] * p["num_clusters"] else (
    f"needs 1 <= classes_per_cluster <= {d.num_classes} (the dataset's classes) and classes_per_cluster x num_clusters "
    f">= {d.num_classes}, got ({p['classes_per_cluster']}, {p['num_clusters']})"
), sizes=lambda p, d: estimated_sizes(p, d))
def partition_femam_cluster(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    classes_per_cluster: int,
    num_clusters: int = 5,
    num_clients: int = 50,
    cluster_sizes: str = "even",
    concentration: float = 10.0,
    val_ratio: float | str = HALF_TEST,
    test_ratio: float = 1 / 6,
    sample_fraction: float = 1.0,
) -> Partition:
    """FeMAM cluster-wise ``(c, K)`` (§5.1 (I), App. C.1; notes §1.2 (b)): K clusters of c classes each
    (refilling picker: clusters may overlap, a class may repeat inside a cluster, every class is used);
    clients in contiguous blocks per cluster, ``even`` (paper) or ``code`` sizes (random smoothed,
    >= 2); a client's classes = its cluster's; per-class Dir(concentration) among the holders.
    Ground truth ``groups={"cluster": ...}``.  ``sample_fraction`` < 1 uses that fraction of every
    class (:func:`class_subsample`)."""
    check_common(concentration, val_ratio, test_ratio)
    pool = class_subsample(dataset, pool, sample_fraction, rng)
    C = dataset.num_classes
    if not 1 <= classes_per_cluster <= C or classes_per_cluster * num_clusters < C:
        raise ValueError(f"femam_cluster needs 1 <= classes_per_cluster <= {C} and classes_per_cluster * num_clusters >= {C} "
                         f"(the code's check), got ({classes_per_cluster}, {num_clusters})")
    if cluster_sizes == "even":
        if num_clients < num_clusters:
            raise ValueError(f"{num_clusters} clusters need >= {num_clusters} clients, got {num_clients}")
        sizes = even_sizes(num_clients, num_clusters)
    elif cluster_sizes == "code":
        sizes = code_cluster_sizes(num_clients, num_clusters, rng)
    else:
        raise ValueError(f"cluster_sizes must be one of {CLUSTER_SIZES}, got {cluster_sizes!r}")
    cluster_classes = refilling_picker(C, classes_per_cluster * num_clusters, rng).reshape(num_clusters, classes_per_cluster)
    cluster_of = np.repeat(np.arange(num_clusters), sizes)
    part = deal_classes(dataset, pool, holders_of([cluster_classes[g] for g in cluster_of]), num_clients, rng,
                        concentration, val_ratio, test_ratio)
    return Partition(part.train, part.test, part.val, groups={"cluster": cluster_of.tolist()})


# --- multi-level [a, b, c] ------------------------------------------------------------------------


def table_c1_classes(structure: list[int], num_classes: int, table: Path = STRUCTURE_TABLE) -> list[int]:
    """Classes per cluster of every level (top->bottom) for a structure of FeMAM Table C.1, read from
    ``config/femam_multilevel_structure.csv`` (the code's ``*_hierarchical_data.pkl`` entries, notes §1.2 (c))."""
    key = "[" + ",".join(str(int(s)) for s in structure) + "]"
    with open(table, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["structure"].replace(" ", "") == key]
    rows.sort(key=lambda r: int(r["level"]))
    if not rows:
        raise ValueError(f"structure {key} is not in {table.name} (Table C.1); pass classes_per_cluster explicitly")
    classes = [int(r["class_num"]) for r in rows]
    if [int(r["cluster_num"]) for r in rows] != list(structure) or np.dot(classes, structure) != num_classes:
        raise ValueError(f"Table C.1 structure {key} ({rows[0]['dataset']}) does not fit a dataset of {num_classes} classes")
    return classes


def balanced_runs(sizes: np.ndarray, parts: int) -> np.ndarray:
    """Cut the sequence ``sizes`` into ``parts`` contiguous non-empty runs whose sums are as equal as
    possible (least squares, exact dynamic programme); returns the run of every element."""
    cum, n, target = np.r_[0, np.cumsum(sizes)], len(sizes), sizes.sum() / parts
    cost = np.full((parts + 1, n + 1), np.inf)
    cost[0, 0] = 0.0
    start = np.zeros((parts + 1, n + 1), int)  # start[j, i]: first element of run j when j runs cover [0, i)
    for j in range(1, parts + 1):
        for i in range(j, n - parts + j + 1):
            options = cost[j - 1, j - 1:i] + (cum[i] - cum[j - 1:i] - target) ** 2
            start[j, i] = j - 1 + int(np.argmin(options))
            cost[j, i] = options.min()
    ends = [n]
    for j in range(parts, 1, -1):
        ends.insert(0, start[j, ends[0]])
    return np.repeat(np.arange(parts), np.diff(np.r_[0, ends]))


def parent_clusters(num_parents: int, child_sizes: np.ndarray, cluster_sizes: str, rng: np.random.Generator) -> np.ndarray:
    """Parent of every child cluster, siblings contiguous, every parent >= 1 child: ``even`` (paper,
    "evenly divided": parents' client counts as equal as the nesting allows, :func:`balanced_runs`)
    or ``code`` (``generate_hierarchical_data``: one child each, the other children a parent
    uniformly at random, sorted)."""
    if cluster_sizes == "even":
        return balanced_runs(child_sizes, num_parents)
    extra = rng.integers(num_parents, size=len(child_sizes) - num_parents)
    return np.sort(np.concatenate([np.arange(num_parents), extra]))


def multilevel_tree(structure: list[int], num_clients: int, min_clients: int, cluster_sizes: str,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """Cluster id of every client at every level (top->bottom) of a nested tree with contiguous client
    blocks (notes §1.2 (c) steps 1-3).  Bottom clusters get the clients ``even``ly (paper: "each cluster
    is evenly divided", applied at every level) or ``min_clients`` each plus the rest uniformly at random
    (``code``); every upper cluster gets >= 1 cluster of the level below (:func:`parent_clusters`)."""
    bottom = structure[-1]
    if cluster_sizes not in CLUSTER_SIZES:
        raise ValueError(f"cluster_sizes must be one of {CLUSTER_SIZES}, got {cluster_sizes!r}")
    if num_clients < min_clients * bottom:
        raise ValueError(f"{bottom} bottom clusters of >= {min_clients} clients need >= {min_clients * bottom} clients, got {num_clients}")
    if cluster_sizes == "even":
        sizes = even_sizes(num_clients, bottom)
    else:
        sizes = min_clients + np.bincount(rng.integers(bottom, size=num_clients - min_clients * bottom), minlength=bottom)
    levels = [np.repeat(np.arange(bottom), sizes)]
    for up, down in zip(structure[-2::-1], structure[:0:-1]):
        levels.insert(0, parent_clusters(up, np.bincount(levels[0], minlength=down), cluster_sizes, rng)[levels[0]])
    return levels


def _multilevel_feasible(params: dict, facts) -> str | None:
    """Planning-time check (``feasible=`` of the registration): the levels' classes fit the dataset's."""
    try:
        needed = multilevel_classes_needed(params, facts.num_classes)
    except ValueError as error:
        return str(error)
    if needed > facts.num_classes:
        return f"structure {params.get('structure')} needs {needed} classes, the dataset has {facts.num_classes}"
    return None


@PARTITIONERS.register("femam_multilevel", bounds={
    "structure": ">= 1", "classes_per_cluster": ">= 1", "num_clients": ">= 1", "min_clients": ">= 1",
    "cluster_sizes": CLUSTER_SIZES, "concentration": "> 0", "val_ratio": VAL_RATIO, "test_ratio": "(0, 1)",
}, feasible=_multilevel_feasible, sizes=lambda p, d: estimated_sizes(p, d))
def partition_femam_multilevel(
    dataset: ArrayDataset,
    pool: np.ndarray,
    rng: np.random.Generator,
    *,
    structure: list[int],
    classes_per_cluster: list[int] | None = None,
    num_clients: int = 50,
    min_clients: int = 2,
    cluster_sizes: str = "even",
    concentration: float = 10.0,
    val_ratio: float | str = HALF_TEST,
    test_ratio: float = 1 / 6,
    sample_fraction: float = 1.0,
) -> Partition:
    """FeMAM multi-level ``[a, b, c]`` (§5.1 (III), App. C.1, Table C.1; notes §1.2 (c)): a nested tree of
    ``structure[l]`` clusters at level l (top->bottom) over ``num_clients`` clients, >= ``min_clients``
    per bottom cluster; every cluster of every level gets ``classes_per_cluster[l]`` classes drawn
    without replacement from one pool (disjoint across all clusters; default: Table C.1); a client's
    classes = the union of its clusters'; per-class Dir(concentration) among the holders.
    Ground truth ``groups={"level1": ..., "level2": ..., ...}`` (top->bottom).  ``sample_fraction`` < 1
    uses that fraction of every class (:func:`class_subsample`)."""
    check_common(concentration, val_ratio, test_ratio)
    pool = class_subsample(dataset, pool, sample_fraction, rng)
    structure = [int(s) for s in structure]
    if not structure or structure[0] < 1 or any(a > b for a, b in itertools.pairwise(structure)):
        raise ValueError(f"structure must list >= 1 clusters per level, non-decreasing top->bottom, got {structure}")
    if classes_per_cluster is None:
        classes_per_cluster = table_c1_classes(structure, dataset.num_classes)
    if len(classes_per_cluster) != len(structure) or min(classes_per_cluster) < 1:
        raise ValueError(f"classes_per_cluster needs one positive count per level of {structure}, got {classes_per_cluster}")
    if np.dot(structure, classes_per_cluster) > dataset.num_classes:
        raise ValueError(f"structure {structure} x classes {classes_per_cluster} needs more than the {dataset.num_classes} classes")
    levels = multilevel_tree(structure, num_clients, min_clients, cluster_sizes, rng)
    order = iter(rng.permutation(dataset.num_classes))  # one shared pool, drawn level by level, cluster by cluster
    level_classes = [[np.array([next(order) for _ in range(c)]) for _ in range(K)] for K, c in zip(structure, classes_per_cluster)]
    client_classes = [np.concatenate([level_classes[l][levels[l][i]] for l in range(len(structure))]) for i in range(num_clients)]
    part = deal_classes(dataset, pool, holders_of(client_classes), num_clients, rng, concentration, val_ratio, test_ratio)
    groups = {f"level{l + 1}": ids.tolist() for l, ids in enumerate(levels)}
    return Partition(part.train, part.test, part.val, groups=groups)


def estimated_sizes(params: dict, facts) -> tuple[int, int, int] | None:
    """(train, validation, test) samples of a FeMAM partition before it exists, from the dataset's
    registered facts (the cost model's estimate, :func:`fedbench.cost.shape.estimated_shape`): the classes it
    uses (a multi-level structure may use fewer than the dataset has), ``sample_fraction`` of them,
    the official test set as test (else ``test_ratio``), and validation = half the test set
    (``val_ratio: half_test``) or ``val_ratio`` of the official training samples.  Tiny ImageNet at
    the paper's setting: 95,000 / 5,000 / 10,000.  None where the dataset's size is not registered."""
    if facts.num_samples is None:
        return None
    used = facts.num_classes
    if "structure" in params:
        used = min(multilevel_classes_needed(params, facts.num_classes), facts.num_classes)
    samples = facts.num_samples * used / facts.num_classes * params.get("sample_fraction", 1.0)
    share = facts.test_samples / facts.num_samples if facts.test_samples else params.get("test_ratio", 1 / 6)
    test = samples * share
    val_ratio = params.get("val_ratio", HALF_TEST)
    val = test / 2 if val_ratio == HALF_TEST else val_ratio * (samples - test)
    return int(samples - test - val), int(val), int(test)


# --- config-time checks (before any job) ----------------------------------------------------------


def multilevel_classes_needed(entry: dict, num_classes: int) -> int:
    """Classes a ``femam_multilevel`` partition entry uses: sum over levels of clusters x classes per
    cluster (its ``classes_per_cluster``, or Table C.1's for the structure)."""
    structure = [int(s) for s in entry.get("structure", [])]
    classes = entry.get("classes_per_cluster")
    if classes is None:
        classes = table_c1_classes(structure, num_classes)
    if len(classes) != len(structure):
        raise ValueError(f"classes_per_cluster {classes} needs one count per level of structure {structure}")
    return int(np.dot(structure, classes))
