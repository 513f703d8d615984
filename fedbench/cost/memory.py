"""The host memory a training job declares to its scheduler (Snakemake ``mem_mb``, SLURM ``--mem``).

A cell holds, besides the engine's working-memory budget (:mod:`fedbench.engine.memory`, which
chunked training and evaluation never exceed):

* the process itself: Python and torch (:data:`PROCESS_MB`), and the dataset as one float32
  tensor (:func:`cell_job_mb`, from the cell's shape);
* the algorithm's state across rounds, which grows with the number of clients: a personal
  model per client (Ditto, pFedMe, Local, FLT, FeMAM's levels), plus a copy of it while it is
  scored and one while its rows are replaced.  :data:`CLIENT_MODEL_COPIES` copies of one model
  per client bound it; global-model algorithms hold far less (their clients share one
  read-only view, ``fedbench.engine.weights.shared``).

The peaks Snakemake's ``benchmark:`` files record (``{results}/benchmarks/train/...``) against
these declarations are in reports/performance.md.
"""

from __future__ import annotations

import math

import torch

from fedbench.engine.batches import effective_batch
from fedbench.engine.memory import DEFAULT_CPU_BUDGET_MB, MemoryBudgetError, format_mb, training_bytes_per_client
from fedbench.cost.model_flops import model_cost
from fedbench.cost.shape import CellShape

PROCESS_MB = 2000
CLIENT_MODEL_COPIES = 3
MB = 2**20


def model_bytes(spec: dict, input_shape, num_classes: int) -> int:
    """Bytes of one model's parameters and buffers (built on the meta device: no memory)."""
    return model_cost(spec, input_shape, num_classes).state_bytes


def train_job_mb(model_spec: dict, input_shape, num_classes: int, num_clients: int, budget_mb: float, data_mb: float = 0.0) -> int:
    """``mem_mb`` of one training job: process + working budget + every client's model state + its data."""
    state_mb = CLIENT_MODEL_COPIES * num_clients * model_bytes(model_spec, input_shape, num_classes) / MB
    return int(math.ceil(PROCESS_MB + budget_mb + state_mb + data_mb))


def cell_job_mb(model_spec: dict, shape: CellShape, training: dict) -> int:
    """``mem_mb`` of one cell's job: :func:`train_job_mb` with the cell's budget, plus its dataset
    (``dataset_samples`` float32 rows of ``input_shape``)."""
    budget = training.get("memory_mb") or DEFAULT_CPU_BUDGET_MB
    data_mb = shape.dataset_samples * math.prod(shape.input_shape) * 4 / MB
    return train_job_mb(model_spec, shape.input_shape, shape.num_classes, shape.num_clients, budget, data_mb)


def check_one_client_fits(model_spec: dict, shape: CellShape, training: dict, device: str) -> None:
    """:class:`MemoryBudgetError` (with both figures in MB) when the cell's working budget cannot
    hold one client's training pass at its effective batch: the error the job would hit, before it
    runs.  On CUDA without ``memory_mb`` the budget is the free GPU memory, unknown until then."""
    budget_mb = training.get("memory_mb")
    if budget_mb is None and device == "cuda":
        return
    budget = (budget_mb or DEFAULT_CPU_BUDGET_MB) * MB
    from fedbench.models import build_model

    with torch.device("meta"):
        model = build_model(model_spec, shape.input_shape, shape.num_classes)
    batch = effective_batch(training["batch_size"], [shape.largest_client])
    need = training_bytes_per_client(model, shape.input_shape, batch, 2 + bool(training.get("momentum")))
    if need > budget:
        raise MemoryBudgetError(
            f"training.memory_mb = {format_mb(budget)} is too small for one client: one client needs {format_mb(need)} "
            f"(batch {batch}, model {format_mb(model_bytes(model_spec, shape.input_shape, shape.num_classes))}); "
            f"raise training.memory_mb (or lower batch_size)"
        )
