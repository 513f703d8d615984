"""What a plan's jobs would hit, checked when the workflow plans (through
:func:`fedbench.planning.validate.validate_config`, given the :class:`Workplace`): where results go, whether
the data is there, whether the run can end.  Each refusal is one line naming the key, the problem
and what to do, raised before anything is written.

* ``results``: not the filesystem root, a home directory, the repository root or a folder holding
  the repository's own files (or the repository itself), nor an existing file;
* the data: every dataset the plan reads has its files under ``data_root`` (each source's
  registered ``files`` check, the message its loader would raise), unless ``download: true``;
  ``check_data: false`` skips this where compute nodes see other disks than the planning host;
* the run time: the cost model's estimate of every cell on the device the training jobs will use
  (:mod:`fedbench.cost`); a cell over :data:`LONG_CELL_DAYS` is refused unless ``allow_long: true``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fedbench.config.cells import TRAINING_DEFAULTS, Cell, ConfigError, expand_partitions, planned_encoders, resolve_cell
from fedbench.cost import cell_cost, device_kind
from fedbench.planning.cost_report import cell_shape, planned_jobs
from fedbench.data.sources import missing_files
from fedbench.planning.missing_data import skips_missing, without_missing
from fedbench.results.claims.spec import evaluated_claims

LONG_CELL_DAYS = 7  # a cell estimated longer than this on its device is refused unless allow_long: true
# training settings that scale a cell's time, tried at their defaults to name the one that drives it
SCALING_SETTINGS = ("rounds", "local_epochs", "participation", "batch_size", "eval_every", "train_eval_every")
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}


@dataclass(frozen=True)
class Workplace:
    """Where a plan runs: the repository (the Snakefile's folder), the working directory that
    ``results`` and ``data_root`` are relative to, the GPUs a training job requests, and whether the
    command names the ``claims`` target alone (the estimate then counts only what the claims read)."""

    repo: Path
    workdir: Path
    train_gpus: int = 0
    claims_only: bool = False


def check_workplace(config: dict, place: Workplace) -> PlanEstimate:
    """Refuse (:class:`ConfigError`, one line) what the jobs would hit; return the plan's estimate."""
    check_results(config.get("results", "results"), place)
    if place.claims_only:
        check_claims_target(config)
    if skips_missing(config):
        config = without_missing(config, place.workdir)[0]  # the cells whose data is there
    elif config.get("check_data", True):
        check_data(config, place)
    estimate = plan_estimate(config, plan_device(config.get("device", "auto"), place.train_gpus), place)
    if not config.get("allow_long", False):
        check_run_length(config, estimate, place)
    return dataclasses.replace(estimate, notes=tuple(plan_notes(config, place)))


def plan_device(device: str, train_gpus: int = 0) -> str:
    """``cpu`` or ``cuda``: the config's ``device``; for ``auto``, cuda where training jobs request a
    GPU (the SLURM profile's ``gpu: 1``) or this machine has one."""
    if device != "auto":
        return device_kind(device)
    return "cuda" if train_gpus > 0 else device_kind("auto")


# ---- where results go ----------------------------------------------------------------------


def check_results(results: str, place: Workplace) -> None:
    """Refuse a ``results`` folder that would scatter the jobs' outputs where they do not belong."""
    problem = results_problem(Path(place.workdir, results), place.repo)
    if problem:
        raise ConfigError(f"results: {results!r} {problem}; name a folder of its own (the default: results)")


def results_problem(path: Path, repo: Path) -> str | None:
    """Why ``path`` cannot hold partitions/, runs/ and tables/, or ``None``."""
    path, repo = Path(os.path.realpath(path)), Path(os.path.realpath(repo))
    blocker = _file_on_the_way(path)
    if blocker is not None:
        return "is an existing file" if blocker == path else f"lies under {blocker}, an existing file"
    if path == Path(path.anchor):
        return "is the filesystem root"
    if _is_home(path):
        return "is a home directory"
    if path == repo:
        return "is the repository root"
    if path in repo.parents:
        return f"contains the repository ({repo})"
    tracked = _tracked_file(repo, path)
    if tracked is not None:
        return f"holds the repository's own files ({tracked}, ...)"
    return None


def _file_on_the_way(path: Path) -> Path | None:
    """The nearest existing ``path`` or parent of it, where that is not a folder."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def _is_home(path: Path) -> bool:
    """``path`` is this user's home, or the home of the user it is named after (``/home/alice``)."""
    if path == Path(os.path.realpath(Path.home())):
        return True
    try:
        import pwd

        return path == Path(os.path.realpath(pwd.getpwnam(path.name).pw_dir))
    except (ImportError, KeyError):  # not a POSIX system; no such user
        return False


def _tracked_file(repo: Path, path: Path) -> str | None:
    """A file git tracks under ``path`` (inside ``repo``), relative to the repository; ``None``
    where there is none or git cannot tell (no git, not a checkout)."""
    if repo not in path.parents:
        return None
    try:
        listed = subprocess.run(
            ["git", "--literal-pathspecs", "-C", str(repo), "ls-files", "--", str(path.relative_to(repo))],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next(iter(listed.splitlines()), None)


# ---- what the claims target evaluates ------------------------------------------------------


def check_claims_target(config: dict) -> None:
    """Refuse the ``claims`` target where ``only_experiments`` leaves out every claim's experiment (it would
    evaluate nothing); a claim left out beside others that run is named in the plan's notes (:func:`plan_notes`)."""
    claims = config.get("claims") or {}
    if not claims:
        raise ConfigError("claims: the config has no claims; the claims target evaluates the config's claims "
                          "(run the tables target, or add claims)")
    if not evaluated_claims(config):
        name, claim = next(iter(claims.items()))
        raise ConfigError(f"claims.{name}.experiment: {claim['experiment']!r} is left out by only_experiments "
                          f"{config['only_experiments']}, as every claim's experiment is: the claims target would "
                          "evaluate nothing; add the claims' experiments to only_experiments")


def plan_notes(config: dict, place: Workplace) -> list[str]:
    """Lines planning prints beside its estimate: claims ``only_experiments`` leaves out, a ``results``
    folder outside the repository."""
    notes = []
    left_out = sorted(set(config.get("claims") or {}) - set(evaluated_claims(config)))
    if left_out and config.get("only_experiments") is not None:
        notes.append(f"fedbench plan: claims {', '.join(left_out)} left out (their experiments are not in only_experiments)")
    results = Path(os.path.realpath(Path(place.workdir, config.get("results", "results"))))
    inside = [Path(os.path.realpath(folder)) for folder in (place.repo, place.workdir)]
    if not any(folder in results.parents for folder in inside):
        notes.append(f"fedbench plan: results go to {results}, outside the repository and the working directory "
                     "(accepted: a folder of its own)")
    return notes


# ---- whether the data is there -------------------------------------------------------------


def planned_datasets(config: dict) -> list[str]:
    """The dataset entries the planned jobs read: those of their partitions (the cells ``only_experiments``
    keeps, ``partition_grid``) and of the encoders they pretrain (:func:`~fedbench.config.cells.planned_encoders`)."""
    names = {dataset for dataset, _, _ in expand_partitions(config)}
    names |= {config["encoders"][name]["dataset"] for name in planned_encoders(config)}
    return sorted(names)


def check_data(config: dict, place: Workplace) -> None:
    """Refuse a plan whose datasets' files are not under ``data_root``, naming every missing one (with
    ``missing_data: skip``, only where no cell would be left, :mod:`fedbench.planning.missing_data`)."""
    root = Path(place.workdir, config.get("data_root", "data"))
    problems = []
    for name in planned_datasets(config):
        problem = missing_files(config["datasets"][name], root)
        if problem:
            problems.append(f"datasets.{name}: {problem.rstrip('.')}")
    if problems:
        raise ConfigError(
            "; ".join(problems) + "; to run only the cells whose data is there, set missing_data: skip; to plan without "
            "the data (or where the compute nodes see other disks than this host), set check_data: false"
        )


# ---- whether the run can end ---------------------------------------------------------------


@dataclass(frozen=True)
class PlanEstimate:
    """The cost model's estimate of a plan on one device: its training jobs, their seconds in all,
    the longest cell and whether every figure rests on a measured throughput."""

    device: str
    jobs: int
    seconds: float
    largest: Cell | None
    largest_seconds: float
    calibrated: bool
    claims_only: bool = False
    notes: tuple[str, ...] = ()  # further lines planning prints (plan_notes)

    def line(self) -> str:
        """The estimate in one line, as planning prints it."""
        name = DEVICE_NAMES[self.device]
        scope = "fedbench plan (target claims)" if self.claims_only else "fedbench plan"
        if self.largest is None:
            return f"{scope}: no training jobs"
        assumed = "" if self.calibrated else ", partly at the device's assumed throughput"
        return (
            f"{scope}: {self.jobs} training jobs, ≈ {self.seconds / 3600:,.1f} {name}-hours (one {name} per job"
            f"{assumed}); the largest cell, {cell_name(self.largest)}, ≈ {duration(self.largest_seconds)}"
        )


def plan_estimate(config: dict, device: str, place: Workplace) -> PlanEstimate:
    """Every training job's estimated run time on ``device`` (``cpu``, ``cuda``): the cells, tuning trials
    and tuned runs (:func:`fedbench.planning.cost_report.planned_jobs`; not the seeds the claims' looks may add,
    which depend on the runs; with ``place.claims_only``, those the claims read), the sum and the longest."""
    total, largest, longest, calibrated, jobs = 0.0, None, 0.0, True, 0
    for row, cell, cfg in planned_jobs(config, claims_only=place.claims_only, added=False):
        cost = cell_cost(*_cell_inputs(cfg, cell, place), device)
        jobs += 1
        total += cost.seconds
        calibrated &= cost.calibrated
        if cost.seconds > longest:
            largest, longest = cell, cost.seconds
    return PlanEstimate(device, jobs, total, largest, longest, calibrated, place.claims_only)


def check_run_length(config: dict, estimate: PlanEstimate, place: Workplace) -> None:
    """Refuse a plan whose longest cell would run over :data:`LONG_CELL_DAYS` on its device,
    naming the training setting that drives it."""
    if estimate.largest_seconds <= LONG_CELL_DAYS * 86400:
        return
    cell = estimate.largest
    key, value = driving_setting(config, cell, estimate.device, place)
    name = DEVICE_NAMES[estimate.device]
    gpu = ", plan for a GPU (device: cuda)" if estimate.device == "cpu" else ""
    raise ConfigError(
        f"experiments.{cell.experiment}.training.{key} = {value!r}: the largest cell, {cell_name(cell)}, would take "
        f"≈ {duration(estimate.largest_seconds)} on the {name}, over the {LONG_CELL_DAYS}-day limit per cell; "
        f"lower it{gpu}, or set allow_long: true"
    )


def driving_setting(config: dict, cell: Cell, device: str, place: Workplace) -> tuple[str, object]:
    """The training setting of the cell's experiment whose default would shorten the cell the most,
    with its value (``rounds``, which scales every cell, where no setting would)."""
    spec, shape = _cell_inputs(config, cell, place)
    best, shortest = "rounds", cell_cost(spec, shape, device).seconds
    for key in SCALING_SETTINGS:
        if key not in config["experiments"][cell.experiment].get("training", {}):
            continue
        changed = copy.deepcopy(spec)
        changed["training"][key] = TRAINING_DEFAULTS[key]
        seconds = cell_cost(changed, shape, device).seconds
        if seconds < shortest:
            best, shortest = key, seconds
    return best, spec["training"][best]


def _cell_inputs(config: dict, cell: Cell, place: Workplace):
    """A cell's spec and shape (from its partition's summary under ``results`` where it exists)."""
    spec = resolve_cell(config, cell)
    located = {**config, "results": str(Path(place.workdir, config.get("results", "results")))}
    return spec, cell_shape(located, cell, spec)


def cell_name(cell: Cell) -> str:
    return f"{cell.experiment}/{cell.dataset}/{cell.partition}/{cell.model}/{cell.algorithm} seed {cell.seed}"


def duration(seconds: float) -> str:
    """``seconds`` in the unit a reader takes in at once: s, min, h, days or years."""
    for unit, size, limit in (("s", 1, 90), ("min", 60, 5400), ("h", 3600, 172800), ("days", 86400, 2 * 365 * 86400)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}" if unit in ("s", "min") else f"{seconds / size:.1f} {unit}"
    return f"{seconds / (365.25 * 86400):,.0f} years"
