"""Rule ``femam_structure_figure``: a FeMAM run's discovered levels beside the partition's ground
truth, and its number of levels against rounds."""

import json
from pathlib import Path

from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.results import femam_figures  # noqa: E402

run = Path(smk.input.metrics).parent
structure = json.loads((run / "structure.json").read_text())
scores = json.loads(Path(smk.input.metrics).read_text()).get("structure_scores")
truth = json.loads(Path(smk.input.partition).read_text()).get("groups", {})
truth = {k: v for k, v in truth.items() if k != "team"}
w = smk.wildcards
title = f"{w.algorithm} on {w.dataset} / {w.partition}, seed {w.seed}"
femam_figures.plot_structure(structure, truth, smk.output.structure, title, scores)
femam_figures.plot_levels(structure, smk.output.levels, title)
