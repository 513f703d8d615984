"""Rule ``pretrain_encoder``: pretrain one FLT ConvAE encoder (``.pt`` + loss curve CSV and PNG)."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.algorithms.flt_encoders import plot_loss_curve, pretrain_encoder  # noqa: E402
from fedbench.run.provenance import ENCODER_SCRIPTS, encoder_roots, provenance  # noqa: E402

entry = smk.config["encoders"][smk.wildcards.encoder]
record = provenance(encoder_roots(smk.config["datasets"][entry["dataset"]]), ENCODER_SCRIPTS)
pretrain_encoder(smk.config, smk.wildcards.encoder, smk.output.pt, smk.output.csv, provenance=record)
plot_loss_curve(smk.output.csv, smk.output.png)
