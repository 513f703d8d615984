"""Rule ``accuracy_curves``: the protocol's accuracy against round for one experiment, mean ± std over seeds."""

import os

from common import config_orders, log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.protocols import PROTOCOLS  # noqa: E402
from fedbench.results.figures import load_histories, plot_accuracy_curves  # noqa: E402

experiment = smk.wildcards.experiment
histories = load_histories(sorted({os.path.dirname(path) for path in smk.input.histories}))
protocol = smk.config["experiments"][experiment].get("protocol", "mean_client_last")
plot_accuracy_curves(
    histories,
    smk.output.png,
    metric=PROTOCOLS[protocol].accuracy,  # the history column the protocol reports
    orders=config_orders(smk.config),
    title=f"experiment {experiment} (protocol {protocol})",
)
