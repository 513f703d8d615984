"""What a config will cost, before any job: training jobs, CPU-hours and GPU-hours per experiment.

    python -m fedbench.cost_report config/experiments/femam.yaml            # one paper grid
    python -m fedbench.cost_report config/experiments/{femam,fedmr,pfedmt,flt}.yaml
    make cost CONFIG=config/experiments/femam.yaml

Each file is one config (as ``snakemake --configfile F --replace-workflow-config`` runs it): its cells,
its tuning trials and tuned runs, and the most seeds the claims' looks may add.  The
estimates are :mod:`fedbench.cost`'s, the same that size every training job's ``runtime``
(without its safety factor): a cell's shape from its partition's summary where the partition
exists under the config's ``results`` root, else from the dataset's facts.  A figure marked ``*``
rests on the device's assumed throughput (no measurement of that model family there).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from fedbench.config import TRAINING_DEFAULTS, Cell, expand_cells, expand_partitions, partition_stem, resolve_cell
from fedbench.cost import cell_cost, estimated_shape, summary_shape, throughputs
from fedbench.plugins import load_plugins
from fedbench.results.claims import claim_algorithms, claim_cells, design_seeds, evaluated_claims
from fedbench.tuning import trial_config, tune_block, tuned_experiments
from fedbench.validation import load_yaml_strict

DEVICES = ("cpu", "cuda")
ADDED_SEEDS = "claims: added seeds, at most"  # the row of the jobs the claims' looks may add


def cell_shape(config: dict, cell, spec: dict):
    summary = Path(f"{partition_stem(config.get('results', 'results'), cell.dataset, cell.partition, cell.seed)}.json")
    if summary.exists():
        recorded = json.loads(summary.read_text())
        if "input_shape" in recorded:
            return summary_shape(recorded)
    return estimated_shape(spec["dataset"], spec["partition"])


def planned_jobs(config: dict):
    """(row, cell, the config it runs under) of every training job the workflow may run: the cells; for a
    tuned experiment its trials (``<experiment> (tuning)``) and its tuned runs at the config's seeds
    (``<experiment> (tuned)``); and the seeds the claims' looks may add, at most (``claims: added seeds,
    at most``: every claim undecided until the design's cap, at the paper's setting and tuned)."""
    for cell in expand_cells(config):
        yield cell.experiment, cell, config
    for experiment in tuned_experiments(config):
        block = tune_block(config, experiment)
        blocks = sorted({(c.dataset, c.partition, c.model, c.algorithm) for c in expand_cells(config)
                         if c.experiment == experiment})
        for d, p, m, a in blocks:
            for trial in range(block["trials"]):
                trial_cfg = trial_config(config, experiment, a, trial)
                for seed in block["seeds"]:
                    yield f"{experiment} (tuning)", Cell(experiment, d, p, m, a, int(seed)), trial_cfg
            for seed in config["seeds"]:
                yield f"{experiment} (tuned)", Cell(experiment, d, p, m, a, int(seed)), config
    extra = design_seeds(config)[len(config["seeds"]):]
    added = set()
    for name in evaluated_claims(config):
        claim = config["claims"][name]
        settings = ("paper", "tuned") if config["experiments"][claim["experiment"]].get("tune") else ("paper",)
        for d, p, m in claim_cells(config, name):
            added.update((s, Cell(claim["experiment"], d, p, m, a, seed)) for s in settings
                         for a in claim_algorithms(claim) for seed in extra)
    for _, cell in sorted(added):
        yield ADDED_SEEDS, cell, config


def config_costs(config: dict) -> dict[str, dict]:
    """Per row of :func:`planned_jobs` (an experiment, its tuning, its tuned runs, the claims' added
    seeds): ``jobs`` (training cells), per device ``hours`` and whether every figure was ``calibrated``,
    ``estimated`` (some shape came from dataset facts) and ``failing`` (cells whose model cannot be built
    for their data: not counted in the hours)."""
    table = throughputs()
    out: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "hours": dict.fromkeys(DEVICES, 0.0), "failing": {},
                                                 "calibrated": dict.fromkeys(DEVICES, True), "estimated": False})
    for name, cell, cfg in planned_jobs(config):
        spec = resolve_cell(cfg, cell)
        spec["training"] = {**TRAINING_DEFAULTS, **spec["training"]}
        shape = cell_shape(config, cell, spec)
        row = out[name]
        row["jobs"] += 1
        row["estimated"] |= shape.estimated
        try:
            costs = {device: cell_cost(spec, shape, device, table) for device in DEVICES}
        except ValueError as error:  # a model that cannot be built for the data: the job would fail too
            row["failing"][f"{cell.dataset}/{cell.model}"] = str(error)
            continue
        for device, cost in costs.items():
            row["hours"][device] += cost.seconds / 3600
            row["calibrated"][device] &= cost.calibrated
    return dict(out)


def _hours(value: float, calibrated: bool) -> str:
    return f"{value:,.1f}{'' if calibrated else '*'}"


def report(path: str) -> str:
    """The cost table of one config file and its summary line."""
    config = load_yaml_strict(path)
    load_plugins(config.get("plugins") or ())  # a plugin's dataset source, partitioner or model
    costs = config_costs(config)
    partitions = len(expand_partitions(config))
    lines = [f"{path}", f"  {'experiment':<34} {'jobs':>6} {'CPU-hours':>12} {'GPU-hours':>12}"]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedbench.cost_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("configfiles", nargs="+", help="config files, each estimated on its own")
    args = parser.parse_args(argv)
    for path in args.configfiles:
        print(report(path))
    print("* the device's assumed throughput (config/throughputs.yaml): no measured figure for that model family there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
