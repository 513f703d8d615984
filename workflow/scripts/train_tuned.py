"""Rule ``train_tuned``: one cell at the setting tuning chose (``chosen.json``), on a final seed."""

import json
import os

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.config import Cell  # noqa: E402
from fedbench.pipeline import run_cell  # noqa: E402
from fedbench.tuning import apply_setting  # noqa: E402

w = smk.wildcards
cell = Cell(w.experiment, w.dataset, w.partition, w.model, w.algorithm, int(w.seed))
with open(smk.input.chosen) as f:
    chosen = json.load(f)
config = apply_setting(smk.config, w.experiment, w.algorithm, chosen["setting"])
run_cell(config, cell, smk.input.partition, os.path.dirname(smk.output.metrics), device=smk.config["device"])
