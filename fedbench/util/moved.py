"""The modules that moved when the flat package root became one package per concern (issue 54), and
an import hook that keeps their old names working for a transition: ``import fedbench.contract``
gives :mod:`fedbench.extension.contract` itself (one module object, so a registry is never
duplicated) with a :class:`DeprecationWarning`, and ``python -m fedbench.stale`` runs
:mod:`fedbench.planning.stale`.  docs/extending.md lists the table for plugin authors.

Modules that were split have no alias (``fedbench.config``, ``fedbench.cost``, ``fedbench.tuning``
and ``fedbench.registry`` are packages now; ``fedbench.registry`` re-exports what plugins import),
except where the package re-exports what their importers use: ``fedbench.workload``, split into
:mod:`fedbench.cost`'s modules, is the package itself (``cell_cost``, ``estimated_shape``, ``summary_shape``, ``runtime_minutes``, ``choose_device``,
``CellShape``, ``model_cost``, ...: :data:`fedbench.cost.PUBLIC`)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

MOVED = {
    "fedbench.algorithm_registry": "fedbench.registry.algorithms",
    "fedbench.search_space": "fedbench.registry.search_space",
    "fedbench.plugins": "fedbench.registry.plugins",
    "fedbench.protocols": "fedbench.registry.protocols",
    "fedbench.threads": "fedbench.util.threads",
    "fedbench.validation": "fedbench.config.files",
    "fedbench.workload": "fedbench.cost",
    "fedbench.job_memory": "fedbench.cost.memory",
    "fedbench.cost_fit": "fedbench.planning.cost_fit",
    "fedbench.cost_report": "fedbench.planning.cost_report",
    "fedbench.checkpoint": "fedbench.run.checkpoint",
    "fedbench.provenance": "fedbench.run.provenance",
    "fedbench.tracking": "fedbench.run.tracking",
    "fedbench.pipeline": "fedbench.run.stages",
    "fedbench.contract": "fedbench.extension.contract",
    "fedbench.scaffold": "fedbench.extension.scaffold",
    "fedbench.plan": "fedbench.planning.validate",
    "fedbench.preflight": "fedbench.planning.preflight",
    "fedbench.stale": "fedbench.planning.stale",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module now at ``target`` (and gives ``runpy`` its code for ``-m``)."""

    def __init__(self, old: str, target: str):
        self.old, self.target = old, target

    def create_module(self, spec):
        warnings.warn(f"{self.old} moved to {self.target}; import it from there", DeprecationWarning, stacklevel=3)
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # importlib sets the alias's spec on the module next: put it back then
        return module

    def exec_module(self, module) -> None:
        """The target module ran when it was imported; nothing is executed twice."""
        module.__spec__ = self.spec

    def get_code(self, fullname: str):
        return importlib.util.find_spec(self.target).loader.get_code(self.target)


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        moved = importlib.util.find_spec(MOVED[fullname])  # its origin: where the old name's code now is
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, MOVED[fullname]), origin=moved.origin)


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``fedbench/__init__.py`` calls it)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
