"""Many clients' models as one *wide* model: the client axis folded into the channel axis.

For k clients of one architecture, activations are ``[B, k*C, ...]``: the sample axis first and
the clients' channels side by side.  Then

* every ``Conv2d`` is a grouped convolution with k times its groups (client j's kernels see
  only client j's channels),
* every ``Linear`` is a batched matrix product over the clients,
* every ``BatchNorm`` normalises k*C channels: each client's statistics over its own batch
  only, and each client's running statistics, so batch statistics are exact by construction,
* parameter-free layers (ReLU, pooling, Flatten, Dropout, residual additions) act on the wide
  tensor unchanged,

and the model's *own* ``forward`` runs (ResNets and VGGs included), through
``torch.func.functional_call`` with the stacked client weights reshaped ``[k, O, ...] ->
[k*O, ...]`` (views: gradients land in the stacked layout without copies).  Compared with
``vmap`` of the per-client model, no activation is transposed between layers.

:func:`widen` refuses (returns ``None``) models it cannot fold -- a module with parameters or
buffers other than Conv2d/Linear/BatchNorm (besides buffers a module declares foldable in
``wide_buffers``: FeMAM's additive model), BatchNorm without running statistics or with a
cumulative average (``momentum=None``), or a ``forward`` that mixes channels across the
fold (checked numerically against the per-client model); callers then use ``vmap``.
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from fedbench.engine.weights import Weights

_BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d)
_NUM_BATCHES = "num_batches_tracked"


class WideConv2d(nn.Module):
    """``Conv2d`` over k clients' channels at once: a convolution with k times the groups, k read
    from the weight it is called with (``[k*O, C/groups, kh, kw]``)."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        if conv.padding_mode != "zeros":
            raise ValueError(f"padding_mode {conv.padding_mode!r}")
        self.out_channels, self.groups = conv.out_channels, conv.groups
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.weight = nn.Parameter(torch.empty(conv.weight.shape, device="meta"))
        self.bias = None if conv.bias is None else nn.Parameter(torch.empty(conv.bias.shape, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        clients = self.weight.shape[0] // self.out_channels
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups * clients)


class WideLinear(nn.Module):
    """``Linear`` for k clients: input ``[B, k*F]`` (client j's features at ``j*F:(j+1)*F``),
    weight ``[k*O, F]``, output ``[B, k*O]``.  Computed as ``W_j @ x_j^T`` so that the weight
    gradient comes out in the weight's own layout."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.out_features = linear.out_features
        self.weight = nn.Parameter(torch.empty(linear.weight.shape, device="meta"))
        self.bias = None if linear.bias is None else nn.Parameter(torch.empty(linear.bias.shape, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"WideLinear takes [batch, clients*features], got {tuple(x.shape)}")
        clients, batch = self.weight.shape[0] // self.out_features, x.shape[0]
        w = self.weight.view(clients, self.out_features, -1)
        xt = x.view(batch, clients, -1).permute(1, 2, 0)  # [k, F, B]
        out = torch.bmm(w, xt) if self.bias is None else torch.baddbmm(self.bias.view(clients, -1, 1), w, xt)
        return out.permute(2, 0, 1).reshape(batch, -1)  # [B, k*O]


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def widen(model: nn.Module, input_shape: tuple[int, ...], check: bool = True) -> nn.Module | None:
    """The wide twin of ``model`` (same parameter and buffer names), or None if it cannot be
    folded.  ``check``: compare its outputs for two clients with the per-client model's, in
    training and evaluation mode, on random inputs of ``input_shape``."""
    wide = copy.deepcopy(model).to("meta")
    for name, module in list(wide.named_modules()):
        if isinstance(module, nn.Conv2d):
            try:
                replacement = WideConv2d(module)
            except ValueError:
                return None
        elif isinstance(module, nn.Linear):
            replacement = WideLinear(module)
        elif isinstance(module, _BATCHNORMS):
            if not module.track_running_stats or module.momentum is None:
                return None
            continue
        elif next(module.parameters(recurse=False), None) is not None or _unfolded_buffers(module):
            return None  # a layer we do not know how to fold
        else:
            continue
        parent, _, attr = name.rpartition(".")
        setattr(wide.get_submodule(parent) if parent else wide, attr, replacement)
    wide.train(model.training)
    if check and not _folds_exactly(model, wide, input_shape):
        return None
    return wide


def _unfolded_buffers(module: nn.Module) -> bool:
    """Does ``module`` own a buffer that its forward does not read per client?  A module declares
    the buffers it reads in the folded layout (``[k * d0, ...]`` rows, k from their size) in
    ``wide_buffers`` (FeMAM's additive model: its ``active`` levels); the numerical check decides."""
    declared = set(getattr(module, "wide_buffers", ()))
    return any(name not in declared for name, _ in module.named_buffers(recurse=False))


def training_counters(wide: nn.Module) -> set[str]:
    """Names of the ``num_batches_tracked`` counters that a forward in the model's current mode
    advances: those of BatchNorm layers in training mode (a frozen part held in eval mode, as
    FeMAM's earlier levels, counts nothing)."""
    return {f"{name}.{_NUM_BATCHES}" if name else _NUM_BATCHES for name, m in wide.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats}


_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def wide_twin(model: nn.Module, input_shape: tuple[int, ...]) -> nn.Module | None:
    """:func:`widen` once per model and input shape (the trainer and evaluation share it; each sets
    the training mode it needs)."""
    twins = _TWINS.setdefault(model, {})
    if tuple(input_shape) not in twins:
        twins[tuple(input_shape)] = widen(model, tuple(input_shape))
    return twins[tuple(input_shape)]


def wide_weights(stacked: Weights) -> Weights:
    """Views ``[k, d0, ...] -> [k*d0, ...]`` of stacked weights (rows contiguous); BatchNorm's
    ``num_batches_tracked`` (one per client) becomes a scratch scalar the wide model may count
    in -- :func:`count_batches` updates the clients' counters."""
    out = {}
    for k, v in stacked.items():
        if k.endswith(_NUM_BATCHES):
            out[k] = torch.zeros((), dtype=v.dtype, device=v.device)
        else:
            out[k] = v.view(-1, *v.shape[2:]) if v.dim() > 1 else v
    return out


def count_batches(buffers: Weights, counters: set[str] | None = None) -> None:
    """One more batch for every client row of every ``num_batches_tracked`` buffer (in place);
    only those named in ``counters`` when given (:func:`training_counters`)."""
    for k, v in buffers.items():
        if k.endswith(_NUM_BATCHES) and (counters is None or k in counters):
            v.add_(1)


def wide_input(x_all: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Samples ``idx`` ``[k, B]`` (global rows) as the wide input ``[B, k*C, ...]``."""
    clients, batch = idx.shape
    x = x_all.index_select(0, idx.t().reshape(-1))  # [B*k, C, ...] sample-major
    return x.view(batch, clients * x_all.shape[1], *x_all.shape[2:]) if x_all.dim() > 1 else x.view(batch, clients)


def wide_forward(wide: nn.Module, weights: Weights, x: torch.Tensor, clients: int) -> torch.Tensor:
    """Logits ``[k, B, classes]`` of the k clients' models (``weights`` from :func:`wide_weights`)
    on the wide input ``x`` ``[B, k*C, ...]``."""
    return functional_call(wide, weights, (x,)).reshape(x.shape[0], clients, -1).transpose(0, 1)


def group_forward(model: nn.Module, x_all: torch.Tensor):
    """``forward(weights, rows)``: logits ``[g, r, classes]`` of g stacked models (in inference),
    model j on the samples ``rows[j]`` of ``x_all`` -- through the wide twin (in eval mode) where
    the model folds, else ``vmap``."""
    wide = wide_twin(model, tuple(x_all.shape[1:]))
    if wide is None:
        batched = vmap(lambda w, x: functional_call(model, w, (x,)))
        return lambda weights, rows: batched(weights, x_all[rows])
    wide.eval()
    return lambda weights, rows: wide_forward(wide, wide_weights(weights), wide_input(x_all, rows), rows.shape[0])


def _folds_exactly(model: nn.Module, wide: nn.Module, input_shape: tuple[int, ...], clients: int = 2) -> bool:
    """Two clients with different random weights: the wide model's logits (training and eval
    mode) and updated running statistics equal the per-client model's."""
    gen = torch.Generator().manual_seed(0)
    reference = copy.deepcopy(model).cpu()
    single = {k: v.detach().cpu() for k, v in reference.state_dict().items()}
    stacked = {}
    for k, v in single.items():
        if v.is_floating_point():
            stacked[k] = torch.stack([v + 0.1 * torch.randn(v.shape, generator=gen) for _ in range(clients)])
            if "running_var" in k:
                stacked[k] = stacked[k].abs() + 0.5
        else:
            stacked[k] = torch.stack([v.clone() for _ in range(clients)])
    x = torch.randn(clients, 3, *input_shape, generator=gen)
    try:
        for training in (False, True):
            reference.train(training)
            wide.train(training)
            _no_dropout(reference, wide)
            per_client = []
            own = {k: v.clone() for k, v in stacked.items()}
            for c in range(clients):
                state = {k: v[c] for k, v in own.items()}
                per_client.append(functional_call(reference, state, (x[c],)))
            folded = {k: v.clone() for k, v in stacked.items()}
            rows = torch.arange(clients * 3).view(clients, 3)
            logits = wide_forward(wide, wide_weights(folded), wide_input(x.view(-1, *input_shape), rows), clients)
            if not _close(logits, torch.stack(per_client)):
                return False
            if not all(_close(folded[k], own[k]) for k in own if own[k].is_floating_point()):
                return False
    except (RuntimeError, ValueError):
        return False
    finally:
        reference.train(model.training)
        wide.train(model.training)
    return True


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal up to float rounding, relative to the tensor's scale (deep random nets reach 1e6)."""
    return torch.allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(want.abs().max())))


def _no_dropout(*models: nn.Module) -> None:
    """Dropout draws differ between the two computations: switch it off for the check."""
    for model in models:
        for m in model.modules():
            if isinstance(m, nn.modules.dropout._DropoutNd):
                m.eval()
