"""How many clients (and rows) one vectorised pass may take under a memory budget.

The budget bounds the *working* memory of one pass: the chunk's copies of the client weights
(weights, gradients, momentum, proximal anchor) and the activations of its minibatches, or,
for evaluation, the activations of a block of test rows.  Activation sizes come from one
forward pass of a CPU copy of the model on two zero samples: every leaf module's output size per
sample.  Training keeps all of them for the backward pass; inference needs
only a few at a time.

``training.memory_mb`` sets the budget; by default it is 80 % of the free device memory on
CUDA (read when the trainer is built) and :data:`DEFAULT_CPU_BUDGET_MB` on the CPU.
"""

from __future__ import annotations

import copy
import functools
import math

import torch
from torch import nn

DEFAULT_CPU_BUDGET_MB = 2048
CUDA_FREE_FRACTION = 0.8
MB = 2**20


class MemoryBudgetError(ValueError):
    """Not even one client fits the budget."""


def budget_bytes(device: torch.device, memory_mb: float | None) -> int:
    """The working-memory budget of one pass on ``device``."""
    if memory_mb is not None:
        return int(memory_mb * MB)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_FREE_FRACTION)
    return DEFAULT_CPU_BUDGET_MB * MB


@functools.lru_cache(maxsize=32)
def _activation_sizes(model: nn.Module, input_shape: tuple[int, ...], dtype_bytes: int) -> tuple[int, int]:
    """(sum, max) over leaf modules of their output size in bytes for one sample."""
    # a zeroed CPU copy (of a meta model too: the cost model's) run on 2 zero samples: the meta device would
    # give the same sizes, but its first forward imports torch._dynamo (~1.5 CPU s a job)
    probe = copy.deepcopy(model).to_empty(device="cpu")
    with torch.no_grad():
        for tensor in (*probe.parameters(), *probe.buffers()):
            tensor.zero_()
    sizes = []

    def record(_module, _inputs, output):
        if isinstance(output, torch.Tensor):
            sizes.append(output[0].numel() * dtype_bytes)

    for module in probe.modules():
        if not list(module.children()):
            module.register_forward_hook(record)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # its dropout draws leave the run's stream as it was
        probe.train()
        probe(torch.zeros(2, *input_shape))  # 2 samples: BatchNorm1d needs more than one
    input_bytes = math.prod(input_shape) * dtype_bytes
    return sum(sizes) + input_bytes, max(sizes + [input_bytes])


def training_bytes_per_client(model: nn.Module, input_shape, batch_size: int, weight_copies: int) -> int:
    """One client's share of a training pass: ``weight_copies`` copies of its weights (the chunk's
    weights, gradients, momentum, anchor) plus twice the activations of a minibatch (those saved
    for the backward pass and the gradients flowing through them)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    weights += sum(b.numel() * b.element_size() for b in model.buffers())
    total, _ = _activation_sizes(model, tuple(input_shape), 4)
    return weight_copies * weights + 2 * total * batch_size


def evaluation_bytes_per_row(model: nn.Module, input_shape) -> int:
    """One test row's share of an inference pass: a few of its largest activations at once
    (a layer's input and output, plus a residual branch)."""
    _, largest = _activation_sizes(model, tuple(input_shape), 4)
    return 3 * largest


def clients_per_pass(per_client: int, budget: int, wanted: int, what: str) -> int:
    """How many of ``wanted`` clients fit ``budget`` bytes at ``per_client`` bytes each (at least 1,
    else :class:`MemoryBudgetError` saying what one client needs)."""
    fit = budget // max(per_client, 1)
    if fit < 1:
        raise MemoryBudgetError(
            f"memory budget of {format_mb(budget)} is too small for one client's {what}: one client needs "
            f"{format_mb(per_client)}; raise training.memory_mb (or lower batch_size)"
        )
    return max(1, min(wanted, fit))


def format_mb(nbytes: float) -> str:
    """``nbytes`` in MB, never rounded to 0: "2,029,419 MB", "12 MB", "0.0488 MB"."""
    mb = nbytes / MB
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.3g} MB"
