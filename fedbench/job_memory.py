"""The host memory a training job declares to its scheduler (Snakemake ``mem_mb``, SLURM ``--mem``).

A cell holds, besides the engine's working-memory budget (:mod:`fedbench.engine.memory`, which
chunked training and evaluation never exceed):

* the process itself: Python, torch and the dataset as one tensor (:data:`PROCESS_MB`);
* the algorithm's state across rounds, which grows with the number of clients: a personal
  model per client (Ditto, pFedMe, Local, FLT, FeMAM's levels), plus a copy of it while it is
  scored and one while its rows are replaced.  :data:`CLIENT_MODEL_COPIES` copies of one model
  per client bound it; global-model algorithms hold far less (their clients share one
  read-only view, ``fedbench.engine.weights.shared``).

The peaks Snakemake's ``benchmark:`` files record (``{results}/benchmarks/train/...``) against
these declarations are in the README's performance section.
"""

from __future__ import annotations

import functools
import json
import math

import torch

from fedbench.models import build_model

PROCESS_MB = 2000
CLIENT_MODEL_COPIES = 3
MB = 2**20


@functools.lru_cache(maxsize=64)
def _model_bytes(spec_json: str, input_shape: tuple[int, ...], num_classes: int) -> int:
    with torch.device("meta"):
        model = build_model(json.loads(spec_json), input_shape, num_classes)
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def model_bytes(spec: dict, input_shape, num_classes: int) -> int:
    """Bytes of one model's parameters and buffers (built on the meta device: no memory)."""
    return _model_bytes(json.dumps(spec, sort_keys=True), tuple(input_shape), num_classes)


def train_job_mb(model_spec: dict, input_shape, num_classes: int, num_clients: int, budget_mb: float) -> int:
    """``mem_mb`` of one training job: process + working budget + every client's model state."""
    state_mb = CLIENT_MODEL_COPIES * num_clients * model_bytes(model_spec, input_shape, num_classes) / MB
    return int(math.ceil(PROCESS_MB + budget_mb + state_mb))
