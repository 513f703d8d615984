"""FeMAM's additive model on the wide step and in evaluation, its frozen levels' outputs computed once.

While level n of an :class:`~fedbench.models.additive.AdditiveLevels` trains, levels 1..n-1 are
frozen and held in eval mode (BatchNorm on running statistics, dropout off): for a given sample
they give the same logits at every step of the round.  The data are fixed tensors on the device
(:class:`~fedbench.engine.federated_data.FederatedData`: no augmentation -- none of the papers'
code augments, :mod:`fedbench.data.vision`), so the trainer computes, before the first step of a
round, every training row's a-weighted sum of its client's frozen levels' logits,

    table[row] = sum_{l < n} a_l f(x_row; theta_l)          (in inference, blocks within the budget)

and every step then runs only the newest level through its wide twin and reads the rest:

    logits = table[row] + a_n f(x_row; theta_n)   (divided by sum_l a_l under combine="mean")

-- the additive forward with the same operations in the same order, except that the frozen levels'
logits come from blocks of another shape (float rounding; tested against the vmap path).  Each
frozen level then costs one forward per training sample per round instead of one per sample per
epoch; and FeMAM passes a key of its frozen levels (:class:`WeightsIdentity`), so that the next
rounds of the same level, whose frozen levels are the same tensors, reuse the table: one forward
per sample per level added.

The table is indexed by the data's global row, so it needs the chunk's clients to own distinct
rows (every fedbench partition deals each sample to one client); where two clients share a row,
:meth:`FrozenLevels.prepare` returns False and the trainer runs every level in every step (the
wide twin of the whole additive model).

Evaluation (:class:`LevelLogits`, held by the model as ``level_logits``; FeMAM's models of 1..L
levels share one) keeps the logits per level: each level's logits of the rows evaluated -- a split
(validation, test or training rows) of given clients -- are kept while that level's weights are the
same tensors (:class:`WeightsIdentity`), and the prediction is summed from them by the additive
forward's own operations in its order (:func:`~fedbench.models.additive.sum_levels`).  A round's
evaluation then runs the newest level only, once per row (FeMAM validates twice a round, itself and
the pipeline: the second pass runs no level, nor does Eq. 9's without the newest level); a frozen
level runs once per row after it was last changed.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.memory import budget_bytes, evaluation_bytes_per_row
from fedbench.engine.step_args import Minibatch, StepState, sgd_update
from fedbench.engine.wide_model import (
    count_batches, group_forward, training_counters, wide_forward, wide_input, wide_twin, wide_weights,
)
from fedbench.models.additive import AdditiveLevels, level_key, level_weights, sum_levels


class WeightsIdentity:
    """Identifies stacked weights by their tensors: equal while every tensor is the same object
    (weak references: nothing is kept alive) and unchanged in place (its version counter)."""

    def __init__(self, weights: list[dict[str, torch.Tensor]]):
        self.tensors = [(weakref.ref(v), v._version) for w in weights for v in w.values()]

    def __eq__(self, other) -> bool:
        if not isinstance(other, WeightsIdentity) or len(other.tensors) != len(self.tensors):
            return False
        for (ref, version), (other_ref, other_version) in zip(self.tensors, other.tensors):
            tensor = ref()
            if tensor is None or tensor is not other_ref() or version != other_version or tensor._version != version:
                return False
        return True

    __hash__ = None


class FrozenLevels:
    """The wide twins of ``model``'s frozen and trainable level templates, and the table of frozen
    logits of the clients in training (:meth:`prepare`).  None of :meth:`of` where the model has no frozen
    level or its levels do not fold."""

    def __init__(self, model: AdditiveLevels, data: FederatedData, frozen_wide, level_wide, memory_mb: float | None):
        self.levels, self.combine, self.data = len(model.levels), model.combine, data
        self.frozen_wide, self.level_wide = frozen_wide, level_wide
        self.newest = level_key(self.levels - 1, "")
        self.budget = budget_bytes(data.x.device, memory_mb)
        self.row_bytes = evaluation_bytes_per_row(model.levels[0], data.input_shape)
        # on the CPU a convolution over one client's rows already runs at the GEMM rate (as evaluate_clients)
        self.one_client_at_a_time = data.x.device.type == "cpu" and any(isinstance(m, nn.Conv2d) for m in model.modules())
        self.table: torch.Tensor | None = None
        self.key = self.clients = self.frozen_active = None  # what the table was computed for
        self.cached_rows = 0  # training rows whose frozen logits the last computed table holds (tests, benchmarks)
        self.reused = 0  # calls that reused the table

    @classmethod
    def of(cls, model, data: FederatedData, memory_mb: float | None = None) -> FrozenLevels | None:
        if not isinstance(model, AdditiveLevels) or model.frozen != len(model.levels) - 1 or model.frozen == 0:
            return None
        frozen_wide = wide_twin(model.levels[0], data.input_shape)
        level_wide = wide_twin(model.levels[-1], data.input_shape)
        if frozen_wide is None or level_wide is None:
            return None
        return cls(model, data, frozen_wide, level_wide, memory_mb)

    @torch.no_grad()
    def prepare(self, weights: dict[str, torch.Tensor], clients: torch.Tensor, key: WeightsIdentity | None = None) -> bool:
        """Fill :attr:`table` for the training rows of ``clients`` (rows of the stacked ``weights``);
        False (and no table) where two of them share a row.  ``key`` identifies the frozen levels
        ``weights`` were drawn from: while it is equal and the clients and their frozen levels'
        a_l are the same, the last table is reused (FeMAM: across the rounds of one level)."""
        data = self.data
        active = weights["active"]
        if (key is not None and key == self.key and self.table is not None and torch.equal(clients, self.clients)
                and torch.equal(active[:, :-1], self.frozen_active)):
            self.reused += 1
            return True
        self.key = self.table = self.clients = self.frozen_active = None
        counts = data.train.counts[clients]
        width = max(int(counts.max()) if len(clients) else 0, 1)
        own = data.train.index[clients, :width]
        valid = torch.arange(width, device=own.device) < counts[:, None]
        real = own[valid]
        if torch.unique(real).numel() != real.numel():
            self.cached_rows = 0
            return False
        self.table = torch.zeros(data.x.shape[0], data.num_classes, device=data.x.device)
        frozen = [level_weights(weights, l) for l in range(self.levels - 1)]
        self.frozen_wide.eval()
        k = len(clients)
        group = 1 if self.one_client_at_a_time else k
        for c0 in range(0, k, group):
            c1 = min(c0 + group, k)
            levels = [wide_weights({name: v[c0:c1] for name, v in level.items()}) for level in frozen]
            block = max(1, min(width, self.budget // max((c1 - c0) * self.row_bytes, 1)))
            for lo in range(0, width, block):
                rows, keep = own[c0:c1, lo : lo + block], valid[c0:c1, lo : lo + block]
                x = wide_input(data.x, rows)
                out = 0
                for l, level in enumerate(levels):  # the additive forward's order: a_1 f_1 + a_2 f_2 + ...
                    out = out + wide_forward(self.frozen_wide, level, x, c1 - c0) * active[c0:c1, l, None, None]
                self.table[rows[keep]] = out[keep]
        self.key, self.clients, self.frozen_active = key, clients.clone(), active[:, :-1].clone()
        self.cached_rows = int(real.numel())
        return True

    def step(self, state: StepState, batch: Minibatch, hp) -> None:
        """The wide step (:func:`~fedbench.engine.vectorised.wide_step`) on the newest level only,
        the frozen levels read from :attr:`table`."""

        n = len(self.newest)
        params = {name[n:]: v for name, v in state.params.items()}
        buffers = {name[n:]: v for name, v in state.buffers.items() if name.startswith(self.newest)}
        active = state.buffers["active"]
        idx, mask = batch.idx, batch.mask
        clients = idx.shape[0]
        x, y = wide_input(self.data.x, idx), self.data.y[idx]
        with torch.enable_grad():
            leaves = {k: v.requires_grad_() for k, v in wide_weights(params).items()}
            newest = wide_forward(self.level_wide, {**leaves, **wide_weights(buffers)}, x, clients)
            logits = self.table[idx] + newest * active[:, -1, None, None]
            if self.combine == "mean":
                logits = logits / active.sum(1).clamp_min(1.0)[:, None, None]
            per_sample = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
            loss = (per_sample.view(clients, -1) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        for leaf in leaves.values():
            leaf.requires_grad_(False)
        count_batches(buffers, training_counters(self.level_wide))
        state.loss_sum.add_(loss.detach())
        sgd_update(state, [g.view_as(p) for g, p in zip(grads, params.values())], hp)


class LevelLogits:
    """Each level's logits of the rows last evaluated, per split (the :class:`ClientIndex`) and
    level, kept while the split, the clients and the level's weights are the same (module doc);
    :func:`~fedbench.engine.evaluate.evaluate_clients` runs an additive model whose ``level_logits``
    is one through :meth:`begin`."""

    def __init__(self):
        self.kept: dict[tuple[int, int], tuple] = {}  # (id(split), level) -> (split key, clients, level key, logits)
        self.computed = 0  # level tables computed (tests, benchmarks)
        self.reused = 0  # level tables read from ``kept``

    def begin(self, model: AdditiveLevels, stacked: dict[str, torch.Tensor], data: FederatedData, index: ClientIndex,
              clients: torch.Tensor) -> LevelPass:
        """One evaluation of ``model`` with the stacked ``stacked`` of ``clients`` on their rows of ``index``."""
        split = WeightsIdentity([{"x": data.x, "index": index.index, "counts": index.counts}])
        width = max(int(index.counts[clients].max()) if len(clients) else 0, 1)
        tables, run, fresh = [], [], {}  # run[l]: level l is computed; fresh: what will be kept of it
        for l in range(len(model.levels)):
            key = WeightsIdentity([level_weights(stacked, l)])
            kept = self.kept.get((id(index), l))
            hit = kept is not None and kept[0] == split and kept[2] == key and torch.equal(kept[1], clients)
            tables.append(kept[3] if hit else torch.empty(len(clients), width, data.num_classes, device=data.x.device))
            run.append(not hit)
            if not hit:
                fresh[(id(index), l)] = (split, clients.clone(), key, tables[-1])
        return LevelPass(self, group_forward(model.levels[0], data.x), model.combine, tables, run, fresh)


class LevelPass:
    """:meth:`LevelLogits.begin`'s evaluation: the model's logits block by block (:meth:`logits`),
    the levels' tables kept once every block has run (:meth:`keep`)."""

    def __init__(self, owner: LevelLogits, forward, combine: str, tables: list[torch.Tensor], run: list[bool],
                 fresh: dict):
        self.owner, self.forward, self.combine = owner, forward, combine
        self.tables, self.run, self.fresh = tables, run, fresh

    def logits(self, weights: dict[str, torch.Tensor], rows: torch.Tensor, group: torch.Tensor, start: int
               ) -> torch.Tensor:
        """Logits ``[g, r, classes]`` of the clients at positions ``group`` (their stacked
        ``weights``) on ``rows``, columns ``start..start+r`` of their rows of the split."""
        outputs = []
        for l, (table, run) in enumerate(zip(self.tables, self.run)):
            if run:
                y = self.forward(level_weights(weights, l), rows)
                table[group, start : start + rows.shape[1]] = y
            else:
                y = table[group, start : start + rows.shape[1]]
            outputs.append(y.transpose(0, 1))  # [r, g, classes], as the additive forward's
        return sum_levels(outputs, weights["active"], self.combine).transpose(0, 1)

    def keep(self) -> None:
        self.owner.kept.update(self.fresh)
        self.owner.computed += len(self.fresh)
        self.owner.reused += len(self.tables) - len(self.fresh)
