"""Which code produced a result, and which finished results were produced by code that has
changed since.

Every ``metrics.json`` (and every partition's ``.json`` and encoder's ``.pt``) records its provenance: the fedbench
version, the git commit of the repository (and whether its work tree had uncommitted
changes), and a hash of the code that ran it: the fedbench modules the job runs, found by
following the imports of its entry point and of the builders its config entry names (a cell:
``fedbench.pipeline`` + its algorithm's, model's and dataset source's modules; a partition:
``fedbench.data.partition`` + its partitioner's and dataset source's modules; an encoder:
``fedbench.algorithms.flt_encoders`` + its dataset source's module).  A package's
``__init__`` is hashed but not followed, so that editing one algorithm's module changes the
hash of that algorithm's cells only.  The rule's own script (``workflow/scripts/train.py`` and
the ``common.py`` it imports, for a cell) is hashed too: Snakemake's ``code`` rerun trigger is
off (profiles/default), so an edit of the script is listed here and never retrains by itself.

The workflow does not rerun finished cells when library code changes (their provenance says
what ran them); this module's command line lists what is out of date::

    python -m fedbench.provenance --configfile config/config.yaml            # report
    python -m fedbench.provenance --configfile config/config.yaml --paths    # files, for snakemake -R
    python -m fedbench.provenance --configfile ... --algorithm fedavg        # one algorithm only

and ``make rerun-stale`` reruns exactly those (``snakemake --forcerun <files>``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import fedbench

PACKAGE = "fedbench"
REPO = Path(fedbench.__file__).resolve().parents[1]


# ---- the code a job runs ------------------------------------------------------------------


@lru_cache(maxsize=None)
def _spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _is_package(name: str) -> bool:
    spec = _spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def _defining_module(package: str, name: str) -> str:
    """The module that defines ``name`` as imported ``from package import name``."""
    if _spec(f"{package}.{name}") is not None:
        return f"{package}.{name}"
    obj = getattr(importlib.import_module(package), name, None)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__
    return package  # a constant or registry instance: the module it is imported from


@lru_cache(maxsize=None)
def _imports(module: str) -> tuple[str, ...]:
    """fedbench modules ``module`` imports (statically, from its source; packages are not followed)."""
    spec = _spec(module)
    if spec is None or spec.origin is None or _is_package(module):
        return ()
    tree = ast.parse(Path(spec.origin).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.rsplit(".", node.level)[0]
                base = f"{parent}.{base}" if base else parent
            if base == PACKAGE or base.startswith(PACKAGE + "."):
                found += [_defining_module(base, alias.name) for alias in node.names]
    return tuple(sorted({m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}))


def code_modules(*roots: str) -> list[str]:
    """``roots`` and every fedbench module they import, transitively, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module in seen or _spec(module) is None:
            continue
        seen.add(module)
        todo += _imports(module)
    return sorted(seen)


def file_hashes(modules: list[str]) -> dict[str, str]:
    """Repository-relative path -> SHA-256 (first 16 hex digits) of every module's source."""
    out = {}
    for module in modules:
        path = Path(_spec(module).origin).resolve()
        try:
            name = str(path.relative_to(REPO))
        except ValueError:
            name = str(path)
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return dict(sorted(out.items()))


# the rule scripts each kind of job runs (repository-relative), hashed beside its modules
CELL_SCRIPTS = ("workflow/scripts/train.py", "workflow/scripts/common.py")
PARTITION_SCRIPTS = ("workflow/scripts/partition.py", "workflow/scripts/common.py")
ENCODER_SCRIPTS = ("workflow/scripts/pretrain_encoder.py", "workflow/scripts/common.py")


def code_files(roots: list[str], scripts=()) -> dict[str, str]:
    """:func:`file_hashes` of ``roots`` and the modules they import, plus the rule ``scripts`` that exist."""
    files = file_hashes(code_modules(*roots))
    for script in scripts:
        path = REPO / script
        if path.exists():
            files[script] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return dict(sorted(files.items()))


def combined_hash(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def cell_roots(spec: dict) -> list[str]:
    """Entry modules of one cell (``spec`` as :func:`fedbench.config.resolve_cell` gives it)."""
    from fedbench.algorithms import ALGORITHMS
    from fedbench.data import DATASETS
    from fedbench.models import MODELS

    return [
        "fedbench.pipeline",
        ALGORITHMS[spec["algorithm"]["method"]].__module__,
        MODELS[spec["model"]["arch"]].__module__,
        DATASETS[spec["dataset"]["source"]].__module__,
    ]


def partition_roots(dataset: dict, partition: dict) -> list[str]:
    """Entry modules of one partition job."""
    from fedbench.data import DATASETS, PARTITIONERS

    return [
        "fedbench.data.partition",
        "fedbench.data.partition_file",
        PARTITIONERS[partition["kind"]].__module__,
        DATASETS[dataset["source"]].__module__,
    ]


def encoder_roots(dataset: dict) -> list[str]:
    """Entry modules of one encoder's pretraining."""
    from fedbench.data import DATASETS

    return ["fedbench.algorithms.flt_encoders", DATASETS[dataset["source"]].__module__]


@lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, work tree has uncommitted changes) of the repository, or (None, None) without git."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", PACKAGE],
            capture_output=True, text=True, timeout=20,
        )
        return commit.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def provenance(roots: list[str], scripts=()) -> dict:
    """The provenance record of a job whose entry modules are ``roots`` and rule scripts ``scripts``."""
    files = code_files(roots, scripts)
    commit, dirty = git_state()
    return {
        "fedbench_version": fedbench.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "code_hash": combined_hash(files),
        "code_files": files,
    }


# ---- what is out of date -------------------------------------------------------------------


def changed_files(recorded: dict | None, roots: list[str], scripts=()) -> list[str] | None:
    """Files whose code differs from the ``recorded`` provenance (added, removed or edited);
    ``None`` when there is no record (a result written before provenance was recorded).  A rule
    script the record does not list (recorded before scripts were hashed) is not compared."""
    if not recorded or "code_files" not in recorded:
        return None
    before = recorded["code_files"]
    now = code_files(roots, [script for script in scripts if script in before])
    return sorted(name for name in set(now) | set(before) if now.get(name) != before.get(name))


def stale_outputs(config: dict, algorithm: str | None = None) -> list[tuple[str, list[str] | None]]:
    """``(file, changed code files or None if unrecorded)`` of every finished partition and cell
    of ``config`` whose code has changed since it was produced (cells of ``algorithm`` only,
    where given; its partitions are then left out)."""
    from fedbench.config import expand_cells, expand_partitions, partition_stem, resolve_cell

    results = config.get("results", "results")
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
    for cell in expand_cells(config):
        if algorithm is not None and cell.algorithm != algorithm:
            continue
        metrics = Path(cell.run_dir(results)) / "metrics.json"
        if not metrics.exists():
            continue
        recorded = json.loads(metrics.read_text()).get("provenance")
        changed = changed_files(recorded, cell_roots(resolve_cell(config, cell)), CELL_SCRIPTS)
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
        prog="python -m fedbench.provenance",
        description="List finished cells and partitions whose code changed since they were produced.",
    )
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"],
                        help="config file(s), merged in order as snakemake --configfile does")
    parser.add_argument("--algorithm", help="only the cells of this algorithm entry")
    parser.add_argument("--paths", action="store_true", help="print only the files (for snakemake --forcerun)")
    args = parser.parse_args(argv)

    from fedbench.validation import load_yaml_strict

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
