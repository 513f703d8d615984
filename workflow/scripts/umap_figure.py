"""Rule ``umap_figure``: UMAP of the client signatures of an FLT run, coloured by ground truth."""

import json
from pathlib import Path

import numpy as np
from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.results.clustering_figures import plot_umap_signatures  # noqa: E402

run_dir = Path(smk.input.metrics).parent
truth = json.loads(Path(smk.input.partition).read_text()).get("groups", {}).get("cluster")
w = smk.wildcards
plot_umap_signatures(
    np.load(run_dir / "centres_2d.npy"), truth, smk.output.png,
    title=f"{w.algorithm} signatures on {w.dataset} / {w.partition}, seed {w.seed}",
)
