"""Rule ``relatedness_figure``: the adjacency of an FLT / PCA+kM+HC run, raw and reordered by HC."""

import json
from pathlib import Path

import numpy as np
from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.results.clustering_figures import plot_adjacency  # noqa: E402

run_dir = Path(smk.input.metrics).parent
truth = json.loads(Path(smk.input.partition).read_text()).get("groups", {}).get("cluster")
w = smk.wildcards
plot_adjacency(
    np.load(run_dir / "adjacency.npy"), np.load(run_dir / "linkage.npy"), truth, smk.output.png,
    title=f"{w.algorithm} on {w.dataset} / {w.partition}, seed {w.seed}",
)
