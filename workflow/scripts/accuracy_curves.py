"""Rule ``accuracy_curves``: training loss and test accuracy against round for one experiment
(the global and personalised models its published links name), mean ± std over seeds; test accuracy
against megabytes sent, and the rounds and megabytes each method took to reach the accuracy targets."""

import os

from common import config_orders, log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.data.partition_file import atomic_write  # noqa: E402
from fedbench.results.convergence import (  # noqa: E402
    TARGET_METRICS, plot_accuracy_vs_bytes, target_markdown, target_table,
)
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

# The same runs against the megabytes they sent, and the rounds and megabytes to the accuracy targets
# (90 % of each run's own final accuracy, and every target the experiment's claims name).
run_dirs = sorted({os.path.dirname(path) for path in smk.input.histories})
targets = [{"target_fraction": 0.9}]
for claim in (smk.config.get("claims") or {}).values():
    if claim["experiment"] == name and claim.get("metric") in TARGET_METRICS:
        spec = {key: claim[key] for key in ("target", "target_fraction") if key in claim}
        if spec not in targets:
            targets.append(spec)
orders = config_orders(smk.config)
plot_accuracy_vs_bytes(run_dirs, smk.output.bytes, orders=orders,
                       title=f"experiment {name} (protocol {experiment.get('protocol', 'mean_client_last')})")
table = target_table(run_dirs, targets, orders=orders)
atomic_write(smk.output.to_target_csv, lambda p: table.to_csv(p, index=False))
atomic_write(smk.output.to_target_md, lambda p: open(p, "w", encoding="utf-8").write(
    target_markdown(table, f"Rounds and megabytes to target: experiment {name}")))
print(f"{len(run_dirs)} runs, targets: {targets}")
