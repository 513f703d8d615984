"""Selection of a tuned setting (:mod:`fedbench.tuning.trials`): every trial's score on the
validation rows at its last evaluated round (:func:`trial_score`, never a test column), the
setting with the best mean over the tuning seeds (:func:`select`), and the selection record
``chosen.json`` with the table ``trials.csv`` (:func:`write_selection`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.tuning.trials import (
    SELECTION_METRICS,
    setting_label,
    trial_settings,
    tune_block,
)

"""History columns selection may read (the clients' models on their validation rows), and their direction."""


def trial_score(history_path: str | Path, metric: str) -> float:
    """``metric`` (a validation column) at the last evaluated round of one trial; NaN where the run
    diverged or never scored its validation rows."""
    history = pd.read_csv(history_path)
    if metric not in history:
        return math.nan
    scored = history[metric].dropna()
    if scored.empty or int(history["round"].iloc[-1]) != int(history.loc[scored.index[-1], "round"]):
        return math.nan  # the last row has no score: the run diverged there
    return float(scored.iloc[-1])


def select(scores: pd.DataFrame, metric: str) -> pd.Series:
    """The chosen trial from ``scores`` (columns trial, seed, score): the best mean over the tuning
    seeds in the metric's direction; a trial with a diverged seed ranks last; ties go to the lower
    trial number (the configured setting first).  Returns the per-trial table's chosen row."""
    if metric not in SELECTION_METRICS:
        raise ValueError(f"unknown selection metric {metric!r}; valid choices: {', '.join(SELECTION_METRICS)}")
    table = per_trial(scores)
    sign = 1.0 if SELECTION_METRICS[metric] == "max" else -1.0
    key = (sign * table["score"]).fillna(-math.inf)
    best = key.max()
    return table[key == best].sort_values("trial").iloc[0]


def per_trial(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean score per trial over the tuning seeds (NaN if any seed diverged), with the seeds' count."""
    grouped = scores.groupby("trial")["score"]
    return pd.DataFrame({"trial": grouped.size().index, "score": grouped.mean().where(~grouped.apply(lambda s: s.isna().any())),
                         "seeds": grouped.size().to_numpy()}).reset_index(drop=True)


def trial_path_keys(path: str | Path) -> tuple[int, int]:
    """(trial, seed) of a trial's file, from its run directory ``.../trial<T>/seed<S>/``."""
    parts = Path(path).parts
    return int(parts[-3].removeprefix("trial")), int(parts[-2].removeprefix("seed"))


def write_selection(config: dict, experiment: str, algorithm: str, history_paths, chosen_path, trials_path) -> dict:
    """Score every trial on its validation rows (:func:`trial_score`), choose one (:func:`select`), and
    write ``trials.csv`` (trial, its knobs, mean score, seeds, chosen) and ``chosen.json`` (the setting)."""
    metric = tune_block(config, experiment)["metric"]
    scores = pd.DataFrame([(*trial_path_keys(p), trial_score(p, metric)) for p in history_paths],
                          columns=["trial", "seed", "score"])
    chosen = select(scores, metric)
    settings = trial_settings(config, experiment, algorithm)
    table = per_trial(scores)
    knobs = pd.DataFrame([{**settings[t]["training"], **settings[t]["algorithm"]} for t in table["trial"]])
    table = pd.concat([table[["trial"]], knobs, table[["score", "seeds"]]], axis=1)
    table["setting"] = [setting_label(settings[t]) for t in table["trial"]]
    table["chosen"] = table["trial"] == chosen["trial"]
    table.insert(0, "algorithm", algorithm)
    table["metric"] = metric
    record = {"experiment": experiment, "algorithm": algorithm, "metric": metric, "trial": int(chosen["trial"]),
              "score": None if pd.isna(chosen["score"]) else float(chosen["score"]),
              "setting": settings[int(chosen["trial"])], "label": setting_label(settings[int(chosen["trial"])]),
              "configured": settings[0], "trials": len(settings), "seeds": sorted(scores["seed"].unique().tolist())}
    atomic_write(trials_path, lambda p: table.to_csv(p, index=False))
    atomic_write(chosen_path, lambda p: Path(p).write_text(json.dumps(record, indent=1)))
    return record
