"""FLT's server updates against the algorithms they generalise (Algorithm 3, cases I and II)."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.flt import neighbour_average
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import broadcast, model_weights

SIZES = [12, 30, 9, 17, 21]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))


def run_flt(adjacency, cluster_count=None, clusters=None, aggregation="simultaneous", rounds=3, participation=1.0,
            cluster_average="all"):
    """FLT with a given relatedness (FCR bypassed), on the shared toy federation."""
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1, momentum=0.5), participation, seed=3)
    algorithm = ALGORITHMS["flt"](encoder="unused", clusters=cluster_count, aggregation=aggregation,
                                  cluster_average=cluster_average)
    state = {"clients": broadcast(model_weights(fed.model), fed.num_clients), "adjacency": adjacency,
             "clusters": clusters}
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
    return state["clients"]


def run(name, rounds=3, participation=1.0, **params):
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1, momentum=0.5), participation, seed=3)
    algorithm = ALGORITHMS[name](**params)
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
    return algorithm.client_models(fed, state, rounds)


def assert_same(a, b, atol=0.0):
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0.0 if atol == 0 else 1e-6)


def test_identity_adjacency_is_local():
    m = len(SIZES)
    assert_same(run_flt(np.eye(m), participation=0.6), run("local", participation=0.6))
    assert_same(run_flt(np.eye(m), aggregation="in_place", participation=0.6), run("local", participation=0.6))


def test_all_ones_adjacency_is_fedavg():
    m = len(SIZES)
    assert_same(run_flt(np.ones((m, m))), run("fedavg"), atol=1e-6)


def test_one_cluster_is_fedavg():
    """Case II with one cluster: FedAvg over the sampled members ("sampled"); with every client
    taking part, "all" (Algorithm 3 lines 20-22) is the same thing."""
    m = len(SIZES)
    ones = run_flt(np.ones((m, m)), cluster_count=1, clusters=np.zeros(m, dtype=int), participation=0.6,
                   cluster_average="sampled")
    assert_same(ones, run("fedavg", participation=0.6), atol=1e-6)
    everyone = run_flt(np.ones((m, m)), cluster_count=1, clusters=np.zeros(m, dtype=int), cluster_average="all")
    assert_same(everyone, run("fedavg"), atol=1e-6)


def test_case_two_averages_all_members_or_only_the_sampled_ones_by_hand():
    """lr = 0 leaves every model as it is; client m holds (m + 1) * w0.  Clusters {0, 1}, {2, 3, 4},
    sampled {0, 2}.  "all": cluster 0 -> (12*1 + 30*2)/42 w0, cluster 1 -> (9*3 + 17*4 + 21*5)/47 w0;
    "sampled": cluster 0 -> 1 w0, cluster 1 -> 3 w0.  "all" with ``aggregation: in_place`` (the authors'
    loop over the same-cluster blocks): each member averages the already-updated earlier members."""
    clusters = np.array([0, 0, 1, 1, 1])
    a1 = (12 * 72 / 42 + 30 * 2) / 42
    b3 = (9 * 200 / 47 + 17 * 4 + 21 * 5) / 47
    b4 = (9 * 200 / 47 + 17 * b3 + 21 * 5) / 47
    expected = {
        "all": [72 / 42, 72 / 42, 200 / 47, 200 / 47, 200 / 47],
        "sampled": [1.0, 1.0, 3.0, 3.0, 3.0],
        "all in_place": [72 / 42, a1, 200 / 47, b3, b4],
    }
    for how, factors in expected.items():
        fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.0), seed=3)
        fed.sample_clients = lambda: torch.tensor([0, 2])
        average, _, aggregation = how.partition(" ")
        algorithm = ALGORITHMS["flt"](encoder="unused", clusters=2, cluster_average=average,
                                      aggregation=aggregation or "simultaneous")
        w0 = model_weights(fed.model)
        scale = torch.arange(1, 6, dtype=torch.float32)
        stacked = {k: broadcast(w0, 5)[k] * scale.view(-1, *[1] * v.dim()) for k, v in w0.items()}
        state, _ = algorithm.round(fed, {"clients": stacked, "adjacency": None, "clusters": clusters}, 1)
        for k, v in w0.items():
            want = torch.stack([f * v for f in factors])
            torch.testing.assert_close(state["clients"][k], want, rtol=1e-5, atol=1e-6)


def gd_step(template, weights, x, y, lr):
    """One full-batch gradient step on the mean cross-entropy, plain autograd."""
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    loss = F.cross_entropy(torch.func.functional_call(template, w, (x,)), y)
    return {k: (w[k] - lr * g).detach() for k, g in zip(w, torch.autograd.grad(loss, list(w.values())))}


@pytest.mark.parametrize("aggregation", ["simultaneous", "in_place"])
def test_case_one_round_averages_over_the_relatedness_graph_by_hand(aggregation):
    """FLT Algorithm 3, lines 5-19, case I: the sampled clients train their own models (one full-batch
    step here), the server collects W̄ (the others' current models) and every client's model becomes the
    Ã-neighbourhood's sample-weighted average w_m = sum_j Ã_mj n_j w̄_j / sum_j Ã_mj n_j ("in_place":
    the authors' loop, client m already averaging the updated w_0..w_{m-1}).  Ã: the path 0-1-2-3-4 with
    self-loops; clients hold different models; sampled {0, 2}."""
    lr = 0.1
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 64, lr), seed=3)
    fed.sample_clients = lambda: torch.tensor([0, 2])
    algorithm = ALGORITHMS["flt"](encoder="unused", aggregation=aggregation)
    models = []
    for m in range(len(SIZES)):
        torch.manual_seed(100 + m)
        models.append(model_weights(nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))))
    adjacency = np.eye(5) + np.eye(5, k=1) + np.eye(5, k=-1)
    stacked = {k: torch.stack([w[k] for w in models]) for k in models[0]}
    state, _ = algorithm.round(fed, {"clients": stacked, "adjacency": adjacency, "clusters": None}, 1)
    current = []
    for m, w in enumerate(models):
        rows = fed.data.train.index[m, : SIZES[m]]
        current.append(gd_step(fed.model, w, fed.data.x[rows], fed.data.y[rows], lr) if m in (0, 2) else w)
    updated = list(current)
    for m in range(5):
        weights = adjacency[m] * np.array(SIZES, dtype=np.float64)
        source = updated if aggregation == "in_place" else current
        updated[m] = {k: sum(float(a) * source[j][k].double() for j, a in enumerate(weights)).float() / float(weights.sum())
                      for k in models[0]}
    for m in range(5):
        for k, v in updated[m].items():
            torch.testing.assert_close(state["clients"][k][m], v, rtol=1e-5, atol=1e-6)


def test_neighbour_average_by_hand():
    stacked = {"w": torch.tensor([[1.0], [2.0], [4.0]])}
    adjacency = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    samples = torch.tensor([1, 1, 2])
    simultaneous = neighbour_average(stacked, adjacency, samples, in_place=False)["w"].flatten()
    torch.testing.assert_close(simultaneous, torch.tensor([1.5, 11 / 4, 10 / 3]))
    # the authors' loop: client 1 already sees client 0's new model, client 2 sees client 1's
    in_place = neighbour_average(stacked, adjacency, samples, in_place=True)["w"].flatten()
    first = 1.5
    second = (first + 2.0 + 2 * 4.0) / 4
    torch.testing.assert_close(in_place, torch.tensor([first, second, (second + 2 * 4.0) / 3]))


def test_fesem_as_flt_code_clusters_all_models_and_averages_per_cluster_by_hand():
    """lr = 0 keeps the models; client m holds s_m * w0 with s = (1, 1.1, 10, 10.5, 11): k-means on
    all five flattened models finds {0, 1} and {2, 3, 4}; each member then holds its cluster's
    sample-weighted mean, (12*1 + 30*1.1)/42 w0 and (9*10 + 17*10.5 + 21*11)/47 w0 (only client 0
    trained: the stale ones count too)."""
    scale = torch.tensor([1.0, 1.1, 10.0, 10.5, 11.0])
    a, b = 45 / 42, 499.5 / 47
    # in place (the code's loop): later members average the already-updated earlier ones
    a1 = (12 * a + 30 * 1.1) / 42
    b3 = (9 * b + 17 * 10.5 + 21 * 11) / 47
    b4 = (9 * b + 17 * b3 + 21 * 11) / 47
    expected = {"simultaneous": [a, a, b, b, b], "in_place": [a, a1, b, b3, b4]}
    for aggregation, factors in expected.items():
        fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.0), seed=3)
        fed.sample_clients = lambda: torch.tensor([0])
        algorithm = ALGORITHMS["fesem_flt"](num_clusters=2, aggregation=aggregation)
        w0 = model_weights(fed.model)
        state = algorithm.init(fed, w0)
        state["clients"] = {k: v * scale.view(-1, *[1] * (v.dim() - 1)) for k, v in state["clients"].items()}
        state, _ = algorithm.round(fed, state, 1)
        labels = algorithm.clusters(fed, state)
        assert labels[0] == labels[1] != labels[2] == labels[3] == labels[4]
        for k, v in w0.items():
            torch.testing.assert_close(state["clients"][k], torch.stack([f * v for f in factors]), rtol=1e-5, atol=1e-6)


def whole_row_in_place(stacked, adjacency, samples):
    """The authors' in-place loop over whole float64 rows: ``neighbour_average(in_place=True)`` before it
    ran over blocks of columns (main at 2e2b0e1)."""
    weights = torch.as_tensor(adjacency, dtype=torch.float64) * samples.to(torch.float64)[None, :]
    weights = weights / weights.sum(1, keepdim=True)
    out = {}
    for name, value in stacked.items():
        if not value.is_floating_point():
            out[name] = value
            continue
        flat = value.reshape(len(value), -1).to(torch.float64).clone()
        for m in range(len(flat)):
            flat[m] = weights[m] @ flat
        out[name] = flat.to(value.dtype).view_as(value)
    return out


def stacked_models_and_graph(clients, shapes):
    """Seeded stacked client tensors (float32 of ``shapes``, one float64, one integer buffer), a copy of
    them, a random generator, sample counts and a partition into 5 cliques, for the average's tests."""
    g = torch.Generator().manual_seed(clients)
    stacked = {f"t{i}": 0.05 * torch.randn(clients, *shape, generator=g) for i, shape in enumerate(shapes)}
    stacked["f64"] = torch.randn(clients, 5, generator=g, dtype=torch.float64)
    stacked["count"] = torch.arange(clients)
    before = {k: v.clone() for k, v in stacked.items()}
    rng = np.random.default_rng(clients)
    samples = torch.from_numpy(rng.integers(300, 900, clients))
    return stacked, before, rng, samples, rng.integers(0, 5, clients)


@pytest.mark.parametrize("clients, shapes, block_bytes", [
    (100, [(200, 784), (200,), (10, 200), (10,)], None),  # FLT's MLP at flt_claims' 100 clients, the default blocks
    (100, [(200, 784), (10,)], 1 << 16),  # blocks of 64 columns: many blocks, a short last one
    (37, [(50, 33), (7,), (3, 3)], 1 << 12),  # odd sizes, columns not a multiple of the block
])
def test_in_place_average_over_column_blocks_equals_the_whole_row_loop_bit_for_bit(monkeypatch, clients, shapes, block_bytes):
    """The in-place loop (FeSEM as FLT's code, FLT's ``aggregation: in_place``) runs over blocks of columns
    that stay in cache; every entry is the same float64 dot product as over whole rows, so the float32
    models are equal bit for bit (a float64 tensor too, and the input is left as it was)."""
    import fedbench.algorithms.flt as flt

    if block_bytes is not None:
        monkeypatch.setattr(flt, "IN_PLACE_BLOCK_BYTES", block_bytes)
    stacked, before, rng, samples, blocks = stacked_models_and_graph(clients, shapes)
    for adjacency in ((blocks[:, None] == blocks[None, :]).astype(float), (rng.random((clients, clients)) < 0.3) | np.eye(clients, dtype=bool)):
        got, expected = neighbour_average(stacked, adjacency, samples, in_place=True), whole_row_in_place(stacked, adjacency, samples)
        for k in stacked:
            assert got[k].dtype == expected[k].dtype and torch.equal(got[k], expected[k]), k
            assert torch.equal(stacked[k], before[k])


def test_neighbour_average_keeps_integer_buffers_and_dtypes():
    """FLT's server average (Algorithm 3, w_m <- sum_j Ã_mj n_j w_j / sum_j Ã_mj n_j) averages the
    floating tensors only: an integer buffer (BatchNorm's ``num_batches_tracked``) is left as it is,
    and every tensor keeps its dtype."""
    stacked = {"n": torch.tensor([3, 5, 7]), "w": torch.tensor([[1.0], [2.0], [4.0]], dtype=torch.float64),
               "v": torch.tensor([[1.0], [1.0], [0.0]])}  # the integer buffer first: what follows is averaged too
    for in_place in (False, True):
        out = neighbour_average(stacked, np.ones((3, 3)), torch.tensor([1, 1, 2]), in_place)
        assert torch.equal(out["n"], stacked["n"])
        assert out["w"].dtype == torch.float64
        torch.testing.assert_close(out["w"][0], torch.tensor([11 / 4], dtype=torch.float64))
        torch.testing.assert_close(out["v"][0], torch.tensor([0.5]))


def test_flt_graph_clusters_and_artifacts_reported_to_the_pipeline():
    """What the pipeline reads from FLT: ``adjacency`` is the graph the server averages over, Ã in case I
    and HC's same-cluster blocks in case II; ``clusters`` are HC's clusters; the artifacts are the
    relatedness outputs the run computed (missing ones left out); every client is scored with its own
    model and there is no global model."""
    algorithm = ALGORITHMS["flt"](encoder="unused")
    adjacency = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    clients = {"w": torch.arange(3.0)[:, None]}
    state = {"clients": clients, "adjacency": adjacency, "clusters": np.array([0, 1, 1]), "distances": np.eye(3),
             "linkage": np.zeros((2, 4)), "centres_2d": np.zeros((3, 2, 2))}
    assert algorithm.adjacency(None, state) is adjacency
    assert algorithm.clusters(None, state).tolist() == [0, 1, 1]
    assert algorithm.client_models(None, state, 1) is clients and algorithm.global_model(None, state) is None
    everything = ["adjacency", "centres_2d", "clusters", "distances", "linkage"]
    assert sorted(algorithm.artifacts(None, state)) == everything
    assert sorted(algorithm.artifacts(None, {**state, "centres_2d": None})) == everything[:1] + everything[2:]  # PCA+kM+HC
    case_two = ALGORITHMS["flt"](encoder="unused", clusters=2)
    assert case_two.adjacency(None, state).tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 1]]
    assert case_two.adjacency(None, {**state, "clusters": None}) is adjacency


def test_flt_documented_defaults_and_choices():
    """The registered defaults the docstrings document: FLT (paper) k = 5, γ = 1, ``distance: min``,
    case I, simultaneous W̄Ã averaging, UMAP 15 neighbours / min_dist 0.1, no encoder fine-tuning, case II
    over all members; PCA+kM+HC (authors' code) k = 5, 128 PCA components, γ = 1.2, matching distance,
    C = 3.  Unknown aggregation / cluster_average choices are rejected."""
    from fedbench.algorithms.flt import FLT

    assert ALGORITHMS["flt"](encoder="e") == FLT("encoder", "e", 0, 5, 1.0, "min", None, "simultaneous", 15, 0.1, 0, "all")
    assert ALGORITHMS["pca_km_hc"]() == FLT("pca", None, 0, 5, 1.2, "matching", 3, "simultaneous", 15, 0.1, 128, "all")
    for bad in (dict(aggregation="sequential"), dict(cluster_average="weighted")):
        with pytest.raises(ValueError):
            ALGORITHMS["flt"](encoder="e", **bad)
        with pytest.raises(ValueError):
            ALGORITHMS["pca_km_hc"](**bad)


def test_fesem_flt_kmeans_warm_starts_from_the_previous_centres():
    """FedSEM as FLT's code (notes §4.4): the first round's k-means is k-means++ with 20 restarts (the
    best of them); later rounds run Lloyd's iterations from the previous round's centres.  Four points
    at the corners of a 10 x 1 rectangle: the best 2-means split is left | right; started at the centres
    (5, 0) and (5, 1), Lloyd stays at the bottom | top split (a fixed point)."""
    from fedbench.algorithms.fesem_flt import kmeans_step

    points = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    labels, centres = kmeans_step(points, 2, None, seed=0)
    assert labels[0] == labels[1] != labels[2] == labels[3]
    np.testing.assert_allclose(sorted(centres.tolist()), [[0.0, 0.5], [10.0, 0.5]])
    labels, centres = kmeans_step(points, 2, np.array([[5.0, 0.0], [5.0, 1.0]]), seed=0)
    assert labels.tolist() == [0, 1, 0, 1]
    np.testing.assert_allclose(centres, [[5.0, 0.0], [5.0, 1.0]])
    # eight Gaussian points, 3 clusters: one k-means++ start (seeds 0-2) ends in a local optimum, the best
    # of 20 reaches the optimal partition (brute force over all 3^8 labellings)
    import itertools

    points = np.random.default_rng(0).normal(size=(8, 2))
    onehot = np.eye(3)[np.array(list(itertools.product(range(3), repeat=8)))]  # [6561, 8, 3]
    sizes = onehot.sum(1)
    sums = np.einsum("lmc,md->lcd", onehot, points)
    sse = (points**2).sum() - ((sums**2).sum(-1) / np.maximum(sizes, 1)).sum(-1)
    labels, _ = kmeans_step(points, 3, None, seed=0)
    assert np.isclose(sse[np.ravel_multi_index(tuple(labels), (3,) * 8)], sse.min())
    # the restarts are drawn from the run's seed: 30 Gaussian points in 4-D, 6 clusters, where unseeded
    # best-of-20 runs end in many different local optima, give the same centres on every call
    points = np.random.default_rng(1).normal(size=(30, 4))
    runs = [kmeans_step(points.copy(), 6, None, seed=5)[1] for _ in range(3)]  # kmeans_step consumes its points
    assert all(np.array_equal(r, runs[0]) for r in runs)


def test_fesem_flt_kmeans_centring_in_place_is_the_same_fit():
    """kmeans_step lets scikit-learn centre the points in place (copy_x=False, no copy of M models): the
    same labels and centres, bit for bit, as scikit-learn's default copy -- a first round (20 restarts)
    and a warm start, on 60 points in 3 planted groups in 5,000 dimensions."""
    from sklearn.cluster import KMeans

    from fedbench.algorithms.fesem_flt import kmeans_step

    rng = np.random.default_rng(3)
    points = 0.05 * rng.normal(size=(60, 5000)) + np.repeat(rng.normal(size=(3, 5000)), 20, axis=0)
    reference = KMeans(3, n_init=20, random_state=7).fit(points)
    labels, centres = kmeans_step(points.copy(), 3, None, seed=7)
    assert np.array_equal(labels, reference.labels_) and np.array_equal(centres, reference.cluster_centers_)
    moved = points + 0.01 * rng.normal(size=points.shape)
    reference = KMeans(3, init=centres, n_init=1, random_state=7).fit(moved)
    labels, warm = kmeans_step(moved.copy(), 3, centres, seed=7)
    assert np.array_equal(labels, reference.labels_) and np.array_equal(warm, reference.cluster_centers_)


@pytest.mark.parametrize("state_kind", ["full", "parameters"])
def test_fesem_flt_state_decides_what_kmeans_sees(state_kind):
    """FedSEM as FLT's code clusters the flattened *state dicts* (``state: full``, buffers such as
    BatchNorm's running statistics included) or only the trained parameters (``state: parameters``).
    lr = 0 and BatchNorm momentum 0 keep every model as it is.  Parameters: clients {0, 1} near w0,
    {2, 3, 4} near 10 w0; running means: {0, 2} at 0, {1, 3, 4} at 1000, which dominate the full state.
    Every client's assignment is logged each round; each client is scored with its own model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.BatchNorm1d(4, momentum=0.0), nn.Linear(4, 3))
    fed = make_federation(make_data(SIZES), model, LocalSGD(1, 64, 0.0), seed=3)
    fed.sample_clients = lambda: torch.tensor([0, 1, 2, 3, 4])
    algorithm = ALGORITHMS["fesem_flt"](num_clusters=2, state=state_kind, aggregation="simultaneous")
    state = algorithm.init(fed, model_weights(fed.model))
    before = algorithm.clusters(fed, state)  # before any round: one cluster
    assert before.tolist() == [0] * 5 and before.dtype.kind == "i"
    scale = torch.tensor([1.0, 1.1, 10.0, 10.5, 11.0])
    clients = {k: v * scale.view(-1, *[1] * (v.dim() - 1)) if v.is_floating_point() else v
               for k, v in state["clients"].items()}
    clients["2.running_mean"] = torch.tensor([0.0, 1000.0, 0.0, 1000.0, 1000.0])[:, None].expand(5, 4).clone()
    clients["2.running_var"] = torch.ones(5, 4)
    state["clients"] = clients
    state, _ = algorithm.round(fed, state, 1)
    labels = algorithm.clusters(fed, state)
    if state_kind == "full":
        assert labels[0] == labels[2] != labels[1] == labels[3] == labels[4]
    else:
        assert labels[0] == labels[1] != labels[2] == labels[3] == labels[4]
    frame = algorithm.artifacts(fed, state)["assignments"]
    assert frame["client"].tolist() == list(range(5)) and frame["cluster"].tolist() == labels.tolist()
    assert algorithm.client_models(fed, state, 1) is state["clients"]  # scored with their own models
    assert algorithm.global_model(fed, state) is None


def test_fesem_flt_rejects_impossible_settings():
    """FedSEM as FLT's code: at least one cluster, at most one per client (as many as clients is valid);
    ``state`` and ``aggregation`` among the documented choices (one cluster is valid: FedAvg over everyone)."""
    for bad in (dict(num_clusters=0), dict(state="buffers"), dict(aggregation="sequential")):
        with pytest.raises(ValueError):
            ALGORITHMS["fesem_flt"](**bad)
    assert ALGORITHMS["fesem_flt"](num_clusters=1).num_clusters == 1
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1), seed=3)
    algorithm = ALGORITHMS["fesem_flt"](num_clusters=6)
    with pytest.raises(ValueError):
        algorithm.round(fed, algorithm.init(fed, model_weights(fed.model)), 1)
    algorithm = ALGORITHMS["fesem_flt"](num_clusters=5)  # one client per cluster: local training
    state, _ = algorithm.round(fed, algorithm.init(fed, model_weights(fed.model)), 1)
    assert sorted(algorithm.clusters(fed, state).tolist()) == [0, 1, 2, 3, 4]


def test_fesem_flt_flattens_models_in_float64_in_the_given_order():
    """FedSEM as FLT's code: k-means runs on the [M, P] float64 matrix of each client's named tensors,
    concatenated in the given order."""
    from fedbench.algorithms.fesem_flt import flattened

    stacked = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([[[0.1]], [[0.2]]])}
    out = flattened(stacked, ["b", "a"])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.array([[np.float32(0.1), 1, 2], [np.float32(0.2), 3, 4]], dtype=np.float64))


def test_flt_relatedness_passes_its_settings_to_fcr(monkeypatch):
    """FLT's initialisation (Algorithm 3 line 2, FCR = Algorithm 2) with the run's own settings: the
    encoder file ``<encoders>/<encoder>.pt``, fine-tuned J epochs on every client's data with the
    authors' Adam lr 1e-3 and batch 64; k-means k, γ, the distance, UMAP's neighbours and min_dist, the
    run's seed; HC into C clusters (``clusters: auto`` or case I: HC picks C).  PCA+kM+HC: the per-client
    PCA sees exactly each client's *training* rows, flattened.  Both keep every output of the relatedness
    step (Ã, C, distances, HC's linkage) and start every client from the run's initial model (Algorithm 3:
    W̄ holds one model per client, all M of them w^0 before round 1).  FCR's own steps are replaced by
    recorders."""
    from types import SimpleNamespace

    from fedbench.algorithms import flt as flt_module

    calls = {}

    def record(name, result):
        def fake(*args, **kwargs):
            calls[name] = (args, kwargs)
            return result
        return fake

    outcome = SimpleNamespace(adjacency="A", clusters="C", distances="D", linkage="L", centres_2d="P")
    monkeypatch.setattr(flt_module, "load_encoder", record("load", torch.nn.Identity()))
    monkeypatch.setattr(flt_module, "embed_clients", record("embed", ["e"]))
    monkeypatch.setattr(flt_module, "fcr", record("fcr", outcome))
    monkeypatch.setattr(flt_module, "pca_signatures", record("pca", "S"))
    monkeypatch.setattr(flt_module, "relatedness", record("relatedness", outcome))
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(1, 5, 0.1), seed=3)
    fed.encoders = Path("/somewhere")
    for clusters, expected in [(None, None), ("auto", None), (4, 4)]:
        algorithm = ALGORITHMS["flt"](encoder="enc", finetune_epochs=2, k=3, gamma=0.7, distance="matching",
                                      clusters=clusters, umap_neighbors=6, umap_min_dist=0.2)
        state = algorithm.init(fed, model_weights(fed.model))
        assert {k: state[k] for k in ("adjacency", "clusters", "distances", "linkage", "centres_2d")} == dict(
            adjacency="A", clusters="C", distances="D", linkage="L", centres_2d="P")
        for k, v in model_weights(fed.model).items():
            assert torch.equal(state["clients"][k], v.expand(5, *v.shape))
        assert calls["load"][0] == (Path("/somewhere/enc.pt"),)
        args, kwargs = calls["embed"]
        assert args[1] is fed.data and args[2].tolist() == list(range(5))
        assert (kwargs["finetune_epochs"], kwargs["lr"], kwargs["batch_size"], kwargs["generator"]) == (2, 1e-3, 64, fed.generator)
        assert calls["fcr"] == ((["e"],), dict(k=3, gamma=0.7, distance="matching", n_neighbors=6, min_dist=0.2,
                                               umap_transform=False, umap_order=None, num_clusters=expected,
                                               n_init=10, seed=3))
    state = ALGORITHMS["pca_km_hc"](k=2, pca_components=4, gamma=0.9, clusters="auto").init(fed, model_weights(fed.model))
    assert {k: state[k] for k in ("adjacency", "clusters", "distances", "linkage")} == dict(
        adjacency="A", clusters="C", distances="D", linkage="L") and "centres_2d" not in state
    for k, v in model_weights(fed.model).items():
        assert torch.equal(state["clients"][k], v.expand(5, *v.shape))
    (samples,), kwargs = calls["pca"]
    assert kwargs == dict(n_components=4, k=2, seed=3)
    for m, rows in enumerate(samples):
        own = fed.data.train.index[m, : SIZES[m]]
        np.testing.assert_array_equal(rows, fed.data.x[own].flatten(1).numpy())
    assert calls["relatedness"] == (("S",), dict(gamma=0.9, distance="matching", num_clusters=None))
    ALGORITHMS["pca_km_hc"](clusters=2).init(fed, model_weights(fed.model))
    assert calls["relatedness"][1]["num_clusters"] == 2


def test_fesem_flt_later_rounds_start_kmeans_at_the_previous_centres(monkeypatch):
    """FedSEM as FLT's code (notes §4.4): from the second round on, k-means starts at the previous
    round's centres.  Linear(1 -> 2) without bias: a model is the point (w_0, w_1); lr = 0 keeps it.
    Round 1: models at (0, 0), (0, 1), (10, 0), (10, 1), clustered left | right, centres (0, 1/2) and
    (10, 1/2).  Then the models move to (0, 0), (0, 20), (10, 0), (10, 20): a fresh k-means splits
    bottom | top (cost 4 x 5^2 = 100 against 4 x 10^2 = 400), but Lloyd started at (0, 1/2), (10, 1/2)
    stays left | right (a fixed point).  k-means is seeded with the run's seed."""
    from fedbench.algorithms import fesem_flt

    seeds, kmeans_step = [], fesem_flt.kmeans_step

    def recording(points, num_clusters, previous, seed):
        seeds.append(seed)
        return kmeans_step(points, num_clusters, previous, seed)

    monkeypatch.setattr(fesem_flt, "kmeans_step", recording)
    data = make_data([6, 6, 6, 6], dim=1, num_classes=2)
    fed = make_federation(data, nn.Linear(1, 2, bias=False), LocalSGD(1, 64, 0.0), seed=3)
    algorithm = ALGORITHMS["fesem_flt"](num_clusters=2, aggregation="simultaneous")
    state = algorithm.init(fed, model_weights(fed.model))
    for round_, points in enumerate([[[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]],
                                     [[0.0, 0.0], [0.0, 20.0], [10.0, 0.0], [10.0, 20.0]]], 1):
        state["clients"] = {"weight": torch.tensor(points)[:, :, None]}
        state, _ = algorithm.round(fed, state, round_)
        labels = algorithm.clusters(fed, state)
        assert labels[0] == labels[1] != labels[2] == labels[3], round_
    assert seeds == [3, 3]


def test_ground_truth_k_counts_the_labels_of_the_widest_planted_cluster():
    """``k: ground_truth`` (the released code: k-means centres = entries of the client's row of its
    cluster array, rows padded to the widest cluster): 3 for three 3-label clusters; 5 where one
    cluster has 5 labels and another 2 (Structured FEMNIST's last cluster [45, 46, 0, 0, 0] counts
    5); the code's 5 without planted clusters (FEMNIST).  Labels are read from the clients' training
    rows only."""
    from fedbench.algorithms.flt import ground_truth_k
    from fedbench.engine.federated_data import ClientIndex, FederatedData

    def federation(client_labels, clusters):
        y = np.concatenate([np.asarray(l) for l in client_labels] + [np.arange(9)])  # test rows hold every label
        bounds = np.cumsum([0] + [len(l) for l in client_labels])
        train = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        test = [np.arange(bounds[-1], bounds[-1] + 9)] * len(client_labels)
        data = FederatedData(torch.zeros(len(y), 2), torch.as_tensor(y), ClientIndex.from_lists(train, "cpu"),
                             ClientIndex.from_lists(test, "cpu"), 9)
        fed = make_federation(data, nn.Linear(2, 9), LocalSGD(1, 5, 0.1))
        fed.clusters = None if clusters is None else np.asarray(clusters)
        return fed

    ring = [[0, 1, 1], [2, 0], [2, 3, 4], [4, 3], [4, 5, 0], [0, 5]]  # clusters {0,1,2}, {2,3,4}, {4,5,0}
    assert ground_truth_k(federation(ring, [0, 0, 1, 1, 2, 2])) == 3
    uneven = [[0, 1, 2], [3, 4], [5, 6], [5, 6, 6]]  # clusters {0,...,4} and {5, 6}
    assert ground_truth_k(federation(uneven, [0, 0, 1, 1])) == 5
    assert ground_truth_k(federation(uneven, None)) == 5
    pairs = [[0, 1], [1, 0], [2, 3], [3]]
    assert ground_truth_k(federation(pairs, [0, 0, 1, 1])) == 2


def test_flt_code_reading_options_validated_and_the_papers_defaults_unchanged():
    """The code reading's options are named, bounded choices; the defaults are the paper's (k = 5) and
    fedbench's earlier settings (the run's seed, UMAP's fitted embedding in client order, 10 k-means
    restarts), so entries that do not set them build exactly the algorithm they built before."""
    from fedbench.algorithms.flt import FLT

    default = ALGORITHMS["flt"](encoder="e")
    assert (default.k, default.random_state, default.umap_fit, default.umap_order, default.n_init) == (
        5, "run", "fit_transform", "clients", 10)
    assert default == FLT("encoder", "e", 0, 5, 1.0, "min", None, "simultaneous", 15, 0.1, 0, "all")
    code = ALGORITHMS["flt"](encoder="e", k="ground_truth", random_state="code", umap_fit="transform",
                             umap_order="code", n_init="auto")
    assert (code.k, code.random_state, code.umap_fit, code.umap_order, code.n_init) == (
        "ground_truth", "code", "transform", "code", "auto")
    for bad in (dict(k="labels"), dict(random_state="fixed"), dict(umap_fit="fit"), dict(umap_order="random")):
        with pytest.raises(ValueError):
            ALGORITHMS["flt"](encoder="e", **bad)
    ALGORITHMS.check_params("flt", {"encoder": "e", "k": "ground_truth", "n_init": "auto", "random_state": "code",
                                    "umap_fit": "transform", "umap_order": "code"}, "algorithms.x")
    for key, value in (("k", 0), ("k", "labels"), ("n_init", 0), ("n_init", "best"), ("umap_order", "shuffled"),
                       ("random_state", "fixed"), ("umap_fit", "fit")):
        with pytest.raises(ValueError, match=f"algorithms.x.{key}"):
            ALGORITHMS.check_params("flt", {"encoder": "e", key: value}, "algorithms.x")


@pytest.mark.parametrize("config", ["flt_claims.yaml", "flt_claims_mnist.yaml", "flt.yaml", "flt_offline.yaml"])
def test_every_code_reading_entry_runs_the_released_codes_relatedness(config):
    """Every FLT entry named ``*_code`` in the FLT grids is the authors' code's reading throughout:
    matching distance, in-place aggregation, k from the planted clusters, the code's random states,
    UMAP fitted then transformed in the code's client order, 10 k-means restarts; every other FLT
    entry keeps the paper's defaults for these."""
    import yaml

    entries = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "experiments" / config).read_text())["algorithms"]
    code = dict(distance="matching", aggregation="in_place", k="ground_truth", random_state="code", umap_fit="transform",
                umap_order="code", n_init=10)
    flt_entries = {name: e for name, e in entries.items() if e["method"] == "flt"}
    readings = [name for name in flt_entries if "_code" in name]
    assert readings
    for name, entry in flt_entries.items():
        built = ALGORITHMS.with_defaults("flt", {k: v for k, v in entry.items() if k != "method"})
        if name in readings:
            assert {k: built[k] for k in code} == code, name
        else:
            assert (built["k"], built["random_state"], built["umap_fit"], built["umap_order"]) == (
                5, "run", "fit_transform", "clients"), name


def test_planted_c_ari_cuts_the_same_ward_tree_at_the_true_number_of_clusters():
    """Structure recovery two ways (pipeline ``ari`` and ``ari_planted``): on a graph of three planted
    groups (clients 0-2 | 3-5 | 6-8) whose second and third are tied by three cross links, HC's own C
    (the largest merge-height gap) is 2 and merges them (ARI 0.5), while Ward's tree on Ã's rows (scipy
    called here) cut at the planted C = 3 separates them (ARI 1); both scored against the truth with
    scikit-learn's ARI."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from sklearn.metrics import adjusted_rand_score

    from fedbench.clustering.fcr import hierarchical_clusters
    from fedbench.run.scoring import _planted_scores, _cluster_scores

    truth = np.repeat(np.arange(3), 3)
    adjacency = (truth[:, None] == truth[None, :]).astype(int)
    for i, j in ((3, 6), (3, 7), (4, 8)):  # cross links between groups 1 and 2
        adjacency[i, j] = adjacency[j, i] = 1
    clusters, tree = hierarchical_clusters(adjacency, None, on="rows")
    assert len(set(clusters)) == 2
    state = {"adjacency": adjacency, "clusters": clusters, "linkage": tree}
    fed = make_federation(make_data([3] * 9), mlp(), LocalSGD(1, 5, 0.1))
    algorithm = ALGORITHMS["flt"](encoder="unused")
    want = adjusted_rand_score(truth, fcluster(linkage(adjacency, method="ward", metric="euclidean"), 3, "maxclust"))
    scores = _planted_scores(fed, algorithm, state, truth)
    assert scores == {"ari_planted": pytest.approx(want)} and want == 1.0
    assert _cluster_scores(clusters, truth)["ari"] == 0.5
    assert _planted_scores(fed, algorithm, state, None) == {}
    assert _planted_scores(fed, ALGORITHMS["fedavg"](), state, truth) == {}  # no such reading: not reported
    # an evaluated round records both (history.csv), metrics.json carries both, a claim may read either
    from fedbench.run.scoring import score_round
    from fedbench.results.claims import METRICS
    from fedbench.results.tables import CLUSTER_METRICS

    row, _ = score_round(fed, algorithm, {**state, "clients": broadcast(model_weights(fed.model), 9)}, 1, 0.0, truth)
    assert (row["ari"], row["ari_planted"]) == (0.5, 1.0)
    assert {"ari", "ari_planted"} <= set(METRICS) and {"ari", "ari_planted"} <= set(CLUSTER_METRICS)
    import yaml

    schema = yaml.safe_load((Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml").read_text())
    assert tuple(schema["properties"]["claims"]["additionalProperties"]["properties"]["metric"]["enum"]) == METRICS


@pytest.mark.parametrize("clients, shapes", [
    (100, [(200, 784), (200,), (10, 200), (10,)]),  # FLT's MLP at flt_claims' 100 clients
    (37, [(50, 33), (7,), (3, 3)]),
])
def test_simultaneous_average_of_the_distinct_rows_equals_the_full_product_to_rounding(clients, shapes):
    """FLT's case-I average computes each distinct row of the weights once and hands it to every client
    with that row: the same models as the product of all M rows up to the rounding of the float64 sums
    (the product of fewer rows may sum in another order): float32 entries at most one unit in the last
    place apart, nearly all equal, float64 ones to float64 rounding -- for a graph of cliques (5 distinct
    rows), a random graph (all rows distinct) and one with both -- and the input is left as it was."""
    stacked, before, rng, samples, blocks = stacked_models_and_graph(clients, shapes)
    cliques = (blocks[:, None] == blocks[None, :]).astype(float)
    random = ((rng.random((clients, clients)) < 0.3) | np.eye(clients, dtype=bool)).astype(float)
    mixed = random.copy()
    mixed[: clients // 2] = cliques[: clients // 2]
    for adjacency in (cliques, random, mixed):
        weights = torch.as_tensor(adjacency, dtype=torch.float64) * samples.to(torch.float64)[None, :]
        weights = weights / weights.sum(1, keepdim=True)
        got = neighbour_average(stacked, adjacency, samples, in_place=False)
        for k, v in stacked.items():
            expected = v if not v.is_floating_point() else (
                (weights @ v.reshape(clients, -1).to(torch.float64)).to(v.dtype).view_as(v))
            assert got[k].dtype == v.dtype, k
            if v.dtype == torch.float64:
                torch.testing.assert_close(got[k], expected, rtol=1e-14, atol=1e-15)
            elif v.is_floating_point():
                ulp = torch.nextafter(expected.abs(), torch.tensor(float("inf"))) - expected.abs()
                assert ((got[k] - expected).abs() <= ulp).all(), k
                assert (got[k] != expected).float().mean() < 1e-3, k
            else:
                assert torch.equal(got[k], expected), k
            assert torch.equal(stacked[k], before[k])
