"""Rules ``train_cell``, ``tune_trial`` and ``train_tuned``: train and evaluate one run as the plan resolved it
(``params.job``: the cell with its trial's or chosen setting applied, the device and why,
fedbench.run.job.CellJob); writes metrics.json, history.csv and clients.csv.  A tuned run whose chosen
setting has the paper-setting run's numbers (``params.reuse``) copies that run where it finished with the
code now (the same seed, settings and code give the same numbers)."""

import logging
import os
import sys
from pathlib import Path

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.data.partition_file import PartitionFileError  # noqa: E402
from fedbench.run.checkpoint import CheckpointError  # noqa: E402
from fedbench.run.job import CellJob  # noqa: E402
from fedbench.run.reuse import copy_run, finished_with_current_code  # noqa: E402
from fedbench.run.stages import run_cell  # noqa: E402

job = CellJob.from_params(smk.params.job)
out_dir = os.path.dirname(smk.output.metrics)
reuse = smk.params.get("reuse")  # train_tuned only
if reuse is not None and finished_with_current_code(Path(reuse), job.spec):
    logging.getLogger("fedbench").info("tuning chose the configured setting: copying the paper-setting run %s", reuse)
    copy_run(Path(reuse), Path(out_dir))
    sys.exit(0)
try:
    run_cell(job, smk.input.partition, out_dir)
except (CheckpointError, PartitionFileError) as error:  # a damaged file: one line naming it, no traceback
    sys.exit(f"fedbench: {error}")
