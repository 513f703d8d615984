"""Rule ``train``: train and evaluate one cell; writes metrics.json, history.csv and clients.csv."""

import os

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

import sys  # noqa: E402

from fedbench.run.checkpoint import CheckpointError  # noqa: E402
from fedbench.config.cells import Cell  # noqa: E402
from fedbench.data.partition_file import PartitionFileError  # noqa: E402
from fedbench.run.job import cell_job  # noqa: E402
from fedbench.run.stages import run_cell  # noqa: E402

w = smk.wildcards
cell = Cell(w.experiment, w.dataset, w.partition, w.model, w.algorithm, int(w.seed))
try:
    run_cell(cell_job(smk.config, cell), smk.input.partition, os.path.dirname(smk.output.metrics))
except (CheckpointError, PartitionFileError) as error:  # a damaged file: one line naming it, no traceback
    sys.exit(f"fedbench: {error}")
