"""FCR: FLT's one-off "Form Client Relatedness" step (Jamali-Rad et al., Algorithm 2).

Pipeline (paper Section 3, "Learning client (task) relatedness"; Algorithm 2 lines 8-21):

1. client side: ``M_m = kMEANS(E_m)``, k centres of the client's encoder embeddings E_m
   (:func:`client_centres`, lines 8-12);
2. server side: ``Z = UMAP(M)`` of all M*k centres jointly (:func:`embed_centres`, line 16);
3. ``A_ij`` = a distance between the embedded centre sets Z_i and Z_j
   (:func:`client_distances`, line 17);
4. ``Ã = Γ(A)`` hard threshold (:func:`threshold_adjacency`, line 19);
5. optional ``C = HC(Ã)`` hierarchical clustering into C disjoint clusters
   (:func:`hierarchical_clusters`, line 21).

:func:`fcr` ties them together; :func:`relatedness` runs steps 3-5 on any signatures (the
PCA+kM+HC baseline's, from :func:`pca_signatures`, skips the encoder and UMAP).

Fidelity: paper default vs the authors' code (notes §4.4, §4.7 of
``docs/original_code_notes.md``), all selectable:

* k: paper k = 5 (default); the code uses k = #labels of the client's ground-truth cluster
  (2 or 3 for MNIST/CIFAR Scenarios 1/2, 5 for (E/FE)MNIST) — pass ``k`` accordingly.
* distance: paper ``A_ij = min_{r,s} ||u_ir - u_js||_2`` (``distance="min"``, default); code
  ``min_matching_distance``: the best one-to-one matching of the centres,
  ``min_p sqrt(sum_r ||u_ir - u_j,p(r)||^2) / k`` (``distance="matching"``), see
  :func:`client_distances`.
* threshold: Ã_ij = 1 iff A_ij < γ, diagonal 1; code γ = 1 (FLT), 1.2 (PCA baseline); the
  paper leaves γ tuned per setting.
* HC: both paper (``HC(Ã)``) and code (``linkage(A, 'ward')`` with the rows of the thresholded
  0/1 matrix as Euclidean feature vectors, then ``fcluster(maxclust=C)``) cluster Ã, not the
  raw distances — default ``hc_on="adjacency_rows"``; ``"distances"`` (Ward on the condensed
  distance matrix) is offered as an alternative.
* seeds: code KMeans ``random_state=43``, UMAP ``random_state=42`` (used when ``seed=None``).
* UMAP: code ``UMAP(n_components=2, random_state=42).fit(all centres)`` then
  ``transform(centres_m)`` per client; default here is ``fit_transform`` (the fitted
  embedding itself, cheaper and exact for the training points), ``umap_transform=True``
  reproduces the code's extra transform.  The code stacks the centres in a shuffled client
  order before fitting (``idxs_users = np.random.choice(M, M, replace=False)``);
  ``umap_order=code_client_order(M)`` replays that order, default client order 0..M-1.
* k-means restarts: ``n_init=10`` (scikit-learn's default when the code was written; today's
  default is ``"auto"``, one k-means++ run).

Cost: UMAP's first call in a process JIT-compiles numba kernels (~20-40 s on a 2-core
machine); later calls are fast.  umap-learn does not ask numba to keep them on disk; where a
numba cache directory is set (``NUMBA_CACHE_DIR``, which the workflow sets for its jobs) they are
kept there and loaded by later processes instead of compiled (:func:`cache_umap_kernels`).  Distances are computed in row blocks with ``cdist`` on all
M*k points (memory ``block * k * M * k`` floats), ``"matching"`` by a vectorised exact
bitmask DP (O(M^2 k 2^k)).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.cluster.hierarchy import cut_tree, fcluster
from scipy.cluster.hierarchy import linkage as scipy_linkage
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist, squareform
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA

from fedbench.util.threads import torch_threads_kept

CODE_KMEANS_SEED = 43  # notes §4.1: client KMeans random_state
CODE_UMAP_SEED = 42  # notes §4.1: UMAP random_state
CODE_NUMPY_SEED = 321  # notes §4.1: the original main_fed.py's np.random.seed(321)
MAX_DP_K = 12  # above this, "matching" falls back to per-pair Hungarian


@dataclass
class FCRResult:
    """Outputs of :func:`fcr` / :func:`relatedness`.

    centres: [M, k, e] client k-means centres (the signatures M_m);
    centres_2d: [M, k, u] their UMAP embedding Z (None for signatures not embedded);
    distances: [M, M] A (symmetric, zero diagonal); adjacency: [M, M] 0/1 Ã with diag 1;
    clusters: [M] 0-based HC labels; linkage: scipy linkage matrix [M-1, 4];
    params: the settings used.
    """

    centres: np.ndarray
    centres_2d: np.ndarray | None
    distances: np.ndarray
    adjacency: np.ndarray
    clusters: np.ndarray
    linkage: np.ndarray
    params: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- client side


def _client_rows(x) -> np.ndarray:
    """One client's samples as float64 rows [n, features]; an empty client is an error (checked before the
    reshape, which cannot infer the width of zero rows)."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("a client has no samples")
    return x.reshape(len(x), -1)


def _kmeans_centres(x: np.ndarray, k: int, seed: int, n_init: int | str) -> np.ndarray:
    x = _client_rows(x)
    if len(x) <= k:
        # Fewer samples than centres: the samples themselves are the centres, repeated
        # cyclically up to k (the code repeats data the same way for its PCA baseline).
        # Duplicated centres change neither the "min" distance nor (being exact copies)
        # the set of embedded points' spread much.
        return x[np.arange(k) % len(x)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate points -> "fewer distinct clusters" warning
        km = KMeans(n_clusters=k, random_state=seed, n_init=n_init).fit(x)
    return km.cluster_centers_


def client_centres(
    embeddings: list[np.ndarray], k: int = 5, seed: int = CODE_KMEANS_SEED, n_init: int | str = 10
) -> np.ndarray:
    """Per-client k-means centres, ``M_m = kMEANS(E_m)`` (Algorithm 2, lines 10-11).

    ``embeddings[m]``: [n_m, e] samples of client m (further dims are flattened).  Returns
    [M, k, e] float64.  scikit-learn ``KMeans(k, random_state=seed, n_init=n_init)``; the
    authors' code used ``random_state=43`` and the then-default ``n_init=10`` (notes §4.1,
    §4.4).  A client with n_m <= k samples gets its samples as centres, repeated cyclically
    to k rows (no k-means), so every client sends exactly k vectors.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    return np.stack([_kmeans_centres(e, k, seed, n_init) for e in embeddings])


def pca_signatures(
    client_features: list[np.ndarray],
    n_components: int = 128,
    k: int = 5,
    seed: int = CODE_KMEANS_SEED,
    fit: str = "client",
    n_init: int | str = 10,
) -> np.ndarray:
    """Signatures of the PCA+kM+HC baseline: PCA then k-means centres, no encoder, no UMAP.

    The paper (Section 4 baselines, Appendix A) calls it "client-side PCA followed by kMEANS"
    and blames "the client-side linear dimensionality reduction"; the code (notes §4.4,
    ``clustering_method: kmeans``) fits ``PCA(n_components=latent_dim=128)`` **on each
    client's own data** — repeating the data when it has fewer rows than ``n_components`` —
    and ``KMeans(5, random_state=43)`` in that client's PCA space.  ``fit="client"`` (default)
    does exactly that; note the clients' PCA bases are then not aligned with one another
    (each has its own rotation/sign), which is part of why the baseline clusters poorly.
    ``fit="pooled"`` fits one PCA on all clients' data (a non-federated diagnostic).

    ``n_components`` is clipped to the feature dimension.  Returns [M, k, n_components].
    """
    feats = [_client_rows(f) for f in client_features]
    d = feats[0].shape[1]
    q = min(n_components, d)
    if fit == "pooled":
        pca = PCA(n_components=q, random_state=seed).fit(np.concatenate(feats))
        projected = [pca.transform(f) for f in feats]
    elif fit == "client":
        projected = []
        for f in feats:
            if len(f) < q:
                f = f[np.arange(q) % len(f)]  # the code repeats the data up to n_components rows
            projected.append(PCA(n_components=q, random_state=seed).fit_transform(f))
    else:
        raise ValueError(f"fit must be 'client' or 'pooled', not {fit!r}")
    return np.stack([_kmeans_centres(p, k, seed, n_init) for p in projected])


# --------------------------------------------------------------------------- server side


def code_client_order(num_clients: int) -> np.ndarray:
    """The client order in which the released code (hjraad/FLT da09bfd, ``base_fed_learning``) stacks
    the clients' centres before fitting UMAP, replayed from its global numpy stream:
    ``main_fed.py`` seeds ``np.random.seed(321)``, ``gen_cluster`` draws the clusters' labels with
    ``np.random.choice(10, 10, replace=False)`` (MNIST/CIFAR-10 Scenarios 1 and 2; nothing else
    draws from numpy before the relatedness step there), and ``clustering_umap_central`` draws
    ``idxs_users = np.random.choice(num_users, num_users, replace=False)``.  Other datasets of the
    code (EMNIST's shuffled blocks, FEMNIST) draw differently before it, so there this is a fixed
    shuffled order, not the code's exact one."""
    rs = np.random.RandomState(CODE_NUMPY_SEED)
    rs.choice(10, 10, replace=False)  # gen_cluster's labels
    return rs.choice(num_clients, num_clients, replace=False)


_UMAP_CACHED = False


def cache_umap_kernels() -> bool:
    """Have numba keep umap-learn's compiled kernels in its cache directory (``NUMBA_CACHE_DIR``) and load
    them from there in later processes: UMAP's first call in a process otherwise compiles them again
    (measured: 16-18 CPU s for ``fit_transform`` on 500 centres, 8 more for the code's per-client
    ``transform``; 1 and 2 s with the cache, reports/performance.md).  umap-learn's functions are
    ``numba.njit`` without ``cache=True``; this turns numba's own file cache on for every compiled
    function of the loaded ``umap`` modules (``Dispatcher.enable_caching``, what ``cache=True`` does),
    before any of them compiles.  The cached machine code is what the compilation produced, so UMAP
    computes the same numbers (tests/test_fcr.py runs it twice in fresh processes).  Only where a
    cache directory is set, so that nothing is written beside umap-learn's installed sources; returns
    whether caching is on."""
    global _UMAP_CACHED
    import sys

    import numba

    if _UMAP_CACHED or not numba.config.CACHE_DIR:
        return _UMAP_CACHED
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "umap" or name.startswith("umap.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher) and isinstance(value._cache, NullCache):
                try:
                    value.enable_caching()
                except RuntimeError:  # numba cannot place this function's cache: it compiles as before
                    pass
    _UMAP_CACHED = True
    return True


def embed_centres(
    centres: np.ndarray,
    n_neighbors: int = 15,
    min_dist: float = 0.1,
    metric: str = "euclidean",
    seed: int | None = CODE_UMAP_SEED,
    n_components: int = 2,
    transform: bool = False,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """``Z = UMAP(M)``: UMAP of all M*k centres jointly (Algorithm 2, line 16).

    ``centres``: [M, k, e]; returns [M, k, n_components] (u = 2 as the paper and code).
    umap-learn defaults as the code (n_neighbors 15, min_dist 0.1, random_state 42; a fixed
    seed makes UMAP single-threaded and deterministic).  ``n_neighbors`` is clipped to
    M*k - 1.  ``transform=True`` mimics the code: ``fit`` on all centres, then ``transform`` of
    each client's centres on their own (one ``transform`` of all of them would return the fitted
    embedding: umap-learn recognises its training data).  ``order``: a permutation of the clients,
    the order in which their centres are stacked for the fit (the code's: :func:`code_client_order`);
    None: 0..M-1.  The result is in client order either way.  The first UMAP call of a process
    compiles numba code (~20-40 s; see :func:`cache_umap_kernels`).
    """
    centres = np.asarray(centres, dtype=np.float64)
    m, k, e = centres.shape
    order = np.arange(m) if order is None else np.asarray(order)
    if sorted(order.tolist()) != list(range(m)):
        raise ValueError(f"order must be a permutation of the {m} clients")
    x = centres[order].reshape(m * k, e)
    # numba's OpenMP layer, started by UMAP's first parallel kernel, resets the OpenMP thread count
    # that torch's CPU pool reads (fedbench/util/threads.py); keep the training's thread count.
    with torch_threads_kept():
        import umap  # imported lazily: importing umap-learn is slow (numba)

        cache_umap_kernels()
        reducer = umap.UMAP(
            n_neighbors=max(2, min(n_neighbors, len(x) - 1)), min_dist=min_dist, metric=metric,
            n_components=n_components, random_state=seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # n_jobs overridden by random_state, small-data notices
            if transform:
                reducer.fit(x)
                z = np.stack([reducer.transform(c) for c in centres])
            else:
                z = np.empty((m, k, n_components))
                z[order] = reducer.fit_transform(x).reshape(m, k, n_components)
    return np.asarray(z, dtype=np.float64).reshape(m, k, n_components)


def _matching_dp(cost: np.ndarray) -> np.ndarray:
    """Exact min over one-to-one assignments of sum_r cost[..., r, p(r)], vectorised over the
    leading axes: bitmask DP f[S] = min_{s in S} f[S - s] + cost[..., |S|-1, s]."""
    k = cost.shape[-1]
    f = np.empty((1 << k,) + cost.shape[:-2], dtype=cost.dtype)
    f[0] = 0.0
    for mask in range(1, 1 << k):
        r = mask.bit_count() - 1
        best = None
        for s in range(k):
            if mask >> s & 1:
                cand = f[mask ^ (1 << s)] + cost[..., r, s]
                best = cand if best is None else np.minimum(best, cand, out=best)
        f[mask] = best
    return f[-1]


def client_distances(points: np.ndarray, how: str = "min", block_bytes: int = 64 << 20) -> np.ndarray:
    """``A``: [M, M] distances between the clients' point sets (Algorithm 2, line 17).

    ``points``: [M, k, d] (UMAP-embedded centres, or raw centres/PCA signatures).

    * ``how="min"`` (paper): ``A_ij = min_{r,s} ||u_ir - u_js||_2``.
    * ``how="matching"`` (authors' code, ``min_matching_distance``, notes §4.4/§4.7.1): the
      minimum over permutations p of the (larger) centre set of
      ``sqrt(sum_r ||u_ir - u_j,p(r)||^2) / |small set|``; here both sets have k elements, so
      ``A_ij = sqrt(min_p sum_r ||u_ir - u_j,p(r)||^2) / k`` — a linear assignment on the
      squared Euclidean costs.  The code enumerates the k! permutations per pair in Python;
      here an exact bitmask DP runs vectorised over all pairs of a row block
      (O(M^2 k 2^k) array work, ~M^2*80 adds for k = 5).  For k > 12 it falls back to
      ``scipy.optimize.linear_sum_assignment`` per pair (O(M^2) Python calls; slow).

    Both are computed from one ``cdist(..., 'sqeuclidean')`` per block of client rows over all
    M*k points, reshaped to [b, k, M, k].  Returned symmetric with an exactly zero diagonal.
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 3:
        raise ValueError("points must be [M, k, d]")
    m, k, d = pts.shape
    flat = pts.reshape(m * k, d)
    per_row = 8 * k * m * k * (1 + ((1 << k) if how == "matching" else 0) / k)
    block = int(max(1, min(m, block_bytes // max(per_row, 1))))
    out = np.empty((m, m))
    for start in range(0, m, block):
        stop = min(m, start + block)
        sq = cdist(flat[start * k : stop * k], flat, "sqeuclidean").reshape(stop - start, k, m, k)
        if how == "min":
            out[start:stop] = np.sqrt(sq.min(axis=(1, 3)))
        elif how == "matching":
            cost = sq.transpose(0, 2, 1, 3)  # [b, M, r, s]
            if k <= MAX_DP_K:
                best = _matching_dp(np.ascontiguousarray(cost))
            else:
                best = np.empty((stop - start, m))
                for a in range(stop - start):
                    for b in range(m):
                        rr, cc = linear_sum_assignment(cost[a, b])
                        best[a, b] = cost[a, b][rr, cc].sum()
            out[start:stop] = np.sqrt(np.maximum(best, 0.0)) / k
        else:
            raise ValueError(f"how must be 'min' or 'matching', not {how!r}")
    out = 0.5 * (out + out.T)
    np.fill_diagonal(out, 0.0)
    return out


def threshold_adjacency(distances: np.ndarray, gamma: float) -> np.ndarray:
    """``Ã = Γ(A)`` (Algorithm 2, line 19): Ã_ij = 1 iff A_ij < γ, with self-loops Ã_ii = 1.

    The paper writes ``Sign(A_ij - γ)``; read literally that is ±1 and +1 for *far* pairs, so
    we follow the intent and the code (``A[i,j] = 1 if d(i,j) < γ else 0``, strict ``<``).
    Returns int64 0/1.
    """
    a = (np.asarray(distances) < gamma).astype(np.int64)
    np.fill_diagonal(a, 1)
    return a


def _auto_num_clusters(z: np.ndarray) -> int:
    """Largest gap in the merge heights: cut between the two consecutive merges with the
    biggest height difference.  With M-1 merges, cutting after merge i leaves M-1-i clusters,
    so this returns a C in [2, M-1] (M >= 3); M <= 2 gives M clusters."""
    n = len(z) + 1
    if n <= 2:
        return n
    heights = np.sort(z[:, 2])
    i = int(np.argmax(np.diff(heights)))
    return n - 1 - i


def hierarchical_clusters(
    matrix: np.ndarray,
    num_clusters: int | None = None,
    *,
    on: str = "distances",
    method: str = "ward",
) -> tuple[np.ndarray, np.ndarray]:
    """HC into C disjoint clusters (Algorithm 2, line 21); returns ``(labels [M] 0-based, linkage)``.

    ``on="distances"`` (default): ``matrix`` is a symmetric distance matrix A, Ward linkage on
    its condensed form.  ``on="rows"``: every row of ``matrix`` is a feature vector (Ward,
    Euclidean) — what the authors' code does with the thresholded Ã (notes §4.4), and what
    :func:`fcr` uses by default.  Labels come from ``fcluster(criterion='maxclust', t=C)``;
    when tied merge heights make that return fewer than C clusters, ``cut_tree`` on the same
    linkage is used instead, so there are always exactly C clusters (1 <= C <= M).
    ``num_clusters=None``: C chosen by the largest gap in the merge heights (the paper only
    says HC "proposes the best fitting number of clusters"; see ``_auto_num_clusters``).
    """
    x = np.asarray(matrix, dtype=np.float64)
    m = len(x)
    if m == 1:
        return np.zeros(1, dtype=np.int64), np.empty((0, 4))
    if on == "distances":
        z = scipy_linkage(squareform(x, checks=False), method=method)
    elif on == "rows":
        z = scipy_linkage(x, method=method, metric="euclidean")
    else:
        raise ValueError(f"on must be 'distances' or 'rows', not {on!r}")
    c = _auto_num_clusters(z) if num_clusters is None else int(num_clusters)
    return cut_linkage(z, c), z


def cut_linkage(z: np.ndarray, num_clusters: int) -> np.ndarray:
    """0-based labels of exactly ``num_clusters`` clusters from a scipy linkage ``z`` of M points:
    ``fcluster(criterion='maxclust')``, or ``cut_tree`` where tied merge heights make fcluster return
    fewer (what :func:`hierarchical_clusters` returns for that C; also the planted-C cut the
    pipeline scores beside HC's own C)."""
    m = len(z) + 1
    c = int(num_clusters)
    if not 1 <= c <= m:
        raise ValueError(f"num_clusters must be in [1, {m}], got {c}")
    if m == 1:
        return np.zeros(1, dtype=np.int64)
    labels = fcluster(z, t=c, criterion="maxclust")
    if len(np.unique(labels)) != c:
        labels = cut_tree(z, n_clusters=c).ravel()
    _, labels = np.unique(labels, return_inverse=True)
    return labels.astype(np.int64)


# --------------------------------------------------------------------------- end to end


def relatedness(
    points: np.ndarray,
    *,
    gamma: float = 1.0,
    distance: str = "min",
    num_clusters: int | None = None,
    hc_on: str = "adjacency_rows",
    centres: np.ndarray | None = None,
) -> FCRResult:
    """Steps 3-5 of FCR on signatures ``points`` [M, k, d]: A, Ã = Γ(A), HC.

    ``hc_on``: ``"adjacency_rows"`` (paper HC(Ã) as the code does it: Ward on the rows of Ã)
    or ``"distances"`` (Ward on condensed A).  For PCA+kM+HC as the code:
    ``relatedness(pca_signatures(x), gamma=1.2, distance="matching", num_clusters=3)``.
    """
    dist = client_distances(points, how=distance)
    adj = threshold_adjacency(dist, gamma)
    if hc_on == "adjacency_rows":
        labels, z = hierarchical_clusters(adj, num_clusters, on="rows")
    elif hc_on == "distances":
        labels, z = hierarchical_clusters(dist, num_clusters, on="distances")
    else:
        raise ValueError(f"hc_on must be 'adjacency_rows' or 'distances', not {hc_on!r}")
    return FCRResult(
        centres=points if centres is None else centres, centres_2d=None, distances=dist,
        adjacency=adj, clusters=labels, linkage=z,
        params={"gamma": gamma, "distance": distance, "num_clusters": num_clusters, "hc_on": hc_on},
    )


def fcr(
    embeddings: list[np.ndarray],
    *,
    k: int = 5,
    gamma: float = 1.0,
    distance: str = "min",
    n_neighbors: int = 15,
    min_dist: float = 0.1,
    metric: str = "euclidean",
    n_components: int = 2,
    umap_transform: bool = False,
    umap_order: np.ndarray | None = None,
    num_clusters: int | None = None,
    hc_on: str = "adjacency_rows",
    n_init: int | str = 10,
    seed: int | None = None,
) -> FCRResult:
    """FCR (Algorithm 2) from the clients' encoder embeddings ``embeddings[m]`` [n_m, e].

    k-means centres per client (k), UMAP of all centres, distances (``"min"`` paper /
    ``"matching"`` code), Ã = [A < γ] with self-loops, HC into ``num_clusters`` (None:
    automatic, largest merge-height gap).  ``seed=None`` uses the code's seeds (KMeans 43,
    UMAP 42); an int seeds both.  ``umap_order``: the client order of UMAP's fit (None: 0..M-1;
    the code's: :func:`code_client_order`).  See the module docstring for paper-vs-code choices.
    """
    centres = client_centres(embeddings, k, CODE_KMEANS_SEED if seed is None else seed, n_init)
    z = embed_centres(
        centres, n_neighbors, min_dist, metric, CODE_UMAP_SEED if seed is None else seed,
        n_components, umap_transform, umap_order,
    )
    out = relatedness(z, gamma=gamma, distance=distance, num_clusters=num_clusters, hc_on=hc_on, centres=centres)
    out.centres_2d = z
    out.params.update(k=k, n_neighbors=n_neighbors, min_dist=min_dist, metric=metric, n_components=n_components,
                      umap_transform=umap_transform, n_init=n_init, seed=seed,
                      umap_order=None if umap_order is None else [int(i) for i in umap_order])
    return out
