"""Rule ``clustering_figure``: one figure of a clustering run's artifacts (``params.kind``: the
relatedness graph, the UMAP signatures or the cluster assignments), with the partition's
ground-truth clusters."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)  # torch, OpenMP/MKL/OpenBLAS and numba pools: the cores Snakemake gave the job

from fedbench.results import clustering_figures as figures  # noqa: E402

run = Path(smk.input.metrics).parent
truth = json.loads(Path(smk.input.partition).read_text()).get("groups", {}).get("cluster")
w = smk.wildcards
title = f"{w.algorithm} on {w.dataset} / {w.partition}, seed {w.seed}"
if smk.params.kind == "adjacency":
    figures.plot_adjacency(np.load(run / "adjacency.npy"), np.load(run / "linkage.npy"), truth, smk.output.png, title)
elif smk.params.kind == "umap":
    figures.plot_umap_signatures(np.load(run / "centres_2d.npy"), truth, smk.output.png, f"signatures: {title}")
else:
    figures.plot_assignments(pd.read_csv(run / "assignments.csv"), truth, smk.output.png, f"assignments: {title}")
