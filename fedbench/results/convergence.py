"""How fast each method gets there: rounds and bytes to a target accuracy, and accuracy against bytes.

A run's ``history.csv`` holds its evaluated rounds with the bytes sent so far
(``downlink_bytes_total + uplink_bytes_total``, :mod:`fedbench.engine.traffic`).  The target is an
accuracy of the protocol's accuracy column: absolute (``target``, in %) or a fraction of the run's
own final accuracy, the protocol's reported number (``target_fraction``).

Interpolation (:func:`reach`).  Let ``r_j`` be the first evaluated round whose accuracy ``a_j`` is at
or above the target ``tau``.  With an evaluated round before it, accuracy is taken as linear between
``(r_{j-1}, a_{j-1})`` and ``(r_j, a_j)``: it crosses ``tau`` at ``r* = r_{j-1} + (tau - a_{j-1}) /
(a_j - a_{j-1}) * (r_j - r_{j-1})``, and the **rounds to target** are ``ceil(r*)``, the first whole
round at or after the crossing (exactly ``r_j`` where every round is evaluated).  The **bytes to
target** are the cumulative bytes at that round, linear between the two rows' totals (exact where
every round is evaluated).  Where the first evaluated round already reaches the target, it is
``r_0`` and its bytes (nothing earlier to interpolate from).  A run that never reaches the target
(or diverged) gives NaN: "not reached".  The first crossing counts even if accuracy later falls
back below the target.

At the horizon (``at_horizon``, what the claims read by default): a run that never reaches the target
counts its last evaluated round ``T`` and the bytes sent by then, so a claim compares the *restricted*
time to target ``min(tau, T)`` -- the survival-analysis restricted mean, whose mean over seeds is an
unbiased estimate of ``E[min(tau, T)]`` -- instead of dropping the seed: a method that never gets there
within the run is not left out of the comparison it loses.  A diverged run stays NaN.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fedbench.data.partition_file import atomic_write
from fedbench.registry.protocols import PROTOCOLS
from fedbench.results.tables import order_rows

MEGABYTE = 1e6  # decimal megabytes, as the report states them
TARGET_METRICS = ("rounds_to_target", "mb_to_target", "client_mb_to_target")
"""Claim metrics of time to a target, fewer is better: rounds, megabytes sent (every client, both
directions), megabytes per client (the mean over the federation's clients)."""
PANEL = ["dataset", "partition", "model"]


def cumulative_bytes(history: pd.DataFrame) -> pd.Series:
    """Bytes sent from round 1 to each row's round, both directions, all clients (NaN for a history
    written before bytes were counted)."""
    if "downlink_bytes_total" not in history:
        return pd.Series(np.nan, index=history.index)
    return history["downlink_bytes_total"].astype(float) + history["uplink_bytes_total"].astype(float)


def reach(rounds: Sequence[float], accuracy: Sequence[float], sent: Sequence[float], tau: float) -> tuple[float, float]:
    """(rounds, bytes) to reach accuracy ``tau`` by the module's rule; (NaN, NaN) when never reached.
    ``rounds``, ``accuracy`` and ``sent`` (cumulative bytes) are the evaluated rows in order of round;
    rows without an accuracy are skipped."""
    r, a, b = (np.asarray(v, float) for v in (rounds, accuracy, sent))
    keep = np.isfinite(a)
    r, a, b = r[keep], a[keep], b[keep]
    order = np.argsort(r, kind="stable")
    r, a, b = r[order], a[order], b[order]
    above = np.flatnonzero(a >= tau)
    if not len(above):
        return math.nan, math.nan
    j = int(above[0])
    if j == 0:
        return float(r[0]), float(b[0])
    crossing = r[j - 1] + (tau - a[j - 1]) / (a[j] - a[j - 1]) * (r[j] - r[j - 1])
    whole = float(min(max(math.ceil(crossing - 1e-9), r[j - 1] + 1), r[j]))
    sent_then = b[j - 1] + (whole - r[j - 1]) / (r[j] - r[j - 1]) * (b[j] - b[j - 1])
    return whole, float(sent_then)


def target_threshold(history: pd.DataFrame, protocol: str, target: float | None = None,
                     fraction: float | None = None) -> float:
    """The target as a fraction (the history's unit): ``target`` % or ``fraction`` of the run's final accuracy."""
    if (target is None) == (fraction is None):
        raise ValueError("give exactly one of target (accuracy %) and target_fraction")
    if target is not None:
        return target / 100
    final = PROTOCOLS[protocol].final(history)["accuracy"]
    return math.nan if final is None else fraction * final


def time_to_target(history: pd.DataFrame, protocol: str, num_clients: int, target: float | None = None,
                   fraction: float | None = None, at_horizon: bool = False) -> dict[str, float]:
    """One run's ``rounds_to_target``, ``mb_to_target`` and ``client_mb_to_target`` and whether it
    ``reached`` the target (not reached: NaN, or with ``at_horizon`` its last evaluated round and the
    bytes sent by then, the module's restricted time)."""
    nothing = {**dict.fromkeys(TARGET_METRICS, math.nan), "reached": False}
    tau = target_threshold(history, protocol, target, fraction)
    if "round" not in history or math.isnan(tau) or PROTOCOLS[protocol].accuracy not in history:
        return nothing
    accuracy, sent = history[PROTOCOLS[protocol].accuracy], cumulative_bytes(history)
    rounds, sent_then = reach(history["round"], accuracy, sent, tau)
    reached = not math.isnan(rounds)
    if not reached and at_horizon:
        evaluated = history[accuracy.notna()]
        if evaluated.empty:
            return nothing
        last = evaluated["round"].idxmax()
        rounds, sent_then = float(history.loc[last, "round"]), float(sent[last])
    return {"rounds_to_target": rounds, "mb_to_target": sent_then / MEGABYTE,
            "client_mb_to_target": sent_then / MEGABYTE / num_clients, "reached": reached}


def run_time_to_target(metrics_path: str | Path, target: float | None = None, fraction: float | None = None,
                       at_horizon: bool = False) -> dict:
    """:func:`time_to_target` of the run whose ``metrics.json`` is ``metrics_path`` (a diverged run: NaN)."""
    metrics = json.loads(Path(metrics_path).read_text())
    if metrics.get("status") == "diverged":
        return {**dict.fromkeys(TARGET_METRICS, math.nan), "reached": False}
    history = pd.read_csv(Path(metrics_path).with_name("history.csv"))
    return time_to_target(history, metrics["protocol"], metrics["num_clients"], target, fraction, at_horizon)


def target_label(target: float | None = None, fraction: float | None = None) -> str:
    """``80 %`` or ``90 % of final``."""
    return f"{target:g} %" if target is not None else f"{100 * fraction:g} % of final"


# ---- the report: a table of rounds and megabytes to target, accuracy against bytes --------------


def _histories(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every run's history with its cell, protocol, client count and cumulative megabytes."""
    frames = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        history = pd.read_csv(run_dir / "history.csv")
        accuracy = PROTOCOLS[metrics["protocol"]].accuracy
        frames.append(history.assign(
            **metrics["cell"], protocol=metrics["protocol"], num_clients=metrics["num_clients"],
            status=metrics.get("status", "completed"), mb=cumulative_bytes(history) / MEGABYTE,
            accuracy_pct=100 * history[accuracy] if accuracy in history else np.nan,
        ))
    if not frames:
        raise ValueError("no runs given")
    return pd.concat(frames, ignore_index=True)


def target_table(run_dirs: Iterable[str | Path], targets: Sequence[Mapping], orders: Mapping | None = None) -> pd.DataFrame:
    """Per cell (dataset, partition, model, algorithm) and target: the rounds and megabytes (all
    clients; per client) to reach it, mean ± std over the seeds that reached it, and how many did."""
    histories = _histories(run_dirs)
    rows = []
    for key, runs in histories.groupby(PANEL + ["algorithm", "seed"], sort=False):
        protocol, clients = runs["protocol"].iloc[0], int(runs["num_clients"].iloc[0])
        for spec in targets:
            target, fraction = spec.get("target"), spec.get("target_fraction")
            values = (dict.fromkeys(TARGET_METRICS, math.nan) if runs["status"].iloc[0] == "diverged"
                      else time_to_target(runs, protocol, clients, target, fraction))
            rows.append({**dict(zip(PANEL + ["algorithm", "seed"], key)), "target": target_label(target, fraction), **values})
    per_seed = order_rows(pd.DataFrame(rows), orders)

    def summary(group: pd.DataFrame) -> pd.Series:
        reached = group.dropna(subset=["rounds_to_target"])
        out = {"reached": f"{len(reached)}/{len(group)}"}
        for metric, digits in (("rounds_to_target", 1), ("mb_to_target", 2), ("client_mb_to_target", 3)):
            values = reached[metric]
            out[metric] = "not reached" if values.empty else f"{values.mean():.{digits}f} ± {values.std(ddof=0):.{digits}f}"
        return pd.Series(out)

    keys = PANEL + ["target", "algorithm"]
    out = order_rows(per_seed.groupby(keys, sort=False)[list(per_seed.columns)].apply(summary).reset_index(), orders)
    labels = [target_label(spec.get("target"), spec.get("target_fraction")) for spec in targets]
    panels = list(dict.fromkeys(out[PANEL].itertuples(index=False, name=None)))
    rank = pd.DataFrame({"panel": [panels.index(p) for p in out[PANEL].itertuples(index=False, name=None)],
                         "target": out["target"].map(labels.index)}, index=out.index)
    return out.loc[rank.sort_values(["panel", "target"], kind="stable").index].reset_index(drop=True)


def target_markdown(table: pd.DataFrame, title: str) -> str:
    """The table as Markdown with its reading rule."""
    legend = ("Rounds and megabytes (MB = 10^6 bytes, both directions; all clients, and per client) until the "
              "protocol's accuracy first reaches the target, mean ± std over the seeds that reached it (*reached*); "
              "linear between the two evaluated rounds that bracket the target, rounded up to a whole round "
              "(fedbench.results.convergence); *not reached*: no seed got there.")
    shown = table.rename(columns={"rounds_to_target": "rounds", "mb_to_target": "MB", "client_mb_to_target": "MB per client"})
    return "\n".join([f"# {title}", "", legend, "", shown.to_markdown(index=False), ""])


def plot_accuracy_vs_bytes(run_dirs: Iterable[str | Path], path: str | Path, orders: Mapping | None = None,
                           title: str | None = None) -> None:
    """Test accuracy (the protocol's, %) against cumulative megabytes sent (left) and against
    round (right): one row per dataset / partition / model, one line per algorithm, the mean over seeds
    with a band of ± one standard deviation (the megabytes are the mean over seeds at each round)."""
    import seaborn as sns

    data = order_rows(_histories(run_dirs), orders).dropna(subset=["accuracy_pct"])
    if data.empty:  # every run diverged before its first evaluation: a figure that says so, as the curves do
        fig = Figure(figsize=(6, 2))
        fig.text(0.5, 0.5, "no evaluated round with an accuracy: every run diverged", ha="center", va="center")
        if title:
            fig.suptitle(title)
        atomic_write(path, lambda p: fig.savefig(p, dpi=120, format=Path(path).suffix[1:]))
        return
    panels = list(dict.fromkeys(data[PANEL].itertuples(index=False, name=None)))
    algorithms = list(dict.fromkeys(data["algorithm"]))
    palette = dict(zip(algorithms, sns.color_palette("colorblind", len(algorithms))))
    fig = Figure(figsize=(9.5, 3.2 * len(panels) + 0.8), layout="constrained")
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for row, panel in zip(axes, panels):
        subset = data[(data[PANEL] == pd.Series(panel, index=PANEL)).all(axis=1)]
        for algorithm, runs in subset.groupby("algorithm", sort=False):
            stats = runs.groupby("round").agg(mb=("mb", "mean"), mean=("accuracy_pct", "mean"),
                                              sd=("accuracy_pct", lambda v: v.std(ddof=0)))
            for ax, x in zip(row, (stats["mb"], stats.index.to_series())):
                ax.plot(x, stats["mean"], color=palette[algorithm], marker="o" if len(stats) <= 30 else None, markersize=3)
                ax.fill_between(x, stats["mean"] - stats["sd"], stats["mean"] + stats["sd"], color=palette[algorithm],
                                alpha=0.2, linewidth=0)
        left, right = row
        left.set(title=" / ".join(panel), xlabel="megabytes sent, cumulative (all clients, both directions)",
                 ylabel="test accuracy (%)")
        right.set(title=" / ".join(panel), xlabel="round", ylabel="test accuracy (%)")
        for ax in row:
            ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    fig.legend([Line2D([], [], color=palette[a]) for a in algorithms], algorithms, loc="outside lower center",
               ncols=min(len(algorithms), 4))
    if title:
        fig.suptitle(title)
    atomic_write(path, lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format=Path(path).suffix[1:]))


__all__ = ["TARGET_METRICS", "cumulative_bytes", "plot_accuracy_vs_bytes", "reach", "run_time_to_target",
           "target_markdown", "target_table", "time_to_target"]
