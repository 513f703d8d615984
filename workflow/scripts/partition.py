"""Rule ``partition``: build one partition (indices ``.npz`` + summary ``.json``)."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.run.partition_job import build_partition  # noqa: E402

w = smk.wildcards
build_partition(smk.config, w.dataset, w.partition, int(w.seed), smk.output.npz, smk.output.json)
