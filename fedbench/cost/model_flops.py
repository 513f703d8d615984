"""A model's cost per sample and its size: FLOPs of one training sample (forward + backward) and of one
scored sample (forward), counted by ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device
(no memory, no compute), and the bytes of its parameters and buffers.  :mod:`fedbench.cost.work` turns
them into a run's work, :mod:`fedbench.cost.memory` into a job's memory."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelCost:
    train_flops: float  # one sample's forward + backward (weight and activation gradients)
    eval_flops: float  # one sample's forward
    state_bytes: int  # parameters + buffers of one model
    batchnorm: bool = False  # the model has BatchNorm (the vectorised engine then pads no short batch)


@functools.lru_cache(maxsize=64)
def _model_cost(spec_json: str, input_shape: tuple[int, ...], num_classes: int) -> ModelCost:
    from torch.utils.flop_counter import FlopCounterMode

    from fedbench.models import build_model

    with torch.device("meta"):
        model = build_model(json.loads(spec_json), input_shape, num_classes)
    model.train()
    x = torch.empty(2, *input_shape, device="meta")  # 2 samples: BatchNorm1d needs more than one
    y = torch.zeros(2, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        torch.nn.functional.cross_entropy(model(x), y)
    with FlopCounterMode(display=False) as both:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    state = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    return ModelCost(both.get_total_flops() / 2, forward.get_total_flops() / 2, state, batchnorm)


def model_cost(spec: dict, input_shape, num_classes: int) -> ModelCost:
    """FLOPs per sample and bytes of the model ``spec`` (built on the meta device: no memory, no compute)."""
    return _model_cost(json.dumps(spec, sort_keys=True), tuple(input_shape), num_classes)

