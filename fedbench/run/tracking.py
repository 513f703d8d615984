"""Live tracking of a running grid with TensorBoard (optional; ``tensorboard: true`` in the config).

Every cell writes its evaluated rounds as TensorBoard scalars while it trains -- each numeric column
of its ``history.csv`` row, tagged by the column's name, at step = round -- to one TensorBoard run
per cell: ``<results>/tensorboard/<the run directory under results>/<code hash, 12 digits>``, so a
rerun with changed code is a new run beside the old one.  ``history.csv`` stays the source of truth
(the report, tables and claims read it, never the event files).  Watch a grid with::

    tensorboard --logdir results/tensorboard

The writer is ``torch.utils.tensorboard.SummaryWriter``, which needs the ``tensorboard`` package
(``pip install -e '.[tensorboard]'``); without it a config that asks for tracking fails at the
cell's start with that instruction.  A cell resumed from its checkpoint appends the rounds after
it to the same run (a round logged before the crash and again after it appears twice at its step).
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path

import numpy as np

TAG_GROUPS = {  # history column prefix -> TensorBoard section, so that the dashboard groups like with like
    "acc": "accuracy", "global_": "global", "val_": "validation", "train_": "training", "downlink": "bytes",
    "uplink": "bytes", "ari": "clustering", "nmi": "clustering", "adj_": "clustering",
}


def tensorboard_dir(results: str | Path, out: str | Path, code_hash: str) -> Path:
    """Where a cell's TensorBoard run goes: ``<results>/tensorboard/<out relative to results>/<hash>``;
    a run directory outside ``results`` (a test's) gets ``<out>/tensorboard/<hash>``."""
    results, out = Path(results), Path(out)
    try:
        relative = out.resolve().relative_to(results.resolve())
    except ValueError:
        return out / "tensorboard" / code_hash[:12]
    return results / "tensorboard" / relative / code_hash[:12]


def tag(column: str) -> str:
    """``section/column`` for a history column (e.g. ``bytes/uplink_bytes_total``)."""
    for prefix, section in TAG_GROUPS.items():
        if column.startswith(prefix):
            return f"{section}/{column}"
    return f"other/{column}"


class TensorBoardLog:
    """One cell's TensorBoard run: :meth:`add_row` writes a history row's numbers at its round."""

    def __init__(self, logdir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # torch's writer imports the tensorboard package
            raise ImportError("tensorboard: true needs the tensorboard package: pip install -e '.[tensorboard]' "
                              f"(or set tensorboard: false); {error}") from None
        self.logdir = Path(logdir)
        self.writer = SummaryWriter(log_dir=str(self.logdir))

    def add_row(self, row: dict) -> None:
        step = int(row["round"])
        for column, value in row.items():
            if column == "round" or isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                continue
            if math.isfinite(float(value)):
                self.writer.add_scalar(tag(column), float(value), step)
        self.writer.flush()  # a running grid shows each round as soon as it is scored

    def close(self) -> None:
        self.writer.close()


__all__ = ["TensorBoardLog", "tag", "tensorboard_dir"]
