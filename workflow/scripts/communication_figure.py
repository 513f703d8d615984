"""Rule ``communication_figure``: test accuracy against megabytes sent and against round for one
experiment (mean ± std over seeds), and the rounds and megabytes each method took to reach the
accuracy targets (90 % of each run's own final accuracy, and every target the experiment's claims name)."""

import os

from common import config_orders, log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.data.partition_file import atomic_write  # noqa: E402
from fedbench.results.convergence import (  # noqa: E402
    TARGET_METRICS, plot_accuracy_vs_bytes, target_markdown, target_table,
)

name = smk.wildcards.experiment
experiment = smk.config["experiments"][name]
run_dirs = sorted({os.path.dirname(path) for path in smk.input.histories})
targets = [{"target_fraction": 0.9}]
for claim in (smk.config.get("claims") or {}).values():
    if claim["experiment"] == name and claim.get("metric") in TARGET_METRICS:
        spec = {key: claim[key] for key in ("target", "target_fraction") if key in claim}
        if spec not in targets:
            targets.append(spec)
orders = config_orders(smk.config)
plot_accuracy_vs_bytes(run_dirs, smk.output.png, orders=orders,
                       title=f"experiment {name} (protocol {experiment.get('protocol', 'mean_client_last')})")
table = target_table(run_dirs, targets, orders=orders)
atomic_write(smk.output.csv, lambda p: table.to_csv(p, index=False))
atomic_write(smk.output.md, lambda p: open(p, "w", encoding="utf-8").write(
    target_markdown(table, f"Rounds and megabytes to target: experiment {name}")))
print(f"{len(run_dirs)} runs, targets: {targets}")
