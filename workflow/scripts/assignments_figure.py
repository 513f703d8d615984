"""Rule ``assignments_figure``: FeSEM's or IFCA's cluster of every client over the rounds."""

import json
from pathlib import Path

import pandas as pd
from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.results.clustering_figures import plot_assignments  # noqa: E402

run_dir = Path(smk.input.metrics).parent
truth = json.loads(Path(smk.input.partition).read_text()).get("groups", {}).get("cluster")
w = smk.wildcards
plot_assignments(
    pd.read_csv(run_dir / "assignments.csv"), truth, smk.output.png,
    title=f"{w.algorithm} cluster assignments on {w.dataset} / {w.partition}, seed {w.seed}",
)
