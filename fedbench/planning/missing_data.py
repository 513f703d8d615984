"""The part of a grid whose data is on disk (``missing_data: skip``): the cells whose dataset, or whose
algorithm's pretrained encoder's dataset, has no files under ``data_root`` are left out of the plan, and
each is listed with the reason (``tables/left_out.csv`` and ``.md``, in the report beside the scorecard),
never silently missing.  The default, ``missing_data: refuse``, stops planning instead
(:func:`fedbench.planning.preflight.check_data`).

Which cells are left out depends on what is on disk when the workflow plans (each job plans again,
the same way): a dataset downloaded later is planned by the next run."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from fedbench.config.cells import ConfigError, expand_cells
from fedbench.data.sources import missing_files
from fedbench.results.claims.spec import ClaimError, claim_cells

LEFT_OUT_COLUMNS = ("experiment", "dataset", "partition", "model", "algorithm", "reason")


def skips_missing(config: dict) -> bool:
    """``missing_data: skip``, where the data is looked at (``check_data`` not false)."""
    return config.get("missing_data", "refuse") == "skip" and config.get("check_data", True) is not False


def without_missing(config: dict, workdir: Path) -> tuple[dict, list[dict]]:
    """A copy of ``config`` without the cells whose data is not on disk, and one row per cell left out
    (:data:`LEFT_OUT_COLUMNS`); :class:`ConfigError` where nothing would be left."""
    reduced = copy.deepcopy(config)
    rows = leave_out_missing(reduced, workdir)
    return reduced, rows


def leave_out_missing(config: dict, workdir: Path) -> list[dict]:
    """Remove from ``config``, in place, every planned cell whose data is missing (its grid blocks narrowed,
    an experiment left with no cell dropped from ``only_experiments``, a claim left with no cell removed);
    returns the rows of what was left out.  Nothing, unless ``missing_data: skip``."""
    if not skips_missing(config):
        return []
    missing = functools.lru_cache(maxsize=None)(lambda name: _missing(config, name, workdir))
    planned = sorted({cell.experiment for cell in expand_cells(config)})
    rows, kept = [], []
    for experiment in planned:
        spec = config["experiments"][experiment]
        blocks = []
        for block in spec["grid"]:
            rows += _left_out_rows(config, experiment, block, missing)
            datasets = [d for d in block["datasets"] if missing(d) is None]
            algorithms = [a for a in block["algorithms"] if _encoder_problem(config, a, missing) is None]
            if datasets and algorithms:
                blocks.append({**block, "datasets": datasets, "algorithms": algorithms})
        spec["grid"] = blocks or spec["grid"]
        if blocks:
            kept.append(experiment)
    if not kept:
        raise ConfigError(f"missing_data: skip leaves no cell to run: {rows[0]['reason']}" if rows else
                          "missing_data: skip leaves no cell to run")
    if rows:
        config["only_experiments"] = kept
        config["partition_grid"] = [b for b in ({**b, "datasets": [d for d in b["datasets"] if missing(d) is None]}
                                                for b in config.get("partition_grid", [])) if b["datasets"]]
        rows += _drop_claims(config)
    return rows


def _missing(config: dict, dataset: str, workdir: Path) -> str | None:
    """Why dataset entry ``dataset`` has no files under ``data_root``, or ``None``."""
    problem = missing_files(config["datasets"][dataset], Path(workdir, config.get("data_root", "data")))
    return None if problem is None else f"datasets.{dataset}: {problem.rstrip('.')}"


def _encoder_problem(config: dict, algorithm: str, missing) -> str | None:
    """Why an algorithm's pretrained encoder cannot be trained (its dataset's files are missing), or ``None``."""
    encoder = config["algorithms"][algorithm].get("encoder")
    if encoder is None or encoder not in config.get("encoders", {}):
        return None
    problem = missing(config["encoders"][encoder]["dataset"])
    return None if problem is None else f"encoders.{encoder} reads {problem}"


def _left_out_rows(config: dict, experiment: str, block: dict, missing) -> list[dict]:
    rows = []
    for dataset in block["datasets"]:
        for algorithm in block["algorithms"]:
            reason = missing(dataset) or _encoder_problem(config, algorithm, missing)
            if reason is None:
                continue
            rows += [dict(zip(LEFT_OUT_COLUMNS, (experiment, dataset, partition, model, algorithm, reason)))
                     for partition in block["partitions"] for model in block["models"]]
    return rows


def _drop_claims(config: dict) -> list[dict]:
    """Remove the claims whose cells were all left out (the claim cannot be tested on the data there is);
    a row for each."""
    rows = []
    for name in list(config.get("claims") or {}):
        try:
            claim_cells(config, name)
        except ClaimError:
            claim = config["claims"].pop(name)
            rows.append(dict(zip(LEFT_OUT_COLUMNS, (claim["experiment"], "-", "-", "-", "-",
                                                    f"claims.{name}: every cell it is tested on is left out"))))
    return rows


def left_out_table(rows: list[dict]) -> str:
    """The cells left out as a Markdown table (what ``tables/left_out.md`` holds)."""
    if not rows:
        return "No cell was left out: every dataset the grid reads is on disk.\n"
    lines = ["| " + " | ".join(LEFT_OUT_COLUMNS) + " |", "|" + "---|" * len(LEFT_OUT_COLUMNS)]
    lines += ["| " + " | ".join(str(row[c]).replace("|", "\\|") for c in LEFT_OUT_COLUMNS) + " |" for row in rows]
    return f"{len(rows)} cells left out (missing_data: skip): their data is not on disk.\n\n" + "\n".join(lines) + "\n"
