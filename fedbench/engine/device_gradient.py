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
batched forward/backward (``bmm``); every other model goes through ``torch.func.vmap`` of
``grad_and_value`` over ``functional_call``, in training mode.  Only parameters are
differentiated.  A model with buffers (BatchNorm's running statistics) takes every client's own
``buffers`` row, which each forward updates in place, as a client's model does in the
authors' PyTorch loops (one forward per gradient; :func:`client_buffers` makes the rows).

``numerics`` (:class:`~fedbench.engine.numerics.Numerics`): under ``bf16`` the forward runs in
bfloat16 autocast (the hand-written stack has none, so it gives way to ``vmap``), the loss from
FP32 logits; ``compile`` compiles the gradient function.  ``channels_last`` cannot apply (``vmap``
takes no memory format): the methods that use the oracle declare it ignored, so a config that
sets it for them is refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.fused_mlp import linear_stack, linear_stack_forward
from fedbench.engine.batches import effective_batch
from fedbench.engine.minibatch import gather_minibatch
from fedbench.engine.numerics import FP32, Numerics, fp32_batchnorm
from fedbench.engine.step_runner import EagerFallback
from fedbench.engine.weights import Weights


class MinibatchGradients:
    def __init__(
        self,
        model: nn.Module,
        data: FederatedData,
        split: ClientIndex,
        batch_size: int,
        weight_decay: float = 0.0,
        hand_written: bool = True,
        numerics: Numerics | None = None,
    ):
        numerics = numerics or FP32
        self.model, self.data, self.split = model, data, split
        self.batch_size, self.weight_decay = batch_size, weight_decay
        self.buffer_names = buffer_names(model)
        self.layers = linear_stack(model, len(data.input_shape)) if hand_written and not numerics.bf16 else None
        self._hand_written = (EagerFallback(linear_stack_gradient) if numerics.compile else linear_stack_gradient)
        self._counts = split.counts.cpu().to(torch.float64)
        self._keep_for, self._keep_value = None, None
        if self.layers is None:

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

    def draw(self, steps: int, clients: torch.Tensor, generator: torch.Generator) -> "Minibatches":
        """``steps`` minibatches of every client in ``clients`` (rows uniform with replacement from
        its own split), gathered at once: ``batches[s]`` is step s's ``(x [C, B, ...], y [C, B])``."""
        counts = self._counts[clients.cpu()]
        batch = effective_batch(self.batch_size, counts.tolist())  # rows drawn per step: at most a client's data
        u = torch.rand(steps, len(counts), batch, generator=generator, dtype=torch.float64)
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
    # softmax cross-entropy spelled out: on the CPU, log_softmax over 10 classes costs ~10x this
    z = z.sub_(z.amax(-1, keepdim=True))
    target = y.unsqueeze(-1)
    dz = z.exp()
    total = dz.sum(-1, keepdim=True)
    loss = (total.log() - z.gather(-1, target)).squeeze(-1).mean(1)
    dz.div_(total)  # d mean-loss / d logits = (softmax - onehot) / B
    dz.scatter_add_(-1, target, torch.full_like(target, -1, dtype=dz.dtype)).div_(y.shape[1])
    grads: Weights = {}
    for i in reversed(range(len(layers))):
        w, b = layers[i]
        a = acts[i]
        grads[w] = torch.bmm(dz.mT, a)
        grads[b] = dz.sum(1)
        if i:
            dz = torch.bmm(dz, params[w]).mul_(a > 0)  # through the ReLU
    return grads, loss
