"""Checkpoint ``claims_look``: one look of the claims' sequential design (fedbench.results.claims.look_state):
the claims still open evaluated on the look's seeds; writes which stay open for the next look."""

import json

from common import log_to, use_threads

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])
use_threads(smk.threads)

from fedbench.data.partition_file import atomic_write  # noqa: E402
from fedbench.results.claims import look_state  # noqa: E402
from fedbench.results.published import load_published  # noqa: E402

w = smk.wildcards
open_claims = None
if smk.input.previous:
    with open(smk.input.previous[0]) as f:
        open_claims = json.load(f)["open"]
state = look_state(smk.config, smk.input.metrics, load_published(smk.input.published), w.paper, w.setting,
                   int(w.look), open_claims)
print(json.dumps(state, indent=1))
atomic_write(smk.output[0], lambda p: open(p, "w").write(json.dumps(state, indent=1)))
