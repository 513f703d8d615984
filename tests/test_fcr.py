"""FCR (FLT Algorithm 2): planted-cluster recovery, distances vs brute force, thresholding, HC,
PCA+kM+HC signatures and the figures.

Only the module-scoped ``planted_fcr`` fixture runs UMAP (its first call compiles numba,
~10-40 s); everything else works on hand-made arrays.
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from fedbench.clustering import (
    client_centres,
    client_distances,
    embed_centres,
    fcr,
    hierarchical_clusters,
    pca_signatures,
    relatedness,
    threshold_adjacency,
)
from fedbench.clustering.fcr import CODE_KMEANS_SEED, CODE_UMAP_SEED

FCR_MODULE = importlib.import_module("fedbench.clustering.fcr")  # the package's name `fcr` is the function


def planted(m=20, clusters=4, k=3, n=30, dim=16, seed=0, scale=10.0):
    """Client c's samples come from the k Gaussian modes of cluster c % clusters."""
    rng = np.random.default_rng(seed)
    modes = rng.normal(scale=scale, size=(clusters, k, dim))
    truth = np.arange(m) % clusters
    return [modes[c][rng.integers(0, k, n)] + rng.normal(size=(n, dim)) for c in truth], truth


@pytest.fixture(scope="module")
def planted_fcr():
    emb, truth = planted()
    return fcr(emb, k=3, gamma=1.0, distance="min", num_clusters=4, seed=0), truth


def test_fcr_recovers_planted_clusters(planted_fcr):
    result, truth = planted_fcr
    assert result.centres.shape == (20, 3, 16)
    assert result.centres_2d.shape == (20, 3, 2)
    assert adjusted_rand_score(truth, result.clusters) == 1.0
    np.testing.assert_array_equal(result.adjacency, (truth[:, None] == truth[None]).astype(int))
    # automatic number of clusters and the code's matching distance on the same embedding
    auto = relatedness(result.centres_2d, gamma=1.0, distance="matching", num_clusters=None)
    assert adjusted_rand_score(truth, auto.clusters) == 1.0
    by_dist = relatedness(result.centres_2d, gamma=1.0, num_clusters=4, hc_on="distances")
    assert adjusted_rand_score(truth, by_dist.clusters) == 1.0


@pytest.mark.filterwarnings("ignore")  # umap-learn's notices on 16 points
@pytest.mark.parametrize("seed, kmeans_seed, umap_seed", [(7, 7, 7), (None, CODE_KMEANS_SEED, CODE_UMAP_SEED)])
def test_fcr_runs_algorithm_2_with_every_setting_passed_through(seed, kmeans_seed, umap_seed):
    """Algorithm 2, lines 10-21, with none of fcr's defaults: M_m = kMEANS(E_m) (the given seed, or the
    code's 43), Z = UMAP(M) fitted on all centres jointly and, the code's reading, each client's centres
    transformed on their own (umap-learn called here directly; the given seed or the code's 42), A by the
    code's matching distance, Ã = [A < γ],
    Ward on A into C clusters.  fcr's result equals the steps run one by one and records its settings."""
    import umap

    emb, _ = planted(m=8, clusters=3, k=2, n=12, dim=5)
    settings = dict(k=2, gamma=0.8, distance="matching", n_neighbors=5, min_dist=0.3, metric="manhattan",
                    n_components=3, umap_transform=True, num_clusters=3, hc_on="distances", n_init=2, seed=seed)
    result = fcr(emb, **settings)
    centres = client_centres(emb, 2, kmeans_seed, 2)
    reducer = umap.UMAP(n_neighbors=5, min_dist=0.3, metric="manhattan", n_components=3, random_state=umap_seed)
    reducer.fit(centres.reshape(16, 5))
    z = np.stack([reducer.transform(c) for c in centres]).astype(np.float64)  # client by client, as the code
    fitted = reducer.embedding_.reshape(8, 2, 3)
    assert not np.allclose(z, fitted)  # (transforming all centres at once would return the fitted embedding)
    distances = client_distances(z, "matching")
    clusters, linkage = hierarchical_clusters(distances, 3, on="distances")
    np.testing.assert_array_equal(result.centres, centres)
    assert result.centres_2d.dtype == np.float64
    np.testing.assert_array_equal(result.centres_2d, z)
    np.testing.assert_array_equal(result.distances, distances)
    np.testing.assert_array_equal(result.adjacency, threshold_adjacency(distances, 0.8))
    np.testing.assert_array_equal(result.clusters, clusters)
    np.testing.assert_array_equal(result.linkage, linkage)
    assert result.params == {**settings, "umap_order": None}
    # Ward on Ã's rows (the default HC) into a given C, not the automatic one
    adjacency = threshold_adjacency(distances, 0.8)
    automatic = len(set(hierarchical_clusters(adjacency, None, on="rows")[0]))
    given = automatic + 1 if automatic < 8 else 2
    rows = relatedness(z, gamma=0.8, distance="matching", num_clusters=given)
    assert len(set(rows.clusters)) == given
    np.testing.assert_array_equal(rows.clusters, hierarchical_clusters(adjacency, given, on="rows")[0])


@pytest.mark.filterwarnings("ignore")  # umap-learn's notices on 30 points
def test_defaults_are_the_papers_and_the_codes_settings():
    """What a direct caller gets with no settings (module docstring; notes §4.1, §4.4), each step against
    its library called with the documented values: k = 5 centres by KMeans(n_init 10, the code's seed
    43); UMAP with umap-learn's 15 neighbours (clipped to the 29 other centres), min_dist 0.1, 2
    Euclidean dimensions, the code's seed 42, the fitted embedding; the paper's min distance, γ = 1 (the
    code's FLT), Ward on Ã's rows (paper and code), C automatic; fcr runs exactly these."""
    import umap
    from sklearn.cluster import KMeans

    emb, _ = planted(m=6, clusters=2, k=5, n=12, dim=4)
    centres = client_centres(emb)
    want = np.stack([KMeans(5, random_state=43, n_init=10).fit(e).cluster_centers_ for e in emb])
    np.testing.assert_array_equal(centres, want)
    z = embed_centres(centres)
    reducer = umap.UMAP(n_neighbors=15, min_dist=0.1, metric="euclidean", n_components=2, random_state=42)
    np.testing.assert_array_equal(z, reducer.fit_transform(centres.reshape(30, 4)).astype(np.float64).reshape(6, 5, 2))
    distances = client_distances(z, "min")
    adjacency = threshold_adjacency(distances, 1.0)
    clusters, _ = hierarchical_clusters(adjacency, None, on="rows")
    np.testing.assert_array_equal(relatedness(z).centres, z)  # no centres given: the signatures themselves
    for result in (relatedness(z), fcr(emb)):
        np.testing.assert_array_equal(result.distances, distances)
        np.testing.assert_array_equal(result.adjacency, adjacency)
        np.testing.assert_array_equal(result.clusters, clusters)
    assert fcr(emb).params == dict(gamma=1.0, distance="min", num_clusters=None, hc_on="adjacency_rows", k=5,
                                   n_neighbors=15, min_dist=0.1, metric="euclidean", n_components=2,
                                   umap_transform=False, n_init=10, seed=None, umap_order=None)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("m, k, neighbours", [(4, 2, 7), (2, 3, 5)])
def test_umap_neighbours_clipped_to_the_other_centres(m, k, neighbours):
    """UMAP cannot have more neighbours than the M*k - 1 other centres: 8 centres use 7, 6 use 5
    (umap-learn called directly with those)."""
    import umap

    centres = np.random.default_rng(5).normal(size=(m, k, 3))
    reducer = umap.UMAP(n_neighbors=neighbours, min_dist=0.1, n_components=2, random_state=42)
    want = reducer.fit_transform(centres.reshape(m * k, 3)).astype(np.float64).reshape(m, k, 2)
    np.testing.assert_array_equal(embed_centres(centres, n_neighbors=15), want)


def test_identity_adjacency_when_far_apart():
    points = np.arange(12, dtype=float).reshape(4, 3, 1) * 100.0
    for how in ("min", "matching"):
        np.testing.assert_array_equal(threshold_adjacency(client_distances(points, how), 1e-3), np.eye(4))


def test_threshold_strict_and_self_loops():
    d = np.array([[5.0, 1.0, 0.5], [1.0, 5.0, 2.0], [0.5, 2.0, 5.0]])
    adjacency = threshold_adjacency(d, 1.0)
    np.testing.assert_array_equal(adjacency, [[1, 0, 1], [0, 1, 0], [1, 0, 1]])
    assert adjacency.dtype == np.int64
    # relatedness's default γ is the code's 1: clients 1.5 apart are not linked (γ = 2 would link them)
    points = np.array([0.0, 1.5, 5.0]).reshape(3, 1, 1)
    np.testing.assert_array_equal(relatedness(points, num_clusters=3).adjacency, np.eye(3))


@pytest.mark.parametrize("on", ["distances", "rows"])
def test_hierarchical_clusters_exactly_c(on):
    rng = np.random.default_rng(0)
    d = client_distances(rng.normal(size=(30, 2, 3)), "min")
    matrix = d if on == "distances" else threshold_adjacency(d, np.median(d))
    for c in (1, 2, 3, 5, 8, 30):
        labels, z = hierarchical_clusters(matrix, c, on=on)
        assert len(np.unique(labels)) == c and labels.min() == 0 and labels.shape == (30,)
        assert z.shape == (29, 4)
    # heavily tied input: identical rows of a 0/1 matrix still give exactly C clusters
    tied = np.kron(np.eye(3, dtype=int), np.ones((4, 4), dtype=int))
    for c in (2, 3, 4, 7, 12):
        assert len(np.unique(hierarchical_clusters(tied, c, on="rows")[0])) == c
    assert len(np.unique(hierarchical_clusters(tied, None, on="rows")[0])) == 3


def test_automatic_number_of_clusters_cuts_at_the_largest_merge_height_gap():
    """C automatic (FLT's code): cut where consecutive Ward merge heights jump most.  Points 0, 10, 11, 12
    merge at heights ~1, ~1.7 and ~19: the jump is before the last merge, so C = 2 ({0} and the rest), not
    the 3 that the merges' sizes (2, 3, 4) would give; 3 points at 0, 1, 10 give 2; 2 points give 2."""
    def line(*xs):
        x = np.array(xs, dtype=float)
        return np.abs(x[:, None] - x[None])

    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    labels, z = hierarchical_clusters(line(0, 10, 11, 12), None)
    np.testing.assert_array_equal(z, linkage(squareform(line(0, 10, 11, 12)), "ward"))  # Ward on A by default
    assert np.argmax(np.diff(np.sort(z[:, 2]))) == 1
    assert labels[0] != labels[1] == labels[2] == labels[3]
    three = hierarchical_clusters(line(0, 1, 10), None)[0]
    assert three[0] == three[1] != three[2]
    assert len(set(hierarchical_clusters(line(0, 5), None)[0])) == 2
    assert labels.dtype == np.int64
    rows = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 1, 1, 1]])  # Ã's rows as feature vectors: Ward
    np.testing.assert_array_equal(hierarchical_clusters(rows, 2, on="rows")[1], linkage(rows, "ward", metric="euclidean"))
    one, no_merges = hierarchical_clusters(line(3), None)  # a single client: its own cluster, no merge
    assert one.tolist() == [0] and one.dtype == np.int64 and no_merges.shape == (0, 4)


@pytest.mark.parametrize("how", ["min", "matching"])
def test_distances_symmetric_zero_diagonal(how):
    d = client_distances(np.random.default_rng(1).normal(size=(9, 4, 3)), how)
    np.testing.assert_array_equal(d, d.T)
    np.testing.assert_array_equal(np.diag(d), 0.0)
    assert (d[~np.eye(9, dtype=bool)] > 0).all()


def test_min_distance_brute_force():
    p = np.random.default_rng(2).normal(size=(5, 3, 2))
    want = np.array([[min(np.linalg.norm(p[i, r] - p[j, s]) for r in range(3) for s in range(3))
                      for j in range(5)] for i in range(5)])
    np.testing.assert_allclose(client_distances(p, "min", block_bytes=1), want, atol=1e-12)
    np.testing.assert_allclose(client_distances(p), want, atol=1e-12)  # the paper's min distance by default


@pytest.mark.parametrize("k", [1, 2, 4])
def test_matching_distance_brute_force(k, monkeypatch):
    """The code's min_matching_distance: min over permutations of sqrt(sum of squared) / k, by the bitmask
    DP and by the Hungarian fallback."""
    p = np.random.default_rng(3).normal(size=(6, k, 3))
    want = np.array([[min(np.sqrt(sum(np.sum((p[i, r] - p[j, perm[r]]) ** 2) for r in range(k))) / k
                          for perm in itertools.permutations(range(k)))
                      for j in range(6)] for i in range(6)])
    np.testing.assert_allclose(client_distances(p, "matching"), want, atol=1e-12)
    np.testing.assert_allclose(client_distances(p, "matching", block_bytes=1), want, atol=1e-12)
    # above MAX_DP_K centres the exact DP gives way to per-pair Hungarian matching (scipy), as exact
    monkeypatch.setattr(FCR_MODULE, "MAX_DP_K", 0)
    np.testing.assert_allclose(client_distances(p, "matching"), want, atol=1e-12)
    np.testing.assert_allclose(client_distances(p, "matching", block_bytes=1), want, atol=1e-12)


def test_client_centres_and_small_clients():
    emb, _ = planted(m=3, n=10, dim=4)
    emb.append(np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]))  # fewer samples than k
    emb.append(np.array([[9.0, 8.0, 7.0, 6.0]]))  # one sample
    emb.append(np.arange(12.0).reshape(3, 4)[::-1])  # exactly k samples: themselves, in their order
    c = client_centres(emb, k=3, seed=0, n_init=1)
    assert c.shape == (6, 3, 4)
    np.testing.assert_array_equal(c[3], emb[3][[0, 1, 0]])
    np.testing.assert_array_equal(c[4], emb[4][[0, 0, 0]])
    np.testing.assert_array_equal(c[5], emb[5])
    # one centre: k-means' single centre is the client's mean
    np.testing.assert_allclose(client_centres(emb, k=1, seed=0, n_init=1)[:, 0], [e.mean(0) for e in emb], atol=1e-12)


def test_pca_signatures_are_each_clients_own_pca_then_kmeans():
    """PCA+kM+HC's signatures as the authors' code computes them (notes §4.4): PCA(q) fitted on each
    client's own data (its rows repeated cyclically up to q when it has fewer), then KMeans(k,
    random_state=seed) in that client's PCA space; ``fit="pooled"``: one PCA on all clients' data.
    q is clipped to the feature dimension."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(4)
    feats = [rng.normal(size=(n, 20)) for n in (40, 7, 25)]  # 7 < n_components: data repeated
    got = pca_signatures(feats, n_components=10, k=3, seed=5, n_init=2)
    for f, centres in zip(feats, got):
        z = PCA(10, random_state=5).fit_transform(f[np.arange(max(len(f), 10)) % len(f)])
        np.testing.assert_allclose(centres, KMeans(3, random_state=5, n_init=2).fit(z).cluster_centers_)
    pooled = pca_signatures(feats, n_components=4, k=2, seed=5, fit="pooled", n_init=2)
    pca = PCA(4, random_state=5).fit(np.concatenate(feats))
    for f, centres in zip(feats, pooled):
        np.testing.assert_allclose(centres, KMeans(2, random_state=5, n_init=2).fit(pca.transform(f)).cluster_centers_)
    assert pca_signatures(feats, n_components=50, k=2, seed=0, n_init=1).shape == (3, 2, 20)  # clipped to d
    wide = [rng.normal(size=(140, 130))]  # more features than the code's 128 components
    assert pca_signatures(wide, n_init=1).shape == (1, 5, 128)
    # the code's settings by default (q = 128, clipped to d = 20; k = 5; seed 43; n_init 10), computed in float64
    # whatever the features' dtype (an encoder's are float32)
    as_float32 = [f.astype(np.float32) for f in feats]
    same_values = [f.astype(np.float64) for f in as_float32]
    np.testing.assert_allclose(pca_signatures(as_float32),
                               pca_signatures(same_values, n_components=128, k=5, seed=43, n_init=10), rtol=0, atol=1e-10)
    for empty in (np.empty((0, 20)), []):  # a clear error, for the signatures and for the encoder's centres
        with pytest.raises(ValueError, match="a client has no samples"):
            pca_signatures([feats[0], empty], n_components=10, k=2)
        with pytest.raises(ValueError, match="a client has no samples"):
            client_centres([feats[0], empty], k=2)
    assert pca_signatures([feats[0], feats[1][:1]], n_components=10, k=2, n_init=1).shape == (2, 2, 10)  # one row: repeated


def test_figures_written(planted_fcr, tmp_path, saved_figures):
    """Fig. 2a / 6: Ã in client-ID order beside Ã in the dendrogram's leaf order, where the planted
    clusters become contiguous blocks (the reordered truth strip changes colour at exactly 3 borders,
    the ID-order strip at every client); the distance matrix without linkage keeps ID order; the UMAP
    scatter draws every client centre."""
    from fedbench.results.clustering_figures import plot_adjacency, plot_umap_signatures

    result, truth = planted_fcr
    plot_adjacency(result.adjacency, result.linkage, truth, tmp_path / "adj.png")
    strip_raw, ax_raw, _, _, strip_ord, ax_ord = saved_figures[-1].axes[:6]
    np.testing.assert_array_equal(ax_raw.images[0].get_array(), result.adjacency)
    raw_strip, ord_strip = strip_raw.images[0].get_array().ravel(), strip_ord.images[0].get_array().ravel()
    assert raw_strip.tolist() == truth.tolist() and np.count_nonzero(np.diff(raw_strip)) == 19
    assert sorted(ord_strip.tolist()) == sorted(truth.tolist()) and np.count_nonzero(np.diff(ord_strip)) == 3
    reordered = ax_ord.images[0].get_array()  # block diagonal: linked exactly where the strip agrees
    np.testing.assert_array_equal(reordered, (ord_strip[:, None] == ord_strip[None]).astype(float))

    plot_adjacency(result.distances, None, None, tmp_path / "dist.pdf")
    _, ax_raw, _, _, _, ax_ord = saved_figures[-1].axes[:6]
    for ax in (ax_raw, ax_ord):
        np.testing.assert_allclose(ax.images[0].get_array(), result.distances)
    plot_umap_signatures(result.centres_2d, truth, tmp_path / "umap.png")
    (ax,) = saved_figures[-1].axes
    np.testing.assert_allclose(ax.collections[0].get_offsets(), result.centres_2d.reshape(-1, 2), rtol=1e-6)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["0", "1", "2", "3"]
    for name in ("adj.png", "dist.pdf", "umap.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adj.png", "dist.pdf", "umap.png"]


def test_min_and_matching_distances_on_three_centre_sets_by_hand():
    """A = {(0,0), (10,0)}, B = {(1,0), (20,0)}, C = {(10,0), (0,0)} (A's centres, swapped).
    min over pairs: d(A,B) = 1, d(A,C) = 0, d(B,C) = 1.  Matching: d(A,C) = 0; d(A,B) = d(B,C) =
    sqrt(1^2 + 10^2) / 2 (0<->1, 10<->20 beats sqrt(20^2 + 9^2) / 2).  At gamma = 3 the paper's
    graph links all three, the code's only A and C."""
    from fedbench.clustering.fcr import client_distances, threshold_adjacency

    points = np.array([[[0, 0], [10, 0]], [[1, 0], [20, 0]], [[10, 0], [0, 0]]], dtype=float)
    far = np.sqrt(101) / 2
    np.testing.assert_allclose(client_distances(points, "min"), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    np.testing.assert_allclose(client_distances(points, "matching"), [[0, far, 0], [far, 0, far], [0, far, 0]])
    assert threshold_adjacency(client_distances(points, "min"), 3.0).tolist() == [[1, 1, 1]] * 3
    assert threshold_adjacency(client_distances(points, "matching"), 3.0).tolist() == [[1, 0, 1], [0, 1, 0], [1, 0, 1]]


@pytest.mark.filterwarnings("ignore")  # umap-learn's notices on 27 points
def test_flt_code_reading_builds_the_released_codes_graph(monkeypatch):
    """FLT's code reading (``k: ground_truth``, ``random_state: code``, ``umap_fit: transform``,
    ``umap_order: code``, ``n_init: 10``, ``distance: matching``) on fixed embeddings: its Ã equals
    the graph built here step by step as ``clustering_umap_central`` of the released code (hjraad/FLT
    da09bfd) builds it, with scikit-learn and umap-learn called directly: per client
    ``KMeans(#labels of its cluster, random_state=43)`` (n_init 10, the default of its day), the
    centres stacked in the code's client order (``np.random.seed(321)``, ``choice(10, 10)`` for the
    clusters' labels, then ``choice(M, M)``), ``UMAP(n_components=2, random_state=42).fit``, each
    client's centres ``transform``-ed on their own, ``min_matching_distance`` over the k!
    permutations, A = [d < 1].  Nine clients in a ring of three 3-label clusters (Scenario 2's
    shape): k = 3 comes from the clients' labels and their planted clusters (oracle information)."""
    import umap
    from sklearn.cluster import KMeans

    from conftest import make_federation
    from fedbench.algorithms import ALGORITHMS
    from fedbench.algorithms import flt as flt_module
    from fedbench.engine.federated_data import ClientIndex, FederatedData
    from fedbench.engine.local_sgd import LocalSGD
    from fedbench.engine.weights import model_weights

    cluster_labels = [[0, 1, 2], [2, 3, 4], [4, 5, 0]]  # a ring: neighbours share one label
    truth = np.repeat(np.arange(3), 3)
    rng = np.random.default_rng(5)
    modes = rng.normal(scale=6.0, size=(6, 8))
    labels = [np.repeat(cluster_labels[c], 6) for c in truth]
    embeddings = [modes[l] + rng.normal(size=(18, 8)) for l in labels]
    y = np.concatenate(labels + [np.zeros(9, np.int64)])
    starts = np.arange(0, 9 * 18 + 1, 18)
    data = FederatedData(
        torch.zeros(len(y), 2), torch.as_tensor(y), ClientIndex.from_lists([np.arange(s, s + 18) for s in starts[:-1]], "cpu"),
        ClientIndex.from_lists([np.array([9 * 18 + m]) for m in range(9)], "cpu"), 6,
    )
    fed = make_federation(data, torch.nn.Linear(2, 6), LocalSGD(1, 5, 0.1), seed=11)
    fed.clusters = truth
    monkeypatch.setattr(flt_module, "load_encoder", lambda path: torch.nn.Identity())
    monkeypatch.setattr(flt_module, "embed_clients", lambda *args, **kwargs: embeddings)
    code = dict(encoder="e", k="ground_truth", distance="matching", aggregation="in_place", random_state="code",
                umap_fit="transform", umap_order="code", n_init=10)
    state = ALGORITHMS["flt"](**code).init(fed, model_weights(fed.model))

    # the released code's steps, one by one
    k = len(cluster_labels[0])
    centres = {m: KMeans(n_clusters=k, random_state=43, n_init=10).fit(embeddings[m]).cluster_centers_ for m in range(9)}
    np.random.seed(321)
    np.random.choice(10, 10, replace=False)  # gen_cluster: the clusters' labels
    idxs_users = np.random.choice(9, 9, replace=False)  # clustering_umap_central's client order
    reducer = umap.UMAP(n_components=2, random_state=42).fit(np.vstack([centres[m] for m in idxs_users]))
    z = {m: reducer.transform(centres[m]) for m in range(9)}

    def min_matching_distance(c0, c1):
        return min(np.sqrt(sum(np.linalg.norm(c0[i] - c1[p[i]]) ** 2 for i in range(len(c0)))) / len(c0)
                   for p in itertools.permutations(range(len(c1))))

    soft = np.array([[min_matching_distance(z[i], z[j]) for j in range(9)] for i in range(9)])
    graph = (soft < 1).astype(int)
    assert 0 < graph.sum() - 9 < 72  # some links, not all
    np.testing.assert_array_equal(state["adjacency"], graph)
    np.testing.assert_allclose(state["distances"], soft, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["centres_2d"], np.stack([z[m] for m in range(9)]), rtol=1e-6, atol=1e-6)
    # the order of UMAP's fit is part of the reading: client order 0..8 embeds the same centres elsewhere
    in_order = ALGORITHMS["flt"](**{**code, "umap_order": "clients"}).init(fed, model_weights(fed.model))
    assert not np.allclose(in_order["centres_2d"], state["centres_2d"])


UMAP_IN_A_FRESH_PROCESS = """
import json, sys, time
import numpy as np
from fedbench.clustering.fcr import embed_centres

rng = np.random.default_rng(0)
centres = rng.normal(size=(40, 3, 16))
start = time.process_time()
fitted = embed_centres(centres, seed=7)
transformed = embed_centres(centres, seed=7, transform=True)
seconds = time.process_time() - start
import umap.umap_ as umap_module
kernels = [umap_module.smooth_knn_dist, umap_module.compute_membership_strengths]
print(json.dumps({"z": np.concatenate([fitted.ravel(), transformed.ravel()]).tolist(), "seconds": seconds,
                  "hits": sum(sum(k.stats.cache_hits.values()) for k in kernels),
                  "misses": sum(sum(k.stats.cache_misses.values()) for k in kernels)}))
"""


def umap_process(cache_dir) -> dict:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", UMAP_IN_A_FRESH_PROCESS], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_umap_kernels_compiled_once_are_loaded_from_numba_cache_with_the_same_numbers(tmp_path):
    """With a numba cache directory (the workflow's jobs: .snakemake/numba_cache), the first process compiles
    UMAP's kernels and keeps them there, a second process loads them instead of compiling (cache hits, no
    misses) and embeds the same centres to the same numbers, bit for bit, fit_transform and the code's
    per-client transform alike."""
    first = umap_process(tmp_path / "numba")
    second = umap_process(tmp_path / "numba")
    assert first["misses"] > 0 and first["hits"] == 0  # compiled, then saved
    assert second["hits"] > 0 and second["misses"] == 0  # loaded
    assert second["z"] == first["z"]


def test_umap_kernels_are_cached_only_where_numba_has_a_cache_directory(monkeypatch, tmp_path):
    """``cache_umap_kernels`` turns numba's file cache on for umap-learn's compiled functions where
    ``NUMBA_CACHE_DIR`` is set, and leaves them alone otherwise (nothing is written beside umap-learn's
    installed sources).  (Every dispatcher's cache is put back afterwards.)"""
    import sys

    import numba
    import umap.umap_  # noqa: F401  (the modules whose functions are turned on)
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    kernels = [value for name, module in list(sys.modules.items()) if module is not None
               and (name == "umap" or name.startswith("umap.")) for value in vars(module).values()
               if isinstance(value, Dispatcher)]
    for kernel in kernels:
        monkeypatch.setattr(kernel, "_cache", NullCache())
    monkeypatch.setattr(FCR_MODULE, "_UMAP_CACHED", False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    assert not FCR_MODULE.cache_umap_kernels()
    assert all(isinstance(kernel._cache, NullCache) for kernel in kernels)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    assert FCR_MODULE.cache_umap_kernels()
    turned_on = [kernel for kernel in kernels if not isinstance(kernel._cache, NullCache)]
    assert len(turned_on) > 50 and sys.modules["umap.umap_"].smooth_knn_dist in turned_on
