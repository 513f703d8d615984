"""Rule ``accuracy_curves``: training loss and test accuracy against round for one experiment
(the global and personalised models its published links name), mean ± std over seeds."""

import os

from common import config_orders, log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.results.figures import experiment_curves, load_histories, plot_training_curves  # noqa: E402

name = smk.wildcards.experiment
experiment = smk.config["experiments"][name]
histories = load_histories(sorted({os.path.dirname(path) for path in smk.input.histories}))
curves = experiment_curves(experiment, list(dict.fromkeys(histories["algorithm"])))
plot_training_curves(
    histories,
    smk.output.png,
    curves,
    orders=config_orders(smk.config),
    title=f"experiment {name} (protocol {experiment.get('protocol', 'mean_client_last')})",
)
print(f"{len(curves)} curves: {', '.join(c.label for c in curves)}")
