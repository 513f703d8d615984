"""Every client's minibatch gradient at its own parameters, in one call.

The Moreau-envelope family (pFedMe, Per-FedAvg, pFedMT, and FedAvg counted in minibatch steps,
as in the pFedMe/PerMFL code) does not run plain local SGD: each method strings gradient
evaluations together with its own update rule (proximal pulls, inner/outer loops, meta steps).
:class:`MinibatchGradients` is that shared primitive:

* ``draw(steps, clients, generator)``: ``steps`` minibatches per client, rows drawn uniformly
  *with replacement* from the client's split (the code cycles an unshuffled DataLoader over data
  shuffled once; with-replacement draws keep sampling stateless across rounds — docs/fidelity.md),
  gathered in one go;
* ``__call__(params, batches[s], clients, buffers)``: gradient of  mean cross-entropy +
  (weight_decay / 2) ||theta||^2 for every client at its own ``params`` row, and the mean
  cross-entropy ``[C]``.  A client without rows in the split contributes a zero data gradient.

Plain ``[Flatten,] Linear, ReLU, ..., Linear`` stacks (MLR, the DNNs) take a hand-written
batched forward/backward (``bmm``, path ``"hand"``); models :func:`~fedbench.engine.wide_model.widen`
folds (convolutions, BatchNorm: the CNNs, ResNet-9) run as one *wide* model of all clients, the
model's own forward and one autograd backward of the sum of the clients' losses (``"wide"``, as
the vectorised trainer's wide step); every other model goes through ``torch.func.vmap`` of
``grad_and_value`` over ``functional_call`` (``"vmap"``), in training mode.  Only parameters are
differentiated.  A model with buffers (BatchNorm's running statistics) takes every client's own
``buffers`` row, which each forward updates in place, as a client's model does in the
authors' PyTorch loops (one forward per gradient; :func:`client_buffers` makes the rows).

The methods take their steps through :meth:`GradientOracle.step`, one proximal gradient step in
place, ``params <- (1 - decay) params - lr grad F(at) + pull anchor``: on the hand path the
gradient goes straight into the update (``baddbmm_``, no gradient tensors), elsewhere a gradient
and three fused ``_foreach`` updates.  A step that recurs with the same state tensors (pFedMe's
local round, pFedMT's device step, Per-FedAvg's inner + meta step) is wrapped by
:meth:`GradientOracle.recurring`: on CUDA it is captured once as a CUDA graph and replayed
(:class:`~fedbench.engine.recurring.Recurring`), elsewhere it is simply called.

``numerics`` (:class:`~fedbench.engine.numerics.Numerics`): under ``bf16`` the forward of the
autograd paths (``"wide"``, ``"vmap"``) runs in bfloat16 autocast, the loss from FP32 logits
(parameters, gradients and the update stay FP32; on ``vmap`` BatchNorm takes its input in FP32,
:func:`~fedbench.engine.numerics.fp32_batchnorm`).  The hand-written stack has no autocast, so
under ``bf16`` it gives way to the wide model (``vmap`` where that does not fold the model):
``path`` names the path taken.  ``compile`` compiles the gradient function of the path taken; the
hand path then runs unfused (the compiled gradient and :meth:`GradientOracle.step`'s ``_foreach``
updates).  ``channels_last`` is not applied (``vmap`` takes no memory format, and the oracle keeps
one layout on every path): the methods that use the oracle declare it ignored, so a config that
sets it for them is refused.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.fused_mlp import linear_stack, linear_stack_forward
from fedbench.engine.batches import effective_batch
from fedbench.engine.minibatch import gather_minibatch
from fedbench.engine.numerics import FP32, Numerics, fp32_batchnorm
from fedbench.engine.recurring import Recurring
from fedbench.engine.step_runner import EagerFallback
from fedbench.engine.weights import Weights
from fedbench.engine.wide_model import count_batches, wide_forward, wide_twin, wide_weights


class GradientOracle:
    """What the Moreau family asks of a gradient oracle beyond ``oracle(params, batch, clients,
    buffers) -> (grads, losses)``: the in-place proximal step built on it, and recurring steps.
    Subclasses may fuse :meth:`step` (:class:`MinibatchGradients` does on its hand path)."""

    def step(
        self, params: Weights, batch, clients: torch.Tensor, buffers: Weights | None = None, *, lr: float,
        at: Weights | None = None, decay: float = 0.0, anchor: Weights | None = None, pull: float = 0.0,
        loss_sum: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """In place: ``params <- (1 - decay) params - lr grad F(at) + pull anchor`` for every client
        row, F the oracle's loss on ``batch`` and ``at`` the point the gradient is taken at (default
        ``params``; Per-FedAvg's meta step takes it elsewhere).  The losses ``[C]`` at ``at`` are added
        to ``loss_sum`` (when given) and returned."""
        grads, loss = self(params if at is None else at, batch, clients, buffers)
        p = list(params.values())
        if decay:
            torch._foreach_mul_(p, 1.0 - decay)
        torch._foreach_add_(p, [grads[n] for n in params], alpha=-lr)
        if pull:
            torch._foreach_add_(p, [anchor[n] for n in params], alpha=pull)
        if loss_sum is not None:
            loss_sum.add_(loss)
        return loss

    def recurring(self, step, uses: int) -> Recurring:
        """``step(*inputs)`` (in place on tensors it holds) run ``uses`` times: eagerly here."""
        return Recurring(step, 0)


class MinibatchGradients(GradientOracle):
    def __init__(
        self,
        model: nn.Module,
        data: FederatedData,
        split: ClientIndex,
        batch_size: int,
        weight_decay: float = 0.0,
        hand_written: bool = True,
        wide: bool = True,
        fused: bool = True,
        cuda_graphs: bool = True,
        numerics: Numerics | None = None,
    ):
        """``hand_written``/``wide``: allow the hand-written and the wide path (else ``vmap``);
        ``fused``: the hand path's gradient straight into :meth:`step`'s update; ``cuda_graphs``:
        replay :meth:`recurring` steps as CUDA graphs (CUDA only); ``numerics``: precision and
        compilation (the module's docstring: ``bf16`` rules out the hand path, ``compile`` the fusion)."""
        numerics = numerics or FP32
        self.numerics = numerics
        self.model, self.data, self.split = model, data, split
        self.batch_size, self.weight_decay = batch_size, weight_decay
        self.buffer_names = buffer_names(model)
        # the hand-written stack computes in FP32 only: under bf16 an MLP takes the wide model (autocast)
        self.layers = linear_stack(model, len(data.input_shape)) if hand_written and not numerics.bf16 else None
        self._wide = wide_twin(model, tuple(data.input_shape)) if wide and self.layers is None else None
        self.path = "hand" if self.layers is not None else "wide" if self._wide is not None else "vmap"
        self.fused = fused and not numerics.compile  # compile: the compiled gradient, then the _foreach updates
        self.cuda_graphs = cuda_graphs and data.x.device.type == "cuda"
        self._hand_written = EagerFallback(linear_stack_gradient) if numerics.compile else linear_stack_gradient
        self._wide_grad = EagerFallback(self._wide_gradient) if numerics.compile else self._wide_gradient
        self._counts = split.counts.cpu().to(torch.float64)
        self._keep_for, self._keep_value = None, None
        if self.path == "vmap":

            device = data.x.device
            if numerics.bf16:
                fp32_batchnorm(model)  # vmap's batch norm takes no bfloat16 input beside FP32 statistics

            def loss_fn(params: Weights, buffers: Weights, x, y):
                with numerics.autocast(device):
                    logits = functional_call(model, {**params, **buffers}, (x,))
                return F.cross_entropy(logits.float(), y)  # in FP32 (a no-op without autocast)

            self._vmapped = vmap(grad_and_value(loss_fn), in_dims=(0, 0, 0, 0), randomness="different")
            if numerics.compile:
                self._vmapped = EagerFallback(self._vmapped)

    def draw(self, steps: int, clients: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator]) -> "Minibatches":
        """``steps`` minibatches of every client in ``clients`` (rows uniform with replacement from
        its own split), gathered at once: ``batches[s]`` is step s's ``(x [C, B, ...], y [C, B])``.
        ``generator``: one for every client's draws, or one per client (its own stream,
        :func:`fedbench.engine.streams.client_streams`)."""
        counts = self._counts[clients.cpu()]
        batch = effective_batch(self.batch_size, counts.tolist())  # rows drawn per step: at most a client's data
        if isinstance(generator, torch.Generator):
            u = torch.rand(steps, len(counts), batch, generator=generator, dtype=torch.float64)
        elif len(generator) != len(counts):
            raise ValueError(f"{len(generator)} generators for {len(counts)} clients")
        else:
            u = torch.stack([torch.rand(steps, batch, generator=g, dtype=torch.float64) for g in generator], 1)
        positions = (u * counts.clamp_min(1)[None, :, None]).long().to(self.split.index.device)
        index = self.split.index[clients]  # [C, n_max]
        rows = torch.gather(index.unsqueeze(0).expand(steps, *index.shape), 2, positions)
        x, y = gather_minibatch(self.data.x, self.data.y, rows.view(steps * len(counts), -1))
        return Minibatches(rows, x.view(*rows.shape, *x.shape[2:]), y.view(rows.shape))

    def __call__(
        self, params: Weights, batch: tuple[torch.Tensor, torch.Tensor], clients: torch.Tensor, buffers: Weights | None = None,
    ) -> tuple[Weights, torch.Tensor]:
        """Gradients ``{name: [C, ...]}`` at ``params`` on ``batch`` = (x, y) of ``clients``, and the
        losses ``[C]``; ``buffers`` (``{name: [C, ...]}``, required when the model has buffers) are
        the clients' running statistics, updated in place by the forward."""
        x, y = batch
        if self.buffer_names and (buffers is None or set(buffers) != set(self.buffer_names)):
            raise ValueError(f"the model has buffers ({', '.join(self.buffer_names)}): pass every client's rows "
                             "of them (client_buffers), which the forward updates")
        if self.layers is not None:
            grads, loss = self._hand_written(self.layers, params, x, y)
        elif self._wide is not None:
            grads, loss = self._wide_grad(params, buffers or {}, x, y)
        else:
            self.model.train()  # dropout active, each client drawing its own masks; BatchNorm on batch statistics
            grads, loss = self._vmapped(params, buffers or {}, x, y)
        keep = self._keep(clients)
        if keep is not None:
            grads = {n: g * keep.view(-1, *([1] * (g.dim() - 1))) for n, g in grads.items()}
            loss = loss * keep
        if self.weight_decay:
            torch._foreach_add_(list(grads.values()), [params[n] for n in grads], alpha=self.weight_decay)
        return grads, loss

    def step(
        self, params: Weights, batch, clients: torch.Tensor, buffers: Weights | None = None, *, lr: float,
        at: Weights | None = None, decay: float = 0.0, anchor: Weights | None = None, pull: float = 0.0,
        loss_sum: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`GradientOracle.step`; on the hand path (``fused``) without gradient tensors: from the
        top layer down, the input gradient (at the old weights), then the weight gradient accumulated
        straight into the update, ``W.baddbmm_(dz^T, a, beta=1 - decay, alpha=-lr / B)`` (the bias likewise,
        against ones), dz = softmax - onehot."""
        if self.layers is None or not self.fused:
            return super().step(params, batch, clients, buffers, lr=lr, at=at, decay=decay, anchor=anchor, pull=pull,
                                loss_sum=loss_sum)
        x, y = batch
        point = params if at is None else at
        wd = self.weight_decay
        scale = 1.0 - decay - (lr * wd if at is None else 0.0)  # weight decay at ``params`` itself folds into the decay
        acts, z = linear_stack_forward(self.layers, point, x)
        ones, minus_ones = self._ones(y)  # [C, B, 1]: the bias gradient as one more batched product
        dz, loss = _cross_entropy_backward(z, y, minus_ones, mean=False)  # softmax - onehot: the 1/B goes into the step size
        keep = self._keep(clients)
        if keep is not None:
            dz.mul_(keep.view(-1, 1, 1))
            loss = loss * keep
        step = -lr / y.shape[1]
        for i in reversed(range(len(self.layers))):
            w, b = self.layers[i]
            a = acts[i]
            d_in = torch.bmm(dz, point[w]) if i else None  # before the update moves the weights
            params[w].baddbmm_(dz.mT, a, beta=scale, alpha=step)
            params[b].unsqueeze(-1).baddbmm_(dz.mT, ones, beta=scale, alpha=step)
            if i:
                dz = d_in.mul_(a > 0)  # through the ReLU
        if wd and at is not None:
            torch._foreach_add_(list(params.values()), [at[n] for n in params], alpha=-lr * wd)
        if pull:
            torch._foreach_add_(list(params.values()), [anchor[n] for n in params], alpha=pull)
        if loss_sum is not None:
            loss_sum.add_(loss)
        return loss

    def recurring(self, step, uses: int) -> Recurring:
        """``step(*inputs)``, in place on tensors it holds, run ``uses`` times with the same state: on
        CUDA (``cuda_graphs``) captured once and replayed, the ``inputs`` copied in (:class:`Recurring`)."""
        return Recurring(step, uses if self.cuda_graphs else 0)

    def _wide_gradient(self, params: Weights, buffers: Weights, x: torch.Tensor, y: torch.Tensor):
        """Every client's gradient and mean loss through the wide model: ``x`` ``[C, B, ...]`` as the
        wide input ``[B, C*channels, ...]``, one forward, autograd of the sum of the clients' mean
        losses (client j's weights reach only its own loss), running statistics moved per client;
        under ``bf16`` the forward in autocast, the loss from FP32 logits."""
        clients, batch = x.shape[:2]
        wide_x = x.transpose(0, 1).reshape(batch, -1, *x.shape[3:])
        self._wide.train()
        with torch.enable_grad():
            leaves = {k: v.requires_grad_() for k, v in wide_weights({k: p.detach() for k, p in params.items()}).items()}
            with self.numerics.autocast(x.device):  # bf16: the forward in bfloat16 autocast
                logits = wide_forward(self._wide, {**leaves, **wide_weights(buffers)}, wide_x, clients)
            logits = logits.float()  # the loss in FP32 (a no-op without autocast)
            per_sample = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
            loss = per_sample.view(clients, batch).mean(1)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        count_batches(buffers)
        return {k: g.view_as(params[k]) for k, g in zip(leaves, grads)}, loss.detach()

    def _ones(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """1 and -1 ``[C, B, 1]`` in the data's dtype (cached per shape)."""
        shape = (*y.shape, 1)
        if getattr(self, "_ones_value", None) is None or self._ones_value[0].shape != shape:
            ones = torch.ones(shape, dtype=self.data.x.dtype, device=y.device)
            self._ones_value = ones, -ones
        return self._ones_value

    def _keep(self, clients: torch.Tensor) -> torch.Tensor | None:
        """1/0 per client: has rows in the split (None when all have; cached per ``clients`` tensor)."""
        if clients is not self._keep_for:
            keep = self.split.counts[clients] > 0
            self._keep_for, self._keep_value = clients, None if bool(keep.all()) else keep.to(self.data.x.dtype)
        return self._keep_value


def buffer_names(model: nn.Module) -> list[str]:
    """The model's state entries that are not parameters (BatchNorm's running statistics)."""
    params = {name for name, _ in model.named_parameters()}
    return [name for name in model.state_dict() if name not in params]


def client_buffers(model: nn.Module, single: Weights, n: int) -> Weights:
    """``n`` clients' own copies of the buffers of ``single`` (empty for a model without buffers),
    for the oracle's forwards to update."""
    return {k: single[k].unsqueeze(0).expand(n, *single[k].shape).clone() for k in buffer_names(model)}


class Minibatches:
    """Pre-gathered minibatches: ``rows`` ``[S, C, B]`` (global data rows), ``x`` ``[S, C, B, ...]``, ``y`` ``[S, C, B]``."""

    def __init__(self, rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
        self.rows, self.x, self.y = rows, x, y

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[step], self.y[step]


def linear_stack_gradient(layers: list[tuple[str, str]], params: Weights, x: torch.Tensor, y: torch.Tensor):
    """Mean cross-entropy gradients of a batched Linear/ReLU stack by hand (``layers`` from
    :func:`~fedbench.engine.fused_mlp.linear_stack`): ``x`` ``[C, B, ...]``, ``y`` ``[C, B]``."""
    acts, z = linear_stack_forward(layers, params, x)
    dz, loss = _cross_entropy_backward(z, y)
    grads: Weights = {}
    for i in reversed(range(len(layers))):
        w, b = layers[i]
        a = acts[i]
        grads[w] = torch.bmm(dz.mT, a)
        grads[b] = dz.sum(1)
        if i:
            dz = torch.bmm(dz, params[w]).mul_(a > 0)  # through the ReLU
    return grads, loss


def _cross_entropy_backward(
    z: torch.Tensor, y: torch.Tensor, minus_ones: torch.Tensor | None = None, mean: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """d (mean cross-entropy) / d logits ``[C, B, classes]`` and the mean cross-entropy ``[C]`` of
    logits ``z`` (overwritten) and labels ``y`` ``[C, B]``; ``mean=False``: the gradient of the sum
    over the batch (softmax - onehot).  ``minus_ones``: -1 ``[C, B, 1]`` in z's dtype, if at hand."""
    # softmax cross-entropy spelled out: on the CPU, log_softmax over 10 classes costs ~10x this
    z = z.sub_(z.amax(-1, keepdim=True))
    target = y.unsqueeze(-1)
    dz = z.exp()
    total = dz.sum(-1, keepdim=True)
    loss = (total.log() - z.gather(-1, target)).squeeze(-1).mean(1)
    dz.div_(total)  # d mean-loss / d logits = (softmax - onehot) / B
    dz.scatter_add_(-1, target, torch.full_like(target, -1, dtype=dz.dtype) if minus_ones is None else minus_ones)
    return (dz.div_(y.shape[1]) if mean else dz), loss
