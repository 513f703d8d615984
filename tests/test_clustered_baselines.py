"""Clustered FL baselines (FeSEM, IFCA, CFL): C = 1 reduces to FedAvg, recovery of planted groups."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import make_data, make_federation
from sklearn.metrics import adjusted_rand_score
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.cfl import CFL, bipartition, cfl
from fedbench.algorithms.fesem import FeSEM, fesem
from fedbench.algorithms.clustered import cluster_average
from fedbench.algorithms.ifca import IFCA, ifca
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights


def two_tasks(groups, n=40, dim=5, classes=2, seed=0, test=10) -> FederatedData:
    """Gaussian x, one linear labelling y0 = argmax(x W); client k's labels are (y0 + groups[k]) mod classes,
    so groups with different shifts are incongruent tasks (for 2 classes: labels flipped).  ``n``: train
    rows of every client, or a list of them, one per client."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, classes))
    xs, ys, train, held, start = [], [], [], [], 0
    sizes = [n] * len(groups) if isinstance(n, int) else n
    for g, size in zip(groups, sizes):
        x = rng.normal(size=(size + test, dim)).astype(np.float32)
        xs.append(x)
        ys.append(((x @ w).argmax(1) + g) % classes)
        train.append(np.arange(start, start + size))
        held.append(np.arange(start + size, start + size + test))
        start += size + test
    return FederatedData(
        torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys).astype(np.int64)),
        ClientIndex.from_lists(train, "cpu"), ClientIndex.from_lists(held, "cpu"), classes,
    )


def linear(dim=5, classes=2, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(dim, classes))


def run(algorithm, fed, rounds, track=False):
    state = algorithm.init(fed, model_weights(fed.model))
    aris = []
    for t in range(1, rounds + 1):
        state, _ = algorithm.round(fed, state, t)
        if track:
            aris.append(adjusted_rand_score(track, algorithm.clusters(fed, state)))
    return (state, aris) if track else state


GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]
SIZES = [12, 30, 9, 17, 21, 8, 25, 14]  # unequal, so that sample weighting shows


def client_rows(fed, i):
    chosen = fed.data.train.index[i, : int(fed.data.train.counts[i])]
    return fed.data.x[chosen], fed.data.y[chosen]


def logits(weights, x):
    """The ``linear()`` model by hand."""
    return x @ weights["1.weight"].T + weights["1.bias"]


def gd_step(weights, x, y, lr):
    """One full-batch gradient step on the mean cross-entropy, plain autograd."""
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    grads = torch.autograd.grad(F.cross_entropy(logits(w, x), y), list(w.values()))
    return {k: (w[k] - lr * g).detach() for k, g in zip(w, grads)}


def member_average(models, members):
    """sum_i n_i w_i / sum_i n_i over ``members``, float64."""
    n = np.asarray(SIZES, dtype=np.float64)[members]
    return {k: (sum(float(a) * models[i][k].double() for a, i in zip(n, members)) / n.sum()).float() for k in models[0]}


def assert_weights(got, expected, atol=1e-6):
    for k, v in expected.items():
        torch.testing.assert_close(got[k], v, atol=atol, rtol=1e-5)


def test_one_cluster_is_fedavg():
    data = make_data([12, 30, 9, 17, 21, 8])
    hp = LocalSGD(epochs=1, batch_size=5, lr=0.1, momentum=0.5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    fed = lambda: make_federation(data, model, hp, participation=0.5, seed=1)
    reference = run(ALGORITHMS["fedavg"](), fed(), 5)["global"]
    centres = {
        "fesem": run(fesem(num_clusters=1), fed(), 5)["centres"],
        "fesem_random": run(fesem(num_clusters=1, init="random"), fed(), 5)["centres"],
        "ifca": run(ifca(num_clusters=1), fed(), 5)["centres"],
        "ifca_warmup": run(ifca(num_clusters=1, warmup_rounds=2), fed(), 5)["centres"],
    }
    for name, stacked in centres.items():
        for k in reference:
            assert torch.equal(stacked[k][0], reference[k]), name
    no_split = run(cfl(eps1=0.0), fed(), 5)["models"]  # never splits: one cluster, FedAvg of updates
    assert list(no_split) == [0]
    for k in reference:
        torch.testing.assert_close(no_split[0][k], reference[k], rtol=0, atol=1e-6)


def test_cluster_average_by_hand_keeps_empty_centres():
    data = make_data([1, 3, 2])
    fed = make_federation(data, linear(), LocalSGD(1, 4, 0.1))
    centres = {"w": torch.tensor([[0.0], [5.0], [7.0]])}
    trained = {"w": torch.tensor([[1.0], [3.0], [9.0]])}
    out = cluster_average(fed, centres, trained, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 2]))
    assert torch.equal(out["w"], torch.tensor([[(1 * 1 + 3 * 3) / 4], [5.0], [9.0]]))


def test_ifca_picks_the_cluster_with_the_lowest_training_loss():
    data = two_tasks(GROUPS)
    fed = make_federation(data, linear(), LocalSGD(1, 10, 0.1))
    algorithm = IFCA(num_clusters=2)
    state = algorithm.init(fed, model_weights(fed.model))
    truth = torch.from_numpy(np.random.default_rng(0).normal(size=(5, 2)).T.astype(np.float32))
    # centre 0 = the labelling of group 0 (scaled up), centre 1 = its rows swapped (labels flipped)
    state["centres"] = {"1.weight": torch.stack([10 * truth, 10 * truth.flip(0)]), "1.bias": torch.zeros(2, 2)}
    state, _ = algorithm.round(fed, state, 1)
    assert state["assign"].tolist() == GROUPS
    frame = algorithm.artifacts(fed, state)["assignments"]
    assert frame["cluster"].tolist() == GROUPS and frame["round"].tolist() == [1] * 8


def test_ifca_round_by_hand():
    """IFCA (Ghosh et al. 2020), Algorithm 1 with model averaging: client i estimates its cluster
    j_i = argmin_j F_i(theta_j) (mean cross-entropy on its training data), runs local SGD from
    theta_{j_i}, and theta_j <- sum_{i: j_i = j} n_i theta_i / sum n_i; a cluster nobody chose keeps
    its model.  Centres: a random linear model, the same with its class rows swapped (it predicts the
    other label), and one that always predicts label 0."""
    lr = 0.3
    fed = make_federation(two_tasks(GROUPS, n=SIZES), linear(seed=1), LocalSGD(1, 64, lr))  # full batch
    algorithm = IFCA(num_clusters=3)
    state = algorithm.init(fed, model_weights(fed.model))
    w0 = model_weights(fed.model)
    always_zero = {"1.weight": torch.zeros(2, 5), "1.bias": torch.tensor([10.0, -10.0])}  # predicts class 0
    centres = [w0, {k: v.flip(0) for k, v in w0.items()}, always_zero]
    state["centres"] = {k: torch.stack([c[k] for c in centres]) for k in w0}
    state, _ = algorithm.round(fed, state, 1)
    data = [client_rows(fed, i) for i in range(8)]
    losses = np.array([[float(F.cross_entropy(logits(c, x), y)) for c in centres] for x, y in data])
    choice = losses.argmin(1)
    assert set(choice.tolist()) == {0, 1}  # both informative centres chosen, the zero one by nobody
    assert state["assign"].tolist() == choice.tolist()
    trained = [gd_step(centres[j], x, y, lr) for j, (x, y) in zip(choice, data)]
    for j in range(3):
        expected = member_average(trained, np.flatnonzero(choice == j)) if j in choice else centres[j]
        assert_weights({k: v[j] for k, v in state["centres"].items()}, expected)


def test_ifca_separates_two_label_flipped_groups():
    for seed in range(3):
        fed = make_federation(two_tasks(GROUPS, seed=seed), linear(seed=seed), LocalSGD(1, 10, 0.5), seed=seed)
        algorithm = ifca(num_clusters=2)
        state, aris = run(algorithm, fed, 6, track=GROUPS)
        assert aris[-3:] == [1.0] * 3, (seed, aris)
        models = algorithm.client_models(fed, state, 6)["1.weight"]
        assert torch.equal(models[0], models[3]) and not torch.equal(models[0], models[4])


def test_ifca_scores_unsampled_clients_with_the_cluster_they_would_choose():
    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 10, 0.5), participation=0.25, seed=3)
    algorithm = ifca(num_clusters=2, warmup_rounds=1)
    state = run(algorithm, fed, 2)
    assert (state["assign"] >= 0).sum() == 2  # two clients sampled after the warm-up round
    effective = algorithm.clusters(fed, state)
    losses = algorithm.train_losses(fed, state["centres"], torch.arange(8)).numpy()
    unseen = state["assign"].numpy() < 0
    assert np.array_equal(effective[unseen], losses.argmin(1)[unseen])


def test_fesem_recovers_two_groups_with_very_different_data():
    for seed in range(3):
        fed = make_federation(two_tasks(GROUPS, seed=seed), linear(seed=seed), LocalSGD(1, 10, 0.5), seed=seed)
        algorithm = fesem(num_clusters=2)
        state, aris = run(algorithm, fed, 4, track=GROUPS)
        assert aris == [1.0] * 4, (seed, aris)
        assert algorithm.global_model(fed, state) is None
        assert len(algorithm.artifacts(fed, state)["assignments"]) == 4 * 8


@pytest.mark.parametrize("distance", ["l2", "cosine"])
def test_fesem_round_by_hand(distance):
    """FeSEM (Xie et al., Alg. 1): every client trains from its centre's model; E-step (Eq. 7): each
    trained model joins the nearest centre (L2 or cosine distance of the flattened parameters); M-step
    (Eq. 8): each centre <- the sample-weighted average of its members' models, an empty centre keeps
    its model.  Every client was in centre 0 (the initial model w0); centre 1 is group 1's mean trained
    model m1, centre 2 is far.  The centres make the two distances disagree: for L2 centre 2 is
    10 x client 4's trained model (its nearest in angle), for cosine centre 1 is 10 m1 (far in L2)."""
    lr = 0.5
    fed = make_federation(two_tasks(GROUPS, n=SIZES), linear(), LocalSGD(1, 64, lr))  # full batch
    algorithm = fesem(num_clusters=3, distance=distance)
    state = algorithm.init(fed, model_weights(fed.model))
    w0 = model_weights(fed.model)
    data = [client_rows(fed, i) for i in range(8)]
    trained = [gd_step(w0, x, y, lr) for x, y in data]  # by hand: everyone trains from centre 0
    towards_group1 = member_average(trained, np.arange(4, 8))
    if distance == "l2":
        centres = [w0, towards_group1, {k: 10 * v for k, v in trained[4].items()}]
    else:
        centres = [w0, {k: 10 * v for k, v in towards_group1.items()}, {k: -3 * v for k, v in w0.items()}]
    state["centres"] = {k: torch.stack([c[k] for c in centres]) for k in w0}
    state["assign"] = torch.zeros(8, dtype=torch.long)
    state, _ = algorithm.round(fed, state, 1)

    def flat(w):
        return torch.cat([w["1.weight"].flatten(), w["1.bias"]]).double().numpy()

    points, means = np.stack([flat(t) for t in trained]), np.stack([flat(c) for c in centres])
    if distance == "l2":
        d = np.sqrt(((points[:, None] - means[None]) ** 2).sum(-1))
    else:
        d = 1 - (points @ means.T) / np.outer(np.linalg.norm(points, axis=1), np.linalg.norm(means, axis=1))
    choice = d.argmin(1)
    assert choice.tolist() == GROUPS  # group 1 leaves centre 0, nobody joins centre 2
    assert state["assign"].tolist() == choice.tolist()
    for j in range(3):
        expected = member_average(trained, np.flatnonzero(choice == j)) if j in choice else centres[j]
        assert_weights({k: v[j] for k, v in state["centres"].items()}, expected)


def test_fesem_cosine_distance_and_finetuning_variant():
    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 10, 0.5))
    algorithm = FeSEM(num_clusters=2, distance="cosine", finetune_epochs=1)
    state, aris = run(algorithm, fed, 3, track=GROUPS)
    assert aris[-1] == 1.0
    tuned = algorithm.client_models(fed, state, 3)["1.weight"]
    assert not torch.equal(tuned[0], tuned[1])  # each client fine-tuned on its own data
    assert torch.equal(tuned, algorithm.client_models(fed, state, 3)["1.weight"])


def test_bipartition_of_a_block_similarity_matrix():
    sim = np.array([[1, .9, -.8, -.7], [.9, 1, -.6, -.9], [-.8, -.6, 1, .8], [-.7, -.9, .8, 1]])
    assert bipartition(sim).tolist() == [True, True, False, False]


def test_cfl_splits_incongruent_groups_once():
    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 40, 0.5))  # full-batch local GD
    algorithm = CFL(eps1=0.1, eps2=0.3, min_cluster_size=3, warmup_rounds=3)
    state, aris = run(algorithm, fed, 12, track=GROUPS)
    splits = algorithm.artifacts(fed, state)["cfl_splits"]
    assert len(splits) == 1 and splits["max_cross_similarity"].iloc[0] < 0
    assert aris[-1] == 1.0 and len(state["models"]) == 2
    membership = algorithm.artifacts(fed, state)["cfl_membership"]
    assert membership.shape == (12, 8) and len(set(membership[0])) == 1


@pytest.mark.parametrize("eps1, eps2, split", [(0.4, 0.6, True), (0.3, 0.6, False), (0.4, 0.8, False)])
def test_cfl_split_criterion_and_bipartition_by_hand(eps1, eps2, split):
    """CFL (Sattler et al. 2020), Algorithm 1 / Eqs. (29)-(30): a cluster splits iff
    ||sum_i n_i/n dtheta_i|| < eps1 and max_i ||dtheta_i|| > eps2; the bipartition separates the
    updates by cosine similarity (Eq. 23) and each side gets the sample-weighted FedAvg of its members.
    Linear(1 -> 2) without bias at W = 0, every x = 1, one full-batch step of lr 1: a client with all
    labels 0 moves by (1/2, -1/2), one with all labels 1 by (-1/2, 1/2).  Clients 0, 2 (6 samples each,
    label 0) and 1, 3 (2 each, label 1): mean update (12 - 4) / 16 (1/2, -1/2), norm sqrt(2)/4 = 0.354;
    largest update norm sqrt(2)/2 = 0.707."""
    sizes, labels = [6, 2, 6, 2], [0, 1, 0, 1]
    y = torch.from_numpy(np.concatenate([np.full(n, l) for n, l in zip(sizes, labels)] + [np.zeros(4)]).astype(np.int64))
    starts = np.cumsum([0] + sizes)
    train = [np.arange(a, a + n) for a, n in zip(starts, sizes)]
    test = ClientIndex.from_lists([np.array([16 + i]) for i in range(4)], "cpu")
    data = FederatedData(torch.ones(20, 1), y, ClientIndex.from_lists(train, "cpu"), test, 2)
    model = nn.Linear(1, 2, bias=False)
    nn.init.zeros_(model.weight)
    fed = make_federation(data, model, LocalSGD(1, 64, 1.0))
    algorithm = cfl(eps1=eps1, eps2=eps2, min_cluster_size=3, warmup_rounds=0)
    state, _ = algorithm.round(fed, algorithm.init(fed, model_weights(model)), 1)
    norms = algorithm.artifacts(fed, state)["cfl_norms"].iloc[0]
    np.testing.assert_allclose([norms["mean_norm"], norms["max_norm"]], [np.sqrt(2) / 4, np.sqrt(2) / 2], atol=1e-7)
    models = algorithm.client_models(fed, state, 1)["weight"][:, :, 0]
    half = torch.tensor([0.5, -0.5])
    if split:
        assert len(state["splits"]) == 1 and len(state["models"]) == 2
        leaves = algorithm.clusters(fed, state).tolist()
        assert leaves[0] == leaves[2] != leaves[1] == leaves[3]
        torch.testing.assert_close(models, torch.stack([half, -half, half, -half]))
    else:
        assert state["splits"] == [] and list(state["models"]) == [0]
        torch.testing.assert_close(models, (half / 2).expand(4, 2))


def test_cfl_leaves_a_congruent_group_whole():
    fed = make_federation(two_tasks([0] * 8), linear(), LocalSGD(1, 40, 0.5))
    algorithm = CFL(eps1=0.1, eps2=0.3, min_cluster_size=3, warmup_rounds=3)
    state = run(algorithm, fed, 12)
    assert len(algorithm.artifacts(fed, state)["cfl_splits"]) == 0
    assert set(algorithm.clusters(fed, state).tolist()) == {0}
    assert algorithm.global_model(fed, state) is not None


def test_cfl_routes_clients_missed_by_a_split_down_the_tree():
    groups = [0] * 6 + [1] * 6
    fed = make_federation(two_tasks(groups), linear(), LocalSGD(1, 40, 0.5), participation=0.5, seed=2)
    algorithm = CFL(eps1=0.15, eps2=0.3, min_cluster_size=3, warmup_rounds=3)
    state, aris = run(algorithm, fed, 25, track=groups)
    assert len(algorithm.artifacts(fed, state)["cfl_splits"]) == 1
    assert not any(int(a) in state["tree"] for a in state["assign"])  # everyone sampled since has descended
    assert aris[-1] == 1.0


def test_fesem_recovers_groups_under_partial_participation():
    groups = [0] * 6 + [1] * 6
    for seed in range(3):
        fed = make_federation(two_tasks(groups, seed=seed), linear(seed=seed), LocalSGD(1, 40, 0.5), 0.5, seed)
        algorithm = fesem(num_clusters=2)
        state, aris = run(algorithm, fed, 15, track=groups)
        assert (state["assign"] >= 0).all() and aris[-1] == 1.0, (seed, aris)


def test_assignment_figure_is_written(tmp_path, saved_figures):
    """Client x round cells: a client keeps its last cluster until sampled again, blank before its
    first (client 1 is first sampled in round 2); rows in ground-truth order, the truth as a strip."""
    import pandas as pd

    from fedbench.results.clustering_figures import plot_assignments

    frame = pd.DataFrame({"round": [1, 1, 2, 3], "client": [0, 2, 1, 0], "cluster": [0, 1, 1, 0]})
    plot_assignments(frame, [1, 0, 1], tmp_path / "a.png")
    strip, ax = saved_figures[-1].axes
    cells = ax.images[0].get_array()
    # rows by truth: client 1 (truth 0), then clients 0 and 2 (truth 1)
    assert cells.mask.tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    assert cells.filled(-1).tolist() == [[-1, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert strip.images[0].get_array().ravel().tolist() == [0, 1, 1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    assert (tmp_path / "a.png").stat().st_size > 0


def test_cfl_mean_update_norm_sample_weighted_or_uniform_by_hand():
    """Linear(1 -> 2) without bias at W = 0, every x = 1, one full-batch step of lr 1: softmax is
    (1/2, 1/2), so client i's update is (f_i - 1/2)(1, -1) with f_i its share of class 0.
    Clients: 4 samples all class 0 (+1/2), 12 all class 1 (-1/2), 8 half and half (0).
    samples (paper): ||(4 (1/2) - 12 (1/2) + 0) / 24 (1, -1)|| = sqrt(2) / 6;
    uniform (notebook): ||(1/2 - 1/2 + 0) / 3 (1, -1)|| = 0; max client norm sqrt(2) / 2."""
    labels = [np.zeros(4), np.ones(12), np.r_[np.zeros(4), np.ones(4)]]
    y = torch.from_numpy(np.concatenate(labels + [np.zeros(3)]).astype(np.int64))  # + 3 test rows
    sizes = [len(l) for l in labels]
    train = [np.arange(a, a + n) for a, n in zip(np.cumsum([0] + sizes[:-1]), sizes)]
    test = ClientIndex.from_lists([np.array([24]), np.array([25]), np.array([26])], "cpu")
    data = FederatedData(torch.ones(27, 1), y, ClientIndex.from_lists(train, "cpu"), test, 2)
    for weighting, want in [("samples", np.sqrt(2) / 6), ("uniform", 0.0)]:
        model = nn.Linear(1, 2, bias=False)
        nn.init.zeros_(model.weight)
        fed = make_federation(data, model, LocalSGD(1, 64, 1.0))
        algorithm = cfl(mean_norm_weighting=weighting)
        state, _ = algorithm.round(fed, algorithm.init(fed, model_weights(model)), 1)
        norms = algorithm.artifacts(fed, state)["cfl_norms"]
        assert norms["clients"].tolist() == [3]
        np.testing.assert_allclose(norms["mean_norm"].iloc[0], want, atol=1e-7)
        np.testing.assert_allclose(norms["max_norm"].iloc[0], np.sqrt(2) / 2, atol=1e-7)
