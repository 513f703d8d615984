"""Where a cell trains under ``device: auto``: the device a config names as ``cpu`` or ``cuda``
(:func:`device_kind`), and, on a machine with a GPU, the one the cost model estimates faster for
the cell (:func:`choose_device`)."""

from __future__ import annotations

import torch

from fedbench.cost import rates
from fedbench.cost.estimate import cell_cost
from fedbench.cost.shape import CellShape


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` for a config's ``device`` (``auto``: what this machine would use)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else "cpu"


def choose_device(spec: dict, shape: CellShape, table: dict | None = None) -> tuple[str, str]:
    """(``cpu`` or ``cuda``, why) for a cell under ``device: auto`` on a machine with a GPU: the CPU
    where :func:`~fedbench.cost.estimate.cell_cost` estimates it faster there (tiny models, whose rounds
    are launch- and bookkeeping-bound on a GPU), else the GPU.  The reason names both estimates and
    whether each rests on measured throughputs."""
    table = table or rates.throughputs()
    costs = {device: cell_cost(spec, shape, device, table) for device in ("cpu", "cuda")}
    choice = "cpu" if costs["cpu"].seconds < costs["cuda"].seconds else "cuda"

    def said(device: str) -> str:
        cost = costs[device]
        return f"{device} {cost.seconds:,.0f} s ({'calibrated' if cost.calibrated else 'uncalibrated'}: {cost.throughput})"

    verdict = "the CPU is estimated faster" if choice == "cpu" else "the GPU is estimated faster"
    return choice, f"device auto: {verdict}: {said('cpu')} vs {said('cuda')} (fedbench.cost.estimate.cell_cost)"
