"""Vectorised local training: every client of a chunk takes its SGD step in one call.

Per-client parameters are stacked along a leading axis and one minibatch per client is
gathered from the device-resident data.  The step computes every client's gradient of
its own mean loss at once and applies ``torch.optim.SGD`` to all rows in place, by one of

* plain ``[Flatten,] Linear, ReLU, ..., Linear`` stacks (the registry's ``mlr``/``mlp``): the
  hand-written batched step of :mod:`fedbench.engine.fused_mlp` (about 3x faster on the CPU);
* models built from Conv2d / Linear / BatchNorm and parameter-free layers (the papers' CNNs,
  ResNets, VGG): the *wide* model of :mod:`fedbench.engine.wide_model` (clients folded into
  the channel axis, the model's own forward, autograd) -- :func:`wide_step`;
* anything else: ``torch.func.vmap(grad_and_value(...))`` -- :func:`vmap_step`;

(FeMAM's additive model folds too; while a level trains on frozen earlier ones, the step runs the
newest level only and reads the frozen levels' logits, computed once per round:
:mod:`fedbench.engine.frozen_levels`)

then fused ``torch._foreach_*`` updates (:func:`sgd_update`).  Every step is called as
``step(state, batch, hp)`` (:mod:`fedbench.engine.step_args`) once its model and data are bound.

Clients are ordered by their sample counts (descending), so the clients still training at
step s of an epoch are a prefix of the chunk: a step works on the views ``[:n_active]`` (no
per-row freezing, no device-to-host sync; the schedule is known on the host).  Short last
batches are masked sample-wise -- except for models with BatchNorm, whose batch statistics
must see only real samples: there the clients whose batch is short at a step take it as
sub-steps of their own, grouped by batch length (contiguous slices, thanks to the order).
The result equals :mod:`fedbench.engine.reference` run client by client on the same
:class:`~fedbench.engine.batches.BatchPlan`, BatchNorm's running statistics and
``num_batches_tracked`` included.

On CUDA, a step shape (number of active clients) that recurs is captured once per chunk
as a CUDA graph and replayed (:mod:`fedbench.engine.step_runner`).  ``compile=True`` also
``torch.compile``s the step; if compilation fails the trainer warns and stays eager.

``numerics`` (:class:`~fedbench.engine.numerics.Numerics`): under ``bf16`` the wide and vmap
steps run the model's forward in bfloat16 autocast (FP32 parameters, gradients, momentum and
loss); the hand-written MLP step has no autocast, so ``bf16`` runs MLPs through the wide step.
``channels_last`` puts the wide step's input and convolution weights in NHWC memory format (the
vmap step cannot: a model with convolutions that does not fold is refused).
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedbench.engine.batches import BatchPlan
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.frozen_levels import FrozenLevels
from fedbench.engine.fused_mlp import dropout_stack, mlp_step
from fedbench.engine.minibatch import gather_minibatch
from fedbench.engine.numerics import FP32, Numerics, fp32_batchnorm
from fedbench.engine.step_args import Minibatch, StepState, sgd_update
from fedbench.engine.step_runner import EagerFallback, StepRunner
from fedbench.engine.trainer import Trainer
from fedbench.engine.weights import Weights
from fedbench.engine.memory import budget_bytes, clients_per_pass, training_bytes_per_client
from fedbench.engine.wide_model import (
    count_batches, has_batchnorm, training_counters, wide_forward, wide_input, wide_twin, wide_weights,
)

# default chunk of the hand-written MLP step on the CPU: at most this many bytes of parameters,
# so that the weights streamed every step stay in cache (2-core EPYC, 32 MiB L3, 784-200-10,
# 50 clients: chunks of 13 clients, 8 MiB, 180 ms/round; all 50 at once, 32 MiB, 265 ms)
_CPU_CHUNK_BYTES = 8 * 2**20


class VectorisedTrainer(Trainer):
    """Trains many clients at once; ``chunk_size`` bounds how many share one vectorised step.

    ``fused_mlp``: use the hand-written step for Linear/ReLU(/Dropout) stacks (on the CPU its
    default chunk keeps the chunk's parameters within ``_CPU_CHUNK_BYTES``).  ``compile``:
    ``torch.compile`` the wide or vmap step (pays off over many rounds: the first call compiles
    for tens of seconds; the hand-written step is left eager, compiling it measured slower).
    ``cuda_graphs``: replay recurring steps as CUDA graphs (CUDA only).  ``wide``: run
    foldable models (convolutions, BatchNorm) as one wide model instead of ``vmap``.
    ``memory_mb``: working-memory budget of one pass (:mod:`fedbench.engine.memory`); chunks
    never exceed it.  ``numerics``: precision, layout and compilation (``compile=True`` or
    ``numerics.compile`` switches compilation on); ``numerics_used`` records what ran.
    """

    def __init__(
        self,
        model: nn.Module,
        data: FederatedData,
        chunk_size: int | None = None,
        compile: bool = False,
        cuda_graphs: bool = True,
        fused_mlp: bool = True,
        wide: bool = True,
        memory_mb: float | None = None,
        numerics: Numerics | None = None,
    ):
        numerics = numerics or FP32
        compile = compile or numerics.compile
        self.numerics = numerics
        self.model = model.to(data.x.device).train()
        self.data = data
        self.param_names = [n for n, _ in model.named_parameters()]
        self.chunk_size = chunk_size
        self.cuda_graphs = cuda_graphs and data.x.device.type == "cuda"
        self.memory_mb = memory_mb
        self.budget = budget_bytes(data.x.device, memory_mb)
        self.exact_batches = has_batchnorm(self.model)  # short batches as sub-steps of their own
        # the hand-written step computes in FP32 only: under bf16 an MLP takes the wide step (autocast)
        stack = dropout_stack(self.model, data.x.dim() - 1) if fused_mlp and not numerics.bf16 else None
        folded = wide_twin(self.model, tuple(data.x.shape[1:])) if wide and stack is None else None
        self._wide = folded
        self.step_kind = "fused_mlp" if stack is not None else "wide" if folded is not None else "vmap"
        self.fused = stack is not None
        if numerics.channels_last and self.step_kind == "vmap" and _has_conv(self.model):
            raise ValueError(
                f"channels_last: {type(model).__name__} does not fold into the wide step, and the vmap step "
                "takes no memory format; set training.channels_last: false for this model"
            )
        # FeMAM's additive model: the newest level only, its frozen levels' logits read from a table
        # (its step has no autocast: under bf16 every level runs in the wide step)
        self.frozen_levels = FrozenLevels.of(self.model, data, memory_mb) if folded is not None and not numerics.bf16 else None
        self._frozen_step = None
        if self.fused:
            step = partial(mlp_step, *stack, data)
        elif folded is not None:
            step = partial(wide_step, folded, data, numerics=numerics)
        else:
            if numerics.bf16:
                fp32_batchnorm(self.model)  # vmap's batch norm takes no bfloat16 input beside FP32 statistics
            loss = _masked_loss_fn(self.model, numerics, data.x.device)
            step = partial(vmap_step, vmap(grad_and_value(loss), randomness="different"), data)
        self._step = EagerFallback(step) if compile else step
        if self.frozen_levels is not None:
            self._frozen_step = EagerFallback(self.frozen_levels.step) if compile else self.frozen_levels.step

    @property
    def numerics_used(self) -> dict:
        """What the training steps ran with: the settings, the step, and whether the step stayed
        compiled (False once compilation failed and the step fell back to eager)."""
        compiled = isinstance(self._step, EagerFallback) and self._step.compiled is not None
        return {**self.numerics.record(), "compile": isinstance(self._step, EagerFallback), "compiled": compiled,
                "trainer_step": self.step_kind}

    def train(
        self,
        start: Weights,
        clients: torch.Tensor,
        plan: BatchPlan,
        hp: LocalSGD,
        center: Weights | None = None,
        frozen_key=None,
    ) -> tuple[Weights, torch.Tensor]:
        """Run ``plan`` from the stacked ``start`` weights of ``clients``.

        ``center`` (stacked like ``start``) anchors the proximal term; default: ``start``.
        ``frozen_key`` (FeMAM's additive model: a :class:`~fedbench.engine.frozen_levels.WeightsIdentity`
        of the frozen levels ``start`` was drawn from): reuse the last call's table of frozen logits
        while it is equal (:meth:`~fedbench.engine.frozen_levels.FrozenLevels.prepare`).
        Returns the trained stacked weights and each client's mean training loss.
        """
        device = self.data.x.device
        self.model.train()  # dropout and BatchNorm in training mode (evaluation may have switched it)
        if self._wide is not None:
            self._wide.train()
        n = len(clients)
        copies = 2 + bool(hp.momentum) + bool(hp.prox_mu)  # chunk weights, gradients, momentum, anchor
        per_client = training_bytes_per_client(self.model, self.data.input_shape, plan.batch_size, copies)
        size = clients_per_pass(per_client, self.budget, self.chunk_size or self._default_chunk(start, n), "training")
        # most samples first, so that at every step the clients still training form a prefix
        # (and, within it, the clients with a short batch form slices of equal batch length)
        by_steps = torch.argsort(plan.counts, descending=True, stable=True)
        out = {k: torch.empty_like(v) for k, v in start.items()}
        losses = torch.empty(n, device=device)
        step = self._step
        if self.frozen_levels is not None and self.frozen_levels.prepare(start, clients, frozen_key):
            step = self._frozen_step  # the frozen levels' logits computed once (per round or level)
        for lo in range(0, n, size):
            pos = by_steps[lo : lo + size]
            at = pos.to(device)
            anchor = None
            if hp.prox_mu:
                anchor = {k: (center or start)[k].index_select(0, at) for k in self.param_names}
            weights, loss = self._train_chunk(
                {k: v.index_select(0, at) for k, v in start.items()},  # fresh copies, trained in place
                clients[pos.to(clients.device)],
                BatchPlan(plan.order[pos], plan.counts[pos], plan.batch_size),
                hp,
                anchor,
                step,
            )
            for k, v in weights.items():
                out[k].index_copy_(0, at, v)
            losses.index_copy_(0, at, loss)
        return out, losses

    def _default_chunk(self, start: Weights, n: int) -> int:
        """All ``n`` clients, except for the hand-written step on the CPU: balanced chunks of at
        most ``_CPU_CHUNK_BYTES`` of parameters."""
        if not (self.fused and self.data.x.device.type == "cpu" and n):
            return n
        per_client = sum(start[k][0].nbytes for k in self.param_names)
        chunks = -(-n // max(_CPU_CHUNK_BYTES // per_client, 1))
        return -(-n // chunks)

    @torch.no_grad()
    def _train_chunk(self, weights: Weights, clients, plan: BatchPlan, hp: LocalSGD, anchor: Weights | None, step):
        device = self.data.x.device
        params = {k: weights[k] for k in self.param_names}
        buffers = {k: v for k, v in weights.items() if k not in params}
        momentum = {k: torch.zeros_like(v) for k, v in params.items()} if hp.momentum else None

        batch, epochs, n = plan.batch_size, plan.epochs, len(clients)
        steps_per_epoch = plan.steps_per_epoch.tolist()  # descending
        schedule = step_schedule(plan.counts.tolist(), batch, self.exact_batches)
        active = [segments[0][1] if segments[0][2] == batch else 0 for segments in schedule]  # full-batch prefix
        width = len(schedule) * batch

        # global row of every (epoch, step, client, slot), padded to whole batches: rows[e, s, c, :]
        order = F.pad(plan.order, (0, max(width - plan.order.shape[2], 0)))[:, :, :width].to(device)
        own_rows = self.data.train.index[clients]
        rows = torch.gather(own_rows[:, None, :].expand(-1, epochs, -1), 2, order.clamp(max=own_rows.shape[1] - 1))
        rows = rows.view(n, epochs, len(schedule), batch).permute(1, 2, 0, 3).contiguous()
        # mask[s, c, :]: 1 for real samples (all but the padding of a short last batch)
        mask = (torch.arange(width, device=device) < plan.counts.to(device)[:, None]).float()
        mask = mask.view(n, len(schedule), batch).transpose(0, 1).contiguous()

        loss_sum = torch.zeros(n, device=device)
        state = StepState(params, buffers, momentum, anchor, loss_sum)
        runner = StepRunner(step, Counter(k for k in active * epochs if k) if self.cuda_graphs else Counter())
        for e in range(epochs):
            for s, segments in enumerate(schedule):
                for lo, hi, length in segments:
                    if lo == 0 and length == batch:  # the recurring full-batch step (CUDA graphs)
                        runner.run(hi, state.rows(0, hi), Minibatch(rows[e, s, :hi], mask[s, :hi]), hp)
                    else:
                        step(state.rows(lo, hi), Minibatch(rows[e, s, lo:hi, :length], mask[s, lo:hi, :length]), hp)
        steps = torch.tensor(steps_per_epoch, device=device, dtype=torch.float32) * epochs
        return weights, loss_sum / steps.clamp_min(1)


def _masked_loss_fn(model: nn.Module, numerics: Numerics = FP32, device: torch.device | str = "cpu"):
    def loss(params: Weights, buffers: Weights, x, y, mask):
        with numerics.autocast(device):
            logits = functional_call(model, {**params, **buffers}, (x,))
        per_sample = F.cross_entropy(logits.float(), y, reduction="none")  # the loss in FP32 (a no-op there)
        return (per_sample * mask).sum() / mask.sum().clamp_min(1.0)

    return loss


def _has_conv(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def step_schedule(counts: list[int], batch: int, exact: bool) -> list[list[tuple[int, int, int]]]:
    """Per step s of an epoch, the ``(start, stop, batch length)`` slices of the clients (sorted
    by ``counts``, descending) that take it.  ``exact=False``: one slice, every active client,
    short batches padded to ``batch`` (and masked).  ``exact=True``: the clients with a full
    batch, then one slice per shorter batch length (clients with equal counts are adjacent)."""
    steps = -(-counts[0] // batch) if counts else 0
    schedule = []
    for s in range(steps):
        active = sum(c > s * batch for c in counts)
        if not exact:
            schedule.append([(0, active, batch)])
            continue
        full = sum(c >= (s + 1) * batch for c in counts)
        segments = [(0, full, batch)] if full else []
        lo = full
        while lo < active:
            hi = lo
            while hi < active and counts[hi] == counts[lo]:
                hi += 1
            segments.append((lo, hi, counts[lo] - s * batch))
            lo = hi
        schedule.append(segments)
    return schedule


def vmap_step(grad_fn, data: FederatedData, state: StepState, batch: Minibatch, hp: LocalSGD) -> None:
    """One minibatch step for all rows of ``state`` (its parameters, momentum, BatchNorm buffers
    and loss sums updated in place) on the samples of ``batch``, through ``grad_fn`` (``vmap`` of
    the model's masked mean loss).  ``torch.optim.SGD`` on grad + mu (p - anchor)."""
    x, y = gather_minibatch(data.x, data.y, batch.idx)
    grads, loss = grad_fn(state.params, state.buffers, x, y, batch.mask)
    state.loss_sum.add_(loss)
    sgd_update(state, grads.values(), hp)


def wide_step(
    wide, data: FederatedData, state: StepState, batch: Minibatch, hp: LocalSGD, numerics: Numerics = FP32
) -> None:
    """:func:`vmap_step` through the wide model (:mod:`fedbench.engine.wide_model`): one forward of
    all clients, autograd of the sum of their masked mean losses (each client's parameters
    reach only its own loss), BatchNorm running statistics updated in place per client.
    ``numerics``: the forward in bfloat16 autocast (``bf16``; the loss from FP32 logits, the
    gradients land in the FP32 parameters), input and 4-D weights channels-last (``channels_last``)."""
    params, buffers, idx, mask = state.params, state.buffers, batch.idx, batch.mask
    clients = idx.shape[0]
    x, y = numerics.layout(wide_input(data.x, idx)), data.y[idx]
    with torch.enable_grad():
        leaves = {k: v.requires_grad_() for k, v in wide_weights(params).items()}
        weights = {k: numerics.layout(v) for k, v in leaves.items()}  # a copy (autograd back to the leaf) where relaid
        with numerics.autocast(x.device):
            logits = wide_forward(wide, {**weights, **wide_weights(buffers)}, x, clients)
        logits = logits.float()  # the loss in FP32 (a no-op without autocast)
        per_sample = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        loss = (per_sample.view(clients, -1) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
    for leaf in leaves.values():
        leaf.requires_grad_(False)
    count_batches(buffers, training_counters(wide))
    state.loss_sum.add_(loss.detach())
    sgd_update(state, [g.view_as(p) for g, p in zip(grads, params.values())], hp)
