"""``kill -9`` of the whole workflow mid-grid, then a rerun: only the unfinished cells are trained
again (a cell that was cut off resumes from its checkpoint), no partial file is ever taken as
finished, and the tables equal an uninterrupted run's (Markdown byte for byte, CSV except the
wall time).  Slow (two tiny workflow runs): ``pytest -m slow tests/test_workflow_kill.py``."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
CELLS = 4  # tiny_config: 2 partitions x 2 algorithms x 1 seed


def command(workdir: Path, *args: str) -> list[str]:
    return [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(workdir / "config.yaml"), "--cores", "1", *args]


def prepare(workdir: Path) -> Path:
    config = yaml.safe_load((REPO / "tests" / "data" / "tiny_config.yaml").read_text())
    # long enough to be caught mid-cell, checkpointed every round so the cut-off cell resumes
    config["experiments"]["tiny"]["training"].update(rounds=400, eval_every=100, checkpoint_every=5)
    workdir.mkdir(parents=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return workdir


def finished(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "runs").glob("**/metrics.json"))


def trained_cells(output: str) -> int:
    """How many train_cell jobs a Snakemake run executed (its job-stats table)."""
    for line in output.split("Job stats:", 1)[-1].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "train_cell":
            return int(parts[1])
    return 0


@pytest.mark.slow
def test_kill_9_mid_grid_then_rerun(tmp_path):
    whole = prepare(tmp_path / "whole")
    subprocess.run(command(whole, "tables"), check=True, capture_output=True, timeout=900)

    cut = prepare(tmp_path / "cut")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command(cut, "tables"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env=env)
    deadline = time.time() + 600
    # kill once one cell is finished and another is past its first checkpoint
    while time.time() < deadline and not (finished(cut) and list((cut / "results" / "runs").glob("**/checkpoint.pt"))):
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the workflow and every job it started
    process.wait()
    done_before = finished(cut)
    assert 1 <= len(done_before) < CELLS, "the kill came too late or too early to test anything"
    for path in done_before:  # whatever is there is whole
        json.loads(path.read_text())
    resumable = [p for p in (cut / "results" / "runs").glob("**/checkpoint.pt")]
    assert resumable, "no cell was cut off after a checkpoint"
    stamps = {p: p.stat().st_mtime_ns for p in done_before}

    subprocess.run(command(cut, "--unlock"), check=True, capture_output=True)
    rerun = subprocess.run(command(cut, "tables"), capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    output = rerun.stdout + rerun.stderr
    assert trained_cells(output) == CELLS - len(done_before)  # only the unfinished cells
    assert all(p.stat().st_mtime_ns == stamps[p] for p in done_before)  # finished cells untouched
    assert "resuming from" in "".join(p.read_text() for p in (cut / "results" / "logs" / "train").glob("**/*.log"))
    assert not list((cut / "results" / "runs").glob("**/checkpoint.pt"))

    tables = Path("results/tables")
    assert (whole / tables / "results.md").read_bytes() == (cut / tables / "results.md").read_bytes()
    a, b = (pd.read_csv(root / tables / "results.csv").drop(columns="wall_time_s") for root in (whole, cut))
    pd.testing.assert_frame_equal(a, b)
    for run in finished(whole):
        relative = run.relative_to(whole)
        assert (whole / relative.parent / "history.csv").read_bytes() == (cut / relative.parent / "history.csv").read_bytes()
