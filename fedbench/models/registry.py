"""``MODELS``: architecture name -> builder(input_shape, num_classes, **params) -> nn.Module.

A model registers the throughput family its time is measured by, ``MODELS.register(name, family="resnet9")``;
the one model a family is benchmarked with adds the input it is measured at, ``benchmark_input=(3, 32, 32)``
(:mod:`fedbench.cost.families`, ``benchmarks/throughputs.py``).  A model without a family is estimated at
the device's assumed throughput, uncalibrated."""

from __future__ import annotations

import functools
import json

from torch import nn

from fedbench.registry.core import Registry

MODELS: Registry = Registry("model architecture")


def build_model(spec: dict, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Build the model a config entry ``{arch: NAME, **params}`` describes."""
    params = {k: v for k, v in spec.items() if k != "arch"}
    return MODELS[spec["arch"]](input_shape, num_classes, **params)


@functools.lru_cache(maxsize=256)
def _input_problem(spec_json: str, input_shape: tuple[int, ...], num_classes: int) -> str | None:
    import torch

    with torch.device("meta"):
        try:
            model = build_model(json.loads(spec_json), input_shape, num_classes)
            model.eval()
            out = model(torch.empty(2, *input_shape))
        except (ValueError, RuntimeError, TypeError, IndexError) as error:
            return str(error).splitlines()[0] if str(error) else type(error).__name__
    if tuple(out.shape) != (2, num_classes):
        return f"the model's output has shape {tuple(out.shape[1:])}, not ({num_classes},) logits"
    return None


def input_problem(spec: dict, input_shape, num_classes: int) -> str | None:
    """Why the model ``spec`` cannot take inputs of ``input_shape`` with ``num_classes`` classes
    (``None``: it can).  Builds the model and runs a two-sample forward pass on the ``meta`` device
    (no memory, no compute), once per distinct (spec, shape, classes): planning a paper grid of
    thousands of cells probes each model a handful of times."""
    return _input_problem(json.dumps(spec, sort_keys=True), tuple(input_shape), int(num_classes))
