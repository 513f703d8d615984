"""Evaluation protocols: which model is scored on which test data, at which round, averaged how.

The four papers disagree (see docs/fidelity.md and original_code_notes §5), so the protocol
is part of every experiment.  A protocol reads the per-round ``history`` table that every
run records and returns the round whose numbers are reported plus those numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fedbench.registry import Registry


@dataclass(frozen=True)
class Protocol:
    description: str
    accuracy: str  # history column reported as the cell's accuracy
    macro_f1: str
    loss: str
    variance: str | None  # across-client variance column, if the protocol has one
    pick: str  # "last" round or "max" of the accuracy column

    def select_round(self, history: pd.DataFrame) -> int:
        if self.pick == "last":
            return int(history["round"].iloc[-1])
        values = history[self.accuracy]
        if values.isna().all():
            raise ValueError(f"protocol needs column {self.accuracy!r}, which this algorithm does not produce")
        return int(history.loc[values.idxmax(), "round"])

    def final(self, history: pd.DataFrame) -> dict:
        round_ = self.select_round(history)
        row = history.set_index("round").loc[round_]
        out = {"round": round_}
        for key in ("accuracy", "macro_f1", "loss", "variance"):
            column = getattr(self, key)
            out[key] = None if column is None or pd.isna(row[column]) else float(row[column])
        return out


PROTOCOLS: Registry = Registry("evaluation protocol")

_PROTOCOLS = {
    "mean_client_last": Protocol(
        "unweighted mean over clients of each client's model on its own test split, last round (FLT; FeMAM without validation)",
        "acc_mean", "f1_mean", "loss_mean", "acc_var", "last",
    ),
    "pooled_max": Protocol(
        "sum of correct / sum of test samples over clients' own test splits, best round (pFedMe, pFedMT)",
        "acc_pooled", "f1_mean", "loss_mean", "acc_var", "max",
    ),
    "global_last": Protocol(
        "the global model on the pooled test set, last round (FedMR)",
        "global_acc", "global_f1", "global_loss", None, "last",
    ),
}
for _name, _protocol in _PROTOCOLS.items():
    PROTOCOLS.register(_name)(_protocol)
