"""Rule ``tune_trial``: one tuning trial -- the cell at the trial's setting on a tuning seed, with the
tune block's share of every client's training rows held out as validation rows (fedbench.tuning.trials)."""

import os

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.config.cells import Cell  # noqa: E402
from fedbench.run.job import cell_job  # noqa: E402
from fedbench.run.stages import run_cell  # noqa: E402
from fedbench.tuning.trials import trial_config  # noqa: E402

w = smk.wildcards
cell = Cell(w.experiment, w.dataset, w.partition, w.model, w.algorithm, int(w.seed))
config = trial_config(smk.config, w.experiment, w.algorithm, int(w.trial))
run_cell(cell_job(config, cell), smk.input.partition, os.path.dirname(smk.output.metrics))
