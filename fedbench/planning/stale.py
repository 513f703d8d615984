"""Which finished results were produced by code that has changed since (their recorded
provenance, :mod:`fedbench.run.provenance`, against the code now)::

    python -m fedbench.planning.stale --configfile config/config.yaml            # report
    python -m fedbench.planning.stale --configfile config/config.yaml --paths    # files, for snakemake -R
    python -m fedbench.planning.stale --configfile ... --algorithm fedavg        # one algorithm only

and ``make rerun-stale`` reruns exactly those (``snakemake --forcerun <files>``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedbench.config.cells import expand_partitions, resolve_cell
from fedbench.config.layout import partition_stem
from fedbench.registry.plugins import load_plugins
from fedbench.run.provenance import (
    CELL_SCRIPTS, ENCODER_SCRIPTS, PARTITION_SCRIPTS, cell_roots, changed_files, encoder_roots, partition_roots,
)
from fedbench.config.files import load_yaml_strict
from fedbench.planning.jobs import planned_runs


def stale_outputs(config: dict, algorithm: str | None = None) -> list[tuple[str, list[str] | None]]:
    """``(file, changed code files or None if unrecorded)`` of every finished partition, encoder and training
    run of ``config`` (:func:`fedbench.planning.jobs.planned_runs`: cells, tuning trials, tuned runs and the seeds
    the claims' looks added) whose code has changed since it was produced (runs of ``algorithm`` only, where
    given; partitions and encoders are then left out)."""
    results = config.get("results", "results")
    load_plugins(config.get("plugins") or ())  # a plugin's cells are hashed with the plugin's code
    out = []
    if algorithm is None:
        for name, entry in config.get("encoders", {}).items():
            path = Path(results) / "encoders" / f"{name}.pt"
            if not path.exists():
                continue
            import torch

            recorded = torch.load(path, map_location="cpu", weights_only=True).get("provenance")
            changed = changed_files(recorded, encoder_roots(config["datasets"][entry["dataset"]]), ENCODER_SCRIPTS)
            if changed is None or changed:
                out.append((str(path), changed))
        for dataset, partition, seed in expand_partitions(config):
            stem = partition_stem(results, dataset, partition, seed)
            meta = Path(f"{stem}.json")
            if not meta.exists():
                continue
            recorded = json.loads(meta.read_text()).get("provenance")
            roots = partition_roots(config["datasets"][dataset], config["partitions"][partition])
            changed = changed_files(recorded, roots, PARTITION_SCRIPTS)
            if changed is None or changed:
                out.append((f"{stem}.npz", changed))
    for run in planned_runs(config):  # every run the plan may write: cells, trials, tuned runs, the looks' seeds
        metrics = Path(run.file(results, "metrics.json"))
        if (algorithm is not None and run.cell.algorithm != algorithm) or not metrics.exists():
            continue
        recorded = json.loads(metrics.read_text()).get("provenance")
        changed = changed_files(recorded, cell_roots(resolve_cell(config, run.cell)), CELL_SCRIPTS)
        if changed is None or changed:
            out.append((str(metrics), changed))
    return out


def _merge(base: dict, update: dict) -> dict:
    """Snakemake's config merge: nested mappings are merged, everything else replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedbench.planning.stale",
        description="List finished cells and partitions whose code changed since they were produced.",
    )
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"],
                        help="config file(s), merged in order as snakemake --configfile does")
    parser.add_argument("--algorithm", help="only the cells of this algorithm entry")
    parser.add_argument("--paths", action="store_true", help="print only the files (for snakemake --forcerun)")
    args = parser.parse_args(argv)

    config: dict = {}
    for path in args.configfile:
        _merge(config, load_yaml_strict(path))
    stale = stale_outputs(config, args.algorithm)
    if args.paths:
        print(" ".join(path for path, _ in stale))
        return 0
    if not stale:
        print("every finished cell and partition was produced by the current code")
        return 0
    for path, changed in stale:
        why = "no provenance recorded" if changed is None else "changed: " + ", ".join(changed)
        print(f"{path}  ({why})")
    print(f"{len(stale)} out of date; rerun them with: make rerun-stale CONFIG='{' '.join(args.configfile)}'"
          + (f" ALGORITHM={args.algorithm}" if args.algorithm else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
