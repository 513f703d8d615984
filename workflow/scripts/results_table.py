"""Rule ``results_table``: mean ± std over seeds of every cell, as CSV and Markdown; with
``only_experiments``, the finished runs of the other experiments are merged in."""

from common import config_orders, log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.results.tables import write_tables  # noqa: E402

runs = [*smk.input.metrics, *smk.params.left_out]  # this invocation's cells and the other experiments' on disk
summary = write_tables(runs, smk.output.csv, smk.output.md, orders=config_orders(smk.config))
print(f"{len(summary)} rows from {len(runs)} runs ({len(smk.params.left_out)} of experiments outside only_experiments)")
