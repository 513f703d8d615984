"""FeMAM as its paper states it, where an audit found the grid or the algorithm reading otherwise
(issue 24): each paper reading on a small case worked out by hand, the code's reading as an option."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.data.partition import partition_dataset
from fedbench.data.sources import ArrayDataset
from fedbench.engine.federated_data import ClientIndex
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights
from conftest import make_data, make_federation

REPO = Path(__file__).resolve().parents[1]
GRID = yaml.safe_load((REPO / "config" / "experiments" / "femam.yaml").read_text())


def labels_only(num_classes: int, train: int, test: int) -> ArrayDataset:
    """``train`` official training and ``test`` official test samples per class (features irrelevant)."""
    y = np.concatenate([np.repeat(np.arange(num_classes), train), np.repeat(np.arange(num_classes), test)])
    mask = np.r_[np.zeros(num_classes * train, bool), np.ones(num_classes * test, bool)]
    return ArrayDataset(x=np.zeros((len(y), 1), np.float32), y=y.astype(np.int64), num_classes=num_classes, test_mask=mask)


def split_sizes(part) -> tuple[int, int, int]:
    return tuple(sum(map(len, rows)) for rows in (part.train, part.val, part.test))


# ---- item 3: validation = half the test set (App. C.1) -------------------------------------------


@pytest.mark.parametrize("spec", [
    {"kind": "femam_cluster", "classes_per_cluster": 50},
    {"kind": "femam_multilevel", "structure": [4, 13, 21]},
])
def test_tiny_imagenet_validation_is_half_the_test_set(spec):
    """Tiny ImageNet per class: 500 official training and 50 official test images.  The paper
    (App. C.1): validation = half the test set, from the training set -> 25 per class, 200 classes:
    95,000 / 5,000 / 10,000.  The code (``val_ratio: 0.1``): 50 per class -> 90,000 / 10,000 / 10,000."""
    tiny = labels_only(200, 500, 50)
    assert split_sizes(partition_dataset(tiny, spec, 0)) == (95_000, 5_000, 10_000)
    assert split_sizes(partition_dataset(tiny, {**spec, "val_ratio": 0.1}, 0)) == (90_000, 10_000, 10_000)


def test_cifar100_validation_is_the_same_under_both_readings():
    """CIFAR-100 per class: 500 training, 100 test: half the test set = 50 = 10 % of 500, so the
    paper and the code agree (45,000 / 5,000 / 10,000)."""
    cifar = labels_only(100, 500, 100)
    spec = {"kind": "femam_cluster", "classes_per_cluster": 30}
    assert split_sizes(partition_dataset(cifar, spec, 0)) == (45_000, 5_000, 10_000)
    assert split_sizes(partition_dataset(cifar, {**spec, "val_ratio": 0.1}, 0)) == (45_000, 5_000, 10_000)


def test_a_bad_validation_rule_is_named():
    cifar = labels_only(10, 20, 4)
    with pytest.raises(ValueError, match="val_ratio must be 'half_test'"):
        partition_dataset(cifar, {"kind": "femam_cluster", "classes_per_cluster": 2, "val_ratio": "half"}, 0)


# ---- item 4: Table C.3's "IID" on the paper's IID split, Dirichlet(10) beside it -----------------


def test_iid_column_runs_on_the_papers_iid_split_and_on_dirichlet_10():
    """The paper says IID; Dir(10) is the code's script (an inference).  Both partitions train in the
    experiment the "iid" published column is linked from; the IID one deals 60,000 pooled CIFAR-100
    images into 50 equal clients: 10,000 test (1/6), then 5,000 validation (10 % of the 50,000 left)."""
    for experiment, iid, dirichlet in (("cifar_iid", "femam_iid_cifar", "femam_dir10_cifar"),
                                       ("tiny_iid", "femam_iid_tiny", "femam_dir10_tiny")):
        spec = GRID["experiments"][experiment]
        assert spec["published"]["partition"] == "iid" and spec["grid"][0]["partitions"] == [iid, dirichlet]
        assert GRID["partitions"][iid]["kind"] == "iid" and GRID["partitions"][dirichlet]["alpha"] == 10
    part = partition_dataset(labels_only(100, 500, 100), GRID["partitions"]["femam_iid_cifar"], 0)
    assert split_sizes(part) == (45_000, 5_000, 10_000)
    sizes = [len(a) + len(b) + len(c) for a, b, c in zip(part.train, part.val, part.test)]
    assert len(sizes) == 50 and set(sizes) == {1200}  # 60,000 / 50
    tiny = partition_dataset(labels_only(200, 500, 50), GRID["partitions"]["femam_iid_tiny"], 0)
    assert split_sizes(tiny) == (95_000, 5_000, 10_000)


# ---- item 2: pFedMe's "lambda = 0.1, mu = 0.01" and 2 epochs per dataset -------------------------


def test_pfedme_reads_mu_as_the_l2_term_and_sizes_two_epochs_per_dataset():
    """App. C.1 "PFedMe lambda = 0.1, mu = 0.01": pFedMe's released optimiser takes ``lamda`` and
    ``mu`` (the L2 term), so mu = 0.01 is the L2 term; the personal lr is the paper's one lr, 0.01.
    2 local epochs at batch 32: CIFAR-100 clients hold 45,000 / 50 = 900 training samples -> 2 x 900 /
    32 = 56.25 -> 56 local rounds; Tiny ImageNet's 95,000 / 50 = 1,900 -> 118.75 -> 119."""
    algorithms = GRID["algorithms"]
    assert algorithms["pfedme"] == {"method": "pfedme", "lam": 0.1, "mu": 0.01, "personal_lr": 0.01, "local_steps": 56}
    assert algorithms["pfedme_tiny"] == {**algorithms["pfedme"], "local_steps": 119}
    assert algorithms["pfedme_mu_as_lr"] == {"method": "pfedme", "lam": 0.1, "personal_lr": 0.01, "local_steps": 56}
    for name, spec in GRID["experiments"].items():
        trained = spec["grid"][0]["algorithms"]
        assert ("pfedme_tiny" if name.startswith("tiny") else "pfedme") in trained, name
        assert ("pfedme" if name.startswith("tiny") else "pfedme_tiny") not in trained, name


# ---- item 8: FeMAM's Local trains on training + validation data ----------------------------------


def data_with_val(sizes=(6, 4, 5)):
    """make_data's clients, their 4 held-out rows split into 2 validation + 2 test rows."""
    data = make_data(list(sizes), test=4)
    n = len(sizes)
    val = ClientIndex(data.test.index[:, :2].contiguous(), torch.full((n,), 2))
    test = ClientIndex(data.test.index[:, 2:].contiguous(), torch.full((n,), 2))
    return replace(data, val=val, test=test)


def one_gd_step(model, start, x, y, lr):
    """One full-batch gradient step on the mean cross-entropy, by plain autograd."""
    leaves = {k: v.clone().requires_grad_(k in dict(model.named_parameters())) for k, v in start.items()}
    loss = F.cross_entropy(torch.func.functional_call(model, leaves, (x,)), y)
    names = [k for k in leaves if leaves[k].requires_grad]
    grads = dict(zip(names, torch.autograd.grad(loss, [leaves[k] for k in names])))
    return {k: (v - lr * grads[k] if k in grads else v).detach() for k, v in leaves.items()}


@pytest.mark.parametrize("train_on", ["train", "train_val"])
def test_local_trains_on_training_and_validation_rows_by_hand(train_on):
    """FeMAM App. C.1: "Local: each client train[s] with its own training and validation dataset".
    One round of one full-batch step (batch 64 > every client's rows, so batch order is irrelevant):
    client k's model = start - lr * grad CE over its training rows, plus its validation rows under
    ``train_on: train_val``; the two differ."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    data = data_with_val()
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=64, lr=0.5))
    start = model_weights(model)
    alg = ALGORITHMS["local"](train_on=train_on)
    state, _ = alg.round(fed, alg.init(fed, start), 1)
    for k in range(data.num_clients):
        rows = data.train.index[k, : int(data.train.counts[k])]
        if train_on == "train_val":
            rows = torch.cat([rows, data.val.index[k, :2]])
        expected = one_gd_step(model, start, data.x[rows], data.y[rows], 0.5)
        for name, value in expected.items():
            torch.testing.assert_close(state["clients"][name][k], value, atol=1e-5, rtol=1e-5)
        only_train = one_gd_step(model, start, data.x[data.train.index[k, : int(data.train.counts[k])]],
                                 data.y[data.train.index[k, : int(data.train.counts[k])]], 0.5)
        differs = any(not torch.allclose(state["clients"][n][k], v) for n, v in only_train.items())
        assert differs == (train_on == "train_val")


def test_local_on_validation_rows_needs_them_and_is_femams_grid_setting():
    fed = make_federation(make_data([4, 4]), nn.Sequential(nn.Linear(5, 3)), LocalSGD(epochs=1, batch_size=4, lr=0.1))
    alg = ALGORITHMS["local"](train_on="train_val")
    with pytest.raises(ValueError, match="train_on: train_val needs per-client validation rows"):
        alg.init(fed, model_weights(fed.model))
    with pytest.raises(ValueError, match="train_on must be one of train, train_val"):
        ALGORITHMS["local"](train_on="val")
    assert GRID["algorithms"]["local"] == {"method": "local", "train_on": "train_val"}


def test_one_local_instance_trains_each_federation_on_its_own_training_and_validation_rows():
    """An algorithm is a plain value: one ``Local(train_on="train_val")`` may serve two federations
    (initialised one after the other, then trained in turn), and each client of each trains on its own
    federation's training + validation rows (FeMAM App. C.1), one full-batch step by plain autograd."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    first, second = data_with_val((6, 4, 5)), data_with_val((3, 8, 2))
    feds = [make_federation(data, model, LocalSGD(epochs=1, batch_size=64, lr=0.5)) for data in (first, second)]
    start = model_weights(model)
    alg = ALGORITHMS["local"](train_on="train_val")
    states = [alg.init(fed, start) for fed in feds]
    states = [alg.round(fed, state, 1)[0] for fed, state in zip(feds, states)]
    for data, state in zip((first, second), states):
        for k in range(data.num_clients):
            rows = torch.cat([data.train.index[k, : int(data.train.counts[k])], data.val.index[k, :2]])
            expected = one_gd_step(model, start, data.x[rows], data.y[rows], 0.5)
            for name, value in expected.items():
                torch.testing.assert_close(state["clients"][name][k], value, atol=1e-5, rtol=1e-5)


# ---- items 5-7: FeMAM's new levels, training after the last level, the row of a level addition ---

import fedbench.algorithms.femam as femam_module  # noqa: E402
from fedbench.engine.evaluate import evaluate_clients  # noqa: E402
from fedbench.models.additive import additive_weights  # noqa: E402


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))


def femam_federation(seed=0, sizes=(6, 4, 5, 6, 4, 5)):
    """Six clients, each with 2 validation and 2 test rows; one full-batch GD step per round."""
    return make_federation(data_with_val(sizes), mlp(), LocalSGD(epochs=1, batch_size=64, lr=0.2), seed=seed)


def level_rows(level: dict, i: int) -> dict:
    return {k: v[i] for k, v in level.items()}


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def flat(weights: dict, names) -> torch.Tensor:
    return torch.cat([weights[n].flatten().double() for n in names])


def test_a_new_cluster_level_starts_from_k_random_models_and_a_random_mapping(monkeypatch):
    """Alg. 2 line 2: "Randomly initialize models Theta_{1:K} and mapping function C" at the new level;
    line 5 / Eq. B.1a: each client starts from Theta_{C(i)}; line 11 / Eq. B.3: after training, each
    client joins the nearest Theta_k, the K random models being the first centres.  Six clients,
    K = 2: the added level holds exactly 2 distinct models, neither the first level's nor the run's
    initial model, 3 clients each (dealt evenly, in random order), each client's row its group's
    model; the first grouping is argmin_k ||theta_i - Theta_k||^2 against those 2 models, by hand;
    the personal level then starts from 6 distinct random models, one group per client."""
    calls = []
    real = femam_module.kmeans_groups

    def recording(features, k, *, fit, seed, centres=None):
        calls.append((features, centres))
        return real(features, k, fit=fit, seed=seed, centres=centres)

    monkeypatch.setattr(femam_module, "kmeans_groups", recording)
    fed = femam_federation()
    initial = model_weights(fed.model)
    alg = ALGORITHMS["femam"](structure=["global", "cluster", "personal"], num_clusters=2, init_rounds=1, window=1,
                              threshold=1e9, epsilon=-1e9)  # epsilon: nobody drops a level (Eq. 9)
    state, _ = alg.round(fed, alg.init(fed, initial), 1)  # level 1 converges: level 2 added
    level, groups, centres = state["levels"][1], state["groups"][1], state["centres"]
    assert sorted(groups.tolist()) == [0, 0, 0, 1, 1, 1]
    models = [level_rows(centres, k) for k in (0, 1)]
    assert not same(models[0], models[1])
    for model in models:
        assert not same(model, initial) and not same(model, level_rows(state["levels"][0], 0))
    for i in range(6):
        assert same(level_rows(level, i), models[groups[i]])
    names = [n for n, _ in fed.model.named_parameters()]
    start_centres = torch.stack([flat(m, names) for m in models])
    state, _ = alg.round(fed, state, 2)  # the level's first round: B.3 against the random centres
    features, given = calls[-1]
    torch.testing.assert_close(torch.from_numpy(given), start_centres)
    by_hand = torch.cdist(torch.from_numpy(features), start_centres).argmin(1).tolist()
    assert state["groups"][1].tolist() == by_hand
    # the cluster level converged (window 1): the personal level, one random model per client
    personal = state["levels"][2]
    rows_ = [level_rows(personal, i) for i in range(6)]
    assert all(not same(rows_[i], rows_[j]) for i in range(6) for j in range(i))
    assert state["groups"][2].tolist() == list(range(6))
    mappings = set()
    for seed in range(4):  # the mapping is drawn from the run's seed
        fed = femam_federation(seed=seed)
        s, _ = alg.round(fed, alg.init(fed, model_weights(fed.model)), 1)
        mappings.add(tuple(s["groups"][1].tolist()))
    assert len(mappings) > 1


def test_the_other_new_level_readings_stay_options():
    """``random_shared`` (fedbench before issue 24): one random model for every client, one group;
    ``global_copy`` (the code, notes §1.4): a copy of level 1."""
    for new_level in ("random_shared", "global_copy"):
        fed = femam_federation()
        alg = ALGORITHMS["femam"](structure=["global", "cluster"], num_clusters=2, init_rounds=1, window=1,
                                  threshold=1e9, new_level=new_level)
        state, _ = alg.round(fed, alg.init(fed, model_weights(fed.model)), 1)
        first = level_rows(state["levels"][1], 0)
        assert all(same(level_rows(state["levels"][1], i), first) for i in range(6))
        assert state["groups"][1].tolist() == [0] * 6 and state["centres"] is None
        assert same(first, level_rows(state["levels"][0], 0)) == (new_level == "global_copy")
    with pytest.raises(ValueError, match="new_level must be one of random_groups, random_shared, global_copy"):
        ALGORITHMS["femam"](new_level="random")


def additive_step_by_hand(fed, levels, i, lr=0.2):
    """One full-batch GD step on the newest level of client i: CE(sum of its levels' outputs, y),
    the earlier levels fixed (Eqs. 2, 8, B.5; the personal level has no proximal term)."""
    model = fed.model
    rows = fed.data.train.index[i, : int(fed.data.train.counts[i])]
    x, y = fed.data.x[rows], fed.data.y[rows]
    fixed = sum(torch.func.functional_call(model, level_rows(level, i), (x,)) for level in levels[:-1]).detach()
    newest = {k: v.clone().requires_grad_(True) for k, v in level_rows(levels[-1], i).items()}
    loss = F.cross_entropy(fixed + torch.func.functional_call(model, newest, (x,)), y)
    grads = torch.autograd.grad(loss, list(newest.values()))
    return {k: (v - lr * g).detach() for (k, v), g in zip(newest.items(), grads)}


@pytest.mark.parametrize("final_training", ["holders", "everyone"])
def test_after_the_last_level_pruned_clients_train_only_under_the_codes_reading(final_training):
    """Structure [global, personal]; epsilon = 100 makes Eq. 9 drop the personal level for every client
    when it converges (round 2), which completes the structure.  Round 3: ``holders`` (Alg. 2 line 16:
    the level is adjusted to its remaining clients, none) trains nobody; ``everyone`` (the code's server
    re-groups all clients at the latest level every round) trains every client's personal model one GD
    step on its additive prediction, by hand, and every client holds the level again."""
    fed = femam_federation()
    alg = ALGORITHMS["femam"](structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9, epsilon=100.0,
                              final_training=final_training)
    state = alg.init(fed, model_weights(fed.model))
    for t in (1, 2):
        state, _ = alg.round(fed, state, t)
    assert state["complete"] and not state["kept"][:, 1].any() and state["pruned"][1] == list(range(6))
    before = [{k: v.clone() for k, v in level.items()} for level in state["levels"]]
    state, _ = alg.round(fed, state, 3)
    for i in range(6):
        if final_training == "holders":
            assert same(level_rows(state["levels"][1], i), level_rows(before[1], i))
        else:
            expected = additive_step_by_hand(fed, before, i)
            for k, v in expected.items():
                torch.testing.assert_close(state["levels"][1][k][i], v, atol=1e-5, rtol=1e-5)
    assert state["kept"][:, 1].all() == (final_training == "everyone")
    assert state["groups"][1].tolist() == (list(range(6)) if final_training == "everyone" else [-1] * 6)


def test_the_round_a_level_is_added_is_scored_before_the_addition():
    """The round whose convergence test adds a level is scored on the state that test validated (the
    code records before adding): after round 1 (level 2 added), ``client_models`` is the first level
    alone, on a one-level module, and its mean validation loss is the one the test recorded; from
    round 2 on both levels are scored."""
    fed = femam_federation()
    alg = ALGORITHMS["femam"](structure=["global", "personal"], init_rounds=1, window=1, threshold=1e9)
    state, _ = alg.round(fed, alg.init(fed, model_weights(fed.model)), 1)
    assert len(state["levels"]) == 2 and state["added"] == [0, 1]
    models, module = alg.client_models(fed, state, 1), alg.scoring_model(fed, state)
    expected = additive_weights([state["levels"][0]], torch.ones(6, 1))
    assert set(models) == set(expected) and all(torch.equal(models[k], expected[k]) for k in expected)
    everyone = torch.arange(6)
    val = evaluate_clients(module, models, fed.data, fed.data.val, everyone)
    assert float(val.loss.mean()) == pytest.approx(state["trace"][-1][2], rel=1e-6)
    assert alg.clusters(fed, state) is None
    state, _ = alg.round(fed, state, 2)
    models = alg.client_models(fed, state, 2)
    assert set(models) == set(additive_weights(state["levels"], torch.ones(6, 2)))
    assert len(module.levels) == 1 and len(alg.scoring_model(fed, state).levels) == 2
