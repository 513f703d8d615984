"""Layer 3, the pure cost model: a cell's work, time and memory before it runs (no files but the
throughput table).  May import layers 0-3, never an algorithm module: an algorithm's work is what its
class declares (:mod:`fedbench.registry.workload`, read through the registry), a model's throughput family what its
registration declares (:mod:`.families`); the model names no method and no architecture.

* :mod:`.shape` -- a cell's clients, samples and input, from its partition's summary or the dataset's facts;
* :mod:`.model_flops` -- a model's FLOPs per sample and its bytes;
* :mod:`.work` -- what a cell trains and scores: samples, steps, FLOPs;
* :mod:`.server` -- the work FLOPs do not count: a relatedness step, an in-place average, a clustering;
* :mod:`.families` -- the throughput family a model declares, the model each family is benchmarked with;
* :mod:`.rates` -- the throughput table: a family's FLOP/s on a device, the fixed overheads;
* :mod:`.estimate` -- a cell's seconds, FLOPs and memory (``cell_cost``), a job's ``runtime``;
* :mod:`.device` -- the device ``auto`` means, and the one a cell is estimated faster on;
* :mod:`.memory` -- a job's host memory.

The names below are importable from the package itself, each loaded from its module on first use."""

import importlib

PUBLIC = {
    "CellCost": "estimate", "cell_cost": "estimate", "runtime_minutes": "estimate",
    "choose_device": "device", "device_kind": "device",
    "CellShape": "shape", "estimated_shape": "shape", "summary_shape": "shape",
    "OVERHEADS": "rates", "THROUGHPUTS": "rates", "throughputs": "rates",
    "model_cost": "model_flops",
}
__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{PUBLIC[name]}"), name)
