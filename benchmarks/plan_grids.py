"""How long Snakemake takes to plan each paper grid (``snakemake -n``), and how many jobs it plans.

The four papers' configs cannot be merged into one run: each has its own ``results:`` root and
reuses entry names (``fedavg``, ``cnn``, ...) with different settings, so each is planned alone,
as a user would run it.  Every plan starts in a fresh empty work directory, so nothing is
finished and every job is planned (the worst case).  Prints one line per config, then one JSON
line for quoting.

    python benchmarks/plan_grids.py                      # the four paper grids, once each
    python benchmarks/plan_grids.py --repeats 3 config/experiments/femam.yaml
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAPER_GRIDS = [REPO / "config" / "experiments" / f"{name}.yaml" for name in ("femam", "fedmr", "pfedmt", "flt")]


def plan(config: Path) -> tuple[float, int]:
    """Seconds of one ``snakemake -n`` over ``config`` alone, and the number of jobs it plans."""
    snakemake = Path(sys.executable).with_name("snakemake")
    with tempfile.TemporaryDirectory() as workdir:
        command = [str(snakemake), "-n", "-s", str(REPO / "Snakefile"), "--directory", workdir,
                   "--configfile", str(config.resolve()), "--replace-workflow-config", "--quiet", "rules"]
        started = time.perf_counter()
        process = subprocess.run(command, cwd=workdir, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        elapsed = time.perf_counter() - started
    if process.returncode:
        sys.exit(f"snakemake -n failed for {config}:\n{process.stdout[-3000:]}")
    total = re.search(r"^total\s+(\d+)", process.stdout, flags=re.M)
    return elapsed, int(total.group(1)) if total else 0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", type=Path, default=PAPER_GRIDS)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    summary = {}
    for config in args.configs:
        runs = [plan(config) for _ in range(args.repeats)]
        seconds, jobs = statistics.median(r[0] for r in runs), runs[0][1]
        summary[config.stem] = {"jobs": jobs, "seconds": round(seconds, 1)}
        print(f"{config.stem:>8}: {jobs:6d} jobs planned in {seconds:5.1f} s (median of {args.repeats})", flush=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
