"""Evaluation on cases small enough to check by hand."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import fedbench.engine.evaluate as evaluate_module
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.evaluate import evaluate_clients, evaluate_pooled
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.memory import MemoryBudgetError, evaluation_bytes_per_row, training_bytes_per_client
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.protocols import PROTOCOLS


def identity_classifier() -> nn.Module:
    """Logits = the 2 input features, so argmax(x) is the prediction."""
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(2))
        model[0].bias.zero_()
    return model


@pytest.fixture
def data():
    # samples: logits (x) and labels; client 0 owns rows 0-3, client 1 owns rows 4-5
    x = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [3.0, 0.0], [0.0, 0.0], [0.0, 5.0]])
    y = torch.tensor([0, 1, 1, 1, 0, 1])
    index = ClientIndex.from_lists([np.array([0, 1, 2, 3]), np.array([4, 5])], "cpu")
    return FederatedData(x, y, index, index, num_classes=2)


def test_per_client_accuracy_loss_and_f1(data):
    model = identity_classifier()
    scores = evaluate_clients(model, broadcast(model_weights(model), 2), data, data.test, torch.arange(2))
    # client 0: predictions 0,1,0,0 vs labels 0,1,1,1 -> 2/4 correct; client 1: argmax([0,0]) = 0 (right), 1 (right)
    np.testing.assert_allclose(scores.accuracy, [0.5, 1.0])
    ce = lambda logits, label: math.log(sum(math.exp(v) for v in logits)) - logits[label]  # noqa: E731
    loss0 = (ce([2, 0], 0) + ce([0, 1], 1) + ce([1, 0], 1) + ce([3, 0], 1)) / 4
    loss1 = (ce([0, 0], 0) + ce([0, 5], 1)) / 2
    np.testing.assert_allclose(scores.loss, [loss0, loss1], rtol=1e-6)
    # client 0 macro-F1: class 0: P=1/3, R=1 -> 0.5; class 1: P=1, R=1/3 -> 0.5
    np.testing.assert_allclose(scores.macro_f1, [0.5, 1.0])
    summary = scores.summary()
    assert summary["acc_mean"] == pytest.approx(0.75)
    assert summary["acc_var"] == pytest.approx(0.0625)  # population variance of (0.5, 1.0)
    assert summary["acc_pooled"] == pytest.approx(4 / 6)


def test_chunked_evaluation_matches(data):
    model = identity_classifier()
    stacked = broadcast(model_weights(model), 2)
    whole = evaluate_clients(model, stacked, data, data.test, torch.arange(2))
    chunked = evaluate_clients(model, stacked, data, data.test, torch.arange(2), chunk_size=1)
    np.testing.assert_allclose(whole.loss, chunked.loss, rtol=1e-6)
    np.testing.assert_array_equal(whole.correct, chunked.correct)


def test_pooled_evaluation(data):
    model = identity_classifier()
    row_mb = evaluation_bytes_per_row(model, data.input_shape) / 2**20
    pooled = evaluate_pooled(model, model_weights(model), data, data.test, memory_mb=4 * row_mb)  # blocks of 4 rows
    assert pooled.accuracy[0] == pytest.approx(4 / 6)


def conv_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 3)
    )


def test_evaluation_stays_within_its_memory_budget(monkeypatch):
    """Six clients of 40 test images: one pass over everything would need about 2.5x the budget;
    every pass evaluation makes (group weights plus its block's activations, as estimated) fits,
    and the scores equal the unconstrained evaluation's."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(240, 1, 8, 8, generator=gen), torch.randint(0, 3, (240,), generator=gen)
    index = ClientIndex.from_lists([np.arange(40 * k, 40 * (k + 1)) for k in range(6)], "cpu")
    data = FederatedData(x, y, index, index, 3)
    model = conv_net()
    stacked = {k: v + 0.1 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
               for k, v in broadcast(model_weights(model), 6).items()}
    row = evaluation_bytes_per_row(model, data.input_shape)
    weights = sum(v[0].numel() * v.element_size() for v in stacked.values())
    everything = 6 * (2 * weights + 40 * row)
    budget = everything / 2.5
    passes = []
    real_forward = evaluate_module.wide_forward

    def recording_forward(wide, w, x, clients):
        passes.append((clients, x.shape[0]))
        return real_forward(wide, w, x, clients)

    monkeypatch.setattr(evaluate_module, "wide_forward", recording_forward)
    budgeted = evaluate_clients(model, stacked, data, data.test, torch.arange(6), memory_mb=budget / 2**20)
    assert len(passes) > 1
    for clients, rows in passes:
        assert clients * (2 * weights + rows * row) <= budget
    monkeypatch.setattr(evaluate_module, "wide_forward", real_forward)
    free = evaluate_clients(model, stacked, data, data.test, torch.arange(6), memory_mb=10 * everything / 2**20)
    np.testing.assert_array_equal(budgeted.correct, free.correct)
    np.testing.assert_allclose(budgeted.loss, free.loss, rtol=1e-5)


def test_budget_too_small_for_one_client_says_what_one_needs():
    gen = torch.Generator().manual_seed(0)
    index = ClientIndex.from_lists([np.arange(20), np.arange(20, 40)], "cpu")
    data = FederatedData(torch.randn(40, 1, 8, 8, generator=gen), torch.randint(0, 3, (40,), generator=gen), index, index, 3)
    model = conv_net()
    trainer = VectorisedTrainer(model, data, memory_mb=0.001)
    plan = make_batch_plan(data.train.counts, 1, 10, torch.Generator().manual_seed(0))
    # the real numbers, not rounded to "0 MB": 0.001 MB given (1,048 bytes); two weight copies + a batch's activations
    need = training_bytes_per_client(model, (1, 8, 8), 10, 2)
    assert 0.01 * 2**20 < need < 10 * 2**20
    with pytest.raises(MemoryBudgetError, match=rf"memory budget of 0.000999 MB is too small for one client's training: one client needs {need / 2**20:.3g} MB"):
        trainer.train(broadcast(model_weights(model), 2), torch.arange(2), plan, LocalSGD(epochs=1, batch_size=10, lr=0.1))
    with pytest.raises(MemoryBudgetError, match="one client's evaluation"):
        evaluate_clients(model, broadcast(model_weights(model), 2), data, data.test, torch.arange(2), memory_mb=0.001)


def test_protocols_pick_their_round():
    history = pd.DataFrame({
        "round": [1, 2, 3], "acc_mean": [0.5, 0.7, 0.6], "acc_pooled": [0.4, 0.8, 0.6], "acc_var": [0.1, 0.2, 0.3],
        "f1_mean": [0.1, 0.2, 0.3], "loss_mean": [3.0, 2.0, 1.0],
        "global_acc": [0.2, 0.3, 0.25], "global_f1": [0.1, 0.1, 0.1], "global_loss": [1.0, 1.0, 1.0],
    })
    assert PROTOCOLS["mean_client_last"].final(history) == {
        "round": 3, "accuracy": 0.6, "macro_f1": 0.3, "loss": 1.0, "variance": 0.3}
    assert PROTOCOLS["pooled_max"].final(history)["round"] == 2
    assert PROTOCOLS["global_last"].final(history)["accuracy"] == 0.25
    assert PROTOCOLS["global_last"].final(history)["variance"] is None
    # pFedMT's columns: the personal (PM) or global (GM) model, max over the first T rounds only
    pooled = PROTOCOLS["pooled_max"]
    assert pooled.final(history, rounds=1) == {"round": 1, "accuracy": 0.4, "macro_f1": 0.1, "loss": 3.0, "variance": 0.1}
    assert pooled.final(history, scored="global") == {"round": 2, "accuracy": 0.3, "macro_f1": 0.1, "loss": 1.0, "variance": None}
    assert pooled.final(history, scored="global", rounds=3)["accuracy"] == 0.3
    with pytest.raises(ValueError, match="scored"):
        pooled.final(history, scored="team")


def test_evaluation_restores_training_mode(data):
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train()
    evaluate_clients(model, broadcast(model_weights(model), 2), data, data.test, torch.arange(2))
    evaluate_pooled(model, model_weights(model), data, data.test)
    assert model.training and model[1].training


def test_macro_f1_from_confusion_matches_scikit_learn():
    """Per-client macro-F1 from confusion matrices equals sklearn's f1_score(average="macro",
    zero_division=0), including labels missing from y_true or y_pred; an empty client is NaN."""
    from sklearn.metrics import confusion_matrix, f1_score

    from fedbench.engine.evaluate import macro_f1_from_confusion

    rng = np.random.default_rng(0)
    cases = [(rng.integers(0, 4, n), rng.integers(0, 5, n)) for n in (1, 3, 17, 40)]
    cases.append((np.array([2, 2, 2]), np.array([2, 2, 2])))  # one label, all right
    cases.append((np.array([0, 1]), np.array([3, 3])))  # all wrong: F1 0
    confusion = torch.tensor(np.stack([confusion_matrix(t, p, labels=range(5)) for t, p in cases] + [np.zeros((5, 5), int)]))
    got = macro_f1_from_confusion(confusion)
    want = [f1_score(t, p, average="macro", zero_division=0) for t, p in cases]
    np.testing.assert_allclose(got[:-1], want, rtol=1e-12)
    assert np.isnan(got[-1])


def test_size_buckets_bound_the_padding():
    from fedbench.engine.evaluate import size_buckets

    counts = torch.tensor([5, 1000, 7, 0, 30, 2100, 9, 31, 1999])
    groups = size_buckets(counts)
    assert sorted(torch.cat(groups).tolist()) == list(range(len(counts)))
    for g in groups:
        c = counts[g]
        assert int(c.max()) <= 2 * max(int(c.min()), 1)
    assert all(len(g) <= 2 for g in size_buckets(counts, max_clients=2))


def test_cross_entropy_per_row_equals_torch():
    from fedbench.engine.evaluate import cross_entropy_per_row

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 10, generator=g) * 20
    y = torch.randint(0, 10, (3, 7), generator=g)
    want = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(3, 7)
    torch.testing.assert_close(cross_entropy_per_row(logits, y), want)


def test_one_model_for_all_clients_is_scored_once_with_the_same_numbers():
    """Every client holds one model (a global model) on one shared test set: the shared path scores
    each distinct row once and gives each client's numbers as scoring it alone does; different
    models per client take the grouped path."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 5, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    train = ClientIndex.from_lists([np.arange(0, 10), np.arange(10, 22), np.arange(22, 30)], "cpu")
    shared = ClientIndex.from_lists([np.arange(30, 40)] * 3, "cpu")
    data = FederatedData(x, y, train, shared, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    same = broadcast(model_weights(model), 3)
    different = {k: v + torch.arange(3.0).view(-1, *[1] * (v.dim() - 1)) for k, v in same.items()}
    for stacked in (same, different):
        for index in (shared, data.train):
            together = evaluate_clients(model, stacked, data, index, torch.arange(3))
            alone = [evaluate_clients(model, {k: v[[c]] for k, v in stacked.items()}, data, index, torch.tensor([c]))
                     for c in range(3)]
            for field in ("samples", "correct", "loss_sum", "macro_f1"):
                np.testing.assert_allclose(getattr(together, field), [getattr(a, field)[0] for a in alone], rtol=1e-6)
