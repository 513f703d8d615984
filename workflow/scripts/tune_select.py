"""Rule ``tune_select``: the trial whose validation score is best (fedbench.tuning.selection.select), from the
trials' histories; writes the chosen setting (JSON) and every trial's score (CSV)."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.tuning.selection import write_selection  # noqa: E402

w = smk.wildcards
chosen = write_selection(smk.config, w.experiment, w.algorithm, smk.input.histories, smk.output.chosen, smk.output.trials)
print(chosen)
