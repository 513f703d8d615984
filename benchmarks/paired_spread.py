"""How paired two methods' runs are: the spread of their per-seed differences and their correlation.

A claim ``better - than`` is decided on the per-seed differences d_s of one cell; its interval's width
grows with sigma_d = sd(d_s), and sigma_d^2 = sigma_a^2 + sigma_b^2 - 2 rho sigma_a sigma_b: the more the
two methods' runs move together over seeds (rho), the fewer seeds a verdict needs.  Common random
numbers (fedbench.engine.streams) are meant to raise rho.  This prints, per pair and per results
root, n, the mean difference, sigma_d, each method's sd and rho (Pearson, over the seeds both have),
in accuracy points of ``final`` (``--metric``):

    python benchmarks/paired_spread.py --pair fedavg fedprox --cell digits/dir0.3/mlp --experiment default \\
        --seeds 0-9 --root before=/tmp/spread_before --root after=/tmp/spread_after

``--run CHECKOUT`` first runs the missing cells of each root with that root's checkout, as the workflow
does (``snakemake --cores 2`` in the checkout, ``results=`` the root, the pair's ten targets), e.g.
``--root before=/tmp/spread_before --run /tmp/before`` (a worktree of the commit before) and
``--root after=/tmp/spread_after --run .``; ``--configfile`` names the experiment config (default: the
default suite's), ``--snakemake ...`` (last) passes further arguments, e.g. for a claims config whose
partitions and encoders were copied into the root: ``--snakemake --replace-workflow-config --rerun-triggers mtime``.  A root may also be finished runs already on disk (the committed claims runs).
Recorded in reports/paired_spread.md."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def seeds_of(text: str) -> list[int]:
    """``0-9`` or ``0,1,2``."""
    if "-" in text:
        first, last = (int(x) for x in text.split("-"))
        return list(range(first, last + 1))
    return [int(x) for x in text.split(",")]


def metrics_path(root: Path, experiment: str, cell: str, algorithm: str, seed: int) -> Path:
    return root / "runs" / experiment / cell / algorithm / f"seed{seed}" / "metrics.json"


def reading(path: Path, metric: str) -> float:
    """The run's ``final`` metric in points (NaN where it is missing or the run diverged)."""
    if not path.exists():
        return math.nan
    value = json.loads(path.read_text())["final"].get(metric)
    return math.nan if value is None else 100.0 * float(value)


def spread(a: np.ndarray, b: np.ndarray) -> dict:
    """Over the seeds where both have a number: n, mean of a - b, sd of a - b (ddof 1), sd of each, rho."""
    both = ~(np.isnan(a) | np.isnan(b))
    a, b = a[both], b[both]
    if len(a) < 3:
        return {"n": len(a)}
    d = a - b
    return {"n": len(a), "mean_d": d.mean(), "sigma_d": d.std(ddof=1), "sd_a": a.std(ddof=1), "sd_b": b.std(ddof=1),
            "rho": float(np.corrcoef(a, b)[0, 1])}


def run_cells(checkout: Path, root: Path, configfiles: list[str], experiment: str, cell: str, pair, seeds,
              extra: list[str]) -> None:
    """The pair's missing runs in ``root``, by the workflow of ``checkout`` (its own code on PYTHONPATH)."""
    targets = [str(metrics_path(root, experiment, cell, a, s)) for a in pair for s in seeds]
    root.mkdir(parents=True, exist_ok=True)
    seeds_file = root / "paired_spread_seeds.yaml"  # the seeds as a config file: --config would read them as text
    # one look at all the seeds: a claims config's design would otherwise refuse a pilot of other size
    seeds_file.write_text(json.dumps({"seeds": seeds, "results": str(root), "claims_design": {"looks": [len(seeds)]}}))
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", *configfiles, str(seeds_file),
               *extra, "--", *targets]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with open(root / "paired_spread.log", "a") as log:  # Snakemake's own output, for a failure's reasons
        subprocess.run(command, cwd=checkout, env=env, check=True, stdout=log, stderr=log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", nargs=2, required=True, metavar=("BETTER", "THAN"))
    parser.add_argument("--cell", required=True, help="dataset/partition/model")
    parser.add_argument("--experiment", default="default")
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--metric", default="accuracy")
    parser.add_argument("--root", action="append", required=True, metavar="LABEL=PATH", help="a results root (repeat)")
    parser.add_argument("--run", action="append", default=[], metavar="CHECKOUT",
                        help="run each root's missing cells with this checkout (one per --root, in order; - runs nothing)")
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"])
    parser.add_argument("--snakemake", nargs=argparse.REMAINDER, default=[],
                        help="further snakemake arguments, last (e.g. --replace-workflow-config --rerun-triggers mtime)")
    args = parser.parse_args(argv)
    seeds = seeds_of(args.seeds)
    roots = [(label, Path(path).resolve()) for label, path in (r.split("=", 1) for r in args.root)]
    for (label, root), checkout in zip(roots, args.run):
        if checkout == "-":  # runs already on disk
            continue
        run_cells(Path(checkout).resolve(), root, args.configfile, args.experiment, args.cell, args.pair, seeds,
                  args.snakemake)
    print(f"{args.pair[0]} - {args.pair[1]}, {args.experiment}/{args.cell}, {args.metric} (points), seeds {args.seeds}")
    print(f"{'root':10s} {'n':>3s} {'mean d':>8s} {'sigma_d':>8s} {'sd a':>7s} {'sd b':>7s} {'rho':>6s}")
    for label, root in roots:
        a, b = (np.array([reading(metrics_path(root, args.experiment, args.cell, m, s), args.metric) for s in seeds])
                for m in args.pair)
        row = spread(a, b)
        if row["n"] < 3:
            print(f"{label:10s} {row['n']:3d}  (fewer than 3 seeds with both runs)")
            continue
        print(f"{label:10s} {row['n']:3d} {row['mean_d']:+8.2f} {row['sigma_d']:8.2f} {row['sd_a']:7.2f} {row['sd_b']:7.2f} "
              f"{row['rho']:+6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
