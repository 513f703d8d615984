"""Clustered FL baselines (FeSEM, IFCA, CFL): C = 1 reduces to FedAvg, recovery of planted groups."""

import numpy as np
import torch
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
    so groups with different shifts are incongruent tasks (for 2 classes: labels flipped)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, classes))
    xs, ys, train, held, start = [], [], [], [], 0
    for g in groups:
        x = rng.normal(size=(n + test, dim)).astype(np.float32)
        xs.append(x)
        ys.append(((x @ w).argmax(1) + g) % classes)
        train.append(np.arange(start, start + n))
        held.append(np.arange(start + n, start + n + test))
        start += n + test
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


def test_assignment_figure_is_written(tmp_path):
    import pandas as pd

    from fedbench.results.clustering_figures import plot_assignments

    frame = pd.DataFrame({"round": [1, 1, 2, 3], "client": [0, 2, 1, 0], "cluster": [0, 1, 1, 0]})
    plot_assignments(frame, [0, 1, 1], tmp_path / "a.png")
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
