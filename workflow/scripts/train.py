"""Rules ``train_cell``, ``tune_trial`` and ``train_tuned``: train and evaluate one run as the plan resolved it
(``params.job``: its kind, cell, trial and device); writes metrics.json, history.csv and clients.csv.  A
tuning trial trains at the trial's setting; a tuned run at the setting tuning chose (``chosen.json``), or,
where that is the configured setting and the paper-setting run of the same seed has finished with the code
now, copies that run (the same seed, settings and code give the same numbers)."""

import json
import logging
import os
from pathlib import Path

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

import sys  # noqa: E402

from fedbench.config.cells import Cell  # noqa: E402
from fedbench.data.partition_file import PartitionFileError  # noqa: E402
from fedbench.run.cell import run_cell  # noqa: E402
from fedbench.run.checkpoint import CheckpointError  # noqa: E402
from fedbench.run.reuse import copy_run, reusable_paper_run  # noqa: E402
from fedbench.tuning.trials import apply_setting, trial_config  # noqa: E402

job = smk.params.job
cell = Cell(**job["cell"])
out_dir = os.path.dirname(smk.output.metrics)
config = smk.config
if job["kind"] == "trial":
    config = trial_config(config, cell.experiment, cell.algorithm, job["trial"])
elif job["kind"] == "tuned":
    with open(smk.input.chosen) as f:
        config = apply_setting(config, cell.experiment, cell.algorithm, json.load(f)["setting"])
    paper_run = reusable_paper_run(smk.config, config, cell)
    if paper_run is not None:
        logging.getLogger("fedbench").info("tuning chose the configured setting: copying the paper-setting run %s", paper_run)
        copy_run(paper_run, Path(out_dir))
        sys.exit(0)
try:
    run_cell(config, cell, smk.input.partition, out_dir, device=job["device"])
except (CheckpointError, PartitionFileError) as error:  # a damaged file: one line naming it, no traceback
    sys.exit(f"fedbench: {error}")
