"""Rule ``partition_heatmap``: client x class heatmap of one partition's training samples."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.results.figures import plot_partition_heatmap  # noqa: E402

plot_partition_heatmap(smk.input.json, smk.output.png, split="train")
