"""Evaluation on cases small enough to check by hand."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import confusion_matrix, f1_score
from torch import nn

import fedbench.engine.evaluate as evaluate_module
import fedbench.engine.wide_model as wide_module
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.evaluate import (
    cross_entropy_per_row,
    evaluate_clients,
    evaluate_pooled,
    macro_f1_from_confusion,
    size_buckets,
)
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.memory import (
    MemoryBudgetError,
    budget_bytes,
    clients_per_pass,
    evaluation_bytes_per_row,
    format_mb,
    training_bytes_per_client,
)
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.engine.wide_model import wide_twin
from fedbench.registry.protocols import PROTOCOLS


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
    real_forward = wide_module.wide_forward

    def recording_forward(wide, w, x, clients):
        passes.append((clients, x.shape[0]))
        return real_forward(wide, w, x, clients)

    monkeypatch.setattr(wide_module, "wide_forward", recording_forward)
    budgeted = evaluate_clients(model, stacked, data, data.test, torch.arange(6), memory_mb=budget / 2**20)
    assert len(passes) > 1
    for clients, rows in passes:
        assert clients * (2 * weights + rows * row) <= budget
    monkeypatch.setattr(wide_module, "wide_forward", real_forward)
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
    counts = torch.tensor([5, 1000, 7, 0, 30, 2100, 9, 31, 1999])
    groups = size_buckets(counts)
    assert sorted(torch.cat(groups).tolist()) == list(range(len(counts)))
    for g in groups:
        c = counts[g]
        assert int(c.max()) <= 2 * max(int(c.min()), 1)
    assert all(len(g) <= 2 for g in size_buckets(counts, max_clients=2))


def test_cross_entropy_per_row_equals_torch():
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


def test_models_that_do_not_fold_are_scored_client_by_client_with_their_own_weights():
    """A model the wide twin refuses (a channel-wise PReLU) takes ``vmap``: each client's numbers
    (row p of the weights for ``clients[p]``) equal its own model scored on its own rows in a plain
    loop (sklearn's macro-F1)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(12, 3, generator=gen), torch.randint(0, 3, (12,), generator=gen)
    index = ClientIndex.from_lists([np.arange(0, 5), np.arange(5, 7), np.arange(7, 12)], "cpu")
    data = FederatedData(x, y, index, index, 3)
    model = nn.Sequential(nn.Linear(3, 4), nn.PReLU(4), nn.Linear(4, 3))
    assert wide_twin(model, data.input_shape) is None
    stacked = {k: v + torch.randn(v.shape, generator=gen) for k, v in broadcast(model_weights(model), 3).items()}
    scores = evaluate_clients(model, stacked, data, data.test, torch.tensor([2, 0, 1]))
    for position, c in enumerate([2, 0, 1]):
        rows = index.index[c, : int(index.counts[c])]
        logits = torch.func.functional_call(model, {k: v[position] for k, v in stacked.items()}, (x[rows],))
        assert scores.samples[position] == len(rows)
        assert scores.correct[position] == int((logits.argmax(1) == y[rows]).sum())
        want_loss = float(nn.functional.cross_entropy(logits, y[rows], reduction="sum"))
        assert scores.loss_sum[position] == pytest.approx(want_loss, rel=1e-5)
        want_f1 = f1_score(y[rows].numpy(), logits.argmax(1).numpy(), average="macro", zero_division=0)
        assert scores.macro_f1[position] == pytest.approx(want_f1)


def _shared_test_set_data(test_rows):
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(20, 5, generator=gen), torch.randint(0, 3, (20,), generator=gen)
    train = ClientIndex.from_lists([np.arange(0, 4), np.arange(4, 8), np.arange(8, 12)], "cpu")
    test = ClientIndex.from_lists([np.asarray(r) for r in test_rows], "cpu")
    return FederatedData(x, y, train, test, 3)


def test_one_shared_model_in_blocks_of_two_rows_scores_as_each_client_alone():
    """Under a budget for two rows at a time (plus the weights), the shared path scores eight
    distinct rows in four blocks; each client's numbers equal scoring it alone, unconstrained."""
    data = _shared_test_set_data([[12, 13, 14, 15, 16], [14, 15, 16, 17, 18], [12, 19, 18]])
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    same = broadcast(model_weights(model), 3)
    weight_bytes = sum(v[0].numel() * v.element_size() for v in same.values())
    two_rows_mb = (weight_bytes + 2 * evaluation_bytes_per_row(model, data.input_shape) + 0.5) / 2**20
    together = evaluate_clients(model, same, data, data.test, torch.arange(3), memory_mb=two_rows_mb)
    alone = [evaluate_clients(model, {k: v[[c]] for k, v in same.items()}, data, data.test, torch.tensor([c]))
             for c in range(3)]
    for field in ("samples", "correct", "loss_sum", "macro_f1"):
        np.testing.assert_allclose(getattr(together, field), [getattr(a, field)[0] for a in alone], rtol=1e-6)


def test_one_shared_model_scores_clients_of_one_test_row_each():
    """Clients holding one test row each (an index one column wide) on the shared path: each
    client's row is right or wrong as the model's argmax says."""
    data = _shared_test_set_data([[12], [13], [14], []])
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    scores = evaluate_clients(model, broadcast(model_weights(model), 4), data, data.test, torch.arange(4))
    with torch.no_grad():
        right = (model(data.x[12:15]).argmax(1) == data.y[12:15]).long().tolist()
    np.testing.assert_array_equal(scores.samples, [1, 1, 1, 0])
    np.testing.assert_array_equal(scores.correct, right + [0])
    np.testing.assert_array_equal(scores.macro_f1[:3], right)  # one row: F1 1 if right, else 0
    assert np.isnan(scores.macro_f1[3])


def test_macro_f1_counts_a_label_seen_once_and_missed():
    """Labels 0 and 1, both predicted 0: label 0 has F1 2/3, label 1 (one true row, never
    predicted) F1 0, so macro-F1 is 1/3 (sklearn's value), not 2/3."""
    np.testing.assert_allclose(macro_f1_from_confusion(torch.tensor([[[1, 0], [1, 0]]])), [1 / 3])


def test_pooled_accuracy_of_one_sample():
    """One client, one sample, right: pooled accuracy 1."""
    scores = evaluate_module.Scores(np.array([1]), np.array([1]), np.array([0.5]), np.array([1.0]))
    assert scores.summary()["acc_pooled"] == 1.0


def test_size_buckets_by_hand():
    """Sorted counts 1, 2 | 3, 4, 6 (slack 2: a group ends where a count exceeds twice its smallest;
    6 is exactly twice 3 and stays); equal counts at most two a group: 2, 2, 1; no clients: no group."""
    groups = size_buckets(torch.tensor([3, 1, 6, 2, 4]))
    assert [sorted(g.tolist()) for g in groups] == [[1, 3], [0, 2, 4]]
    assert [len(g) for g in size_buckets(torch.full((5,), 7), max_clients=2)] == [2, 2, 1]
    assert size_buckets(torch.tensor([], dtype=torch.long)) == []


def test_clients_per_pass_by_hand():
    """Whole clients only: 100 bytes hold three of 30 (not 3.3), exactly one of 100, ten of 1;
    never more than wanted; 101 bytes for one client do not fit 100."""
    assert clients_per_pass(30, 100, 10, "evaluation") == 3
    assert isinstance(clients_per_pass(30, 100, 10, "evaluation"), int)
    assert clients_per_pass(100, 100, 5, "evaluation") == 1
    assert clients_per_pass(1, 10, 100, "evaluation") == 10
    assert clients_per_pass(30, 100, 2, "evaluation") == 2
    assert clients_per_pass(30, 100, 1, "evaluation") == 1
    with pytest.raises(MemoryBudgetError):
        clients_per_pass(101, 100, 5, "evaluation")


def test_format_mb_by_hand():
    """Whole MB from 10 MB up (with thousands separators), three significant digits below."""
    assert format_mb(2_029_419 * 2**20) == "2,029,419 MB"
    assert format_mb(10.4 * 2**20) == "10 MB"
    assert format_mb(12 * 2**20) == "12 MB"
    assert format_mb(0.0488 * 2**20) == "0.0488 MB"


def test_memory_estimates_by_hand():
    """Linear(4, 3) then BatchNorm1d(3), float32: weights 21 floats (84 bytes) plus buffers 6 floats
    and one int64 counter (32 bytes); per sample the input (16 bytes) and two outputs of 12 bytes.
    Training, 2 weight copies, batch 5: 2 * 116 + 2 * 40 * 5 = 632; evaluation: three times the
    largest activation, the input: 48."""
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    assert training_bytes_per_client(model, (4,), 5, 2) == 632
    assert evaluation_bytes_per_row(model, (4,)) == 48


def test_the_default_budget_is_80_percent_of_the_given_cuda_devices_free_memory(monkeypatch):
    """On CUDA (free memory read from the device given, here faked) 80 % of it; on the CPU 2,048 MB;
    a budget given in MB is taken as given."""
    mb = 2**20
    free = {torch.device("cuda", 1): (1000 * mb, 4000 * mb)}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: free[device])
    assert budget_bytes(torch.device("cuda", 1), None) == 800 * mb
    assert budget_bytes(torch.device("cpu"), None) == 2048 * mb
    assert budget_bytes(torch.device("cuda", 1), 1.5) == int(1.5 * mb)


def test_identical_models_are_grouped_bit_for_bit():
    """Rows equal in every tensor, byte for byte, form a group (two or more rows); a row equal in the sampled
    key entries but not elsewhere, or differing only in the sign of a zero, is a model of its own."""
    from fedbench.engine.evaluate import identical_models

    base = torch.arange(40.0).view(1, 40).repeat(7, 1)
    count = torch.zeros(7, dtype=torch.long)
    base[2, 5] += 1.0  # row 2 differs from 0, 1, 3 off the key entries (0, 2.6, ..., 39: 16 of 40)
    base[4] += 1.0  # rows 4 and 6 are another model
    base[6] += 1.0
    zero = torch.zeros(7, 3)
    zero[3, 0] = -0.0  # equal as numbers, not as bytes
    groups = identical_models({"w": base, "z": zero, "n": count})
    assert [g.tolist() for g in groups] == [[0, 1, 5], [4, 6]]
    assert identical_models({"w": torch.randn(5, 3)}) == [] and identical_models({"w": torch.ones(1, 3)}) == []


def test_clients_sharing_models_are_scored_as_each_alone():
    """Clients holding one of a few models (IFCA's or FLT's cluster models) beside clients with models of
    their own: the models held by several clients run once over their clients' distinct rows, the others
    as before, and every client's numbers equal scoring it alone (a cluster's clients share its test rows)."""
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(60, 5, generator=gen), torch.randint(0, 3, (60,), generator=gen)
    train = ClientIndex.from_lists([np.arange(4 * c, 4 * c + 4) for c in range(7)], "cpu")
    test = ClientIndex.from_lists([np.arange(30, 40), np.arange(40, 50), np.arange(30, 40), np.arange(40, 52),
                                   np.arange(30, 38), np.arange(50, 60), np.arange(30, 40)], "cpu")
    data = FederatedData(x, y, train, test, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    models = [{k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in model_weights(model).items()} for _ in range(5)]
    holds = [0, 1, 0, 1, 0, 2, 3]  # clients 0, 2, 4 and 6 hold model 0 but for 6 (model 3); 1 and 3 hold model 1
    stacked = {k: torch.stack([models[m][k] for m in holds]) for k in models[0]}
    clients = torch.tensor([0, 1, 2, 3, 4, 5, 6])
    for index in (data.test, data.train):
        together = evaluate_clients(model, stacked, data, index, clients)
        alone = [evaluate_clients(model, {k: v[[c]] for k, v in stacked.items()}, data, index, torch.tensor([c]))
                 for c in range(7)]
        np.testing.assert_array_equal(together.samples, [a.samples[0] for a in alone])
        np.testing.assert_array_equal(together.correct, [a.correct[0] for a in alone])
        np.testing.assert_allclose(together.loss_sum, [a.loss_sum[0] for a in alone], rtol=1e-6)
        np.testing.assert_allclose(together.macro_f1, [a.macro_f1[0] for a in alone])


def test_grouped_scores_equal_the_per_client_path_up_to_rounding():
    """The whole evaluation of a cell whose 50 clients hold 5 cluster models (a 784-200-10 MLP, each
    cluster's 10 clients on its 200 shared test rows, 40 training rows each): with identical models
    grouped (one pass per model over its distinct rows) against every client through the wide per-client
    path as before: the same correct predictions per client, losses equal to float32 rounding."""
    gen = torch.Generator().manual_seed(5)
    x, y = torch.rand(3000, 784, generator=gen), torch.randint(0, 10, (3000,), generator=gen)
    cluster = torch.arange(50) % 5
    train = ClientIndex.from_lists([np.arange(40 * c, 40 * c + 40) for c in range(50)], "cpu")
    test = ClientIndex.from_lists([np.arange(2000 + 200 * int(k), 2200 + 200 * int(k)) for k in cluster], "cpu")
    data = FederatedData(x, y, train, test, 10)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Dropout(0.5), nn.Linear(200, 10))
    models = [{k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in model_weights(model).items()} for _ in range(5)]
    stacked = {k: torch.stack([models[int(c)][k] for c in cluster]) for k in models[0]}
    everyone = torch.arange(50)
    for index in (data.test, data.train):
        grouped = evaluate_clients(model, stacked, data, index, everyone)
        with torch.inference_mode():
            model.eval()
            budget = budget_bytes(data.x.device, None)
            row_bytes = evaluation_bytes_per_row(model, data.input_shape)
            weight_bytes = sum(v[0].numel() * v.element_size() for v in stacked.values())
            each = evaluate_module._evaluate_own_models(model, stacked, data, index, everyone, None, budget, row_bytes,
                                                        weight_bytes)
        np.testing.assert_array_equal(grouped.samples, each.samples)
        np.testing.assert_array_equal(grouped.correct, each.correct)
        np.testing.assert_allclose(grouped.loss_sum, each.loss_sum, rtol=1e-5)
        np.testing.assert_allclose(grouped.macro_f1, each.macro_f1, rtol=1e-12)


def test_sizing_a_model_with_dropout_leaves_torchs_random_stream_alone():
    """The activation-size probe (a forward with dropout in training mode) draws nothing from the run's
    stream: a run's numbers cannot depend on whether the sizes were cached (a resumed run's were not)."""
    from fedbench.engine import memory
    from fedbench.models import build_model

    model = build_model({"arch": "mlp_dropout"}, (1, 28, 28), 10)
    memory._activation_sizes.cache_clear()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    memory.evaluation_bytes_per_row(model, (1, 28, 28))
    assert torch.equal(torch.rand(3), expected)
