"""Which code produced a result, and which finished results were produced by code that has
changed since.

Every ``metrics.json`` (and every partition's ``.json`` and encoder's ``.pt``) records its provenance: the fedbench
version, the git commit of the repository (and whether its work tree had uncommitted
changes), and a hash of the code that ran it: the fedbench modules the job runs, found by
following the imports of its entry point and of the builders its config entry names (a cell:
``fedbench.run.stages`` + its algorithm's, model's and dataset source's modules; a partition:
``fedbench.data.partition`` + its partitioner's and dataset source's modules; an encoder:
``fedbench.algorithms.flt_encoders`` + its dataset source's module).  A builder from a plugin
(:mod:`fedbench.registry.plugins`) is hashed the same way: its module and the modules of its own package it
imports, so editing a plugin makes its cells stale.  A package's
``__init__`` is hashed but not followed, so that editing one algorithm's module changes the
hash of that algorithm's cells only.  The rule's own script (``workflow/scripts/train.py`` and
the ``common.py`` it imports, for a cell) is hashed too: Snakemake's ``code`` rerun trigger is
off (profiles/default), so an edit of the script is listed here and never retrains by itself.

The workflow does not rerun finished cells when library code changes (their provenance says
what ran them); :mod:`fedbench.planning.stale` lists what is out of date (``make stale``) and ``make
rerun-stale`` reruns exactly those.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import subprocess
from functools import lru_cache
from pathlib import Path

import fedbench
from fedbench.run.code_ledger import translate

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
    """fedbench modules and modules of its own top-level package (a plugin's) that ``module`` imports
    (statically, from its source; packages are not followed)."""
    spec = _spec(module)
    if spec is None or spec.origin is None or _is_package(module):
        return ()
    tree = ast.parse(Path(spec.origin).read_text())
    followed = {PACKAGE, module.split(".")[0]}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.rsplit(".", node.level)[0]
                base = f"{parent}.{base}" if base else parent
            if base.split(".")[0] in followed:
                found += [_defining_module(base, alias.name) for alias in node.names]
    return tuple(sorted({m for m in found if m.split(".")[0] in followed}))


def code_modules(*roots: str) -> list[str]:
    """``roots`` and every fedbench module (and plugin module of a root's package) they import, transitively, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module in seen or _spec(module) is None:
            continue
        seen.add(module)
        todo += _imports(module)
    return sorted(seen)


def file_hashes(modules: list[str]) -> dict[str, str]:
    """Repository-relative path -> SHA-256 (first 16 hex digits) of every module's source (a plugin's
    module, wherever it is installed: its path in its package, ``plugin:my_package/method.py``)."""
    out = {}
    for module in modules:
        path = Path(_spec(module).origin).resolve()
        if module.split(".")[0] != PACKAGE:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            name = "plugin:" + "/".join([*package, path.name])
        else:
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
    """Entry modules of one cell (``spec`` as :func:`fedbench.config.cells.resolve_cell` gives it)."""
    from fedbench.registry.algorithms import ALGORITHMS
    from fedbench.data import DATASETS
    from fedbench.models import MODELS

    return [
        "fedbench.run.stages",
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
    script the record does not list (recorded before scripts were hashed) is not compared.  A record
    written before a behaviour-preserving refactor (:mod:`fedbench.run.code_ledger`) is read in the terms
    of the tree after it: only the files the job runs now count, each against what the record says of
    its predecessors, or against the refactor's own hash where the record lists none."""
    if not recorded or "code_files" not in recorded:
        return None
    before, baseline = translate(recorded["code_files"])
    now = code_files(roots, [script for script in scripts if script in before])
    if baseline is None:
        return sorted(name for name in set(now) | set(before) if now.get(name) != before.get(name))
    return sorted(name for name in now if now[name] != before.get(name, baseline.get(name)))
