"""Rule ``gamma_sweep_figure``: FLT's relatedness graph and accuracy against the threshold γ, both
distances, for one experiment block (fedbench.results.gamma_sweep)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.data.partition_file import atomic_write  # noqa: E402
from fedbench.results import gamma_sweep  # noqa: E402

truth_of = {}
for path in smk.input.partitions:
    seed = int(Path(path).stem.removeprefix("seed"))
    truth_of[seed] = json.loads(Path(path).read_text()).get("groups", {}).get("cluster")
runs = []
for path in smk.input.metrics:
    metrics = json.loads(Path(path).read_text())
    cell = metrics["cell"]
    runs.append({
        "entry": smk.params.entries[cell["algorithm"]], "seed": int(cell["seed"]),
        "centres_2d": np.load(Path(path).parent / "centres_2d.npy"), "truth": truth_of[int(cell["seed"])],
        "accuracy": metrics["final"]["accuracy"],
    })
graph = gamma_sweep.sweep_runs(runs)
accuracy = gamma_sweep.accuracy_points(runs)
w = smk.wildcards
gamma_sweep.plot_gamma_sweep(graph, accuracy, smk.output.png, f"FLT vs γ: {w.dataset} / {w.partition} / {w.model} ({w.experiment})")
table = pd.concat([graph.assign(kind="graph"), accuracy.assign(kind="run")], ignore_index=True)
atomic_write(smk.output.csv, lambda p: table.to_csv(p, index=False))
print(f"gamma sweep: {len(runs)} FLT runs, {len(graph)} graph rows")
