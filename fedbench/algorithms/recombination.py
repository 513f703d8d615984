"""FedMR's layer-wise model recombination (Hu et al., KDD'24, Sec. 4.2.2, Fig. 4).

The m intermediate models are decomposed into layers; for every layer an independent random
permutation of the m models decides which model's layer each slot receives, so "any decomposed
layer of the uploaded model will eventually be used by one and only one of the recombined
models".  The partition ablation (Sec. 5.4.2, "FedMR-px") groups consecutive layers into
segments sharing one permutation: layer j (1-based, of N) lies in segment ceil(j / (x N));
x = 1 reassigns whole models.

What a "layer" is:

* ``module`` (the paper's figure, default): a Conv/Linear module together with the
  normalisation modules (BatchNorm, GroupNorm, LayerNorm) registered after it, with all their
  parameters and buffers, as one unit.  Units come from the model's module structure: the
  state-dict key prefixes in module registration order (a normalisation module with no
  weight-bearing module before it is a unit of its own);
* ``entry`` (the released code, notes §2.4): every state-dict entry separately (a conv weight,
  its bias, the BatchNorm weight, bias and running statistics are all shuffled independently).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from fedbench.engine.weights import Weights

_NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)

LayerUnit = Literal["module", "entry"]


def recombination_units(model: nn.Module, unit: LayerUnit = "module") -> list[list[str]]:
    """The state-dict keys of each recombination unit, in module order."""
    keys = set(model.state_dict().keys())
    ordered = list(model.state_dict().keys())
    if unit == "entry":
        return [[k] for k in ordered]
    if unit != "module":
        raise ValueError(f"layer unit must be 'module' or 'entry', got {unit!r}")
    units: list[list[str]] = []
    for name, module in model.named_modules():
        local = [k for k, _ in module.named_parameters(recurse=False)] + [k for k, _ in module.named_buffers(recurse=False)]
        own = [full for full in (f"{name}.{k}" if name else k for k in local) if full in keys]
        if not own:
            continue
        if isinstance(module, _NORMS) and units:
            units[-1].extend(own)  # a normalisation layer moves with the layer before it
        else:
            units.append(own)
    covered = {k for u in units for k in u}
    units.extend([k] for k in ordered if k not in covered)  # state outside named modules (none in the registry)
    return units


def segment_of_units(num_units: int, partition: float) -> list[int]:
    """Segment index of each unit: layer j (1-based) is in segment ceil(j / (x N)) (Sec. 5.4.2);
    ``partition`` = x = 0 means every layer its own segment (plain FedMR)."""
    if partition == 0:
        return list(range(num_units))
    return [math.ceil(j / (partition * num_units)) for j in range(1, num_units + 1)]


def recombine(stacked: Weights, units: list[list[str]], segments: list[int], generator: torch.Generator) -> Weights:
    """Slot i of unit u receives model pi_s(i)'s unit u, with one random permutation pi_s of the
    m models per segment s (drawn in segment order from ``generator``)."""
    m = next(iter(stacked.values())).shape[0]
    perms: dict[int, torch.Tensor] = {}
    out = {}
    for unit, segment in zip(units, segments):
        if segment not in perms:
            perms[segment] = torch.randperm(m, generator=generator)
        for key in unit:
            out[key] = stacked[key][perms[segment].to(stacked[key].device)]
    return out
