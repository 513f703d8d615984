"""Plugins: algorithms, models, dataset sources and partitioners defined in another package.

A plugin is a module whose import registers builders in fedbench's registries
(``@ALGORITHMS.register``, ``@MODELS.register``, ``@DATASETS.register``, ``@PARTITIONERS.register``),
which check them as they check a built-in's (the algorithm interface, parameter types and bounds).
It is found in two ways:

* an installed package's entry point in the group ``fedbench.plugins`` whose value names the module
  (``[project.entry-points."fedbench.plugins"] fedavgm = "fedbench_fedavgm.fedavgm"``);
* a config's top-level ``plugins: [my_package.my_method]``.

:func:`load_plugins` imports both, before a config's entries are checked and at the start of every
job.  A plugin that fails to import, fails a registry's check or registers nothing raises
:class:`PluginError`, one line naming it; whatever it registered before failing is taken back.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import sys
from typing import Iterable, Iterator

from fedbench.registry.core import REGISTRIES

GROUP = "fedbench.plugins"
# the packages whose import registers the built-ins: imported before a plugin, so that what the
# plugin registers is told apart from them (by name, as a registry's provider: no layer is crossed)
BUILTINS = ("fedbench.data", "fedbench.models", "fedbench.registry.protocols", "fedbench.algorithms")

LOADED: dict[str, str] = {}  # plugin module -> where it was named
_INSTALLED: dict[tuple[str, ...], list[tuple[str, str, str]]] = {}  # sys.path -> its plugins (read once per path)


class PluginError(ValueError):
    """A plugin module cannot be imported, fails a registry's check, or registers nothing."""


def installed() -> list[tuple[str, str, str]]:
    """``(entry point name, module, distribution)`` of every installed plugin, sorted (read once per
    ``sys.path``: a package installed while a process runs is seen by the next process)."""
    key = tuple(sys.path)
    if key not in _INSTALLED:
        found = []
        for point in importlib.metadata.entry_points(group=GROUP):
            distribution = point.dist.name if point.dist is not None else "unknown distribution"
            found.append((point.name, point.module, distribution))
        _INSTALLED[key] = sorted(found)
    return list(_INSTALLED[key])


def load_plugins(modules: Iterable[str] = (), entry_points: bool = True) -> list[str]:
    """Import the installed plugins (``entry_points``) and ``modules`` (a config's ``plugins``), each
    once per process; returns every plugin module loaded so far."""
    wanted = [(module, f"entry point {name!r} of {distribution}") for name, module, distribution in
              (installed() if entry_points else [])]
    wanted += [(module, "named in the config's plugins") for module in modules or ()]
    for module, origin in wanted:
        if module not in LOADED:
            load_plugin(module, origin)
    return list(LOADED)


def load_plugin(module: str, origin: str = "named in the config's plugins") -> None:
    """Import the plugin ``module``; :class:`PluginError` (one line) if it fails or registers nothing."""
    for package in BUILTINS:
        importlib.import_module(package)
    before = {id(registry): registry.snapshot() for registry in REGISTRIES}
    imported_before = module in sys.modules
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):  # argparse's usage line would name no plugin
            importlib.import_module(module)
    except (Exception, SystemExit) as error:  # an import error, a registry's check, sys.exit or argparse at import
        for registry in REGISTRIES:
            if id(registry) in before:
                registry.restore(before[id(registry)])
        raise PluginError(f"plugin {module!r} ({origin}) cannot be loaded: {_failure(error, printed.getvalue())}") from None
    sys.stderr.write(printed.getvalue())
    added = [f"{registry.kind} {name!r}" for registry in REGISTRIES
             for name in set(registry.snapshot()[0]) - set(before.get(id(registry), ({},))[0])]
    if not added and not (imported_before and _provides(module)):
        raise PluginError(f"plugin {module!r} ({origin}) registers nothing: its import must register a builder "
                          "(@ALGORITHMS.register, @MODELS.register, @DATASETS.register or @PARTITIONERS.register)")
    LOADED[module] = origin


def _failure(error: BaseException, printed: str) -> str:
    """Why a plugin's import failed, in one line (an exit at import: its code and last printed line)."""
    if isinstance(error, SystemExit):
        said = printed.strip().splitlines()[-1] if printed.strip() else f"exit code {error.code}"
        return (f"it exits when imported (SystemExit: {said}); a plugin module must not parse the command "
                "line or call sys.exit at import")
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}"


def _provides(module: str) -> bool:
    """Whether a builder registered now was defined in ``module`` (or a module under it)."""
    return any(getattr(builder, "__module__", "") in (module,) or getattr(builder, "__module__", "").startswith(module + ".")
               for registry in REGISTRIES for builder in registry.snapshot()[0].values())


@contextlib.contextmanager
def scratch_registries() -> Iterator[None]:
    """Whatever is registered or loaded as a plugin inside the block is forgotten after it (for
    tests that register throw-away algorithms): the registries' entries, :data:`LOADED` and the
    plugin modules themselves (a later load imports them afresh)."""
    for package in BUILTINS:
        importlib.import_module(package)
    before = {id(registry): registry.snapshot() for registry in REGISTRIES}
    loaded = dict(LOADED)
    try:
        yield
    finally:
        for registry in REGISTRIES:
            if id(registry) in before:
                registry.restore(before[id(registry)])
        for module in set(LOADED) - set(loaded):
            sys.modules.pop(module, None)
        LOADED.clear()
        LOADED.update(loaded)
