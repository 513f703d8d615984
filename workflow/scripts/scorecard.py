"""Rule ``scorecard``: every published number the experiments link to, next to the reproduction,
and the coverage per paper and table (planned: the whole config's grid, ``only_experiments`` aside)."""

import os

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.planning.missing_data import left_out_table  # noqa: E402
from fedbench.results.coverage import total_line, write_coverage  # noqa: E402
from fedbench.results.published import load_published  # noqa: E402
from fedbench.results.scorecard import scorecard, write_scorecard  # noqa: E402

published = load_published(smk.input.published)
run_dirs = sorted({os.path.dirname(path) for path in smk.input.metrics})
card = write_scorecard(smk.config, run_dirs, published, smk.output.csv, smk.output.md)
if smk.params.left_out:  # missing_data: skip: what the scorecard lacks, and why
    with open(smk.output.md, "a") as md:
        md.write("\n## Cells left out\n\n" + left_out_table(smk.params.left_out))
planned = scorecard({**smk.config, "only_experiments": None}, [], published)
coverage = write_coverage(published, [planned, card], smk.output.coverage_csv, smk.output.coverage_md, smk.output.coverage_rst)
print(card.to_string())
print(coverage.to_string())
print(total_line(coverage))
