"""FeMAM's additive model on the wide step (issue 39): it folds, and while a level trains on frozen
ones the step reads the frozen levels' logits from a table computed once per round
(fedbench.engine.frozen_levels).  Its updates equal the vmap path's up to float rounding.  Its
evaluation keeps each level's logits while the level is unchanged (LevelLogits): the same scores
as running every level.

Tolerance: both paths compute the same float32 operations in the same order except that
convolutions and matrix products are grouped differently (one grouped convolution for all clients
against vmap's per-client batched one; the frozen levels on blocks of a client's rows against
the minibatch) -- summation-order differences of a few float32 ulps per reduction (unit roundoff
2^-24 = 6e-8, reductions of <= 100 terms here: <= ~1e-5 relative), carried through a few dozen
SGD steps of lr 0.1 on O(1) weights.  The engine's own wide-vs-reference comparisons of
BatchNorm convolutional models (tests/test_engine.py) hold at rtol 1e-4, atol 2e-5; so do these.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import fedbench.algorithms.femam as femam_module
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.evaluate import Scores, evaluate_clients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.frozen_levels import FrozenLevels, LevelLogits, WeightsIdentity
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.memory import evaluation_bytes_per_row
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.engine.wide_model import widen
from fedbench.models.additive import AdditiveLevels

CLASSES, SHAPE = 4, (3, 8, 8)
COUNTS = [21, 10, 16, 16, 5]  # short last batches, equal counts, one client with less than a batch
HP = LocalSGD(epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-2, prox_mu=0.5)
TOL = {"rtol": 1e-4, "atol": 2e-5}


def conv_bn() -> nn.Module:
    """conv-BN-ReLU, max-pool, a BN'd classifier with dropout: the frozen levels' BatchNorm reads
    running statistics and their dropout is off (eval mode), the newest level's trains."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.0), nn.Linear(12, CLASSES),
    )


def images(counts, shared: bool = False) -> FederatedData:
    """Random images, each client's rows scattered over the data; ``shared``: clients 0 and 1 both
    own rows 0..4."""
    gen = torch.Generator().manual_seed(0)
    total = sum(counts) + 3
    x, y = torch.randn(total, *SHAPE, generator=gen), torch.randint(0, CLASSES, (total,), generator=gen)
    perm = np.random.default_rng(0).permutation(total)
    lists = np.split(perm[: sum(counts)], np.cumsum(counts)[:-1])
    if shared:
        lists[1] = np.concatenate([lists[0][:5], lists[1][5:]])
    index = ClientIndex.from_lists(lists, "cpu")
    return FederatedData(x, y, index, index, CLASSES)


def start_weights(module: AdditiveLevels, n: int, active: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every client's levels different (running variances kept positive), ``active`` ``[n, levels]``."""
    gen = torch.Generator().manual_seed(1)
    out = {}
    for k, v in broadcast(model_weights(module), n).items():
        if v.is_floating_point() and k != "active":
            v = v + 0.3 * torch.randn(v.shape, generator=gen)
            v = v.abs() + 0.5 if "running_var" in k else v
        out[k] = v
    out["active"] = active
    return out


def train(module, data, start, **kw):
    n = data.num_clients
    plan = make_batch_plan(data.train.counts, HP.epochs, HP.batch_size, torch.Generator().manual_seed(3))
    trainer = VectorisedTrainer(module, data, fused_mlp=False, **kw)
    center = {k: v + 0.05 for k, v in start.items() if k.startswith(f"levels.{len(module.levels) - 1}.")}
    return trainer, trainer.train(start, torch.arange(n), plan, HP, center)


def assert_same(got, want):
    (w_got, loss_got), (w_want, loss_want) = got, want
    assert w_got.keys() == w_want.keys()
    for k in w_want:
        torch.testing.assert_close(w_got[k], w_want[k], **TOL, msg=k)
    torch.testing.assert_close(loss_got, loss_want, **TOL)


# per client: which levels are active (the newest, level 3, always: only its holders train it)
ACTIVE = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 1]], dtype=torch.float32)


@pytest.mark.parametrize("combine", ["sum", "mean"])
def test_the_additive_model_folds_and_its_frozen_levels_are_read_from_a_table(combine):
    """Three levels, the first two frozen, a different active mask per client, BatchNorm in every
    level, momentum, weight decay and prox: the fast path (wide, frozen table) equals the vmap path
    and the reference loop; frozen levels and their BatchNorm counters do not move, the newest
    level's count its batches."""
    module = AdditiveLevels(conv_bn(), 3, combine)
    assert widen(module, SHAPE) is not None
    data = images(COUNTS)
    start = start_weights(module, len(COUNTS), ACTIVE)
    fast, got = train(module, data, start)
    vmapped, want = train(module, data, start, wide=False)
    assert fast.step_kind == "wide" and fast.frozen_levels is not None and vmapped.step_kind == "vmap"
    assert fast.frozen_levels.cached_rows == sum(COUNTS)  # every training row's frozen logits, once
    assert_same(got, want)
    plan = make_batch_plan(data.train.counts, HP.epochs, HP.batch_size, torch.Generator().manual_seed(3))
    center = {k: v + 0.05 for k, v in start.items() if k.startswith("levels.2.")}
    assert_same(got, ReferenceTrainer(module, data).train(start, torch.arange(len(COUNTS)), plan, HP, center))
    for k, v in got[0].items():
        if not k.startswith("levels.2.") or k == "active":
            assert torch.equal(v, start[k]), k  # frozen levels (and their counters) untouched
    steps = torch.tensor([-(-c // HP.batch_size) * HP.epochs for c in COUNTS])
    assert torch.equal(got[0]["levels.2.1.num_batches_tracked"], start["levels.2.1.num_batches_tracked"] + steps)


def test_clients_sharing_rows_run_every_level_in_every_step():
    """The table is indexed by the data's rows: where two clients own the same row it is not used,
    and the wide model of the whole additive model runs the frozen levels in each step (same result)."""
    module = AdditiveLevels(conv_bn(), 3, "sum")
    data = images(COUNTS, shared=True)
    start = start_weights(module, len(COUNTS), ACTIVE)
    fast, got = train(module, data, start)
    assert fast.frozen_levels is not None and fast.frozen_levels.cached_rows == 0
    _, want = train(module, data, start, wide=False)
    assert_same(got, want)


def test_no_table_without_frozen_levels():
    """A one-level additive model (FeMAM's first level) and an all-frozen one (scoring) have no
    frozen level to tabulate; the first trains on the plain wide step."""
    assert FrozenLevels.of(AdditiveLevels(conv_bn(), 1), images(COUNTS)) is None
    assert FrozenLevels.of(AdditiveLevels(conv_bn(), 2, trainable=False), images(COUNTS)) is None
    assert VectorisedTrainer(AdditiveLevels(conv_bn(), 1), images(COUNTS), fused_mlp=False).step_kind == "wide"


def test_a_femam_run_on_the_fast_path_equals_the_vmap_path(monkeypatch):
    """Six rounds of FeMAM (global, cluster, personal levels added at rounds 2 and 3, the structure
    final after round 4; client 1 drops level 2 by Eq. 9, so from round 4 on the clients' active
    frozen levels differ; no client's Eq. 9 margin is within 1e-3 of epsilon) on the wide step with
    the frozen table and on vmap: the same decisions and, up to float rounding, the same level
    models.  Rounds 5 and 6 train the same holders on the same frozen levels: round 6 reuses the
    table of round 5."""
    from conftest import make_federation
    from test_femam import data_with_val

    def run(wide):
        monkeypatch.setattr(femam_module, "trainer_for",
                            lambda fed, module: VectorisedTrainer(module, fed.data, fused_mlp=False, wide=wide))
        torch.manual_seed(0)
        template = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        fed = make_federation(data_with_val(), template, LocalSGD(epochs=2, batch_size=10, lr=0.1), seed=0)
        alg = femam_module.femam(structure=["global", "cluster", "personal"], num_clusters=2, init_rounds=2,
                                 window=1, threshold=1e9, epsilon=1e-3)
        state = alg.init(fed, model_weights(fed.model))
        for t in range(1, 7):
            state, _ = alg.round(fed, state, t)
        return alg, state

    alg, fast = run(True)
    trainer = alg._modules[next(k for k in alg._modules if k[1] == 3)][1]
    assert trainer.step_kind == "wide" and trainer.frozen_levels.cached_rows > 0 and trainer.frozen_levels.reused == 1
    _, slow = run(False)
    assert len(fast["levels"]) == len(slow["levels"]) == 3
    assert np.array_equal(fast["kept"], slow["kept"]) and not fast["kept"][1, 1]
    assert all(np.array_equal(a, b) for a, b in zip(fast["groups"], slow["groups"]))
    for level_fast, level_slow in zip(fast["levels"], slow["levels"]):
        for k in level_slow:
            torch.testing.assert_close(level_fast[k], level_slow[k], **TOL, msg=k)


def test_the_table_is_reused_while_the_frozen_levels_are_the_same_tensors():
    """Calls with an equal key (the same frozen tensors, unchanged), the same clients and the same
    frozen a_l reuse the table, and train as a fresh table would; another a_l, other tensors or a
    tensor changed in place recompute it."""
    module = AdditiveLevels(conv_bn(), 3, "sum")
    data = images(COUNTS)
    start = start_weights(module, len(COUNTS), ACTIVE)
    frozen = [{k: v for k, v in start.items() if k.startswith(f"levels.{l}.")} for l in range(2)]
    trainer = VectorisedTrainer(module, data, fused_mlp=False)
    table = trainer.frozen_levels
    plan = make_batch_plan(data.train.counts, HP.epochs, HP.batch_size, torch.Generator().manual_seed(3))
    clients = torch.arange(len(COUNTS))
    first = trainer.train(start, clients, plan, HP, frozen_key=WeightsIdentity(frozen))
    again = trainer.train(start, clients, plan, HP, frozen_key=WeightsIdentity(frozen))
    assert table.reused == 1
    assert_same(again, first)
    assert_same(again, VectorisedTrainer(module, data, fused_mlp=False, wide=False).train(start, clients, plan, HP))
    other_active = {**start, "active": ACTIVE.flip(0)}
    trainer.train(other_active, clients, plan, HP, frozen_key=WeightsIdentity(frozen))
    assert table.reused == 1  # recomputed: another mask
    trainer.train(start, clients, plan, HP, frozen_key=WeightsIdentity(frozen))
    copies = [{k: v.clone() for k, v in level.items()} for level in frozen]
    trainer.train(start, clients, plan, HP, frozen_key=WeightsIdentity(copies))
    assert table.reused == 1  # recomputed: other tensors (equal values are not checked)
    key = WeightsIdentity(copies)
    copies[0]["levels.0.0.weight"].add_(1.0)
    assert key != WeightsIdentity(copies)  # changed in place
    trainer.train(start, clients, plan, HP)
    assert table.reused == 1 and table.key is None  # no key: computed every call


def layer_norm() -> nn.Module:
    """A model that does not fold (LayerNorm): evaluation runs it through vmap."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 12), nn.LayerNorm(12), nn.ReLU(), nn.Linear(12, CLASSES))


def assert_same_scores(got: Scores, want: Scores):
    np.testing.assert_array_equal(got.samples, want.samples)
    np.testing.assert_array_equal(got.correct, want.correct)
    np.testing.assert_allclose(got.loss_sum, want.loss_sum, rtol=TOL["rtol"])
    np.testing.assert_allclose(got.macro_f1, want.macro_f1, rtol=TOL["rtol"])


def scores(template, levels, combine, weights, data, index, clients, cache=None, **kw) -> Scores:
    """``weights`` scored by an additive model of ``template``; with ``cache``: level by level."""
    module = AdditiveLevels(template(), levels, combine)
    module.level_logits = cache
    return evaluate_clients(module, weights, data, index, clients, **kw)


@pytest.mark.parametrize("combine", ["sum", "mean"])
@pytest.mark.parametrize("template", [conv_bn, layer_norm], ids=["folds", "vmap"])
def test_evaluation_level_by_level_scores_as_the_additive_model(combine, template):
    """Three levels, a different active mask per client, clients of 300 (two blocks of rows under
    the budget), 21, 10, 16 and 5 rows, groups of one and of two clients: the level-by-level
    evaluation, computing its tables and then reading them, scores as the additive model's forward
    (here bit for bit: the same operations in the same order; compared within TOL)."""
    counts = [300, 21, 10, 16, 5]
    data = images(counts)
    module = AdditiveLevels(template(), 3, combine)
    weights = start_weights(module, len(counts), ACTIVE)
    clients = torch.arange(len(counts))
    weight_bytes = sum(v[0].numel() * v.element_size() for v in weights.values())
    two_blocks = (2 * weight_bytes + 256 * evaluation_bytes_per_row(module, SHAPE)) / 2**20
    for kw in ({}, {"memory_mb": two_blocks}, {"chunk_size": 2}):
        want = scores(template, 3, combine, weights, data, data.test, clients, **kw)
        cache = LevelLogits()
        for reused in (0, 3):
            got = scores(template, 3, combine, weights, data, data.test, clients, cache, **kw)
            assert (cache.computed, cache.reused) == (3, reused)
            assert_same_scores(got, want)


def test_the_levels_logits_are_kept_while_the_level_is_the_same_tensors():
    """One cache through what FeMAM does to its levels: the same weights again, another active
    mask (Eq. 9 without the newest level) read every level; a new newest level, a frozen level
    changed in place, another split and other clients recompute what changed; a fourth level added
    on the same three reads them.  Every evaluation scores as the one that runs every level."""
    data = images(COUNTS)
    other = images(COUNTS)  # other tensors, the same values
    module = AdditiveLevels(conv_bn(), 3)
    weights = start_weights(module, len(COUNTS), ACTIVE)
    everyone = torch.arange(len(COUNTS))
    cache = LevelLogits()

    def check(levels, w, computed, reused, data=data, clients=everyone):
        want = scores(conv_bn, levels, "sum", w, data, data.test, clients)
        got = scores(conv_bn, levels, "sum", w, data, data.test, clients, cache)
        assert (cache.computed, cache.reused) == (computed, reused)
        assert_same_scores(got, want)
        return got

    first = check(3, weights, 3, 0)
    check(3, weights, 3, 3)
    without = weights["active"].clone()
    without[:, 2] = 0
    check(3, {**weights, "active": without}, 3, 6)  # Eq. 9: only a_l differs
    newest = {**weights, **{k: v + 0.1 if v.is_floating_point() else v.clone()
                            for k, v in weights.items() if k.startswith("levels.2.")}}
    check(3, newest, 4, 8)  # the newest level trained: the frozen two read
    newest["levels.0.0.weight"].add_(0.1)
    changed = check(3, newest, 5, 10)  # level 1 changed in place
    assert not np.allclose(changed.loss_sum, first.loss_sum)
    check(3, newest, 8, 10, data=other)  # another split
    check(3, newest, 11, 10, clients=everyone.flip(0))  # other clients (the weights' rows in their order)
    check(3, newest, 14, 10)  # back: each level's kept table is the last one computed
    level4 = start_weights(AdditiveLevels(conv_bn(), 4), len(COUNTS), torch.ones(len(COUNTS), 4))
    added = {**newest, **{k: v for k, v in level4.items() if k.startswith("levels.3.")},
             "active": torch.cat([ACTIVE, torch.ones(len(COUNTS), 1)], 1)}
    check(4, added, 15, 13)  # level 4 added: the first three read


def test_clients_holding_the_same_additive_model_are_evaluated_level_by_level():
    """Clients 0 and 3 hold the same levels and mask (one cluster's model): evaluation does not group them
    onto the one-model path (tests/test_evaluate.py) but runs every client level by level, each level's
    table kept for all of them."""
    data = images(COUNTS)
    module = AdditiveLevels(conv_bn(), 3)
    weights = start_weights(module, len(COUNTS), ACTIVE)
    weights = {k: v.index_select(0, torch.tensor([0, 1, 2, 0, 4])) for k, v in weights.items()}
    everyone = torch.arange(len(COUNTS))
    cache = LevelLogits()
    got = scores(conv_bn, 3, "sum", weights, data, data.test, everyone, cache)
    assert cache.computed == 3 and all(torch.equal(kept[1], everyone) for kept in cache.kept.values())
    assert_same_scores(got, scores(conv_bn, 3, "sum", weights, data, data.test, everyone))


def test_a_femam_run_scores_as_with_every_level_evaluated(monkeypatch):
    """Six FeMAM rounds (as above: a level added at rounds 2 and 3, client 1 dropping level 2 by
    Eq. 9), each scored as the pipeline scores it (test, validation and training rows): with the
    levels' logits kept, the same validation trace, decisions and scores as a run whose evaluation
    runs every level (up to float rounding); the pipeline's validation pass reads every level."""
    from conftest import make_federation
    from test_femam import data_with_val

    from fedbench.run.scoring import score_round

    def run(keep):
        if not keep:
            monkeypatch.setattr(femam_module, "LevelLogits", lambda: None)
        torch.manual_seed(0)
        template = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        fed = make_federation(data_with_val(), template, LocalSGD(epochs=2, batch_size=10, lr=0.1), seed=0)
        alg = femam_module.femam(structure=["global", "cluster", "personal"], num_clusters=2, init_rounds=2,
                                 window=1, threshold=1e9, epsilon=1e-3)
        state = alg.init(fed, model_weights(fed.model))
        history = []
        for t in range(1, 7):
            state, loss = alg.round(fed, state, t)
            history.append(score_round(fed, alg, state, t, float(loss.mean()))[0])
        return alg, state, history

    alg, fast, fast_history = run(True)
    cache = next(iter(alg._level_logits.values()))
    assert cache.computed > 0 and cache.reused > cache.computed
    _, slow, slow_history = run(False)
    assert np.array_equal(fast["kept"], slow["kept"]) and not fast["kept"][1, 1]
    assert all(np.array_equal(a, b) for a, b in zip(fast["groups"], slow["groups"]))
    np.testing.assert_allclose(np.array([r[2:] for r in fast["trace"]]), np.array([r[2:] for r in slow["trace"]]),
                               rtol=TOL["rtol"])
    for got, want in zip(fast_history, slow_history):
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in want], [want[k] for k in want], rtol=TOL["rtol"], atol=TOL["atol"],
                                   err_msg=str(want["round"]))
