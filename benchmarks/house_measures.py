"""The shape of the house, counted in a checkout: modules at the package root, method and architecture
names in the cost model, lines of ``common.smk``, the README's size, the largest modules.

    python benchmarks/house_measures.py                      # this checkout
    git worktree add /tmp/before f15767b
    python benchmarks/house_measures.py --repo /tmp/before   # the tree issue 54 started from

The cost model is every module of ``fedbench/cost/`` where that package exists, else the flat modules
that held it (``cost.py``, ``workload.py``, ``job_memory.py``).  A name counts where a string constant
equals a method or architecture registered in *this* checkout (the registries' names did not change).
The learning rate's path from the training rule to ``LocalSGD`` is ``benchmarks/parameter_path.py``'s.
Recorded in reports/architecture.md."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAT_COST = ("cost.py", "workload.py", "job_memory.py")


def cost_modules(repo: Path) -> list[Path]:
    package = repo / "fedbench" / "cost"
    if package.is_dir():
        return sorted(package.glob("*.py"))
    return [repo / "fedbench" / name for name in FLAT_COST if (repo / "fedbench" / name).exists()]


def name_literals(paths: list[Path], names: set[str]) -> list[str]:
    """Every string constant of ``paths`` that is one of ``names``."""
    return [node.value for path in paths for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def definitions(path: Path) -> int:
    """Top-level functions, classes and assignments of one module."""
    return sum(isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign))
               for node in ast.parse(path.read_text()).body)


def measures(repo: Path) -> dict:
    from fedbench.algorithms import ALGORITHMS
    from fedbench.models import MODELS

    methods, archs = set(ALGORITHMS.names()), set(MODELS.names())
    cost = cost_modules(repo)
    readme = (repo / "README.md").read_bytes()
    library = sorted((repo / "fedbench").rglob("*.py"))
    largest = sorted(library, key=definitions, reverse=True)[:3]
    return {
        "modules at the package root": sum(p.name not in ("__init__.py", "__main__.py")
                                           for p in (repo / "fedbench").glob("*.py")),
        "method names in the cost model (literals)": len(name_literals(cost, methods)),
        "distinct methods named there": len(set(name_literals(cost, methods))),
        "architecture names in the cost model (literals)": len(name_literals(cost, archs)),
        "lines of workflow/rules/common.smk": len((repo / "workflow/rules/common.smk").read_text().splitlines()),
        "README bytes": len(readme),
        "README lines": len(readme.decode().splitlines()),
        "library lines": sum(len(p.read_text().splitlines()) for p in library),
        "most definitions in one module": ", ".join(f"{p.relative_to(repo)} ({definitions(p)})" for p in largest),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to count (default: this one)")
    args = parser.parse_args(argv)
    for name, value in measures(args.repo.resolve()).items():
        print(f"{name:50s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
