"""Evaluation protocols: which model is scored on which test data, at which round, averaged how.

The four papers disagree (see docs/fidelity.md and docs/original_code_notes.md §5), so the protocol
is part of every experiment.  A protocol reads the per-round ``history`` table that every
run records and returns the round whose numbers are reported plus those numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fedbench.registry.core import Registry


@dataclass(frozen=True)
class Protocol:
    description: str
    accuracy: str  # history column reported as the cell's accuracy
    macro_f1: str
    loss: str
    variance: str | None  # across-client variance column, if the protocol has one
    pick: str  # "last" round, "max" of the accuracy column, or "min_val_loss" (the round of least mean validation loss)

    def columns(self, scored: str = "personal") -> dict[str, str | None]:
        """History columns of the reported numbers: the protocol's own (``personal``: the models
        clients are scored with) or the global model's on the pooled test set (``global``)."""
        if scored == "personal":
            return {"accuracy": self.accuracy, "macro_f1": self.macro_f1, "loss": self.loss, "variance": self.variance}
        if scored == "global":
            return {"accuracy": "global_acc", "macro_f1": "global_f1", "loss": "global_loss", "variance": None}
        raise ValueError(f"scored must be 'personal' or 'global', got {scored!r}")

    def final(self, history: pd.DataFrame, scored: str = "personal", rounds: int | None = None) -> dict:
        """The reported round and numbers; ``rounds=T`` looks only at the first T rounds (pFedMT's
        "Accuracy (T = 100)" and "(T = 600)" columns come from one run)."""
        if rounds is not None:
            history = history[history["round"] <= rounds]
            if history.empty:
                raise ValueError(f"no evaluated round within the first {rounds}")
        columns = self.columns(scored)
        if self.pick == "last":
            round_ = int(history["round"].iloc[-1])
        elif self.pick == "min_val_loss":
            round_ = min_validation_round(history)
        else:
            values = history[columns["accuracy"]]
            if values.isna().all():
                raise ValueError(f"protocol needs column {columns['accuracy']!r}, which this algorithm does not produce")
            round_ = int(history.loc[values.idxmax(), "round"])
        row = history.set_index("round").loc[round_]
        out = {"round": round_}
        for key, column in columns.items():
            out[key] = None if column is None or column not in row or pd.isna(row[column]) else float(row[column])
        if self.pick == "min_val_loss":  # FeMAM reports the selected checkpoint and the last round
            last = history.iloc[-1]
            out["last_round"] = int(last["round"])
            for key in ("accuracy", "macro_f1"):
                column = columns[key]
                out[f"last_{key}"] = None if column not in last or pd.isna(last[column]) else float(last[column])
        return out


def min_validation_round(history: pd.DataFrame) -> int:
    """The evaluated round with the least mean (over clients) validation loss, the first on ties
    (FeMAM Sec. 5.1: "select the checkpoint with the minimum evaluation error"; code
    ``update_optimal``)."""
    if "val_loss_mean" not in history or history["val_loss_mean"].isna().all():
        raise ValueError("protocol femam needs the clients' validation loss (history column val_loss_mean): "
                         "use a partition with validation rows")
    return int(history.loc[history["val_loss_mean"].idxmin(), "round"])


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
    # FedMR (Hu et al. 2024, Sec. 5; notes §2.7): the global model (FedMR: the uniform mean of the
    # intermediate models; FedExP: the mean of the last two iterates) on the global test set,
    # evaluated every ``eval_every`` rounds (the code: 10).  Table 1's "±" is undefined in the paper;
    # the scorecard reports mean ± std over seeds of the final evaluation (``fedmr``) or of the best
    # evaluation (``fedmr_best``, the best-over-evaluations figure).
    "fedmr": Protocol(
        "the global model on the global test set, last evaluated round (FedMR Table 1; mean ± std over seeds)",
        "global_acc", "global_f1", "global_loss", None, "last",
    ),
    "fedmr_best": Protocol(
        "the global model on the global test set, best evaluated round (FedMR, best-over-evaluations reading of Table 1)",
        "global_acc", "global_f1", "global_loss", None, "max",
    ),
}
_PROTOCOLS["femam"] = Protocol(
    "unweighted mean over clients of each client's model on its own test split (accuracy; macro-F1 per "
    "client, then averaged over clients), at the round of least mean validation loss; the last round's too (FeMAM)",
    "acc_mean", "f1_mean", "loss_mean", "acc_var", "min_val_loss",
)
for _name, _protocol in _PROTOCOLS.items():
    PROTOCOLS.register(_name)(_protocol)
