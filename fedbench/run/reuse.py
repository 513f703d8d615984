"""A tuned run that needs no training: where tuning chose the configured setting, the
paper-setting run of the same cell and seed has the same numbers (same seed, settings and code),
so ``train_tuned`` copies its files (:func:`reusable_paper_run`, :func:`copy_run`)."""

from __future__ import annotations

import json
from pathlib import Path

from fedbench.config.cells import Cell, resolve_cell, results_settings
from fedbench.data.partition_file import atomic_write
from fedbench.run.provenance import CELL_SCRIPTS, cell_roots, changed_files

RUN_FILES = ("history.csv", "clients.csv", "metrics.json")
"""The files a finished run leaves (metrics.json written last)."""


def same_numbers(paper_spec: dict, tuned_spec: dict) -> bool:
    """Whether a tuned run would compute the paper-setting run's numbers: every setting they depend on is the
    same (:func:`fedbench.config.cells.results_settings`; same seed and code given)."""
    return results_settings(tuned_spec) == results_settings(paper_spec)


def finished_with_current_code(run: Path, spec: dict) -> bool:
    """Whether the run directory ``run`` holds a finished run of ``spec`` whose recorded provenance is the code now."""
    if not all((run / name).exists() for name in RUN_FILES):
        return False
    recorded = json.loads((run / "metrics.json").read_text()).get("provenance")
    return changed_files(recorded, cell_roots(spec), CELL_SCRIPTS) == []


def reusable_paper_run(config: dict, chosen_config: dict, cell: Cell) -> Path | None:
    """The paper-setting run of ``cell`` where tuning chose the configured setting: the run directory
    when ``chosen_config`` gives the cell the same settings as ``config`` (:func:`same_numbers`) and that
    run has finished with the code now (:func:`finished_with_current_code`); else None."""
    spec = resolve_cell(config, cell)
    run = Path(cell.run_dir(config.get("results", "results")))
    reusable = same_numbers(spec, resolve_cell(chosen_config, cell)) and finished_with_current_code(run, spec)
    return run if reusable else None


def copy_run(source: Path, out_dir: Path) -> None:
    """The run files of ``source`` into ``out_dir`` (each atomically, metrics.json last), the metrics
    naming the run they come from (``reused_from``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES[:-1]:
        atomic_write(out_dir / name, lambda p, name=name: Path(p).write_bytes((source / name).read_bytes()))
    metrics = {**json.loads((source / "metrics.json").read_text()), "reused_from": str(source)}
    atomic_write(out_dir / "metrics.json", lambda p: Path(p).write_text(json.dumps(metrics, indent=1)))
