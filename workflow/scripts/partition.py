"""Rule ``partition``: build one partition (indices ``.npz`` + summary ``.json``)."""

from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.pipeline import build_partition  # noqa: E402

w = smk.wildcards
build_partition(smk.config, w.dataset, w.partition, int(w.seed), smk.output.npz, smk.output.json)
