"""FeMAM and its new baselines (FedRep, Ditto, FeSEM+) against hand-derived cases."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from torch import nn

import fedbench.algorithms.femam as femam_module
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.femam_rules import cluster_features, converged, keep_eq9, keep_window, kmeans_groups
from fedbench.algorithms.partial import frozen_copy, trainer_for
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.models.additive import AdditiveLevels, additive_weights
from fedbench.run.scoring import structure_scores
from fedbench.registry.protocols import PROTOCOLS
from conftest import make_data, make_federation

SIZES = [30, 20, 25, 15, 30, 20]


def data_with_val(sizes=SIZES):
    """make_data's clients, their 8 held-out rows split into 4 validation + 4 test rows."""
    data = make_data(sizes, test=8)
    n = len(sizes)
    val = ClientIndex(data.test.index[:, :4].contiguous(), torch.full((n,), 4))
    test = ClientIndex(data.test.index[:, 4:].contiguous(), torch.full((n,), 4))
    return replace(data, val=val, test=test)


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))


def run(name_or_alg, fed, rounds, **params):
    alg = ALGORITHMS[name_or_alg](**params) if isinstance(name_or_alg, str) else name_or_alg
    state = alg.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        fed.begin_round(t)  # as the pipeline does: round t's shared streams
        state, _ = alg.round(fed, state, t)
    return alg, state


def federation(local=None, data=None, seed=0):
    data = data or data_with_val()
    return make_federation(data, mlp(), local or LocalSGD(epochs=1, batch_size=8, lr=0.1), seed=seed)


def full_batch():
    return LocalSGD(epochs=1, batch_size=64, lr=0.2)  # one full-batch step per epoch: batch order is irrelevant


PLANTED = np.array([0, 1, 0, 1, 1, 0, 0, 1])  # two planted client groups, interleaved


def planted_data(groups=PLANTED, n=24, val=6, test=4, dim=5, seed=0):
    """Two-class Gaussian data with one linear labelling; clients of planted group 1 have their
    labels flipped (very different tasks).  Every client: n train, ``val`` validation, ``test`` test rows."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, 2))
    xs, ys, splits, start = [], [], ([], [], []), 0
    for g in groups:
        x = rng.normal(size=(n + val + test, dim)).astype(np.float32)
        xs.append(x)
        ys.append(((x @ w).argmax(1) + g) % 2)
        for split, (a, b) in zip(splits, [(0, n), (n, n + val), (n + val, n + val + test)]):
            split.append(np.arange(start + a, start + b))
        start += n + val + test
    train, val_rows, test_rows = (ClientIndex.from_lists(s, "cpu") for s in splits)
    y = torch.from_numpy(np.concatenate(ys).astype(np.int64))
    return FederatedData(torch.from_numpy(np.concatenate(xs)), y, train, test_rows, 2, val=val_rows)


PLANTED_LR, PLANTED_STEPS = 0.5, 2  # full-batch local GD: 2 epochs = 2 steps, batch order irrelevant


def planted_federation(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))
    hp = LocalSGD(epochs=PLANTED_STEPS, batch_size=64, lr=PLANTED_LR)
    return make_federation(planted_data(seed=seed), model, hp, seed=seed)


def client_rows(fed, i, split="train"):
    index = getattr(fed.data, split)
    chosen = index.index[i, : int(index.counts[i])]
    return fed.data.x[chosen], fed.data.y[chosen]


def row(stacked, i):
    return {k: v[i] for k, v in stacked.items()}


def output(template, weights, x):
    return torch.func.functional_call(template, weights, (x,))


def gd_by_hand(template, start, x, y, steps, lr, keys=None, mu=0.0, center=None, offset=None):
    """Plain autograd: ``steps`` full-batch GD steps on CE(offset + f(x; w), y) + mu/2 ||w - center||^2
    (center: ``start``) moving only the entries ``keys`` (default: all of them)."""
    center = start if center is None else center
    keys = list(start) if keys is None else keys
    w = {k: v.clone() for k, v in start.items()}
    for _ in range(steps):
        moving = {k: w[k].requires_grad_(True) for k in keys}
        logits = output(template, {**w, **moving}, x)
        loss = F.cross_entropy(logits if offset is None else offset + logits, y)
        loss = loss + mu / 2 * sum(((moving[k] - center[k]) ** 2).sum() for k in keys)
        grads = torch.autograd.grad(loss, list(moving.values()))
        w = {k: v.detach() for k, v in w.items()} | {k: (moving[k] - lr * g).detach() for k, g in zip(keys, grads)}
    return w


def train_newest_by_hand(template, frozen, start, x, y, mu, steps=PLANTED_STEPS, lr=PLANTED_LR):
    """The newest level: full-batch GD on CE(sum of the frozen levels' outputs + f(x; theta), y)
    + mu/2 ||theta - start||^2 with respect to theta only (Eqs. 2, 8, B.4, B.5)."""
    fixed = sum((output(template, w, x) for w in frozen), torch.zeros(())).detach()
    return gd_by_hand(template, start, x, y, steps, lr, mu=mu, offset=fixed)


def weighted_mean(models, counts, members):
    """sum_i n_i theta_i / sum_i n_i over ``members`` (Eq. 7), in float64."""
    n = counts.double()
    return {k: (sum(n[i] * models[i][k].double() for i in members) / n[members].sum()).float() for k in models[0]}


def assert_rows(stacked, expected, clients, atol=1e-5):
    for i in clients:
        for k, v in expected.items():
            torch.testing.assert_close(stacked[k][i], v, atol=atol, rtol=atol)


# ---- the additive model ------------------------------------------------------------------------


@pytest.mark.parametrize("combine", ["sum", "mean"])
def test_additive_prediction_is_the_sum_or_mean_of_the_active_levels(combine):
    template = mlp()
    module = AdditiveLevels(template, 3, combine=combine).eval()
    levels = [model_weights(mlp(seed)) for seed in (1, 2, 3)]
    x = torch.randn(7, 5)
    outputs = [torch.func.functional_call(template, w, (x,)) for w in levels]
    for active in ([1.0, 1.0, 1.0], [1.0, 0.0, 1.0]):
        weights = additive_weights([{k: v[None] for k, v in w.items()} for w in levels], torch.tensor([active]))
        got = torch.func.functional_call(module, {k: v[0] for k, v in weights.items()}, (x,))
        expected = sum(a * o for a, o in zip(active, outputs))
        if combine == "mean":
            expected = expected / sum(active)
        torch.testing.assert_close(got, expected)


def test_only_the_newest_level_is_a_parameter_and_earlier_levels_stay_in_eval_mode():
    template = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    module = AdditiveLevels(template, 3).train()
    assert {n.split(".")[1] for n, _ in module.named_parameters()} == {"2"}
    assert [level.training for level in module.levels] == [False, False, True]
    assert set(module.state_dict()) == {f"levels.{l}.{k}" for l in range(3) for k in template.state_dict()} | {"active"}


# ---- reductions -------------------------------------------------------------------------------


def test_one_global_level_is_fedavg():
    _, femam = run("femam", federation(), 3, structure=["global"], init_rounds=1000)
    _, fedavg = run("fedavg", federation(), 3)
    for k, v in fedavg["global"].items():
        torch.testing.assert_close(femam["levels"][0][k], v.expand_as(femam["levels"][0][k]), atol=1e-5, rtol=1e-5)


def test_one_client_femam_has_its_global_level_as_the_global_model():
    """One client: the global level (Eq. B.2) is FedAvg of one model, the client's own full-batch GD step,
    and it is what ``global_model`` reports."""
    fed = make_federation(data_with_val([30]), mlp(), full_batch())
    alg, state = run("femam", fed, 1, structure=["global"], init_rounds=1000)
    by_hand = gd_by_hand(fed.model, model_weights(fed.model), *client_rows(fed, 0), steps=1, lr=0.2)
    for k, v in alg.global_model(fed, state).items():
        torch.testing.assert_close(v, by_hand[k], atol=1e-5, rtol=1e-5)

def test_the_personal_level_alone_is_local():
    _, femam = run("femam", federation(), 3, structure=["personal"], init_rounds=1000)
    _, local = run("local", federation(), 3)
    for k, v in local["clients"].items():
        torch.testing.assert_close(femam["levels"][0][k], v, atol=1e-5, rtol=1e-5)


def test_frozen_levels_do_not_move_while_the_newest_trains():
    # window 1, threshold huge: the test fires every round from round 1, so level 2 is added after round 1
    fed = federation()
    alg, state = run("femam", fed, 1, structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9)
    assert len(state["levels"]) == 2 and state["added"] == [0, 1]
    before = [{k: v.clone() for k, v in level.items()} for level in state["levels"]]
    state, _ = alg.round(fed, state, 2)
    for k in before[0]:
        torch.testing.assert_close(state["levels"][0][k], before[0][k], rtol=0, atol=0)
    assert all(not torch.equal(state["levels"][1][k], before[1][k]) for k in before[1])


# ---- convergence, grouping, pruning -----------------------------------------------------------------


def test_convergence_fires_on_a_constructed_history_and_never_before_init_rounds():
    acc = [0.10, 0.30, 0.50, 0.500, 0.505, 0.498]  # last 3 in percent: 50.0, 50.5, 49.8 -> var 0.0867
    loss = [3.0, 2.0, 1.0, 0.5, 0.45, 0.4]
    kw = dict(init_rounds=5, window=3, threshold=1.0)
    assert converged(loss, acc, 6, rule="accuracy_variance", **kw)
    assert not converged(loss, acc, 4, rule="accuracy_variance", **kw)  # before init_rounds
    assert not converged(loss[:2], acc[:2], 6, rule="accuracy_variance", **kw)  # fewer than window rounds
    wide = acc[:-1] + [0.52]  # 50.0, 50.5, 52.0: var = 0.7222 < 1; 53.0 -> var 1.5556 > 1
    assert converged(loss, wide, 6, rule="accuracy_variance", **kw)
    assert not converged(loss, acc[:-1] + [0.53], 6, rule="accuracy_variance", **kw)
    # code: std of the mean validation loss, here of [0.5, 0.45, 0.4] = 0.0408
    assert converged(loss, acc, 6, rule="loss_std", init_rounds=5, window=3, threshold=0.05)
    assert not converged(loss, acc, 6, rule="loss_std", init_rounds=5, window=3, threshold=0.04)


@pytest.mark.parametrize("fit", ["sem", "refit"])
def test_kmeans_recovers_planted_groups_of_parameters(fit):
    rng = np.random.default_rng(0)
    truth = np.repeat([0, 1, 2], [5, 7, 4])
    centres = rng.normal(scale=10, size=(3, 20))
    features = centres[truth] + rng.normal(scale=0.1, size=(len(truth), 20))
    found = kmeans_groups(features, 3, fit=fit, seed=0)
    assert adjusted_rand_score(truth, found) == 1.0


def test_sem_assigns_each_client_to_the_nearest_current_centre():
    centres = np.array([[0.0, 0.0], [10.0, 0.0]])
    features = np.array([[1.0, 1.0], [9.0, -1.0], [4.9, 0.0], [5.1, 0.0]])
    assert kmeans_groups(features, 2, fit="sem", seed=0, centres=centres).tolist() == [0, 1, 0, 1]


def test_eq9_and_window_pruning_by_hand():
    """FeMAM Eq. (9) (keep iff loss_without - loss_with > epsilon) and the released code's windowed
    variant (docs/original_code_notes.md §1.4, ``server.add_layer``): means of the last ``window`` validation losses."""
    without, with_ = np.array([1.0, 0.8, 0.5, 0.9]), np.array([0.9, 0.8, 0.6, 0.85])
    assert keep_eq9(without, with_, 0.0).tolist() == [True, False, False, True]
    assert keep_eq9(without, with_, 0.07).tolist() == [True, False, False, False]
    # 3 clients; rounds at level 0, 0, 1, 1 (one row per round, one column per client)
    losses = np.array([[1.0, 1.0, 0.5], [0.8, 0.6, 0.9], [0.7, 0.9, 0.95], [0.5, 0.65, 0.6]])
    levels = np.array([0, 0, 1, 1])
    kept = np.ones((3, 2), dtype=bool)
    # all rounds: before = (0.9, 0.8, 0.7), now = (0.6, 0.775, 0.775) -> keep, keep, drop
    assert keep_window(losses, levels, kept, 1, window=50, epsilon=0.0).tolist() == [True, True, False]
    # window 1: before = (0.8, 0.6, 0.9), now = (0.5, 0.65, 0.6) -> keep, drop, keep
    assert keep_window(losses, levels, kept, 1, window=1, epsilon=0.0).tolist() == [True, False, True]
    # client 2 dropped level 1 earlier: at level 2 it compares with level 0, the last level it kept
    losses3 = np.vstack([losses, [[0.4, 0.6, 0.8]]])
    kept3 = np.array([[True, True, True], [True, True, True], [True, False, True]])
    # window 1: before = (0.5, 0.65, 0.9), now = (0.4, 0.6, 0.8): margins 0.1, 0.05, 0.1 against eps 0.09
    assert keep_window(losses3, np.r_[levels, 2], kept3, 2, window=1, epsilon=0.09).tolist() == [True, False, True]


def test_convergence_compares_the_latest_window_strictly_below_the_threshold():
    """Sec. 5.1's test (variance of the accuracy in percent) and the code's (std of the loss, notes §1.4)
    at their boundaries: only the latest ``window`` rounds count, and a statistic equal to the threshold
    has not converged (strict <).  Exact binary fractions: accuracies 0.5, 0.515625 are 50 and 51.5625
    percent, variance (1.5625 / 2)^2 = 0.6103515625; losses 0.5, 0.75 have std 0.125."""
    acc = [0.0, 1.0, 0.2, 0.5, 0.515625]  # earlier rounds would dominate any longer window
    loss = [9.0, 0.0, 4.0, 0.5, 0.75]
    kw = dict(init_rounds=0, window=2)
    assert not converged(loss, acc, 5, rule="accuracy_variance", threshold=0.6103515625, **kw)
    assert converged(loss, acc, 5, rule="accuracy_variance", threshold=0.62, **kw)  # not 0.6226 (101 * acc)
    assert not converged(loss, acc, 5, rule="loss_std", threshold=0.125, **kw)
    assert converged(loss, acc, 5, rule="loss_std", threshold=0.126, **kw)


def test_window_pruning_at_its_edges_by_hand():
    """The code's windowed pruning (notes §1.4, ``server.add_layer``) at its edges: a client with no
    earlier kept level keeps the level (and the clients after it are still decided), a margin equal to
    epsilon drops it (keep iff b - a > epsilon), and a level without recorded rounds is kept by everyone."""
    losses = np.array([[1.0, 1.0, 1.0], [0.5, 1.25, 0.75]])  # round 1 at level 0, round 2 at level 1
    levels = np.array([0, 1])
    kept = np.array([[False, True], [True, True], [True, True]])
    # client 0: no earlier kept level; client 1: 1.0 - 1.25 < 0; client 2: 1.0 - 0.75 = 0.25
    assert keep_window(losses, levels, kept, 1, window=5, epsilon=0.25).tolist() == [True, False, False]
    assert keep_window(losses, levels, kept, 1, window=5, epsilon=0.0).tolist() == [True, False, True]
    assert keep_window(losses[:1], levels[:1], kept, 1, window=5, epsilon=0.0).tolist() == [True, True, True]


def test_cluster_features_by_hand():
    """What a cluster level groups by: the whole flattened level model (paper, Eq. 4), or the code's last
    Linear weight and bias divided by the absolute value of their signed sum (notes §1.4,
    ``compute_diff_structure``; a row summing to 0 is left as it is), in float64."""
    flat_params = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    last = torch.tensor([[1.0, -3.0, 0.5], [1.0, -1.0, 0.0], [0.25, 0.25, 0.0], [2.0, 1.0, 1.0]])
    got = cluster_features(flat_params, last, "parameters")
    assert got.dtype == np.float64 and got.tolist() == flat_params.tolist()
    got = cluster_features(flat_params, last, "last_layer")
    assert got.dtype == np.float64
    # signed sums -1.5, 0, 0.5, 4
    np.testing.assert_allclose(got, [[2 / 3, -2, 1 / 3], [1, -1, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]], rtol=1e-12)
    with pytest.raises(ValueError, match="cluster_features"):
        cluster_features(flat_params, last, "gradients")


def test_first_grouping_and_the_codes_refit_are_the_documented_seeded_kmeans():
    """A cluster level's first grouping (Eq. B.3 before any centre exists: one k-means++ draw) and the
    code's grouping of every round (notes §1.4: ``KMeans(k, init='random', n_init=10, max_iter=300,
    tol=1e-4)`` refitted from scratch) on unstructured features, where those settings change the
    result; both reproducible for a seed."""
    features = np.random.default_rng(8).normal(size=(40, 3))
    for seed in (0, 1, 2):
        sem = kmeans_groups(features, 4, fit="sem", seed=seed)
        refit = kmeans_groups(features, 4, fit="refit", seed=seed)
        assert sem.tolist() == KMeans(4, init="k-means++", n_init=1, random_state=seed).fit_predict(features).tolist()
        assert refit.tolist() == KMeans(4, init="random", n_init=10, max_iter=300, tol=1e-4,
                                        random_state=seed).fit_predict(features).tolist()
        assert kmeans_groups(features, 4, fit="refit", seed=seed).tolist() == refit.tolist()


def test_pruning_drops_exactly_the_clients_whose_validation_loss_did_not_improve():
    """FeMAM Eq. (9) / Algorithm 2 lines 14-16: when the newest level has converged, client i drops it
    iff loss without it - loss with it <= epsilon (0) on its validation data; a dropped level leaves
    the client's prediction and is no longer trained for it."""
    fed = federation()
    alg, state = run("femam", fed, 2, structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9)
    assert state["complete"] and state["added"] == [0, 1]
    # recompute Eq. (9) by hand from the final levels (each level an ordinary MLP)
    template = fed.model
    for i in range(fed.num_clients):
        rows = fed.data.val.index[i, : int(fed.data.val.counts[i])]
        x, y = fed.data.x[rows], fed.data.y[rows]
        outs = [torch.func.functional_call(template, {k: v[i] for k, v in level.items()}, (x,)) for level in state["levels"]]
        with_level = F.cross_entropy(outs[0] + outs[1], y).item()
        without = F.cross_entropy(outs[0], y).item()
        assert (i in state["pruned"][1]) == (without - with_level <= 0), i
        assert state["kept"][i, 1] == (i not in state["pruned"][1])
    assert state["groups"][1].tolist() == [-1 if i in state["pruned"][1] else i for i in range(fed.num_clients)]
    assert 0 < len(state["pruned"][1]) < fed.num_clients
    before = {k: v.clone() for k, v in state["levels"][1].items()}
    state, _ = alg.round(fed, state, 3)
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i, "val")
        outs = [output(template, row(level, i), x) for level in state["levels"]]
        kept = i not in state["pruned"][1]
        assert state["val_log"][-1][i] == pytest.approx(F.cross_entropy(outs[0] + outs[1] if kept else outs[0], y).item(), rel=1e-5)
        assert kept != all(torch.equal(state["levels"][1][k][i], before[k][i]) for k in before)


def run_planted(rounds, structure=("global", "cluster", "personal"), **params):
    """FeMAM on the planted federation: the first level converges at round 3 (init_rounds 3,
    window 2, threshold huge), the next one 2 rounds after it was added.  New levels start from one
    shared random model in one group (``new_level: random_shared``; the paper's K random models and
    random mapping are tested in test_femam_fidelity.py)."""
    fed = planted_federation()
    options = dict(num_clusters=2, init_rounds=3, window=2, threshold=1e9, new_level="random_shared") | params
    alg, state = run("femam", fed, rounds, structure=list(structure), **options)
    return fed, alg, state


def test_cluster_level_recovers_planted_groups_and_averages_them_by_hand():
    """FeMAM Algorithm 2, lines 4-13 at a cluster level: every client trains only the newest level on
    the additive prediction (Eqs. 2, 8) with lam/2 ||theta - Theta_C(i)||^2 (Eq. B.4), the server
    groups the trained level models by k-means (Eq. B.3) and each group's model is the sample-weighted
    average of its members' (Eq. 7 / B.1b), broadcast to them (Eq. 6).  Planted: two label-flipped
    client groups; the grouping and its scores are checked against the planted truth."""
    fed, alg, state = run_planted(3)
    assert state["added"] == [0, 3]
    global_level, start = state["levels"][0], state["levels"][1]
    state, _ = alg.round(fed, state, 4)
    groups = alg.level_clusters(fed, state)
    assert adjusted_rand_score(PLANTED, groups["level2"]) == 1.0
    scores = structure_scores(groups, {"planted": PLANTED.tolist()})
    assert scores["level2"]["planted"]["ari"] == 1.0 and scores["level2"]["planted"]["nmi"] == pytest.approx(1.0)
    assert scores["level1"]["planted"]["ari"] == 0.0  # the global level is one group
    # by hand: client i trains level 2 from the level's start with level 1 frozen, then Eq. (7) per planted group
    trained = [train_newest_by_hand(fed.model, [row(global_level, i)], row(start, i), *client_rows(fed, i), mu=alg.lam)
               for i in range(fed.num_clients)]
    for g in (0, 1):
        members = np.flatnonzero(PLANTED == g)
        assert_rows(state["levels"][1], weighted_mean(trained, fed.data.train.counts, members), members)
    for k, v in global_level.items():
        assert torch.equal(state["levels"][0][k], v)  # the frozen level did not move
    # the recorded validation loss is the additive prediction's (Eq. 2): CE(f(x; level 1) + f(x; level 2), y)
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i, "val")
        loss = F.cross_entropy(sum(output(fed.model, row(level, i), x) for level in state["levels"]), y)
        assert state["val_log"][-1][i] == pytest.approx(float(loss), rel=1e-5)
    structure = alg.artifacts(fed, state)["structure"]
    assert [level["added_round"] for level in structure["levels"]] == [0, 3]
    assert [t["round"] for t in structure["trace"]] == [1, 2, 3, 4]
    assert sorted(map(sorted, structure["levels"][1]["groups"].values())) == [[0, 2, 5, 6], [1, 3, 4, 7]]


@pytest.mark.parametrize("threshold", [5.0, 2.0])
def test_levels_are_added_when_the_validation_accuracy_variance_falls_below_the_threshold(threshold):
    """FeMAM Algorithm 1 lines 2-15 / Sec. 3.4 "progressive level adding" with Sec. 5.1's test: a
    level converges at round t >= init_rounds once the variance of the mean validation accuracy (in
    percent) over the level's last ``window`` rounds is < threshold; then the next level is added and
    the test restarts; after the last level the structure is complete.  Replayed by hand from the
    recorded accuracies (threshold 5: init_rounds holds the first level back; threshold 2: the
    restart after adding a level matters)."""
    init_rounds, window, rounds = 4, 3, 16
    fed, alg, state = run_planted(rounds, init_rounds=init_rounds, window=window, threshold=threshold)
    accuracy = [100 * acc for _, _, _, acc in state["trace"]]
    added, since, complete, blocked = [0], [], False, 0
    for t, acc in enumerate(accuracy, start=1):
        since.append(acc)
        if t < init_rounds or len(since) < window or complete:
            continue
        if np.var(since[-window:]) >= threshold:
            blocked += 1  # the threshold, not the window, held the level back
            continue
        if len(added) == len(alg.structure):
            complete = True
        else:
            added.append(t)
        since = []
    assert blocked > 0 and len(added) == 3  # the case exercises the threshold and adds every level
    assert state["added"] == added and state["complete"] == complete
    assert [n for _, n, _, _ in state["trace"]] == [1 + sum(t > a for a in added[1:]) for t in range(1, rounds + 1)]


def test_a_new_level_starts_from_one_random_model_or_the_codes_copy_of_level_one():
    """``new_level: random_shared`` (fedbench's reading of Algorithm 2 line 2 before issue 24): the added
    level is randomly initialised, every client starting it from the same model; the code's ``new_level: global_copy`` (notes §1.4, §1.7.5) starts it from
    a copy of level 1 instead, and changes nothing before."""
    fed, _, paper = run_planted(3)
    _, _, code = run_planted(3, new_level="global_copy")
    for k, v in paper["levels"][1].items():
        assert torch.equal(v, v[:1].expand_as(v))
        assert not torch.equal(v[0], paper["levels"][0][k][0]) and not torch.equal(v[0], model_weights(fed.model)[k])
        assert torch.equal(code["levels"][0][k], paper["levels"][0][k])
        assert torch.equal(code["levels"][1][k], paper["levels"][0][k])


def by_hand_window_keep(losses, levels, window):
    """The code's pruning for a 2-level run: mean of the client's last ``window`` validation losses
    at level 1 below the mean of its last ``window`` at level 0."""
    before, now = losses[levels == 0][-window:].mean(0), losses[levels == 1][-window:].mean(0)
    return before - now > 0.0


def test_window_pruning_in_a_run_follows_its_window_by_hand():
    """FeMAM's released code (docs/original_code_notes.md §1.4, ``pruning: window``): when the level converges a client
    keeps it iff the mean of its last ``window`` validation losses with the level beats the mean of its
    last ``window`` before.  Two runs (window 1 and 3) prune differently, each exactly as computed by
    hand from its recorded validation losses (and not as the other window, or all rounds, would)."""
    decisions = {}
    for window in (1, 3):
        fed = make_federation(data_with_val(), mlp(1), LocalSGD(epochs=1, batch_size=8, lr=0.1), seed=1)
        alg, state = run("femam", fed, 4 + window, structure=["global", "personal"], init_rounds=4, window=window,
                         threshold=1e9, pruning="window", new_level="random_shared")
        assert state["added"] == [0, 4] and state["complete"]
        losses, levels = np.stack(state["val_log"]), np.array(state["val_level"])
        keep = by_hand_window_keep(losses, levels, window)
        other = by_hand_window_keep(losses, levels, 4 if window == 1 else 1)  # 4: every round of level 0
        assert not np.array_equal(keep, other)
        assert state["kept"][:, 1].tolist() == keep.tolist()
        assert state["pruned"][1] == np.flatnonzero(~keep).tolist()
        decisions[window] = keep.tolist()
    assert decisions[1] != decisions[3]


def test_ablated_structures_differ_from_full_femam_only_at_the_ablated_level():
    """FeMAM Table 2 (levels excluded; ``femam_no*`` in config/experiments/femam.yaml): a structure
    without some level runs the same steps as full FeMAM except at that level.  Full: global, cluster,
    personal.  Without the cluster level the second level is personal: each client keeps its own
    trained model (Eq. B.5, no averaging, no proximal term).  Without the personal level the run is the
    full one until the personal level would be added, then the structure is complete.  Without the
    global level the first level is a cluster level grouped and averaged from the initial model."""
    fed, _, full = run_planted(4)
    assert full["added"] == [0, 3]
    # without the cluster level
    fed_p, alg_p, before = run_planted(3, structure=("global", "personal"))
    start, cluster_start = before["levels"][1], run_planted(3)[2]["levels"][1]
    after, _ = alg_p.round(fed_p, before, 4)
    for k in full["levels"][0]:
        assert torch.equal(after["levels"][0][k], full["levels"][0][k])
        assert torch.equal(start[k], cluster_start[k])  # the same random start as the cluster level
    for i in range(fed.num_clients):
        by_hand = train_newest_by_hand(fed.model, [row(full["levels"][0], i)], row(start, i), *client_rows(fed, i), mu=0.0)
        assert_rows(after["levels"][1], by_hand, [i])
    assert after["groups"][1].tolist() == list(range(fed.num_clients))
    # without the personal level: identical to the full run, then complete instead of adding a level
    _, _, no_personal = run_planted(5, structure=("global", "cluster"))
    _, _, full5 = run_planted(5)
    assert full5["added"] == [0, 3, 5] and no_personal["added"] == [0, 3]
    assert no_personal["complete"] and len(no_personal["levels"]) == 2
    for l in (0, 1):
        assert np.array_equal(no_personal["groups"][l], full5["groups"][l])
        for k in full5["levels"][l]:
            assert torch.equal(no_personal["levels"][l][k], full5["levels"][l][k])
    # without the global level: round 1 groups the clients' level-1 models trained from the initial model
    fed_c, alg_c, clustered = run_planted(1, structure=("cluster", "personal"))
    assert adjusted_rand_score(PLANTED, clustered["groups"][0]) == 1.0 and alg_c.global_model(fed_c, clustered) is None
    initial = model_weights(fed_c.model)
    trained = [train_newest_by_hand(fed.model, [], initial, *client_rows(fed, i), mu=alg_c.lam)
               for i in range(fed.num_clients)]
    for g in (0, 1):
        members = np.flatnonzero(PLANTED == g)
        assert_rows(clustered["levels"][0], weighted_mean(trained, fed.data.train.counts, members), members)


def deep_planted_federation(seed=0):
    """The planted federation with a 3-layer MLP (the last Linear is not the second parameter pair)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
    hp = LocalSGD(epochs=PLANTED_STEPS, batch_size=64, lr=PLANTED_LR)
    return make_federation(planted_data(seed=seed), model, hp, seed=seed)


def features_by_hand(weights, kind):
    """Eq. (4)'s full flattened model, or the code's last Linear (weight, bias) over |its signed sum|."""
    if kind == "parameters":
        return torch.cat([v.flatten() for v in weights.values()]).double()  # no buffers: parameters in model order
    last = torch.cat([weights["5.weight"].flatten(), weights["5.bias"]]).double()
    return last / last.sum().abs()


@pytest.mark.parametrize("kind", ["parameters", "last_layer"])
def test_a_cluster_level_groups_its_trained_models_then_joins_each_to_the_nearest_current_centre(kind, monkeypatch):
    """FeMAM Eq. (B.3) (FeSEM's E-step) over the rounds of a cluster level, grouping by the paper's whole
    level model (Eq. 4) or the code's normalised last Linear (notes §1.4): in the level's first round the
    clients' trained level models are grouped afresh (no centres yet); in the next each client's trained
    model joins the nearest of the level's current centres (the group models of the round before, Eq. 7),
    keeping the groups' identities; a newly added cluster level starts afresh.  Training, features and
    nearest centres by hand (full-batch GD); the grouping calls are recorded."""
    calls = []
    real = femam_module.kmeans_groups

    def recording(features, k, *, fit, seed, centres=None):
        groups = real(features, k, fit=fit, seed=seed, centres=centres)
        calls.append((features, centres, groups))
        return groups

    monkeypatch.setattr(femam_module, "kmeans_groups", recording)
    fed = deep_planted_federation()
    alg = ALGORITHMS["femam"](structure=["cluster", "cluster"], num_clusters=2, init_rounds=2, window=2,
                              threshold=1e9, cluster_features=kind, new_level="random_shared")
    state = alg.init(fed, model_weights(fed.model))
    centres_by_hand = None
    for t in (1, 2):
        start = state["levels"][0]
        state, _ = alg.round(fed, state, t)
        trained = [train_newest_by_hand(fed.model, [], row(start, i), *client_rows(fed, i), mu=alg.lam)
                   for i in range(fed.num_clients)]
        features, centres, groups = calls[-1]
        by_hand = torch.stack([features_by_hand(w, kind) for w in trained])
        torch.testing.assert_close(torch.from_numpy(features), by_hand, atol=1e-5, rtol=1e-4)
        if t == 1:
            assert centres is None
            assert kind == "last_layer" or adjusted_rand_score(PLANTED, groups) == 1.0  # the planted tasks
        else:
            torch.testing.assert_close(torch.from_numpy(centres), centres_by_hand, atol=1e-6, rtol=1e-6)
            assert groups.tolist() == torch.cdist(by_hand, centres_by_hand).argmin(1).tolist()
        assert state["groups"][0].tolist() == groups.tolist()
        for g in (0, 1):  # Eq. (7): each group's model, broadcast to its members
            members = np.flatnonzero(groups == g)
            assert_rows(state["levels"][0], weighted_mean(trained, fed.data.train.counts, members), members)
        # the level's current centres: the group models of this round, one member's row each
        firsts = [int(np.flatnonzero(groups == g)[0]) for g in (0, 1)]
        centres_by_hand = torch.stack([features_by_hand(row(state["levels"][0], i), kind) for i in firsts])
    assert state["added"] == [0, 2]  # the second cluster level was added after round 2
    state, _ = alg.round(fed, state, 3)
    assert calls[-1][1] is None  # the new cluster level's first grouping has no centres


def test_a_final_level_every_client_dropped_is_no_longer_trained():
    """FeMAM Eq. (9) with a margin no client reaches (epsilon huge): every client drops the final level
    when it converges; later rounds train nothing (a finite zero training loss), leave every level as it
    is and still record each client's validation loss, now of level 1 alone."""
    fed = federation()
    alg, state = run("femam", fed, 2, structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9,
                     epsilon=1e9)
    assert state["complete"] and state["pruned"][1] == list(range(fed.num_clients))
    assert state["kept"].shape == (fed.num_clients, 2) and not state["kept"][:, 1].any()
    before = [{k: v.clone() for k, v in level.items()} for level in state["levels"]]
    state, loss = alg.round(fed, state, 3)
    assert float(loss.mean()) == 0.0
    assert [r for r, *_ in state["trace"]] == [1, 2, 3] and len(state["val_log"]) == 3
    for level, old in zip(state["levels"], before):
        assert all(torch.equal(level[k], old[k]) for k in old)
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i, "val")
        loss_i = F.cross_entropy(output(fed.model, row(state["levels"][0], i), x), y)
        assert state["val_log"][-1][i] == pytest.approx(float(loss_i), rel=1e-5)


def test_the_codes_mean_of_logits_and_pruned_levels_that_stay():
    """The released code's reading (notes §1.4, §1.7.1 and §1.7.7; ``combine: mean``,
    ``pruned_level: stays``): a client predicts with the mean of its levels' logits, and a level it
    dropped stays in its prediction (pruning only edits the server's structure), though it is no longer
    trained for it.  The recorded validation loss of every client is CE((f_1 + f_2) / 2, y)."""
    fed = federation()
    alg, state = run("femam", fed, 2, structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9,
                     combine="mean", pruned_level="stays")
    pruned = state["pruned"][1]
    assert 0 < len(pruned) < fed.num_clients and state["complete"]
    assert alg.client_models(fed, state, 2)["active"].tolist() == [[1.0, 1.0]] * fed.num_clients
    before = {k: v.clone() for k, v in state["levels"][1].items()}
    state, _ = alg.round(fed, state, 3)
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i, "val")
        outs = [output(fed.model, row(level, i), x) for level in state["levels"]]
        assert state["val_log"][-1][i] == pytest.approx(F.cross_entropy((outs[0] + outs[1]) / 2, y).item(), rel=1e-5)
        assert (i in pruned) == all(torch.equal(state["levels"][1][k][i], before[k][i]) for k in before)


@pytest.mark.parametrize("kind, epsilon", [("global", 0.0), ("cluster", 0.05), ("personal", 0.0)])
def test_after_pruning_the_final_level_trains_for_the_clients_that_kept_it(kind, epsilon):
    """FeMAM Algorithm 2 after the last level converged and was pruned (Eq. 9): the structure is final and
    its level keeps training, only for the clients that kept it; Eq. (7) / B.1b then averages over
    those clients only (over all of them at a global level, within each group at a cluster level, not at
    all at a personal level), and the dropped clients' rows stay as they were.  By hand (full-batch GD)."""
    fed = planted_federation()
    alg, state = run("femam", fed, 5, structure=["global", kind], num_clusters=2, init_rounds=3, window=2,
                     threshold=1e9, epsilon=epsilon)
    assert state["added"] == [0, 3] and state["complete"]
    holders = np.flatnonzero(state["kept"][:, 1])
    assert 0 < len(holders) < fed.num_clients
    start = {k: v.clone() for k, v in state["levels"][1].items()}
    state, _ = alg.round(fed, state, 6)
    mu = alg.lam if kind == "cluster" else 0.0
    trained = {i: train_newest_by_hand(fed.model, [row(state["levels"][0], i)], row(start, i), *client_rows(fed, i),
                                       mu=mu) for i in holders}
    groups = state["groups"][1]
    assert (groups[holders] >= 0).all() and (np.delete(groups, holders) == -1).all()
    for i in holders:
        members = holders if kind == "global" else holders[groups[holders] == groups[i]] if kind == "cluster" else [i]
        models = [trained.get(j, row(start, j)) for j in range(fed.num_clients)]  # only holders are averaged
        assert_rows(state["levels"][1], weighted_mean(models, fed.data.train.counts, members), [i])
    dropped = np.setdiff1d(np.arange(fed.num_clients), holders)
    for k, v in start.items():
        assert torch.equal(state["levels"][1][k][dropped], v[dropped])


def test_eq9_pruning_compares_the_final_models_with_and_without_the_level():
    """FeMAM Eq. (9) (``pruning: eq9``): the decision compares each client's validation loss with and
    without the newest level at convergence, not the code's windowed means of earlier rounds (which,
    with a window of 3 rounds, would decide differently here)."""
    fed = federation(seed=5)
    alg, state = run("femam", fed, 6, structure=["global", "personal"], init_rounds=3, window=3, threshold=1e9)
    assert state["added"] == [0, 3] and state["complete"]
    keep = []
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i, "val")
        outs = [output(fed.model, row(level, i), x) for level in state["levels"]]
        keep.append(F.cross_entropy(outs[0], y).item() - F.cross_entropy(outs[0] + outs[1], y).item() > 0)
    assert state["kept"][:, 1].tolist() == keep
    window = by_hand_window_keep(np.stack(state["val_log"]), np.array(state["val_level"]), 3)
    assert window.tolist() != keep


def test_the_proximal_term_on_every_level_under_the_codes_prox_levels_all():
    """The released code's regulariser (notes §1.7.2, ``prox_levels: all``): every level, here a personal
    one (local training under the paper's default), trains with lam/2 ||theta - theta_start||^2.
    Full-batch GD, 2 steps, by hand."""
    fed = planted_federation()
    initial = model_weights(fed.model)
    _, state = run("femam", fed, 1, structure=["personal"], lam=1.0, prox_levels="all", init_rounds=1000)
    for i in range(fed.num_clients):
        by_hand = train_newest_by_hand(fed.model, [], initial, *client_rows(fed, i), mu=1.0)
        assert_rows(state["levels"][0], by_hand, [i])
        without = train_newest_by_hand(fed.model, [], initial, *client_rows(fed, i), mu=0.0)
        assert not torch.allclose(by_hand["1.weight"], without["1.weight"], atol=1e-4)  # the term matters here


def test_an_added_levels_random_model_is_drawn_from_the_runs_seed():
    """FeMAM Algorithm 2 line 2: an added level starts from fresh random models (the personal level:
    one per client) drawn from the run's seed: runs with other seeds start it from other models."""
    starts = []
    for seed in (0, 1):
        fed = federation(seed=seed)
        _, state = run("femam", fed, 1, structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9)
        assert state["added"] == [0, 1]
        starts.append(row(state["levels"][1], 0))
    assert all(not torch.equal(starts[0][k], starts[1][k]) for k in starts[0])


def test_what_the_pipeline_reads_of_a_femam_run():
    """The outputs behind the structure scores and Fig. 4 / A.1: the global level's model (level 1 of a
    structure that starts with a global level), the first cluster level's groups (none before it exists),
    and the structure record: every level's number, kind, round added, members of each group (a client
    that dropped the level in none), assignment and dropped clients, and the trace of the mean
    validation loss and accuracy at every round."""
    fed, alg, state = run_planted(2)
    assert alg.clusters(fed, state) is None
    fed, alg, state = run_planted(7, epsilon=0.01)
    assert state["added"] == [0, 3, 5] and state["complete"]
    assert state["kept"].shape == (fed.num_clients, 3)
    assert np.array_equal(alg.clusters(fed, state), state["groups"][1])
    model = alg.global_model(fed, state)
    for k, v in model.items():
        level = state["levels"][0][k]
        assert torch.equal(v, level[0]) and torch.equal(level, v.expand_as(level))
    structure = alg.artifacts(fed, state)["structure"]
    assert structure["structure"] == ["global", "cluster", "personal"] and structure["complete"]
    levels = structure["levels"]
    assert [(l["level"], l["kind"], l["added_round"]) for l in levels] == [(1, "global", 0), (2, "cluster", 3),
                                                                            (3, "personal", 5)]
    assert levels[0]["groups"] == {"0": list(range(fed.num_clients))} and levels[0]["assignment"] == [0] * fed.num_clients
    assert levels[0]["pruned"] == []
    for level in levels[1:]:
        assignment = np.array(level["assignment"])
        assert level["pruned"] == np.flatnonzero(assignment == -1).tolist()
        assert level["groups"] == {str(g): np.flatnonzero(assignment == g).tolist() for g in set(level["assignment"]) - {-1}}
    assert sum(len(level["pruned"]) for level in levels) > 0
    assert levels[2]["groups"] == {str(i): [i] for i in range(fed.num_clients) if i not in levels[2]["pruned"]}
    assert [t["round"] for t in structure["trace"]] == list(range(1, 8))
    assert [t["levels"] for t in structure["trace"]] == [1, 1, 1, 2, 2, 3, 3]
    for t, losses in zip(structure["trace"], state["val_log"]):
        assert t["val_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-6) and 0 <= t["val_acc"] <= 1


def test_one_algorithm_object_serves_two_federations():
    """FeMAM's additive models and FedRep's partial trainers are built per federation's data: an
    algorithm object already run on one federation trains on the clients of another exactly as a fresh
    object does."""
    for name, params in (("femam", dict(structure=["personal"], init_rounds=1000)), ("fedrep", {})):
        alg = ALGORITHMS[name](**params)
        first = federation()
        run(alg, first, 1)
        other = dict(data=data_with_val([10, 40, 20]), local=full_batch())
        _, reused = run(alg, federation(**other), 2)
        _, fresh = run(ALGORITHMS[name](**params), federation(**other), 2)
        models = reused["levels"][0] if name == "femam" else {**reused["global"], **reused["heads"]}
        expected = fresh["levels"][0] if name == "femam" else {**fresh["global"], **fresh["heads"]}
        for k, v in expected.items():
            assert torch.equal(models[k], v), (name, k)


# ---- baselines -------------------------------------------------------------------------------------


def test_ditto_with_lam_zero_is_local_and_its_global_model_is_fedavg():
    _, ditto = run("ditto", federation(full_batch()), 3, lam=0.0)
    _, local = run("local", federation(full_batch()), 3)
    _, fedavg = run("fedavg", federation(full_batch()), 3)
    for k in local["clients"]:
        torch.testing.assert_close(ditto["personal"][k], local["clients"][k], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ditto["global"][k], fedavg["global"][k], atol=1e-5, rtol=1e-5)


def test_ditto_personal_models_approach_fedavgs_model_as_lam_grows():
    """The personal models end a round near the global model w^t the round started from
    (FedAvg's model): the gap shrinks monotonically with lam, towards 0."""
    def gap(lam):
        fed = federation(LocalSGD(epochs=5, batch_size=64, lr=0.05))
        alg, state = run("ditto", fed, 2, lam=lam)
        anchor = state["global"]
        state, _ = alg.round(fed, state, 3)
        return sum(float((state["personal"][k] - anchor[k]).norm()) for k in anchor)

    gaps = [gap(lam) for lam in (0.0, 1.0, 10.0, 19.0)]  # lr * lam < 1: the proximal step is stable
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 0.15 * gaps[0]


def test_fedrep_averages_only_the_body_and_keeps_each_clients_head():
    """FedRep (Collins et al. 2021), Algorithm 1: each client first runs ``head_epochs`` updates of
    its head with the body fixed, then ``body_epochs`` of the body with the new head fixed; the server
    averages only the bodies (sample-weighted), every client keeps its head.  Full batch: 2 head steps,
    then 3 body steps, by hand."""
    fed = federation(full_batch())
    initial = model_weights(fed.model)
    alg, state = run("fedrep", fed, 1, head_epochs=2, body_epochs=3)
    head, body = ["3.weight", "3.bias"], ["1.weight", "1.bias"]
    trained = []
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i)
        after_head = gd_by_hand(fed.model, initial, x, y, steps=2, lr=0.2, keys=head)
        trained.append(gd_by_hand(fed.model, after_head, x, y, steps=3, lr=0.2, keys=body))
    everyone = np.arange(fed.num_clients)
    averaged = weighted_mean(trained, fed.data.train.counts, everyone)
    for k in body:
        torch.testing.assert_close(state["global"][k], averaged[k], atol=1e-5, rtol=1e-5)
    for k in head:
        torch.testing.assert_close(state["heads"][k], torch.stack([t[k] for t in trained]), atol=1e-5, rtol=1e-5)
    models = alg.client_models(fed, state, 1)
    assert torch.equal(models["1.weight"][0], models["1.weight"][-1]) and not torch.equal(models["3.weight"][0], models["3.weight"][-1])


def test_ditto_personal_step_by_hand():
    """Ditto (Li et al. 2021), Algorithm 1: the global model w runs FedAvg's local SGD; the personal
    model takes v <- v - lr (grad F(v) + lam (v - w^t)), w^t the global model the round started from.
    One client, full batch, 2 steps per round, 2 rounds (so that v != w^t), by hand."""
    lam, lr = 0.5, 0.2
    data = data_with_val([30])
    fed = make_federation(data, mlp(), LocalSGD(epochs=2, batch_size=64, lr=lr))
    alg = ALGORITHMS["ditto"](lam=lam)
    state = alg.init(fed, model_weights(fed.model))
    x, y = client_rows(fed, 0)
    w, v = model_weights(fed.model), model_weights(fed.model)
    for t in (1, 2):
        state, _ = alg.round(fed, state, t)
        w, v = gd_by_hand(fed.model, w, x, y, 2, lr), gd_by_hand(fed.model, v, x, y, 2, lr, mu=lam, center=w)
        for k in w:
            torch.testing.assert_close(state["global"][k], w[k], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(state["personal"][k][0], v[k], atol=1e-6, rtol=1e-5)
    assert any(not torch.allclose(w[k], v[k], atol=1e-3) for k in w)


def test_fesem_plus_scores_each_client_with_its_cluster_model_fine_tuned_by_hand():
    """FeSEM+ (FeMAM Sec. 5.1): FeSEM's training, then every client fine-tunes its cluster's model for
    ``finetune_epochs`` (2) local epochs before it is scored.  Full batch: 2 GD steps, by hand."""
    plus, plain = ALGORITHMS["fesem_plus"](num_clusters=2), ALGORITHMS["fesem"](num_clusters=2)
    assert plus.finetune_epochs == 2
    fed, fed_plain = federation(full_batch()), federation(full_batch())
    _, state = run(plus, fed, 2)
    _, state_plain = run(plain, fed_plain, 2)
    assert torch.equal(state["assign"], state_plain["assign"]) and set(state["assign"].tolist()) == {0, 1}
    for k in state["centres"]:
        assert torch.equal(state["centres"][k], state_plain["centres"][k])
    scored = plus.client_models(fed, state, 2)
    for i in range(fed.num_clients):
        cluster = row(state["centres"], int(state["assign"][i]))
        tuned = gd_by_hand(fed.model, cluster, *client_rows(fed, i), steps=2, lr=0.2)
        assert_rows(scored, tuned, [i])


def deep_mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 3))


@pytest.mark.parametrize("name", ["ditto", "fedrep"])
def test_ditto_and_fedrep_with_a_sampled_half_of_the_clients_by_hand(name):
    """Ditto (Li et al. 2021, Alg. 1) and FedRep (Collins et al. 2021, Alg. 1; the head is the last Linear
    layer, here of a 3-layer MLP) when a round samples half the clients: only they train; the global
    model (FedRep: the body) becomes the sample-weighted average of theirs; the others' personal models
    (heads) stay as they were.  One full-batch step per phase, by hand."""
    fed = make_federation(data_with_val(), deep_mlp(), full_batch(), participation=0.5)
    initial = model_weights(fed.model)
    alg = ALGORITHMS[name](**({"head_epochs": 1, "body_epochs": 1} if name == "fedrep" else {}))
    state = alg.init(fed, initial)
    state, _ = alg.round(fed, state, 1)
    personal = state["personal"] if name == "ditto" else state["heads"]
    chosen = [i for i in range(fed.num_clients) if not torch.equal(personal["5.weight"][i], initial["5.weight"])]
    assert len(chosen) == 3
    head = ["5.weight", "5.bias"]
    trained = []
    for i in range(fed.num_clients):
        x, y = client_rows(fed, i)
        if name == "ditto":
            trained.append(gd_by_hand(fed.model, initial, x, y, steps=1, lr=0.2))
        else:
            after_head = gd_by_hand(fed.model, initial, x, y, steps=1, lr=0.2, keys=head)
            trained.append(gd_by_hand(fed.model, after_head, x, y, steps=1, lr=0.2, keys=[k for k in initial if k not in head]))
    averaged = weighted_mean(trained, fed.data.train.counts, chosen)
    body = initial if name == "ditto" else [k for k in initial if k not in head]
    for k in body:
        torch.testing.assert_close(state["global"][k], averaged[k], atol=1e-5, rtol=1e-5)
    for i in range(fed.num_clients):
        expected = trained[i] if i in chosen else initial
        for k in personal:
            torch.testing.assert_close(personal[k][i], expected[k], atol=1e-5, rtol=1e-5)
    if name == "ditto":
        assert alg.client_models(fed, state, 1) is state["personal"] and alg.global_model(fed, state) is state["global"]
    else:
        assert torch.equal(state["global"]["5.weight"], initial["5.weight"])  # the head is never averaged


def test_partial_trainers_are_of_the_federations_kind():
    """``partial.trainer_for``: the trainer of a partly frozen model is of the federation's kind, the
    vectorised one with the federation's chunk size and memory budget (the hand-written Linear/ReLU step
    off: it would take a frozen Linear for a trainable one), or the reference one; FedRep trains the same
    on either."""
    fed = federation(full_batch())
    fed.trainer = VectorisedTrainer(fed.model, fed.data, chunk_size=2, memory_mb=64.0)
    trainer = trainer_for(fed, frozen_copy(fed.model, ["3.weight", "3.bias"]))
    assert isinstance(trainer, VectorisedTrainer) and trainer.step_kind != "fused_mlp"
    assert (trainer.chunk_size, trainer.memory_mb) == (2, 64.0)
    _, vectorised = run("fedrep", fed, 1)
    reference = federation(full_batch())
    reference.trainer = ReferenceTrainer(reference.model, reference.data)
    assert isinstance(trainer_for(reference, frozen_copy(reference.model)), ReferenceTrainer)
    _, by_reference = run("fedrep", reference, 1)
    for part in ("global", "heads"):
        for k, v in vectorised[part].items():
            torch.testing.assert_close(by_reference[part][k], v, atol=1e-5, rtol=1e-5)


def test_partial_training_anchors_the_proximal_term_at_the_given_centre():
    """``partial.train_module`` (FeMAM's level training, Eq. 5 / B.4: lam/2 ||theta - Theta_C(i)||^2): the
    proximal term is anchored at the ``center`` it is given, which need not be the starting point.  One
    full-batch GD step from w0 with the centre w0 + 1 (mu = 0.5), checked per client by plain autograd."""
    from fedbench.algorithms.partial import train_module
    from fedbench.engine.weights import broadcast, rows

    fed = federation(full_batch())
    clients = torch.tensor([0, 3])
    start = broadcast(model_weights(fed.model), len(clients))
    center = {k: v + 1.0 for k, v in start.items()}
    trained, _ = train_module(fed, trainer_for(fed, fed.model), start, clients, fed.with_local(prox_mu=0.5), center=center)
    for j, i in enumerate(clients.tolist()):
        x, y = client_rows(fed, i)
        expected = gd_by_hand(fed.model, row(start, j), x, y, 1, 0.2, mu=0.5, center=row(center, j))
        assert_rows(trained, expected, [j])


def test_a_cluster_level_where_kmeans_finds_fewer_groups_than_k():
    """A cluster level (Eq. 4 / B.3 grouping, Eq. 7 averaging) whose clients' trained models are all the
    same (lr 0: nothing moves) has one distinct point for K = 2 groups: the round goes on with every client
    in one group, and each client's level model is the group's average, i.e. the unchanged initial model."""
    fed = federation(LocalSGD(epochs=1, batch_size=64, lr=0.0))
    w0 = model_weights(fed.model)
    algorithm, state = run("femam", fed, 1, structure=["cluster"], num_clusters=2, init_rounds=100)
    assert len(set(state["groups"][0].tolist())) == 1
    for k, v in w0.items():
        torch.testing.assert_close(state["levels"][0][k], v.expand(len(SIZES), *v.shape))


# ---- protocol and bad input ------------------------------------------------------------------------


def test_femam_protocol_picks_the_round_of_least_validation_loss():
    history = pd.DataFrame({
        "round": [1, 2, 3, 4],
        "acc_mean": [0.2, 0.5, 0.4, 0.45], "f1_mean": [0.1, 0.4, 0.3, 0.35], "loss_mean": [2.0, 1.0, 1.1, 1.2],
        "acc_var": [0.0, 0.01, 0.02, 0.03], "val_loss_mean": [2.1, 1.3, 1.2, 1.25],
    })
    final = PROTOCOLS["femam"].final(history)
    assert final["round"] == 3 and final["accuracy"] == 0.4 and final["macro_f1"] == 0.3
    assert final["last_round"] == 4 and final["last_accuracy"] == 0.45 and final["last_macro_f1"] == 0.35
    with pytest.raises(ValueError, match="val_loss_mean"):
        PROTOCOLS["femam"].final(history.drop(columns="val_loss_mean"))


@pytest.mark.parametrize("params, message", [
    ({"structure": []}, "at least 1 level"),
    ({"structure": ["global", "clusters"]}, "'clusters' is not one of"),
    ({"combine": "average"}, "combine must be one of"),
    ({"cluster_fit": "warm"}, "cluster_fit must be one of"),
])
def test_bad_femam_options_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        ALGORITHMS["femam"](**params)


@pytest.mark.parametrize("params, valid", [
    ({"num_clusters": 1, "window": 1, "init_rounds": 0, "lam": 0.0, "threshold": 1e-9}, True),
    ({"num_clusters": 0}, False),
    ({"window": 0}, False),
    ({"init_rounds": -1}, False),
    ({"lam": -0.1}, False),
    ({"threshold": 0.0}, False),
])
def test_femam_option_bounds(params, valid):
    """FeMAM's numeric options at their bounds: at least 1 cluster and a window of 1 round, init_rounds
    and lam may be 0, the convergence threshold must be positive; each bound is checked on its own."""
    if valid:
        assert ALGORITHMS["femam"](**params).num_clusters == params["num_clusters"]
    else:
        with pytest.raises(ValueError, match="FeMAM needs"):
            ALGORITHMS["femam"](**params)


def test_femam_needs_validation_rows():
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(epochs=1, batch_size=8, lr=0.1))
    with pytest.raises(ValueError, match="validation rows"):
        ALGORITHMS["femam"]().init(fed, model_weights(fed.model))


def test_structure_figures_are_written(tmp_path, saved_figures):
    """Fig. 4 / A.1: the ground-truth groupings beside FeMAM's levels, clients in ground-truth order,
    each column coloured by its grouping (white: no model), the levels' best ARI on the ticks; and the
    level count and validation accuracy against rounds from the structure trace."""
    from fedbench.results.femam_figures import client_order, plot_levels, plot_structure

    truth = {"level1": [1, 0, 1, 0, 0, 1], "level2": [2, 0, 3, 1, 0, 2]}
    assert client_order(truth, 6).tolist() == [1, 4, 3, 0, 5, 2]  # by level1, then level2, then id
    fed = federation()
    alg, state = run("femam", fed, 4, structure=["global", "cluster", "personal"], num_clusters=2,
                     init_rounds=1, window=1, threshold=1e9)
    structure = alg.artifacts(fed, state)["structure"]
    scores = structure_scores(alg.level_clusters(fed, state), truth)
    plot_structure(structure, truth, tmp_path / "s.png", "t", scores)
    order = client_order(truth, 6)
    ax_truth, ax_found = saved_figures[-1].axes

    def colours_group_like(image, columns):
        """Column j of the image paints two clients alike exactly when columns[j] groups them
        together; clients without a model (-1) are white."""
        for j, labels in enumerate(columns):
            labels, painted = np.asarray(labels)[order], [tuple(c) for c in image[:, j]]
            assert all((painted[a] == painted[b]) == (labels[a] == labels[b]) for a in range(6) for b in range(6))
            assert all((painted[a] == (1.0, 1.0, 1.0)) == (labels[a] < 0) for a in range(6))

    colours_group_like(ax_truth.images[0].get_array(), list(truth.values()))
    levels = [level["assignment"] for level in structure["levels"]]
    found = ax_found.images[0].get_array()
    assert found.shape[1] == 3  # every level of the structure, reached or not
    colours_group_like(found, levels + [[-1] * 6] * (3 - len(levels)))
    assert len({tuple(c) for c in found[:, 1]} - {(1.0, 1.0, 1.0)}) == 2  # the cluster level's two groups are drawn
    best = max(s["ari"] for s in scores["level2"].values())
    assert ax_found.get_xticklabels()[1].get_text() == f"2\ncluster\nARI {best:.2f}"

    plot_levels(structure, tmp_path / "l.png", "t")
    ax, twin = saved_figures[-1].axes
    trace = structure["trace"]
    assert ax.lines[0].get_ydata().tolist() == [t["levels"] for t in trace]
    np.testing.assert_allclose(twin.lines[0].get_ydata(), [100 * t["val_acc"] for t in trace])
    assert (tmp_path / "s.png").stat().st_size > 1000 and (tmp_path / "l.png").stat().st_size > 1000


def test_a_femam_cell_end_to_end_through_the_pipeline(tmp_path):
    """Digits in a FeMAM cluster-wise partition (with validation rows): history has the validation
    columns, the femam protocol's pick is the least-validation-loss round, structure outputs exist."""
    import json

    from fedbench.config.cells import Cell
    from fedbench.planning.validate import check_config
    from fedbench.run.partition_job import build_partition
    from fedbench.run.job import cell_job
    from fedbench.run.stages import run_cell

    config = {
        "results": "unused", "device": "cpu", "seeds": [0],
        "datasets": {"digits": {"source": "digits"}},
        "partitions": {"c": {"kind": "femam_cluster", "classes_per_cluster": 4, "num_clusters": 3, "num_clients": 6}},
        "models": {"mlp": {"arch": "mlp", "hidden": [16]}},
        "algorithms": {"femam": {"method": "femam", "structure": ["global", "cluster", "personal"], "num_clusters": 3,
                                 "init_rounds": 2, "window": 1, "threshold": 1.0e9}},
        "experiments": {"t": {"protocol": "femam",
                              "training": {"rounds": 6, "local_epochs": 1, "batch_size": 16, "lr": 0.1, "eval_every": 1},
                              "grid": [{"datasets": ["digits"], "partitions": ["c"], "models": ["mlp"], "algorithms": ["femam"]}]}},
    }
    check_config(config)
    build_partition(config, "digits", "c", 0, tmp_path / "p.npz", tmp_path / "p.json")
    metrics = run_cell(cell_job(config, Cell("t", "digits", "c", "mlp", "femam", 0)), tmp_path / "p.npz", tmp_path / "run")
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert metrics["final"]["round"] == int(history.loc[history["val_loss_mean"].idxmin(), "round"])
    assert metrics["final"]["last_round"] == 6
    structure = json.loads((tmp_path / "run" / "structure.json").read_text())
    assert [level["added_round"] for level in structure["levels"]] == [0, 2, 3] and structure["complete"]
    assert set(metrics["structure_scores"]) == {"level1", "level2", "level3"}
    assert set(metrics["structure_scores"]["level2"]) == {"cluster"}
