"""Rule ``paper_claims``: one paper's claims (config ``claims:``) evaluated on the runs the looks read,
at the paper's setting and tuned, as CSV and Markdown."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.results.claims import write_claims  # noqa: E402
from fedbench.results.published import load_published  # noqa: E402

table = write_claims(smk.config, smk.input.metrics, load_published(smk.input.published),
                     smk.output.csv, smk.output.md, paper=smk.wildcards.paper, tuned_paths=smk.input.tuned_metrics)
print(table.to_string())
