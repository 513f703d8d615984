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


# --- centre initialisation and seeding (clustered.py, IFCA/FeSEM init) -----------------------------


def reinitialised(template, seed):
    """The template with every layer's ``reset_parameters`` run under ``torch.manual_seed(seed)``."""
    import copy

    clone = copy.deepcopy(template)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    for module in clone.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    torch.random.set_rng_state(state)
    return model_weights(clone)


def test_fresh_and_perturbed_centres_use_their_own_seeded_streams():
    """IFCA's / FeSEM's random centres (module docstrings): ``fresh_weights`` is the model template
    re-initialised under the given seed, ``perturbed`` adds N(0, std^2) noise to every floating tensor
    (integer buffers untouched, every tensor keeps its dtype); both draw from their own generator, so neither depends on nor moves
    the global torch RNG."""
    from fedbench.algorithms.clustered import fresh_weights, perturbed

    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 10, 0.1))
    template = model_weights(fed.model)
    before = torch.random.get_rng_state()
    fresh = fresh_weights(fed, 7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert_weights(model_weights(fed.model), template, atol=0)  # the template itself is left alone
    assert_weights(fresh, reinitialised(fed.model, 7), atol=0)
    assert not torch.equal(fresh["1.weight"], template["1.weight"])
    assert not torch.equal(fresh_weights(fed, 8)["1.weight"], fresh["1.weight"])

    single = {"w": torch.full((200, 100), 3.0), "n": torch.tensor(5), "h": torch.zeros(3, dtype=torch.float16)}
    torch.manual_seed(0)
    noisy = perturbed(single, 0.5, seed=11)
    torch.manual_seed(1)  # another global state: same draw
    assert torch.equal(perturbed(single, 0.5, seed=11)["w"], noisy["w"])
    assert not torch.equal(perturbed(single, 0.5, seed=12)["w"], noisy["w"])
    noise = (noisy["w"] - 3.0).double()
    assert abs(float(noise.mean())) < 0.01 and abs(float(noise.std()) - 0.5) < 0.01  # N(0, 0.5^2), 20000 draws
    assert noisy["n"].dtype == torch.long and int(noisy["n"]) == 5
    assert noisy["h"].dtype == torch.float16 and noisy["h"].abs().max() > 0  # every tensor keeps its dtype
    assert torch.equal(perturbed(single, 0.0, seed=11)["w"], single["w"])


def test_random_centres_are_the_template_reinitialised_per_centre():
    """IFCA ``init: random`` and FeSEM ``init: random`` (module docstrings): centre 0 is the run's initial
    model, centre j >= 1 the template re-initialised under seed ``fed.seed * 1000 + j``; IFCA
    ``init: perturb``: centre j = initial model + N(0, perturb^2) noise."""
    from fedbench.algorithms.clustered import perturbed

    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 10, 0.1), seed=2)
    initial = model_weights(fed.model)
    for algorithm in (ifca(num_clusters=3), fesem(num_clusters=3, init="random")):
        centres = algorithm.init(fed, initial)["centres"]
        assert_weights({k: v[0] for k, v in centres.items()}, initial, atol=0)
        for j in (1, 2):
            assert_weights({k: v[j] for k, v in centres.items()}, reinitialised(fed.model, 2000 + j), atol=0)
    centres = ifca(num_clusters=3, init="perturb", perturb=0.3).init(fed, initial)["centres"]
    for j in (1, 2):
        assert_weights({k: v[j] for k, v in centres.items()}, perturbed(initial, 0.3, 2000 + j), atol=0)
    assert fesem(num_clusters=3).init(fed, initial)["centres"] is None  # "clients": seeded in round 1


def test_ifca_warm_up_is_fedavg_then_perturbed_centres():
    """IFCA with ``warmup_rounds`` (module docstring, FLT's IFCA runs pre-train with FedAvg): rounds
    1..warmup are FedAvg on one global model (which is what every client is scored with); the first
    round after it starts all centres from the FedAvg model, centre j >= 1 perturbed by N(0, perturb^2)
    under seed fed.seed * 1000 + j.  lr = 0, so training leaves every model as it is and each centre
    after the clustered round is exactly where it started."""
    from fedbench.algorithms.clustered import perturbed

    fed = make_federation(two_tasks(GROUPS), linear(), LocalSGD(1, 10, 0.0), seed=4)
    algorithm = ifca(num_clusters=3, warmup_rounds=1, perturb=0.5)
    initial = model_weights(fed.model)
    state = algorithm.init(fed, initial)
    state, _ = algorithm.round(fed, state, 1)
    assert state["centres"] is None and (state["assign"] < 0).all()
    assert_weights(algorithm.global_model(fed, state), initial)
    models = algorithm.client_models(fed, state, 1)
    for k, v in initial.items():
        torch.testing.assert_close(models[k], v.expand(8, *v.shape))
    assert algorithm.clusters(fed, state).tolist() == [0] * 8
    state, _ = algorithm.round(fed, state, 2)
    assert algorithm.global_model(fed, state) is None
    expected = [initial] + [perturbed(initial, 0.5, 4000 + j) for j in (1, 2)]
    for j in range(3):
        assert_weights({k: v[j] for k, v in state["centres"].items()}, expected[j])
    frame = algorithm.artifacts(fed, state)["assignments"]
    assert frame["round"].tolist() == [2] * 8 and frame["client"].tolist() == list(range(8))


def test_options_outside_the_documented_choices_are_rejected():
    """Every option with a fixed set of choices (module docstrings) rejects anything else; the
    smallest valid values (one cluster, one fine-tuning epoch) are accepted."""
    from fedbench.algorithms.fesem import fesem_plus

    for make in (lambda: IFCA(centre_init="kmeans"), lambda: IFCA(num_clusters=0), lambda: ifca(init="zeros"),
                 lambda: FeSEM(centre_init="kmeans"), lambda: FeSEM(distance="l1"), lambda: fesem(distance="cos"),
                 lambda: CFL(mean_norm_weighting="clients"), lambda: fesem_plus(finetune_epochs=0)):
        with pytest.raises(ValueError):
            make()
    assert IFCA(num_clusters=1).num_clusters == 1 and fesem_plus(finetune_epochs=1).finetune_epochs == 1


def test_documented_defaults():
    """The registered defaults the docstrings document: IFCA 2 random centres, perturb 0.01, no warm-up;
    CFL the authors' notebook eps1 = 0.4, eps2 = 1.6, > 2 clients to split, splits after round 20,
    sample-weighted mean norm (Alg. 1); FeSEM 5 centres, L2 (the paper's distance), seeded from the
    clients' models; FeSEM+ (FeMAM Sec. 5.1) 2 fine-tuning epochs."""
    from fedbench.algorithms.fesem import fesem_plus

    assert ifca() == IFCA(num_clusters=2, warmup_rounds=0, centre_init="random", perturb=0.01)
    assert cfl() == CFL(eps1=0.4, eps2=1.6, min_cluster_size=3, warmup_rounds=20, mean_norm_weighting="samples")
    assert fesem() == FeSEM(num_clusters=5, distance="l2", centre_init="clients", finetune_epochs=0)
    assert fesem_plus() == FeSEM(num_clusters=5, distance="l2", centre_init="clients", finetune_epochs=2)


def test_assignment_frame_and_flat_parameters():
    """The assignment log (round, client, cluster) is empty, with its columns, before any clustered
    round; ``flat`` is the [n, P] parameter vector of each stacked model, buffers (BatchNorm's running
    statistics) left out, in the model's parameter order."""
    from types import SimpleNamespace

    from fedbench.algorithms.clustered import assignment_frame, flat

    empty = assignment_frame([])
    assert list(empty.columns) == ["round", "client", "cluster"] and len(empty) == 0
    frame = assignment_frame([(3, np.array([2, 5]), np.array([1, 0])), (4, np.array([1]), np.array([1]))])
    assert frame.values.tolist() == [[3, 2, 1], [3, 5, 0], [4, 1, 1]]
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    stacked = {k: torch.stack([v, 2 * v + 1]) for k, v in model_weights(model).items() if v.is_floating_point()}
    stacked["1.num_batches_tracked"] = torch.tensor([0, 4])
    got = flat(SimpleNamespace(model=model), stacked)
    by_hand = [torch.cat([p.detach().flatten() for p in model.parameters()])]
    by_hand.append(2 * by_hand[0] + 1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.stack(by_hand))


# --- IFCA: cluster estimates outside the round ---------------------------------------------------


def test_ifca_train_losses_and_effective_clusters_by_hand():
    """IFCA (Ghosh et al. 2020, Alg. 1, cluster identity estimation): F_i(theta_j) is client i's mean
    cross-entropy on its training data (checked against plain cross-entropy for every client and
    centre); the model is left in the mode it was in.  A client is scored with its last chosen cluster
    even when another centre now fits it better; a never-sampled client with argmin_j F_i(theta_j)
    (module docstring)."""
    fed = make_federation(two_tasks(GROUPS, n=SIZES), linear(seed=1), LocalSGD(1, 64, 0.1))
    algorithm = IFCA(num_clusters=2)
    w0 = model_weights(fed.model)
    centres = [w0, {k: v.flip(0) for k, v in w0.items()}]
    state = algorithm.init(fed, w0)
    state["centres"] = {k: torch.stack([c[k] for c in centres]) for k in w0}
    data = [client_rows(fed, i) for i in range(8)]
    losses = np.array([[float(F.cross_entropy(logits(c, x), y)) for c in centres] for x, y in data])
    for mode in (False, True):
        fed.model.train(mode)
        got = algorithm.train_losses(fed, state["centres"], torch.arange(8))
        np.testing.assert_allclose(got.numpy(), losses, rtol=1e-5)
        assert fed.model.training == mode
    best = losses.argmin(1)
    state["assign"] = torch.tensor([1 - best[0], 1 - best[1], -1, -1, 1 - best[4], -1, -1, -1])
    expected = best.copy()
    expected[[0, 1, 4]] = 1 - best[[0, 1, 4]]
    assert algorithm.clusters(fed, state).tolist() == expected.tolist()
    models = algorithm.client_models(fed, state, 1)
    for i in range(8):
        assert_weights({k: v[i] for k, v in models.items()}, centres[expected[i]], atol=0)
    assert algorithm.global_model(fed, state) is None


# --- CFL: one split by hand, the parameter tree, and the split gates -------------------------------


def cfl_federation(labels, lr=1.0):
    """Linear(1 -> 2) without bias at W = 0, every x = 1, full-batch local GD: client i's update is
    lr (f_i - 1/2)(1, -1), f_i its share of class 0 (softmax at 0 is (1/2, 1/2)).  ``labels``: one array
    of training labels per client (one extra test row each)."""
    sizes = [len(l) for l in labels]
    total = sum(sizes)
    y = torch.from_numpy(np.concatenate(list(labels) + [np.zeros(len(labels))]).astype(np.int64))
    starts = np.cumsum([0] + sizes[:-1])
    train = [np.arange(a, a + n) for a, n in zip(starts, sizes)]
    test = ClientIndex.from_lists([np.array([total + i]) for i in range(len(labels))], "cpu")
    data = FederatedData(torch.ones(len(y), 1), y, ClientIndex.from_lists(train, "cpu"), test, 2)
    model = nn.Linear(1, 2, bias=False)
    nn.init.zeros_(model.weight)
    return make_federation(data, model, LocalSGD(1, 64, lr)), model_weights(model)


def share(n, f):
    """n labels, a share f of them class 0."""
    return np.r_[np.zeros(round(n * f)), np.ones(n - round(n * f))]


# clients 0-3 sampled in round 1: updates +1/2, +1/4 (4 and 8 samples), -1/2, -1/4 (2 and 4 samples);
# client 4 (2 samples, all class 1) is not sampled in round 1
CFL_LABELS = [share(4, 1.0), share(8, 0.75), share(2, 0.0), share(4, 0.25), share(2, 0.0)]


def test_cfl_split_parameter_tree_and_logs_by_hand():
    """CFL (Sattler et al. 2020), Alg. 1 and Sec. VI (parameter tree).  Round 1, clients 0-3: updates
    u = (1/2, 1/4, -1/2, -1/4)(1, -1) with n = (4, 8, 2, 4): mean update sum n_i u_i / 18 = (1/9)(1, -1),
    norm sqrt(2)/9 < eps1 = 0.4; max norm sqrt(2)/2 > eps2 = 0.6: the cluster splits by cosine
    similarity into {0, 1} (child 1: it holds client 0) and {2, 3} (child 2), cross similarity -1.
    Each child's model is its members' sample-weighted average, +-(1/3)(1, -1); the tree caches the
    pre-split model (0) and each child's sample-weighted mean update, +-(1/3)(1, -1).  Client 4, not
    sampled, stays on the inner node and is scored with the child holding more samples (1: 12 vs 6).
    Round 2, only client 4: its update from the cached model, (-1/2)(1, -1), is most similar to child
    2's direction, so it descends to child 2 (not the larger one) and trains from child 2's model:
    logits (-1/3, 1/3), label 1, so it moves by p0 (-1, 1) with p0 = 1 / (1 + e^{2/3})."""
    fed, w0 = cfl_federation(CFL_LABELS)
    algorithm = cfl(eps1=0.4, eps2=0.6, min_cluster_size=3, warmup_rounds=0)
    fed.sample_clients = lambda: torch.tensor([0, 1, 2, 3])
    state = algorithm.init(fed, w0)
    assert algorithm.artifacts(fed, state)["cfl_membership"].shape == (0, 5)
    state, _ = algorithm.round(fed, state, 1)
    third = torch.tensor([1 / 3, -1 / 3])
    assert set(state["models"]) == {1, 2} and set(state["tree"]) == {0}
    node = state["tree"][0]
    assert node["children"] == (1, 2) and node["larger"] == 1
    torch.testing.assert_close(node["model"]["weight"], w0["weight"])
    torch.testing.assert_close(node["directions"].float(), torch.stack([third, -third]))
    torch.testing.assert_close(state["models"][1]["weight"][:, 0], third)
    torch.testing.assert_close(state["models"][2]["weight"][:, 0], -third)
    assert algorithm.clusters(fed, state).tolist() == [0, 0, 1, 1, 0]
    models = algorithm.client_models(fed, state, 1)["weight"][:, :, 0]
    torch.testing.assert_close(models, torch.stack([third, third, -third, -third, third]))
    assert algorithm.global_model(fed, state) is None
    splits = algorithm.artifacts(fed, state)["cfl_splits"]
    assert splits.drop(columns=["mean_norm", "max_norm", "max_cross_similarity"]).values.tolist() == [
        [1, 0, 1, 2, 2, 2, "0 1", "2 3"]]
    np.testing.assert_allclose(splits[["mean_norm", "max_norm", "max_cross_similarity"]].values[0],
                               [np.sqrt(2) / 9, np.sqrt(2) / 2, -1.0], atol=1e-6)
    diagnostics = algorithm.diagnostics(fed, state)
    np.testing.assert_allclose([diagnostics["cfl_mean_norm"], diagnostics["cfl_max_norm"]], [np.sqrt(2) / 9, np.sqrt(2) / 2], atol=1e-6)
    assert diagnostics["cfl_splits"] == 1 and algorithm.summary(fed, state) == {"split_rounds": [1]}

    fed.sample_clients = lambda: torch.tensor([4])
    state, _ = algorithm.round(fed, state, 2)
    p0 = 1 / (1 + np.exp(2 / 3))
    assert algorithm.clusters(fed, state).tolist() == [0, 0, 1, 1, 1]
    torch.testing.assert_close(state["models"][2]["weight"][:, 0], -third + torch.tensor([-p0, p0], dtype=torch.float32))
    torch.testing.assert_close(state["models"][1]["weight"][:, 0], third)  # no member this round: kept
    membership = algorithm.artifacts(fed, state)["cfl_membership"]
    assert membership.tolist() == [[1, 1, 2, 2, 1], [1, 1, 2, 2, 2]]
    diagnostics = algorithm.diagnostics(fed, state)  # this round's norms only: one client, in its own cluster
    np.testing.assert_allclose([diagnostics["cfl_mean_norm"], diagnostics["cfl_max_norm"]], [np.sqrt(2) * p0] * 2, rtol=1e-5)
    norms = algorithm.artifacts(fed, state)["cfl_norms"]
    assert norms[["round", "cluster", "clients"]].values.tolist() == [[1, 0, 4], [2, 2, 1]]
    fed.sample_clients = lambda: torch.arange(5)  # round 3: both leaves take part, each logs its norms
    state, _ = algorithm.round(fed, state, 3)  # (leaf 1, two members, is below min_cluster_size)
    norms = algorithm.artifacts(fed, state)["cfl_norms"]
    assert norms[["round", "cluster", "clients"]].values.tolist()[2:] == [[3, 1, 2], [3, 2, 3]]
    splits = algorithm.artifacts(fed, state)["cfl_splits"]  # cluster ids are logged as integers
    assert all(frame[c].dtype.kind == "i" for frame, c in [(norms, "cluster"), (splits, "parent"), (splits, "child_a")])


@pytest.mark.parametrize("case", ["baseline", "warmup", "too_few", "exactly_min", "eps2_equal", "pair", "single"])
def test_cfl_split_gates(case):
    """CFL's split condition (Alg. 1, Eqs. (29)-(30), and the authors' code's gates, module docstring):
    a cluster splits only after ``warmup_rounds`` (round > warmup), with at least ``min_cluster_size``
    (and never fewer than 2) participating members, and strictly ||mean update|| < eps1 and
    max ||update|| > eps2.  Clients 0-3 of the by-hand split above (mean norm sqrt(2)/9, max sqrt(2)/2)."""
    clients, params, split = [0, 1, 2, 3], dict(eps1=0.4, eps2=0.6, min_cluster_size=3, warmup_rounds=0), True
    if case == "warmup":  # round 1 is not past warmup_rounds = 1
        params["warmup_rounds"], split = 1, False
    elif case == "too_few":
        params["min_cluster_size"], split = 5, False
    elif case == "exactly_min":
        params["min_cluster_size"] = 4
    elif case == "eps2_equal":  # the largest update norm is sqrt(1/2) (in float32): max > eps2 fails at equality
        params["eps2"], split = float(np.float32(np.sqrt(0.5))), False
    elif case == "pair":  # two opposite clients may split when min_cluster_size allows it
        clients, params["min_cluster_size"] = [0, 2], 1
    elif case == "single":  # one client never splits, whatever min_cluster_size says
        clients, params["min_cluster_size"], split = [0], 1, False
    fed, w0 = cfl_federation(CFL_LABELS)
    fed.sample_clients = lambda: torch.tensor(clients)
    algorithm = cfl(**params)
    state, _ = algorithm.round(fed, algorithm.init(fed, w0), 1)
    assert len(state["splits"]) == int(split) and len(state["models"]) == 1 + int(split)


def test_cfl_mean_norm_threshold_is_strict():
    """Eq. (29): the cluster must be *strictly* below eps1.  Uniform weighting (the authors' notebook)
    of the updates +1/2, +1/4, -1/2, -1/4 (times (1, -1)) gives a mean update of exactly 0: eps1 = 0
    does not split, any positive eps1 does."""
    for eps1, split in [(0.0, False), (1e-9, True)]:
        fed, w0 = cfl_federation(CFL_LABELS)
        fed.sample_clients = lambda: torch.tensor([0, 1, 2, 3])
        algorithm = cfl(eps1=eps1, eps2=0.6, warmup_rounds=0, mean_norm_weighting="uniform")
        state, _ = algorithm.round(fed, algorithm.init(fed, w0), 1)
        assert state["norms"][0]["mean_norm"] == 0.0
        assert len(state["splits"]) == int(split)


def test_cfl_never_split_is_reported():
    """A CFL run that never splits reports it (the pipeline logs the warning: it trained FedAvg), and its
    split log is empty with the documented columns; the diagnostics of a run with no round yet are NaN
    norms and no splits."""
    fed, w0 = cfl_federation(CFL_LABELS)
    algorithm = cfl(eps1=0.4, eps2=0.6)  # warmup_rounds 20: no split in round 1
    state = algorithm.init(fed, w0)
    before = algorithm.diagnostics(fed, state)
    assert np.isnan(before["cfl_mean_norm"]) and np.isnan(before["cfl_max_norm"]) and before["cfl_splits"] == 0
    empty = algorithm.artifacts(fed, state)  # the logs keep their columns when empty (a header-only CSV)
    assert list(empty["cfl_norms"].columns) == ["round", "cluster", "clients", "mean_norm", "max_norm"]
    state, _ = algorithm.round(fed, state, 1)
    summary = algorithm.summary(fed, state)
    assert summary["split_rounds"] == [] and "never split" in summary["warning"]
    splits = algorithm.artifacts(fed, state)["cfl_splits"]
    assert len(splits) == 0 and list(splits.columns) == [
        "round", "parent", "child_a", "child_b", "clients_a", "clients_b", "mean_norm", "max_norm",
        "max_cross_similarity", "members_a", "members_b"]
    assert algorithm.global_model(fed, state) is state["models"][0]


def test_bipartition_is_the_authors_complete_linkage_split():
    """CFL's bipartition (Eq. (23) as the authors' code solves it): the top split of complete-linkage
    agglomerative clustering of the updates with dissimilarity -cos (sklearn ``AgglomerativeClustering``
    on the precomputed matrix, as felisat/clustered-federated-learning); the mask marks the side of the
    first client.  Random update directions, several of which single or average linkage split differently."""
    from sklearn.cluster import AgglomerativeClustering

    from fedbench.algorithms.cfl import cosine_matrix

    rng = np.random.default_rng(0)
    for _ in range(20):
        updates = torch.from_numpy(rng.normal(size=(7, 3)))
        sim = cosine_matrix(updates)
        u = updates.numpy() / np.linalg.norm(updates.numpy(), axis=1, keepdims=True)
        np.testing.assert_allclose(sim, u @ u.T, atol=1e-12)
        labels = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete").fit(-sim).labels_
        mask = bipartition(sim)
        assert mask[0] and mask.tolist() == (labels == labels[0]).tolist()


# --- FeSEM: distances, k-means++ seeding, newcomers, never-assigned clients --------------------------


def test_fesem_distances_against_brute_force():
    """FeSEM's E-step distance d(W_i, W~_k) (Xie et al., Eq. 7): "l2" the Euclidean distance, "cosine"
    1 - cos of the flattened models, both [len(a), len(b)]; anything else is rejected."""
    from scipy.spatial.distance import cdist

    from fedbench.algorithms.fesem import distances

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(3, 4))
    for kind, metric in [("l2", "euclidean"), ("cosine", "cosine")]:
        got = distances(torch.from_numpy(a).float(), torch.from_numpy(b).float(), kind)
        np.testing.assert_allclose(got.numpy(), cdist(a, b, metric), atol=1e-6)
    with pytest.raises(ValueError):
        distances(torch.from_numpy(a), torch.from_numpy(b), "l1")


def test_fesem_kmeans_plus_plus_seeding_distribution():
    """FeSEM ``init: clients`` seeds the centres by k-means++ (Arthur & Vassilvitskii 2007): the first
    centre uniformly, each next one with probability proportional to D(x)^2, the squared distance to
    the nearest centre chosen so far.  Points 0, 1, 3, 7 on a line, 3 centres: the empirical frequency of
    every ordered pick over 2000 seeds matches the exact distribution enumerated by hand; the draws
    come from the run's own seeded generator (the global torch RNG does not matter); with fewer
    distinct models than centres the extra centres are duplicates."""
    import itertools
    from types import SimpleNamespace

    points = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    x = points.numpy().ravel()
    exact = {}
    for order in itertools.permutations(range(4), 3):
        p, picked = 1 / 4, [order[0]]
        for nxt in order[1:]:
            d2 = np.array([min((x[i] - x[j]) ** 2 for j in picked) for i in range(4)])
            p *= d2[nxt] / d2.sum()
            picked.append(nxt)
        exact[order] = p
    algorithm = FeSEM(num_clusters=3)
    n, counts, threads = 2000, {}, torch.get_num_threads()
    torch.set_num_threads(1)  # 2000 tiny draws: thread start-up would dominate
    try:
        for seed in range(n):
            pick = tuple(algorithm._seed_centres(SimpleNamespace(seed=seed), points).tolist())
            counts[pick] = counts.get(pick, 0) + 1
    finally:
        torch.set_num_threads(threads)
    assert set(counts) <= {k for k, v in exact.items() if v > 0}
    for order, p in exact.items():
        assert abs(counts.get(order, 0) / n - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9, (order, counts.get(order, 0) / n, p)
    torch.manual_seed(0)
    first = algorithm._seed_centres(SimpleNamespace(seed=5), points)
    torch.manual_seed(1)
    assert torch.equal(algorithm._seed_centres(SimpleNamespace(seed=5), points), first)
    same = algorithm._seed_centres(SimpleNamespace(seed=0), torch.zeros(4, 2))
    assert len(same) == 3 and ((same >= 0) & (same < 4)).all()


def test_fesem_newcomers_train_their_own_model_and_unassigned_clients_take_the_nearest_centre():
    """FeSEM (module docstring): a client sampled for the first time trains its own local model (still
    the initial model w0), not a centre; a client never assigned is scored with the centre nearest to
    w0 (the E-step on its current model).  lr = 0 keeps every model as it is.  Centres 2 w0 and 10 w0;
    client 0 in centre 0, client 2 in centre 1, clients 1 and 3 new.  Before the round, the new clients
    are scored with centre 0 (nearest to w0 under L2).  Round (clients 0, 1, 2 sampled): the E-step puts
    client 1's w0 into centre 0, and the M-step gives centre 0 = (n_0 2 + n_1 1) / (n_0 + n_1) w0."""
    fed = make_federation(two_tasks([0, 0, 1, 1], n=[12, 30, 9, 17]), linear(), LocalSGD(1, 64, 0.0))
    fed.sample_clients = lambda: torch.tensor([0, 1, 2])
    algorithm = FeSEM(num_clusters=2)
    w0 = model_weights(fed.model)
    state = algorithm.init(fed, w0)
    assert algorithm.clusters(fed, state).tolist() == [0] * 4  # no centres yet
    for k, v in algorithm.client_models(fed, state, 0).items():
        torch.testing.assert_close(v, w0[k].expand(4, *w0[k].shape))
    state["centres"] = {k: torch.stack([2 * v, 10 * v]) for k, v in w0.items()}
    state["assign"] = torch.tensor([0, -1, 1, -1])
    assert algorithm.clusters(fed, state).tolist() == [0, 0, 1, 0]
    models = algorithm.client_models(fed, state, 0)
    for i, f in enumerate([2, 2, 10, 2]):
        assert_weights({k: v[i] for k, v in models.items()}, {k: f * v for k, v in w0.items()}, atol=0)
    state, _ = algorithm.round(fed, state, 1)
    assert state["assign"].tolist() == [0, 0, 1, -1]
    assert_weights({k: v[0] for k, v in state["centres"].items()}, {k: (12 * 2 + 30) / 42 * v for k, v in w0.items()})
    assert_weights({k: v[1] for k, v in state["centres"].items()}, {k: 10 * v for k, v in w0.items()})
    # cosine: 10 w0 is at distance 0 from w0, -w0 at distance 2; L2: -w0 is at 2 |w0|, 10 w0 at 9 |w0|
    cosine = FeSEM(num_clusters=2, distance="cosine")
    state["assign"] = torch.tensor([1, -1, 1, -1])
    state["centres"] = {k: torch.stack([-v, 10 * v]) for k, v in w0.items()}
    assert cosine.clusters(fed, state).tolist() == [1, 1, 1, 1]
    assert algorithm.clusters(fed, state).tolist() == [1, 0, 1, 0]


def test_cfl_split_reports_the_maximum_cross_cluster_similarity():
    """CFL's bipartition quality (Sattler et al. 2020, Eq. (23): alpha_cross, the *largest* cosine
    similarity between updates on different sides), logged with each split.  Linear(2 -> 2) without
    bias at W = 0, lr 1, full batch: a client whose rows all are x with a share f of class 0 moves by
    (v, -v), v = (f - 1/2) x.  v = (1/2, 0), (1/2, 1/2), (0, -1/2), (-1/2, -1/2) (two rows each): the
    split is {0, 1} | {2, 3}, cross similarities cos = 0, -1/sqrt(2), -1/sqrt(2), -1, so alpha_cross = 0.
    Mean update (1/8, -1/8, -1/8, 1/8), norm 1/4; largest update norm 1."""
    xs = [(1.0, 0.0), (1.0, 1.0), (0.0, 1.0), (1.0, 1.0)]
    labels = [0, 0, 1, 1]
    x = torch.tensor([xs[i] for i in range(4) for _ in range(2)] + [(0.0, 0.0)] * 4)
    y = torch.tensor([labels[i] for i in range(4) for _ in range(2)] + [0] * 4)
    train = ClientIndex.from_lists([np.arange(2 * i, 2 * i + 2) for i in range(4)], "cpu")
    test = ClientIndex.from_lists([np.array([8 + i]) for i in range(4)], "cpu")
    model = nn.Linear(2, 2, bias=False)
    nn.init.zeros_(model.weight)
    fed = make_federation(FederatedData(x, y, train, test, 2), model, LocalSGD(1, 64, 1.0))
    algorithm = cfl(eps1=0.4, eps2=0.9, warmup_rounds=0)
    state, _ = algorithm.round(fed, algorithm.init(fed, model_weights(model)), 1)
    split = algorithm.artifacts(fed, state)["cfl_splits"].iloc[0]
    assert (split["members_a"], split["members_b"]) == ("0 1", "2 3")
    np.testing.assert_allclose([split["max_cross_similarity"], split["mean_norm"], split["max_norm"]], [0.0, 0.25, 1.0], atol=1e-6)


def test_cfl_client_missed_by_a_split_is_scored_with_the_child_holding_more_samples():
    """CFL's parameter tree (module docstring): until it is sampled again, a client left on a split
    node is scored with the child that had more training samples at split time.  As the by-hand split
    above, but client 3 holds 12 samples (a quarter of class 0): the sides {0, 1} and {2, 3} hold 12 and
    14 samples, so the unsampled client 4 goes with {2, 3}."""
    labels = list(CFL_LABELS)
    labels[3] = share(12, 0.25)
    fed, w0 = cfl_federation(labels)
    fed.sample_clients = lambda: torch.tensor([0, 1, 2, 3])
    algorithm = cfl(eps1=0.4, eps2=0.6, min_cluster_size=3, warmup_rounds=0)
    state, _ = algorithm.round(fed, algorithm.init(fed, w0), 1)
    assert len(state["splits"]) == 1
    assert algorithm.clusters(fed, state).tolist() == [0, 0, 1, 1, 1]


def test_cfl_splits_recursively_with_fresh_cluster_ids():
    """CFL is recursive over rounds (Alg. 1, Sec. III): a child cluster that again meets the criterion
    splits in a later round, its children getting new ids (parameter tree nodes are never reused).
    Linear(2 -> 2) without bias at W = 0, lr 1, full batch; clients 0, 1 hold x = e1, clients 2, 3 hold
    x = e2, with labels 0, 1, 0, 1 (2, 3, 2, 3 samples).  Round 1: the updates (v, -v) with
    v = (1/2, 0), (-1/2, 0), (0, 1/2), (0, -1/2): mean norm 0.1 < eps1 = 0.5, max sqrt(2)/2 > eps2 = 0.3,
    split into two pairs of orthogonal updates.  Round 2: inside each pair the updates are orthogonal
    again (mean norm 1/sqrt(2) of the max), each pair splits: four leaves, one client each."""
    xs, labels, sizes = [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, 1.0)], [0, 1, 0, 1], [2, 3, 2, 3]
    x = torch.tensor([xs[i] for i in range(4) for _ in range(sizes[i])] + [(0.0, 0.0)] * 4)
    y = torch.tensor([labels[i] for i in range(4) for _ in range(sizes[i])] + [0] * 4)
    starts = np.cumsum([0] + sizes[:-1])
    train = ClientIndex.from_lists([np.arange(a, a + n) for a, n in zip(starts, sizes)], "cpu")
    test = ClientIndex.from_lists([np.array([10 + i]) for i in range(4)], "cpu")
    model = nn.Linear(2, 2, bias=False)
    nn.init.zeros_(model.weight)
    fed = make_federation(FederatedData(x, y, train, test, 2), model, LocalSGD(1, 64, 1.0))
    algorithm = cfl(eps1=0.5, eps2=0.3, min_cluster_size=2, warmup_rounds=0)
    state = algorithm.init(fed, model_weights(model))
    for t in (1, 2, 3):
        state, _ = algorithm.round(fed, state, t)
    splits = algorithm.artifacts(fed, state)["cfl_splits"]
    assert splits[["round", "parent", "child_a", "child_b"]].values.tolist() == [[1, 0, 1, 2], [2, 1, 3, 4], [2, 2, 5, 6]]
    np.testing.assert_allclose(splits["mean_norm"].iloc[0], 0.1, atol=1e-6)
    assert sorted(state["models"]) == [3, 4, 5, 6] and sorted(state["tree"]) == [0, 1, 2]
    assert sorted(algorithm.artifacts(fed, state)["cfl_membership"][-1].tolist()) == [3, 4, 5, 6]
    assert sorted(algorithm.clusters(fed, state).tolist()) == [0, 1, 2, 3]


# --- survivors of the mutation run (docs/mutation.md, docs/mutation/) -------------------------------


def test_bipartition_counts_cosines_rounded_above_one_as_parallel():
    """CFL's bipartition (Eq. (23), solved as the authors' code by complete linkage on the dissimilarity
    1 - cos, module docstring): a cosine is at most 1, so a similarity that rounding lifts above 1 (two
    parallel updates) is a dissimilarity of 0, exactly as a cosine of 1.  Three updates, 0 parallel to 1
    and 1 parallel to 2 but 0 orthogonal to 2: whichever parallel pair reads 1.5 instead of 1, the split
    is the one for cosines clipped to 1, and it separates 0 from 2; two parallel updates whose cosine
    rounds to 1 + 2^-52 split as two at cosine 1 do."""
    sim = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    for pair in [(0, 1), (1, 2)]:
        lifted = sim.copy()
        lifted[pair] = lifted[pair[::-1]] = 1.5
        side = bipartition(lifted)
        assert side.tolist() == bipartition(sim).tolist() and side[0] != side[2]
    two = np.full((2, 2), 1.0 + 2.0**-52)
    assert bipartition(two).tolist() == bipartition(np.ones((2, 2))).tolist() == [True, False]


def test_cfl_uniform_mean_norm_uses_exact_one_over_cluster_size():
    """Eq. (29) with the notebook's uniform weights p_i = 1 / |c| (``mean_norm_weighting: uniform``):
    clients holding only class 0, only class 0 and half of each have the updates (1/2, 1/2, 0)(1, -1)
    (exact in float32, ``cfl_federation``), so ||sum_i p_i dtheta_i|| = sqrt(2) / 3 to double precision
    (the recorded criterion), not with 1/3 rounded to float32 (a relative error of 3e-8)."""
    fed, w0 = cfl_federation([share(4, 1.0), share(4, 1.0), share(4, 0.5)])
    algorithm = cfl(mean_norm_weighting="uniform")
    state, _ = algorithm.round(fed, algorithm.init(fed, w0), 1)
    norms = algorithm.artifacts(fed, state)["cfl_norms"]
    assert norms["clients"].tolist() == [3]
    np.testing.assert_allclose(norms["mean_norm"].iloc[0], np.sqrt(2) / 3, rtol=1e-13, atol=0)


def test_bipartition_splits_tied_orthogonal_updates_into_two_nonempty_groups():
    """CFL's bipartition on tied merge heights (module docstring; the authors' ``cluster_clients``,
    sklearn ``AgglomerativeClustering(n_clusters=2, linkage="complete")`` on -cos): three mutually
    orthogonal updates have every dissimilarity -cos = 0, so every complete-linkage merge is at height 0.
    Undoing the last merge still leaves two non-empty groups: one pair and one singleton, with largest
    cross similarity 0.  The tie is broken as the authors' call breaks it (merges in index order): (0, 1)
    then 2, so {0, 1} | {2}; four orthogonal updates: (0, 1), then 2, then 3, so {0, 1, 2} | {3}.  (scipy's
    ``fcluster(t=2, criterion="maxclust")``, used before, returns one group here: CFL did not split.)"""
    for n, expected in [(3, [True, True, False]), (4, [True, True, True, False])]:
        sim = np.eye(n)
        side = bipartition(sim)
        assert side.tolist() == expected
        assert 0 < side.sum() < n and sim[np.ix_(side, ~side)].max() == 0.0


def test_cfl_bipartitions_a_cluster_of_identical_updates_as_the_authors_do():
    """Alg. 1 with the authors' bipartition (module docstring): a cluster that meets the split criterion
    is always bipartitioned, also when its updates are all parallel (every complete-linkage merge at the
    same height: two groups all the same, {0, 1} | {2} for three, the tie broken in index order as in the
    authors' sklearn call), and every cluster of the round is examined.  ``cfl_federation`` (Linear(1 -> 2)
    at 0, x = 1, full-batch GD, lr 1), 10 samples per client with class-0 shares
    f = (0.1, 0.1, 0.1, 0.9, 0.9, 0.6); eps1 = 10 and eps2 = 0 leave the decision to the bipartition.
    Round 1: updates (f - 1/2)(1, -1) split {0, 1, 2} (child 1, it holds client 0) from {3, 4, 5}
    (child 2).  Child 1's model is (0.1 - 1/2)(1, -1): class-0 probability p = sigmoid(-0.8) = 0.31 > 0.1,
    so in round 2 its three updates (0.1 - p)(1, -1) are identical (cross similarity 1) and it splits into
    children 3 = {0, 1} and 4 = {2}; child 2's model is (0.8 - 1/2)(1, -1): p = sigmoid(0.6) = 0.65 lies
    between 0.6 and 0.9, so clients 3, 4 (f = 0.9) and client 5 (f = 0.6) move in opposite directions
    (cross similarity -1): it splits into children 5 = {3, 4} and 6 = {5}."""
    fed, w0 = cfl_federation([share(10, f) for f in (0.1, 0.1, 0.1, 0.9, 0.9, 0.6)])
    algorithm = cfl(eps1=10.0, eps2=0.0, min_cluster_size=2, warmup_rounds=0)
    state = algorithm.init(fed, w0)
    for t in (1, 2):
        state, _ = algorithm.round(fed, state, t)
    splits = algorithm.artifacts(fed, state)["cfl_splits"]
    assert splits[["round", "parent", "child_a", "child_b"]].values.tolist() == [[1, 0, 1, 2], [2, 1, 3, 4], [2, 2, 5, 6]]
    assert splits[["members_a", "members_b"]].values.tolist() == [["0 1 2", "3 4 5"], ["0 1", "2"], ["3 4", "5"]]
    np.testing.assert_allclose(splits["max_cross_similarity"].iloc[1:].tolist(), [1.0, -1.0], atol=1e-6)
    assert sorted(state["models"]) == [3, 4, 5, 6]


def test_logs_before_any_round_are_empty_with_integer_ids():
    """Before any round the logs exist, empty, with the integer type of the ids they will hold: the
    assignment log's round, client and cluster columns (IFCA, FeSEM) and CFL's [rounds, clients]
    membership of leaf cluster ids."""
    from fedbench.algorithms.clustered import assignment_frame

    empty = assignment_frame([])
    assert [dtype.kind for dtype in empty.dtypes] == ["i", "i", "i"]
    fed, w0 = cfl_federation(CFL_LABELS)
    membership = cfl().artifacts(fed, cfl().init(fed, w0))["cfl_membership"]
    assert membership.shape == (0, 5) and membership.dtype.kind == "i"


def test_fesem_kmeans_plus_plus_is_scale_free_and_leaves_the_global_rng_alone():
    """FeSEM ``init: clients`` (module docstring, k-means++ of Arthur & Vassilvitskii 2007): a next centre
    is drawn with probability D(x)^2 / sum D^2, which does not depend on the scale of the points, and a
    point already chosen (D = 0) is never drawn while another has D > 0.  Points (0, 1, 3, 7) / 64 (an
    exact power-of-two scaling, sum D^2 < 1) get the picks of (0, 1, 3, 7), seed by seed, three distinct
    ones.  The draws come from FeSEM's own seeded generator: the global torch RNG is not advanced, also
    when every point is the same and the extra centres are duplicates."""
    from types import SimpleNamespace

    points = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    algorithm = FeSEM(num_clusters=3)
    for seed in range(60):
        picks = algorithm._seed_centres(SimpleNamespace(seed=seed), points)
        assert len(set(picks.tolist())) == 3
        assert torch.equal(algorithm._seed_centres(SimpleNamespace(seed=seed), points / 64), picks)
    for same_or_not in (points, torch.zeros(4, 2)):
        before = torch.random.get_rng_state()
        algorithm._seed_centres(SimpleNamespace(seed=1), same_or_not)
        assert torch.equal(torch.random.get_rng_state(), before)
