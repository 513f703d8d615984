"""Rules ``paper_results_table`` and ``paper_scorecard``: one paper's rows of the results table or
the scorecard (its experiments', ``params.experiments``), as CSV and Markdown for its report category."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.results.papers import write_paper_rows  # noqa: E402

kind = "scorecard" if smk.rule == "paper_scorecard" else "results"
rows = write_paper_rows(kind, smk.input.csv, smk.params.experiments, smk.output.csv, smk.output.md)
print(f"{smk.wildcards.paper}: {len(rows)} {kind} rows of experiments {', '.join(smk.params.experiments)}")
