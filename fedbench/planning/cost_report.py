"""What a config will cost, before any job: training jobs, CPU-hours and GPU-hours per experiment.

    python -m fedbench.planning.cost_report config/experiments/femam.yaml            # one paper grid
    python -m fedbench.planning.cost_report config/experiments/{femam,fedmr,pfedmt,flt}.yaml
    make cost CONFIG=config/experiments/femam.yaml
    python -m fedbench.planning.cost_report --numerics bf16+cl+compile config/experiments/femam.yaml   # every cell at that setting
    python -m fedbench.planning.cost_report --check results/fedmr_claims      # predicted vs measured, finished runs
    make cost CHECK=results/fedmr_claims
    python -m fedbench.planning.cost_report --fit results/fedmr_claims --fit results/pfedmt [--write]   # fit the CPU overheads
    make cost-fit FIT="results/fedmr_claims results/pfedmt" [WRITE=1]

Each file is one config (as ``snakemake --configfile F --replace-workflow-config`` runs it): its cells,
its tuning trials and tuned runs, and the most seeds the claims' looks may add.  The
estimates are :mod:`fedbench.cost`'s, the same that size every training job's ``runtime``
(without its safety factor): a cell's shape from its partition's summary where the partition
exists under the config's ``results`` root, else from the dataset's facts.  A figure marked ``*``
rests on the device's assumed throughput (no measurement of that model family there, or none at
the cell's input size).

``--check ROOT`` compares, for every finished run under a results root (``metrics.json`` with
``status: completed``, under ``runs/``, ``tuning/trials/``, ``tuned/runs/`` or anywhere below), the
estimate of :func:`fedbench.cost.estimate.cell_cost` (the function that sizes the jobs' ``runtime``, with the
run's recorded hyperparameters and device, its shape from its partition's summary under
``ROOT/partitions`` where present, else from the dataset's facts) with the measured wall time: the
job's Snakemake benchmark (``ROOT/benchmarks/.../seed<k>.tsv``, ``s``: the whole job) where there
is one that covers the run (a job resumed from a checkpoint benchmarks only its last attempt), else
``metrics.json``'s ``wall_time_s`` (the run from loading its data, earlier attempts included; no
process start-up).  It prints per run predicted and measured seconds and their ratio, the CPU's
share of the wall time (the benchmark's ``cpu_time / s``: well below 1 on a machine shared with
other jobs), and the median absolute relative error |predicted / measured - 1| per model family, per
algorithm and over all runs; then the same against the job's CPU time.  Snakemake's benchmark
samples the CPU time (every 30 s after its first 17 s) and records the last sample: up to 30 s of a
job's CPU are missing, most of it for a job of a minute; :func:`cpu_seconds` extrapolates the
sample to the job's end at the job's CPU share until then (a job that ended within a second after a
sample was due has no CPU time: the sample may or may not have been taken).
Last, the job time by stage: every benchmark under ``ROOT/benchmarks`` (partitions, encoders, runs,
trials, tuned runs) summed per stage in CPU-hours and wall hours (:func:`stage_times`).

``--fit ROOT`` (repeatable) fits the device's overhead constants (``job_overhead_s``,
``step_overhead_s``, ``round_overhead_s``, ``eval_overhead_s``; ``--terms`` picks some) to those
runs' CPU time by non-negative least squares on the relative error (:mod:`fedbench.planning.cost_fit`), prints
them beside the file's with the median |predicted / CPU time - 1| before and after over all runs,
per root, experiment, algorithm and family, and, with several roots, each root held out (fitted to
the others, checked on it); ``--write`` sets them in ``config/throughputs.yaml`` (the lines replaced
in place, the rest of the file as it was).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from fedbench.planning import cost_fit
from fedbench.config.cells import (
    TRAINING_DEFAULTS, expand_partitions, resolve_cell,
)
from fedbench.config.layout import RUN_KINDS, partition_stem
from fedbench.cost import (
    OVERHEADS, THROUGHPUTS, cell_cost, device_kind, estimated_shape, summary_shape, throughputs,
)
from fedbench.cost.server import relatedness_seconds
from fedbench.engine.numerics import Numerics
from fedbench.registry.plugins import load_plugins
from fedbench.config.files import load_yaml_strict
from fedbench.planning.jobs import planned_runs

DEVICES = ("cpu", "cuda")
ADDED_SEEDS = "claims: added seeds, at most"  # the row of the jobs the claims' looks may add


def shape_under(root: str, dataset: str, partition: str, seed: int, spec: dict):
    """A cell's shape: its partition's summary under the results ``root`` where present, else the dataset's facts."""
    summary = Path(f"{partition_stem(root, dataset, partition, seed)}.json")
    if summary.exists():
        recorded = json.loads(summary.read_text())
        if "input_shape" in recorded:
            return summary_shape(recorded)
    return estimated_shape(spec["dataset"], spec["partition"])


def cell_shape(config: dict, cell, spec: dict):
    return shape_under(config.get("results", "results"), cell.dataset, cell.partition, cell.seed, spec)


ROW_NAMES = {"train": "{}", "trial": "{} (tuning)", "tuned": "{} (tuned)"}


def planned_jobs(config: dict, claims_only: bool = False, added: bool = True):
    """(row, cell, the config it runs under) of every training job the workflow may run
    (:func:`fedbench.planning.jobs.planned_runs`): the cells (a row per experiment), a tuned experiment's trials
    (``<experiment> (tuning)``) and tuned runs (``<experiment> (tuned)``), and the seeds the claims' looks may add,
    at most (``claims: added seeds, at most``; ``added=False``: not those).  ``claims_only``: those of the
    ``claims`` target alone."""
    for run in planned_runs(config, claims_only, added):
        row = ADDED_SEEDS if run.added else ROW_NAMES[run.kind].format(run.cell.experiment)
        yield row, run.cell, run.config(config)


def config_costs(config: dict, claims_only: bool = False, numerics: str | None = None) -> dict[str, dict]:
    """Per row of :func:`planned_jobs` (an experiment, its tuning, its tuned runs, the claims' added
    seeds; ``claims_only``: of the ``claims`` target alone; ``numerics``: every cell trained at that setting,
    e.g. ``bf16+cl+compile``, instead of its own): ``jobs`` (training cells), per device ``hours`` and whether every figure was ``calibrated``,
    ``estimated`` (some shape came from dataset facts) and ``failing`` (cells whose model cannot be built
    for their data: not counted in the hours)."""
    table = throughputs()
    out: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "hours": dict.fromkeys(DEVICES, 0.0), "failing": {},
                                                 "calibrated": dict.fromkeys(DEVICES, True), "estimated": False})
    embedded = set()  # the fine-tuned embeddings some job already computes (then kept for the others)
    for name, cell, cfg in planned_jobs(config, claims_only):
        spec = resolve_cell(cfg, cell)
        spec["training"] = {**TRAINING_DEFAULTS, **spec["training"], **(Numerics.parse(numerics).record() if numerics else {})}
        shape = cell_shape(config, cell, spec)
        row = out[name]
        row["jobs"] += 1
        row["estimated"] |= shape.estimated
        try:
            costs = {device: cell_cost(spec, shape, device, table) for device in DEVICES}
        except ValueError as error:  # a model that cannot be built for the data: the job would fail too
            row["failing"][f"{cell.dataset}/{cell.model}"] = str(error)
            continue
        shared = shared_embeddings(spec, cell)
        for device, cost in costs.items():
            kept = relatedness_seconds(spec, shape, table, device) if shared is not None and shared in embedded else 0.0
            row["hours"][device] += (cost.seconds - kept) / 3600
            row["calibrated"][device] &= cost.calibrated
        embedded.add(shared)
    return dict(out)


def shared_embeddings(spec: dict, cell) -> tuple | None:
    """What FLT's fine-tuned client embeddings depend on among a plan's jobs (the encoder, J, the data, the
    partition, the seed, the hold-out), so that the runs with equal keys compute them once
    (:mod:`fedbench.algorithms.embedding_cache`); None where a run fine-tunes no encoder."""
    algorithm = spec["algorithm"]
    if not algorithm.get("encoder") or not algorithm.get("finetune_epochs"):
        return None
    return (algorithm["encoder"], algorithm["finetune_epochs"], cell.dataset, cell.partition, cell.seed,
            spec["training"].get("holdout", 0.0))


def _hours(value: float, calibrated: bool) -> str:
    return f"{value:,.1f}{'' if calibrated else '*'}"


def report(path: str, claims_only: bool = False, numerics: str | None = None) -> str:
    """The cost table of one config file (``claims_only``: of its ``claims`` target; ``numerics``: every cell
    at that setting) and its summary line."""
    config = load_yaml_strict(path)
    load_plugins(config.get("plugins") or ())  # a plugin's dataset source, partitioner or model
    costs = config_costs(config, claims_only, numerics)
    partitions = len(expand_partitions(config))
    lines = [f"{path}{' (target claims)' if claims_only else ''}{f' (every cell at {numerics})' if numerics else ''}", f"  {'experiment':<34} {'jobs':>6} {'CPU-hours':>12} {'GPU-hours':>12}"]
    for name, row in costs.items():
        lines.append(f"  {name:<34} {row['jobs']:>6} {_hours(row['hours']['cpu'], row['calibrated']['cpu']):>12} "
                     f"{_hours(row['hours']['cuda'], row['calibrated']['cuda']):>12}")
    for name, row in costs.items():
        for where, error in row["failing"].items():
            lines.append(f"  ! {name}: {where} cannot be estimated, and its jobs would fail: {error}")
    jobs = sum(row["jobs"] for row in costs.values())
    total = {d: sum(row["hours"][d] for row in costs.values()) for d in DEVICES}
    calibrated = {d: all(row["calibrated"][d] for row in costs.values()) for d in DEVICES}
    lines.append(f"  {'total':<34} {jobs:>6} {_hours(total['cpu'], calibrated['cpu']):>12} {_hours(total['cuda'], calibrated['cuda']):>12}")
    estimated = any(row["estimated"] for row in costs.values())
    lines.append(
        f"{Path(path).name}: {jobs} training jobs (+ {partitions} partition jobs), "
        f"≈ {total['cpu']:,.0f} CPU-hours{'' if calibrated['cpu'] else ' (partly uncalibrated*)'} on one CPU job each, or "
        f"≈ {total['cuda']:,.0f} GPU-hours on one H100-class GPU{'' if calibrated['cuda'] else ' (uncalibrated*)'}"
        + ("; shapes estimated from dataset facts (no partition built yet)" if estimated else "")
    )
    return "\n".join(lines)


# ---- predicted vs measured: the finished runs of a results root ------------------------------

BENCHMARK_DIRS = {kind.outputs: kind.stage for kind in RUN_KINDS.values()}  # outputs -> benchmarks/ (runs -> train, ...)


def run_benchmark(root: Path, run_dir: Path) -> Path | None:
    """The Snakemake benchmark ``.tsv`` of the job that wrote ``run_dir`` (``<root>/runs/X`` ->
    ``<root>/benchmarks/train/X.tsv``, tuning trials under ``tune``, tuned runs under ``tuned``)."""
    rel = run_dir.relative_to(root).as_posix()
    for outputs, benchmarks in BENCHMARK_DIRS.items():
        if rel.startswith(outputs + "/"):
            return root / "benchmarks" / benchmarks / f"{rel[len(outputs) + 1:]}.tsv"
    return None


# Snakemake's benchmark samples the job's CPU time (psutil, the job's process tree): about every 0.5 s
# for its first 17 s (30 samples and their own time), then every 30 s (snakemake.benchmark's
# BENCHMARK_INTERVAL), and ``cpu_time`` is the last sample's total: a job's last up-to-30 s of CPU
# are not in it.  The finished runs show the staircase: jobs of 35-47 s report 12-14 s of CPU, of
# 47-75 s 31-42 s, of 78-105 s 55-67 s (/work/persist/pfedmt, 2026-11-27).
BENCHMARK_FIRST_S = 17.0
BENCHMARK_INTERVAL_S = 30.0
BENCHMARK_AMBIGUOUS_S = 1.0  # a job ending this close after a sample's time: was it taken? unknown


def last_cpu_sample(seconds: float) -> float | None:
    """When the benchmark of a job of ``seconds`` took its last CPU sample (:data:`BENCHMARK_FIRST_S`,
    then every :data:`BENCHMARK_INTERVAL_S`); None where the job ended within
    :data:`BENCHMARK_AMBIGUOUS_S` after a sample was due (taken or not, nobody can tell)."""
    if seconds <= BENCHMARK_FIRST_S:
        return seconds  # sampled every 0.5 s until then
    last = BENCHMARK_FIRST_S + BENCHMARK_INTERVAL_S * ((seconds - BENCHMARK_FIRST_S) // BENCHMARK_INTERVAL_S)
    return None if seconds - last < BENCHMARK_AMBIGUOUS_S else last


def cpu_seconds(seconds: float, cpu_time: float) -> float | None:
    """The job's CPU time, extrapolated from the benchmark's sampled ``cpu_time`` at the job's CPU share
    until its last sample (:func:`last_cpu_sample`): ``cpu_time x seconds / last sample``; None where
    the last sample's time is ambiguous."""
    last = last_cpu_sample(seconds)
    return None if last is None or last <= 0 else cpu_time * seconds / last


def read_benchmark(tsv: Path) -> tuple[float, float | None] | None:
    """(``s``, ``cpu_time`` or None where not recorded) of a Snakemake benchmark's last row; None where empty."""
    rows = list(csv.DictReader(tsv.open(), delimiter="\t"))
    if not rows:
        return None
    cpu = rows[-1].get("cpu_time")
    return float(rows[-1]["s"]), None if cpu in (None, "", "-", "NA") else float(cpu)


def measured_seconds(root: Path, run_dir: Path, metrics: dict) -> tuple[float, str, float | None, float | None]:
    """(seconds, where from, the CPU's share of them as the benchmark's ``cpu_time`` records it, the
    job's CPU seconds extrapolated to its end (:func:`cpu_seconds`)) of a finished run (module doc, ``--check``)."""
    wall = float(metrics["wall_time_s"])
    bench = run_benchmark(root, run_dir)
    if bench is not None and bench.exists():
        read = read_benchmark(bench)
        if read and read[0] >= wall:  # else a resumed job: the benchmark saw its last attempt only
            seconds, cpu = read
            if cpu is None or not seconds:
                return seconds, "benchmark", None, None
            return seconds, "benchmark", cpu / seconds, cpu_seconds(seconds, cpu)
    return wall, "wall_time_s", None, None


def run_shape(root: Path, metrics: dict, spec: dict):
    """The run's shape: its partition's summary under ``root`` where present, else the dataset's facts."""
    cell = metrics.get("cell", {})
    return shape_under(str(root), cell.get("dataset", "?"), cell.get("partition", "?"),
                       cell.get("seed", metrics.get("seed", 0)), spec)


def stage_times(root: str | Path) -> list[dict]:
    """Per stage (the first folder under ``ROOT/benchmarks``: ``train``, ``tune``, ``tuned``, ...) the
    jobs, wall seconds and CPU seconds of every Snakemake benchmark there: ``stage``, ``jobs``, ``wall_s``,
    ``cpu_s`` (:func:`cpu_seconds`; where the last sample's time is ambiguous, the recorded ``cpu_time``,
    a lower bound) and ``ambiguous`` (how many such jobs).  A job resumed from its checkpoint counts its
    last attempt only (its benchmark saw no more)."""
    stages = []
    for folder in sorted(path for path in (Path(root) / "benchmarks").glob("*") if path.is_dir()):
        jobs = wall = cpu = ambiguous = 0
        for tsv in sorted(folder.rglob("*.tsv")):
            read = read_benchmark(tsv)
            if read is None:
                continue
            seconds, recorded = read
            jobs, wall = jobs + 1, wall + seconds
            extrapolated = None if recorded is None else cpu_seconds(seconds, recorded)
            ambiguous += extrapolated is None
            cpu += extrapolated if extrapolated is not None else (recorded or 0.0)
        if jobs:
            stages.append({"stage": folder.name, "jobs": jobs, "wall_s": wall, "cpu_s": cpu, "ambiguous": ambiguous})
    return stages


def stage_report(root: str | Path) -> str:
    """One line: :func:`stage_times` in hours, per stage and over all."""
    stages = stage_times(root)
    if not stages:
        return f"  job time by stage: no benchmarks under {Path(root) / 'benchmarks'}"
    parts = [f"{row['stage']} {row['jobs']} jobs, {row['cpu_s'] / 3600:.2f} CPU-h ({row['wall_s'] / 3600:.2f} h wall)"
             for row in stages]
    ambiguous = sum(row["ambiguous"] for row in stages)
    return (f"  job time by stage (every benchmark under {Path(root) / 'benchmarks'}): " + "; ".join(parts)
            + f"; all {sum(row['jobs'] for row in stages)} jobs {sum(row['cpu_s'] for row in stages) / 3600:.2f} CPU-h "
            f"({sum(row['wall_s'] for row in stages) / 3600:.2f} h wall; CPU time extrapolated to each job's end, "
            f"{ambiguous} jobs with an ambiguous last sample at their recorded cpu_time, a lower bound; a resumed "
            "job's last attempt only)")


def check_runs(root: str | Path, table: dict | None = None) -> tuple[list[dict], list[str]]:
    """(one row per finished run under ``root``: ``run``, ``algorithm``, ``family``, ``device``,
    ``predicted``, ``measured``, ``source``, ``cpu_share``, ``cpu_s`` (:func:`cpu_seconds`), ``ratio``,
    ``calibrated``, ``estimated``, ``root``, ``experiment``, and for a fit (:mod:`fedbench.planning.cost_fit`)
    ``flop_seconds`` and the overheads' ``counts``; what was skipped and why)."""
    root = Path(root)
    table = table or throughputs()
    rows, skipped = [], []
    for path in sorted(root.rglob("metrics.json")):
        run = path.parent.relative_to(root).as_posix()
        metrics = json.loads(path.read_text())
        if metrics.get("status") != "completed" or "wall_time_s" not in metrics or "hyperparameters" not in metrics:
            skipped.append(f"{run}: {metrics.get('status', 'no status')}")
            continue
        recorded = metrics["hyperparameters"]
        spec = {**recorded, "training": {**TRAINING_DEFAULTS, **recorded["training"]}}
        device = device_kind(str(metrics.get("device", "cpu")))
        try:
            shape = run_shape(root, metrics, spec)
            cost = cell_cost(spec, shape, device, table)
        except (KeyError, ValueError) as error:  # a plugin's model or data not loaded, an unknown source
            skipped.append(f"{run}: cannot be estimated: {error}")
            continue
        seconds, source, share, cpu = measured_seconds(root, path.parent, metrics)
        rows.append({"run": run, "algorithm": spec["algorithm"]["method"], "family": cost.family, "device": device,
                     "predicted": cost.seconds, "measured": seconds, "source": source, "cpu_share": share, "cpu_s": cpu,
                     "ratio": cost.seconds / seconds, "calibrated": cost.calibrated, "estimated": shape.estimated,
                     "root": str(root), "experiment": metrics.get("cell", {}).get("experiment", "?"),
                     "flop_seconds": cost.flop_seconds, "counts": cost.counts()})
    return rows, skipped


def median_error(rows: list[dict], against: str = "measured") -> float:
    """Median of |predicted / measured - 1| over ``rows`` (``against="cpu_s"``: over the rows with a CPU time, against it)."""
    return statistics.median(abs(row["predicted"] / row[against] - 1) for row in rows if row.get(against))


def cpu_timed(rows: list[dict]) -> list[dict]:
    """The rows with a job CPU time (:func:`cpu_seconds`)."""
    return [row for row in rows if row.get("cpu_s")]


def by_group(rows: list[dict], key: str, against: str = "measured") -> str:
    """``name error % (runs)`` per value of ``key``, sorted."""
    groups = defaultdict(list)
    for row in rows:
        groups[row[key]].append(row)
    return ", ".join(f"{name} {100 * median_error(group, against):.0f} % ({len(group)})" for name, group in sorted(groups.items()))


def check_report(root: str, rows: list[dict] | None = None, skipped: list[str] | None = None) -> str:
    """Predicted vs measured seconds of every finished run under ``root``; median absolute errors
    against the wall time and against the job's CPU time."""
    if rows is None:
        rows, skipped = check_runs(root)
    lines = [f"{root}: {len(rows)} finished runs (predicted: fedbench.cost.estimate.cell_cost before the safety factor)"]
    if rows:
        width = min(max(len(row["run"]) for row in rows), 90)
        lines.append(f"  {'run':<{width}} {'algorithm':<10} {'family':<10} {'device':<6} {'predicted s':>11} "
                     f"{'measured s':>10} {'ratio':>6} {'cpu share':>9} {'CPU s':>7} {'vs CPU':>6}  measured by")
        for row in rows:
            mark = ("" if row["calibrated"] else "*") + ("~" if row["estimated"] else "")
            share = "-" if row["cpu_share"] is None else f"{row['cpu_share']:.2f}"
            cpu = "-" if not row.get("cpu_s") else f"{row['cpu_s']:,.0f}"
            vs_cpu = "-" if not row.get("cpu_s") else f"{row['predicted'] / row['cpu_s']:.2f}"
            lines.append(f"  {row['run'][-width:]:<{width}} {row['algorithm']:<10} {row['family']:<10} {row['device']:<6} "
                         f"{row['predicted']:>10,.0f}{mark:<1} {row['measured']:>10,.0f} {row['ratio']:>6.2f} {share:>9} "
                         f"{cpu:>7} {vs_cpu:>6}  {row['source']}")
        for key in ("family", "algorithm", "device"):
            lines.append(f"  median |predicted/measured - 1| by {key}: {by_group(rows, key)}")
        lines.append(f"  median |predicted/measured - 1| over all {len(rows)} runs: {100 * median_error(rows):.1f} % "
                     f"(median ratio {statistics.median(row['ratio'] for row in rows):.2f})")
        timed = cpu_timed(rows)
        if timed:  # against the CPU time instead: what a machine shared with other jobs does not stretch
            lines.append(f"  median |predicted/CPU time - 1| by algorithm: {by_group(timed, 'algorithm', 'cpu_s')}")
            lines.append(f"  median |predicted/CPU time - 1| over the {len(timed)} runs with a benchmark's CPU time: "
                         f"{100 * median_error(timed, 'cpu_s'):.1f} % (median ratio "
                         f"{statistics.median(row['predicted'] / row['cpu_s'] for row in timed):.2f}; CPU time: the "
                         "benchmark's cpu_time extrapolated to the job's end, fedbench.planning.cost_report.cpu_seconds)")
        sampled = [row for row in rows if row["cpu_share"]]
        if sampled:  # the benchmark's cpu_time as it stands (its last sample: up to 30 s short of the job's end)
            error = statistics.median(abs(row["ratio"] / row["cpu_share"] - 1) for row in sampled)
            lines.append(f"  median |predicted/cpu_time - 1| against the benchmark's cpu_time as recorded (its last "
                         f"sample), {len(sampled)} runs: {100 * error:.1f} %")
    lines.append(stage_report(root))
    for line in skipped or ():
        lines.append(f"  skipped {line}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedbench.planning.cost_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("configfiles", nargs="*", help="config files, each estimated on its own")
    parser.add_argument("--claims", action="store_true",
                        help="estimate the configs' `claims` target alone: the algorithm entries a claim reads")
    parser.add_argument("--numerics", default=None, metavar="SETTING",
                        help="estimate every cell at this training setting, e.g. bf16+cl+compile "
                             "(precision, then +cl, +bench, +compile; config/throughputs.yaml's `settings`)")
    parser.add_argument("--check", action="append", default=[], metavar="ROOT",
                        help="a results root: predicted vs measured seconds of its finished runs (repeatable)")
    parser.add_argument("--fit", action="append", default=[], metavar="ROOT",
                        help="a results root whose finished runs' CPU time the overhead constants are fitted to "
                             "(repeatable; fedbench.planning.cost_fit)")
    parser.add_argument("--terms", default=",".join(cost_fit.SHORT),
                        help="overheads to fit, of job, step, round, eval (default all; the others keep the file's values)")
    parser.add_argument("--device", default="cpu", choices=DEVICES, help="the device whose runs and constants --fit takes")
    parser.add_argument("--write", nargs="?", const=str(THROUGHPUTS), default=None, metavar="FILE",
                        help=f"with --fit: write the fitted constants into FILE (default {THROUGHPUTS.name}), in place")
    args = parser.parse_args(argv)
    if not args.configfiles and not args.check and not args.fit:
        parser.error("name config files, --check a results root, or --fit one")
    if args.write and not args.fit:
        parser.error("--write writes what --fit fitted: name --fit ROOT")
    if args.numerics:
        try:
            Numerics.parse(args.numerics)
        except ValueError as error:
            parser.error(f"--numerics: {error}")
    for path in args.configfiles:
        try:
            print(report(path, args.claims, args.numerics))
        except ValueError as error:  # a file that is not YAML (a tab), a repeated key: one line
            print(f"fedbench cost: {error}", file=sys.stderr)
            return 2
    every = []
    for root in args.check:
        rows, skipped = check_runs(root)
        every += rows
        print(check_report(root, rows, skipped))
    if len(args.check) > 1 and every:
        print(f"median |predicted/measured - 1| over all {len(every)} runs of the {len(args.check)} roots: "
              f"{100 * median_error(every):.1f} % (median ratio {statistics.median(row['ratio'] for row in every):.2f})")
        if cpu_timed(every):
            print(f"median |predicted/CPU time - 1| over the {len(cpu_timed(every))} runs with a CPU time of the "
                  f"{len(args.check)} roots: {100 * median_error(every, 'cpu_s'):.1f} %")
    if args.fit:
        table = throughputs()
        terms = cost_fit.parse_terms(args.terms)
        rows = [row for root in args.fit for row in check_runs(root, table)[0]]
        fit = cost_fit.fit_overheads(rows, table, args.device, terms)
        print(cost_fit.fit_report(rows, table, fit, args.device))
        held_out = cost_fit.held_out_report(rows, table, args.device, terms)
        if held_out:
            print(held_out)
        if args.write:
            cost_fit.write_constants(args.write, args.device, fit.constants)
            print(f"written to {args.write} under {args.device} (3 significant digits): "
                  + ", ".join(f"{name} {fit.constants[name]:.3g}" for name in OVERHEADS))
    if args.check or args.configfiles:
        print("* the device's assumed throughput (config/throughputs.yaml): no measured figure for that model family "
              "there, or none at the cell's input size" + ("; ~ shape estimated from the dataset's facts (no partition summary)"
                                                          if args.check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
