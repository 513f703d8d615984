"""Fit the cost model's fixed costs to finished runs: ``python -m fedbench.planning.cost_report --fit ROOT [ROOT ...]``.

The time of a cell (:func:`fedbench.cost.estimate.cell_cost`) is its FLOPs at the measured rates plus fixed
costs, each a constant times a count (:data:`fedbench.cost.model.OVERHEADS`): ``job_overhead_s`` once,
``step_overhead_s`` per local minibatch step, ``round_overhead_s`` per round, ``eval_overhead_s``
per evaluated round.  The FLOP rates stay as the benchmarks measured them; the constants are fitted
here to the runs' CPU time (:func:`fedbench.planning.cost_report.cpu_seconds`, the job's Snakemake benchmark):
for every finished run on the device with a CPU time y, FLOP seconds f and counts c_j, the
non-negative k minimising sum ((f + sum_j k_j c_j - y) / y)^2 (each run's relative error; every row
weighted by 1 / y; ``scipy.optimize.nnls``).

Runs can only tell apart the terms whose counts vary differently across them: terms are taken in the
order of :data:`FIT_ORDER`, and one whose (weighted, normalised) column adds no rank to those
before it (``numpy.linalg.matrix_rank``) is held at 0 and named (for example ``round_overhead_s``
and ``eval_overhead_s`` on runs that all have 600 rounds, every one evaluated: their counts are the
job's times 600).  Terms left out of ``terms`` keep the file's values (their seconds are subtracted
before the fit).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import nnls

from fedbench.cost.rates import OVERHEADS, overhead

FIT_ORDER = ("job_overhead_s", "step_overhead_s", "round_overhead_s", "eval_overhead_s")
SHORT = {"job": "job_overhead_s", "step": "step_overhead_s", "round": "round_overhead_s", "eval": "eval_overhead_s"}


@dataclass(frozen=True)
class Fit:
    constants: dict[str, float]  # every term of OVERHEADS on the device: fitted, held at 0, or the file's
    fitted: tuple[str, ...]  # the terms the runs determined
    inseparable: tuple[str, ...]  # terms asked for that the runs cannot tell apart from earlier ones: held at 0
    runs: int


def fit_rows(rows: list[dict], device: str = "cpu") -> list[dict]:
    """The rows of :func:`fedbench.planning.cost_report.check_runs` a fit can use: on ``device``, with a CPU time."""
    return [row for row in rows if row["device"] == device and row.get("cpu_s")]


def predicted(row: dict, constants: dict[str, float]) -> float:
    """``row``'s seconds under ``constants``: its FLOP seconds + each overhead x its count."""
    return row["flop_seconds"] + sum(constants.get(name, 0.0) * n for name, n in row["counts"].items())


def fit_overheads(rows: list[dict], table: dict, device: str = "cpu", terms=FIT_ORDER) -> Fit:
    """Fit the overhead constants ``terms`` of ``device`` to ``rows`` (:func:`fit_rows`; each with
    ``cpu_s``, ``flop_seconds`` and ``counts``) by weighted non-negative least squares (module doc)."""
    rows = fit_rows(rows, device)
    asked = [name for name in FIT_ORDER if name in terms]
    held = {name: overhead(table, device, name) for name in OVERHEADS if name not in asked}
    if not rows or not asked:
        return Fit({**held, **dict.fromkeys(asked, 0.0)}, (), tuple(asked), len(rows))
    y = np.array([row["cpu_s"] for row in rows], dtype=float)
    weight = 1.0 / y
    target = (y - np.array([predicted(row, held) for row in rows])) * weight
    columns = np.array([[row["counts"][name] for name in asked] for row in rows], dtype=float) * weight[:, None]
    kept, inseparable = [], []
    for j, name in enumerate(asked):
        trial = columns[:, kept + [j]]
        norms = np.linalg.norm(trial, axis=0)
        if norms[-1] > 0 and np.linalg.matrix_rank(trial / np.where(norms > 0, norms, 1.0)) == len(kept) + 1:
            kept.append(j)
        else:
            inseparable.append(name)
    solution, _ = nnls(columns[:, kept], target)
    constants = {**held, **dict.fromkeys(asked, 0.0)}
    constants.update({asked[j]: float(k) for j, k in zip(kept, solution)})
    return Fit(constants, tuple(asked[j] for j in kept), tuple(inseparable), len(rows))


def median_abs_error(rows: list[dict], constants: dict[str, float]) -> float:
    """Median |predicted / CPU time - 1| of ``rows`` under ``constants``."""
    return statistics.median(abs(predicted(row, constants) / row["cpu_s"] - 1) for row in rows)


def fit_report(rows: list[dict], table: dict, fit: Fit, device: str = "cpu") -> str:
    """The fitted constants against the file's, and the median |predicted / CPU time - 1| before
    (the file's constants) and after (the fit's): over all runs, per results root, experiment and algorithm."""
    rows = fit_rows(rows, device)
    before = {name: overhead(table, device, name) for name in OVERHEADS}
    lines = [f"fit of the {device} overheads to {fit.runs} runs' CPU time (weighted 1 / CPU time, scipy.optimize.nnls; "
             "FLOP rates as measured):"]
    for name in OVERHEADS:
        how = ("fitted" if name in fit.fitted else "held at 0: the runs cannot tell it apart from the terms before it"
               if name in fit.inseparable else "not fitted: the file's")
        lines.append(f"  {name:<18} {before[name]:>10.4g} -> {fit.constants[name]:>10.4g}  ({how})")
    if not rows:
        return "\n".join(lines + ["  no run with a CPU time on " + device])
    lines.append(f"  median |predicted/CPU time - 1| before -> after, over all {len(rows)} runs: "
                 f"{100 * median_abs_error(rows, before):.1f} % -> {100 * median_abs_error(rows, fit.constants):.1f} %")
    for key in ("root", "experiment", "algorithm", "family"):
        groups = defaultdict(list)
        for row in rows:
            groups[row.get(key, "?")].append(row)
        lines.append(f"  by {key}: " + "; ".join(
            f"{name} {100 * median_abs_error(group, before):.0f} % -> {100 * median_abs_error(group, fit.constants):.0f} % "
            f"({len(group)})" for name, group in sorted(groups.items())))
    return "\n".join(lines)


def held_out_report(rows: list[dict], table: dict, device: str = "cpu", terms=FIT_ORDER) -> str:
    """Per results root: the constants fitted to the other roots' runs, and this root's median
    |predicted / CPU time - 1| under them (runs the fit did not see)."""
    rows = fit_rows(rows, device)
    roots = sorted({row["root"] for row in rows})
    lines = []
    for root in roots if len(roots) > 1 else ():
        fit = fit_overheads([row for row in rows if row["root"] != root], table, device, terms)
        mine = [row for row in rows if row["root"] == root]
        said = ", ".join(f"{name} {fit.constants[name]:.4g}" for name in fit.fitted)
        lines.append(f"  held out {root}: fitted to the other roots' {fit.runs} runs ({said}"
                     + (f"; {', '.join(fit.inseparable)} held at 0" if fit.inseparable else "")
                     + f"): {100 * median_abs_error(mine, fit.constants):.1f} % on its {len(mine)} runs")
    return "\n".join(lines)


def write_constants(path: Path | str, device: str, constants: dict[str, float], digits: int = 3) -> None:
    """Set ``device``'s ``constants`` in the throughput file at ``path`` in place: each ``  name: value``
    line of the device's block replaced (or added after its ``assumed``, in the order given), every other
    line, comments included, kept as it is; values rounded to ``digits`` significant digits."""
    path = Path(path)
    lines = path.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(rf"{re.escape(device)}:\s*(#.*)?$", line)), None)
    if start is None:
        raise ValueError(f"{path}: no top-level '{device}:' block")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    cursor = next((i for i in range(start + 1, end) if lines[i].startswith("  assumed:")), start)  # new lines go after
    for name, value in constants.items():
        text = f"{float(f'{value:.{digits}g}')!r}"
        pattern = re.compile(rf"^(  {re.escape(name)}:\s*)([^#\n]*?)(\s*#.*)?(\n?)$")
        for i in range(start + 1, end):
            match = pattern.match(lines[i])
            if match:
                lines[i] = f"{match.group(1)}{text}{match.group(3) or ''}{match.group(4)}"
                break
        else:
            cursor += 1
            lines.insert(cursor, f"  {name}: {text}\n")
            end += 1
    path.write_text("".join(lines))
    written = yaml.safe_load(path.read_text())[device]
    for name, value in constants.items():  # the file still parses, and says what was meant
        assert written[name] == float(f"{value:.{digits}g}"), (name, written[name], value)


def parse_terms(text: str) -> tuple[str, ...]:
    """``job,step,round,eval`` (or the constants' full names) -> the constants' names."""
    names = tuple(SHORT.get(part.strip(), part.strip()) for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in OVERHEADS]
    if unknown:
        raise ValueError(f"unknown overhead terms {unknown}: choose from {', '.join(SHORT)}")
    return names
