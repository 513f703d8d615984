"""FeMAM and its new baselines (FedRep, Ditto, FeSEM+) against hand-derived cases."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import adjusted_rand_score
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.femam_rules import converged, keep_eq9, keep_window, kmeans_groups
from fedbench.engine.federated_data import ClientIndex
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights
from fedbench.models.additive import AdditiveLevels, additive_weights
from fedbench.pipeline import structure_scores
from fedbench.protocols import PROTOCOLS
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
        state, _ = alg.round(fed, state, t)
    return alg, state


def federation(local=None, data=None, seed=0):
    data = data or data_with_val()
    return make_federation(data, mlp(), local or LocalSGD(epochs=1, batch_size=8, lr=0.1), seed=seed)


def full_batch():
    return LocalSGD(epochs=1, batch_size=64, lr=0.2)  # one full-batch step per epoch: batch order is irrelevant


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
    without, with_ = np.array([1.0, 0.8, 0.5, 0.9]), np.array([0.9, 0.8, 0.6, 0.85])
    assert keep_eq9(without, with_, 0.0).tolist() == [True, False, False, True]
    assert keep_eq9(without, with_, 0.07).tolist() == [True, False, False, False]
    # 2 clients; rounds at level 0, 0, 1, 1; client 1 dropped level 0? (kept[:, 0] always True)
    losses = np.array([[1.0, 1.0], [0.8, 0.6], [0.7, 0.9], [0.5, 0.7]])
    levels = np.array([0, 0, 1, 1])
    kept = np.ones((2, 2), dtype=bool)
    # client 0: before mean 0.9, now 0.6 -> keeps; client 1: before 0.8, now 0.8 -> drops (eps 0)
    assert keep_window(losses, levels, kept, 1, window=50, epsilon=0.0).tolist() == [True, False]
    # window 1: client 1 compares 0.6 with 0.7 -> drops; client 0: 0.8 vs 0.5 -> keeps
    assert keep_window(losses, levels, kept, 1, window=1, epsilon=0.0).tolist() == [True, False]


def test_pruning_drops_exactly_the_clients_whose_validation_loss_did_not_improve():
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


def test_structure_artifact_and_scores():
    fed = federation()
    alg, state = run("femam", fed, 4, structure=["global", "cluster", "personal"], num_clusters=2,
                     init_rounds=1, window=1, threshold=1e9)
    structure = alg.artifacts(fed, state)["structure"]
    assert [level["added_round"] for level in structure["levels"]] == [0, 1, 2]
    assert [t["round"] for t in structure["trace"]] == [1, 2, 3, 4]
    levels = alg.level_clusters(fed, state)
    scores = structure_scores(levels, {"cluster": levels["level2"].tolist(), "none": [0] * fed.num_clients})
    assert scores["level2"]["cluster"]["ari"] == 1.0 and scores["level2"]["cluster"]["nmi"] == pytest.approx(1.0)


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
    fed = federation(full_batch())
    initial = model_weights(fed.model)
    alg, state = run("fedrep", fed, 1, head_epochs=1, body_epochs=1)
    # by hand: each client one full-batch step on the head (body fixed), then one on the body (head fixed)
    bodies, heads, counts = [], [], fed.data.train.counts
    for i in range(fed.num_clients):
        rows = fed.data.train.index[i, : int(counts[i])]
        x, y = fed.data.x[rows], fed.data.y[rows]
        w = {k: v.clone().requires_grad_(True) for k, v in initial.items()}
        for part in (["3.weight", "3.bias"], ["1.weight", "1.bias"]):
            loss = F.cross_entropy(torch.func.functional_call(fed.model, w, (x,)), y)
            grads = torch.autograd.grad(loss, [w[k] for k in part])
            with torch.no_grad():
                for k, g in zip(part, grads):
                    w[k] -= 0.2 * g
        bodies.append({k: w[k].detach() for k in ("1.weight", "1.bias")})
        heads.append({k: w[k].detach() for k in ("3.weight", "3.bias")})
    n = counts.double() / counts.sum()
    for k in ("1.weight", "1.bias"):
        expected = sum(float(n[i]) * bodies[i][k].double() for i in range(fed.num_clients)).float()
        torch.testing.assert_close(state["global"][k], expected, atol=1e-5, rtol=1e-5)
    for k in ("3.weight", "3.bias"):
        torch.testing.assert_close(state["heads"][k], torch.stack([h[k] for h in heads]), atol=1e-5, rtol=1e-5)
    models = alg.client_models(fed, state, 1)
    assert torch.equal(models["1.weight"][0], models["1.weight"][-1]) and not torch.equal(models["3.weight"][0], models["3.weight"][-1])


def test_fesem_plus_is_fesem_with_finetuning():
    alg = ALGORITHMS["fesem_plus"](num_clusters=2)
    assert alg.finetune_epochs == 2 and alg.num_clusters == 2


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


def test_femam_needs_validation_rows():
    fed = make_federation(make_data(SIZES), mlp(), LocalSGD(epochs=1, batch_size=8, lr=0.1))
    with pytest.raises(ValueError, match="validation rows"):
        ALGORITHMS["femam"]().init(fed, model_weights(fed.model))


def test_structure_figures_are_written(tmp_path):
    from fedbench.results.femam_figures import client_order, plot_levels, plot_structure

    truth = {"level1": [1, 0, 1, 0, 0, 1], "level2": [2, 0, 3, 1, 0, 2]}
    assert client_order(truth, 6).tolist() == [1, 4, 3, 0, 5, 2]  # by level1, then level2, then id
    fed = federation()
    alg, state = run("femam", fed, 4, structure=["global", "cluster", "personal"], num_clusters=2,
                     init_rounds=1, window=1, threshold=1e9)
    structure = alg.artifacts(fed, state)["structure"]
    scores = structure_scores(alg.level_clusters(fed, state), truth)
    plot_structure(structure, truth, tmp_path / "s.png", "t", scores)
    plot_levels(structure, tmp_path / "l.png", "t")
    assert (tmp_path / "s.png").stat().st_size > 1000 and (tmp_path / "l.png").stat().st_size > 1000


def test_a_femam_cell_end_to_end_through_the_pipeline(tmp_path):
    """Digits in a FeMAM cluster-wise partition (with validation rows): history has the validation
    columns, the femam protocol's pick is the least-validation-loss round, structure outputs exist."""
    import json

    from fedbench.config import Cell, check_config
    from fedbench.pipeline import build_partition, run_cell

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
    metrics = run_cell(config, Cell("t", "digits", "c", "mlp", "femam", 0), tmp_path / "p.npz", tmp_path / "run")
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert metrics["final"]["round"] == int(history.loc[history["val_loss_mean"].idxmin(), "round"])
    assert metrics["final"]["last_round"] == 6
    structure = json.loads((tmp_path / "run" / "structure.json").read_text())
    assert [level["added_round"] for level in structure["levels"]] == [0, 2, 3] and structure["complete"]
    assert set(metrics["structure_scores"]) == {"level1", "level2", "level3"}
    assert set(metrics["structure_scores"]["level2"]) == {"cluster"}
