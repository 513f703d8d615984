"""Rule ``left_out``: the cells ``missing_data: skip`` left out, each with the reason (CSV and Markdown)."""

from pathlib import Path

import pandas as pd
from common import log_to

smk = snakemake  # noqa: F821  (injected by Snakemake's script directive)
log_to(smk.log[0])

from fedbench.planning.missing_data import LEFT_OUT_COLUMNS, left_out_table  # noqa: E402

rows = smk.params.rows
pd.DataFrame(rows, columns=list(LEFT_OUT_COLUMNS)).to_csv(smk.output.csv, index=False)
Path(smk.output.md).write_text(left_out_table(rows))
print(f"{len(rows)} cells left out")
