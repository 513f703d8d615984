"""Rules ``tuning_figure`` and ``claims_tuning_figure``: one tuned experiment's trials (every method's, or
those its claims compare), validation score against the tuned knobs."""

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.results.tuning_figures import load_trials, plot_sensitivity  # noqa: E402

trials = load_trials(smk.input.trials)
plot_sensitivity(trials, smk.output.png, title=smk.params.title)
print(trials.to_string())
