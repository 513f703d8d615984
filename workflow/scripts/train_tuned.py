"""Rule ``train_tuned``: one cell at the setting tuning chose (``chosen.json``), on a final seed.  Where
tuning chose the configured setting and the paper-setting run of the same seed has finished with the
code now, its files are copied instead (the same seed, settings and code give the same numbers)."""

import json
import logging
import os
from pathlib import Path

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.config.cells import Cell  # noqa: E402
from fedbench.run.job import cell_job  # noqa: E402
from fedbench.run.stages import run_cell  # noqa: E402
from fedbench.tuning.trials import apply_setting  # noqa: E402
from fedbench.run.reuse import copy_run, reusable_paper_run

w = smk.wildcards
cell = Cell(w.experiment, w.dataset, w.partition, w.model, w.algorithm, int(w.seed))
with open(smk.input.chosen) as f:
    chosen = json.load(f)
config = apply_setting(smk.config, w.experiment, w.algorithm, chosen["setting"])
out_dir = os.path.dirname(smk.output.metrics)
paper_run = reusable_paper_run(smk.config, config, cell)
if paper_run is not None:
    logging.getLogger("fedbench").info("tuning chose the configured setting: copying the paper-setting run %s", paper_run)
    copy_run(paper_run, Path(out_dir))
else:
    run_cell(cell_job(config, cell), smk.input.partition, out_dir)
