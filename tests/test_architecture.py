"""The library's layers only point down: the import graph of ``fedbench/`` (every ``import`` and
``from ... import`` anywhere in a module, inside functions too, read with ``ast``) has no cycle
and no import from a lower layer into a higher one.  The layer map is written here, once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedbench"

# package -> layer (a module belongs to its longest listed prefix; ``fedbench`` is the root package's
# __init__ only).  A module may import its own layer and the ones below, never above.  Each package's
# docstring says the same; the package root holds no module but __init__ and __main__.
LAYERS = {
    # 0 names (registries, bounds, search spaces, protocols, plugins) and helpers that know no FL
    "fedbench": 0,
    "fedbench.registry": 0,
    "fedbench.util": 0,
    # 1 the registered parts of a cell: data sources and partitions, models
    "fedbench.data": 1,
    "fedbench.models": 1,
    # 2 the training engine
    "fedbench.engine": 2,
    # 3 what the user wrote (config), the pure cost model, tuning trials: registries only, never an algorithm module
    "fedbench.config": 3,
    "fedbench.cost": 3,
    "fedbench.tuning": 3,
    # 4 the algorithms (FLT's encoders with them) and their clustering
    "fedbench.algorithms": 4,
    "fedbench.clustering": 4,
    # 5 one job's life (cell, partition, checkpoint, provenance, tracking) and the extension kit (contract, scaffold)
    "fedbench.run": 5,
    "fedbench.extension": 5,
    # 6 tables, figures, scorecards and claims of finished runs (the gamma sweep reruns cells)
    "fedbench.results": 6,
    # 7 the workflow's view: which jobs, validation of a plan, preflight, stale results, the cost report
    "fedbench.planning": 7,
    "fedbench.__main__": 7,  # python -m fedbench: new (the scaffold), contract
}


def module_files() -> dict[str, Path]:
    """Dotted name -> source file of every module of the package (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """fedbench modules ``name`` imports: ``from X import y`` counts as X.y where that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def layer(module: str) -> int | None:
    if module == "fedbench":
        return LAYERS["fedbench"]
    prefixes = [p for p in LAYERS if p != "fedbench" and (module == p or module.startswith(p + "."))]
    return LAYERS[max(prefixes, key=len)] if prefixes else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in graph() if layer(m) is None)
    assert not unplaced, f"modules without a layer (add their prefix to LAYERS): {unplaced}"


def test_the_import_graph_has_no_cycle():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_points_up_a_layer():
    upward = [
        f"{source} (layer {layer(source)}) imports {target} (layer {layer(target)})"
        for source, targets in sorted(graph().items())
        for target in sorted(targets)
        if layer(source) is not None and layer(target) is not None and layer(target) > layer(source)
    ]
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_the_checks_see_through_functions_and_relative_imports(tmp_path):
    """An import inside a function counts; ``from . import x`` resolves to its package's module."""
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from fedbench.run.stages import run_cell\n\nfrom .util import threads\n")
    modules = module_files()
    assert imports("fedbench.mod", source, modules) == {"fedbench.run.stages", "fedbench.util.threads"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer("fedbench.planning.cost_report") == 7 and layer("fedbench.cost.estimate") == 3 and layer("fedbench.data.vision") == 1


def test_config_loads_the_algorithms_only_when_it_looks_one_up():
    """The algorithm registry lives below the algorithms and imports their package on its first
    lookup (plugin-style), so validating a config needs no static import of an algorithm module."""
    script = (
        "import sys; import fedbench.config.checks, fedbench.run.provenance\n"
        "assert 'fedbench.algorithms' not in sys.modules, 'imported too early'\n"
        "from fedbench.registry.algorithms import ALGORITHMS\n"
        "assert 'fedavg' in ALGORITHMS and 'fedbench.algorithms.fedavg' in sys.modules\n"
        "from fedbench.algorithms import ALGORITHMS as same\n"
        "assert same is ALGORITHMS\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=PACKAGE.parent)


def test_planning_reads_a_claims_spec_without_loading_its_statistics():
    """Listing a config's jobs reads each claim's cells and the seeds its design may add
    (:mod:`fedbench.results.claims.spec`), not the t intervals, the evaluation or the report; the
    package's names still load their modules on first use."""
    script = (
        "import sys; import fedbench.planning.jobs, fedbench.planning.validate\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('fedbench.results.claims'))\n"
        "assert loaded == ['fedbench.results.claims', 'fedbench.results.claims.spec'], loaded\n"
        "from fedbench.results.claims import compare, write_report\n"
        "assert compare.__module__ == 'fedbench.results.claims.statistics'\n"
        "assert write_report.__module__ == 'fedbench.results.claims.report'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=PACKAGE.parent)


def test_the_package_root_holds_only_its_init_and_main_and_every_package_names_its_layer():
    """One package per concern: no module at the root but ``__init__`` and ``__main__``; each top-level
    package's docstring opens with the layer the map gives it."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]
    for package in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        assert doc.startswith(f"Layer {LAYERS[f'fedbench.{package.name}']},"), f"{package.name}: {doc[:60]!r}"


def test_a_moved_module_keeps_its_old_name_for_a_transition():
    """``import fedbench.contract`` is :mod:`fedbench.extension.contract` itself (one module object, its own
    spec), with a DeprecationWarning naming the new place; ``python -m fedbench.stale`` still runs."""
    script = (
        "import warnings, importlib\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import fedbench.contract as old\n"
        "    from fedbench.plugins import load_plugins\n"
        "import fedbench.extension.contract as new\n"
        "from fedbench.registry.plugins import load_plugins as same\n"
        "assert old is new and load_plugins is same, (old, new)\n"
        "assert new.__spec__.name == 'fedbench.extension.contract' and new.__spec__.origin.endswith('contract.py')\n"
        "assert any('fedbench.extension.contract' in str(w.message) for w in caught), [str(w.message) for w in caught]\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=PACKAGE.parent)
    help_text = subprocess.run([sys.executable, "-m", "fedbench.stale", "--help"], check=True, cwd=PACKAGE.parent,
                               capture_output=True, text=True).stdout
    assert "--configfile" in help_text


def test_the_workflow_and_the_planning_name_no_method():
    """Which figures a run gets, what a job trains and costs: declared by the algorithms (``figures=`` at
    registration, their workload), never looked up by a method's name in the workflow or the planning."""
    import re

    from fedbench.registry.algorithms import ALGORITHMS

    methods = set(ALGORITHMS.names())
    sources = [*PACKAGE.parent.joinpath("workflow", "rules").glob("*.smk"), PACKAGE.parent / "Snakefile",
               *PACKAGE.joinpath("planning").glob("*.py")]
    named = {(path.name, literal) for path in sources
             for literal in re.findall(r"""["']([a-z_0-9]+)["']""", path.read_text()) if literal in methods}
    assert not named, f"method names in the workflow or planning: {sorted(named)}"
