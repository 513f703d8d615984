"""Rule ``scorecard``: every published number the experiments link to, next to the reproduction."""

import os

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.results.published import load_published  # noqa: E402
from fedbench.results.scorecard import write_scorecard  # noqa: E402

run_dirs = sorted({os.path.dirname(path) for path in smk.input.metrics})
card = write_scorecard(smk.config, run_dirs, load_published(smk.input.published), smk.output.csv, smk.output.md)
print(card.to_string())
