"""Mutation testing of the library's core with mutmut 3, one module group at a time.

    python scripts/mutation.py                    # every group (several hours on 2 cores), then the summary
    python scripts/mutation.py --groups fedmr     # one group
    python scripts/mutation.py --summary          # the table of the last runs, nothing run
    python scripts/mutation.py --fresh ...        # forget earlier results (after the library changed)
    python scripts/mutation.py --survivors ...    # re-test only the last run's survivors (after tests were added)
    python scripts/mutation.py --groups fedmr --mutants 'fedbench.engine.sam_step*'   # those mutants again (a module changed)

Why per group: mutmut runs, for each mutant, every test that its stats phase saw calling the
mutated function.  The engine's functions are called by nearly every test, so one run over the
whole suite spends minutes on each surviving engine mutant.  Each group below names the modules
it mutates and the test files that target them; the group runs in its own copy of the
repository (``mutation/<group>/``, resumable: an interrupted group continues where it stopped)
whose ``[tool.mutmut]`` section is rewritten to that selection.

The summary (``mutation/summary.md``, printed) counts, per module, mutants killed (a test
failed, or the mutant timed out), survived, and with no test; ``mutation/survivors.txt`` lists
every survivor with its diff for review (``docs/mutation.md`` keeps the ones judged equivalent).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")

# group -> (modules mutated, test files that target them); globs relative to the repository root
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "fedmr": (
        ["fedbench/algorithms/" + m for m in ("fedmr.py", "recombination.py", "fedmut.py", "fedexp.py", "fedasam.py",
                                             "clusamp.py", "fedgen.py")]
        + ["fedbench/engine/sam_step.py", "fedbench/engine/custom_step.py"],
        ["tests/test_fedmr*.py", "tests/test_sam_step.py"],
    ),
    "femam": (
        ["fedbench/algorithms/" + m for m in ("femam.py", "femam_rules.py", "ditto.py", "fedrep.py", "partial.py")],
        ["tests/test_femam.py"],
    ),
    "clustered": (
        ["fedbench/algorithms/" + m for m in ("ifca.py", "cfl.py", "fesem.py", "clustered.py", "flt.py", "fesem_flt.py")],
        ["tests/test_clustered_baselines.py", "tests/test_flt.py", "tests/test_relatedness_path.py"],
    ),
    # FLT's relatedness step on its own: its tests run UMAP, compiled once in the fork server (WARMUP)
    "fcr": (["fedbench/clustering/*"], ["tests/test_fcr.py"]),
    "moreau": (
        ["fedbench/algorithms/" + m for m in ("pfedme.py", "perfedavg.py", "pfedmt.py")]
        + ["fedbench/engine/device_gradient.py", "fedbench/engine/minibatch.py"],
        ["tests/test_moreau_family.py", "tests/test_pfedmt.py", "tests/test_device_gradient.py"],
    ),
    "base": (
        ["fedbench/algorithms/" + m for m in ("base.py", "fedavg.py", "local.py")],
        # FedAvg in minibatch steps (Federation.sgd_steps) is tested with the Moreau family; Local's
        # train_val with FeMAM's fidelity tests; the registration check with the interface's tests
        ["tests/test_algorithms.py", "tests/test_bn_aggregation.py", "tests/test_resume.py", "tests/test_moreau_family.py",
         "tests/test_femam_fidelity.py", "tests/test_algorithm_interface.py"],
    ),
    # the engine in two groups, each with the tests of its modules, so that each runs in about an hour
    "engine": (  # the local step and the aggregation every algorithm trains with
        ["fedbench/engine/" + m for m in ("vectorised.py", "wide_model.py", "fused_mlp.py", "reference.py", "weights.py",
                                         "batches.py", "step_runner.py", "local_sgd.py")],
        ["tests/test_engine.py", "tests/test_algorithms.py", "tests/test_models_conv.py", "tests/test_effective_batch.py"],
    ),
    "engine_eval": (  # the clients' data on the device, evaluation, memory estimates, device choice
        ["fedbench/engine/" + m for m in ("federated_data.py", "evaluate.py", "memory.py", "device.py")],
        ["tests/test_evaluate.py", "tests/test_job_memory.py", "tests/test_engine.py", "tests/test_cost.py",
         "tests/test_device_and_data.py"],
    ),
    "results": (
        ["fedbench/results/scorecard.py", "fedbench/results/agreement.py"],
        ["tests/test_scorecard*.py", "tests/test_agreement.py", "tests/test_coverage.py", "tests/test_published.py",
         "tests/test_femam_grid.py", "tests/test_papers.py"],
    ),
}
# group -> pytest plugin (a module of scripts/) that the fork server loads before forking the mutants: the
# groups whose tests run UMAP (FCR, FLT's relatedness path)
WARMUP: dict[str, str] = {"fcr": "mutation_warmup", "clustered": "mutation_warmup"}
MESSAGE_LINES = [r"^\s*raise \w+\(", r"^\s*warnings\.warn\("]
COPIED = ["fedbench", "tests", "config", "scripts", "workflow", "envs", "profiles", "docs", "Snakefile", "README.md",
          "pyproject.toml"]


def toml_list(values: list[str]) -> str:
    return json.dumps(values)  # a TOML array of basic strings is valid JSON


def workflow_tests(path: Path) -> list[str]:
    """Node ids of the tests in ``path`` that run the workflow in a subprocess (they call the tests'
    ``snakemake`` helper).  mutmut's stats phase cannot follow them: the subprocess imports the
    mutated library, whose trampolines look for mutmut's configuration in the subprocess's working
    directory and fail.  They are also the slowest tests; the checks they make on the library's
    behaviour are made in-process elsewhere."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and any(
                isinstance(call, ast.Call) and getattr(call.func, "id", None) == "snakemake" for call in ast.walk(node)):
            found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def mutmut_section(modules: list[str], tests: list[str], plugin: str | None = None) -> str:
    selection = sorted({str(p.relative_to(ROOT)) for pattern in tests for p in ROOT.glob(pattern)})
    deselect = [arg for path in selection for test in workflow_tests(ROOT / path) for arg in ("--deselect", test)]
    return "\n".join([
        "[tool.mutmut]",
        'source_paths = ["fedbench"]',
        f"only_mutate = {toml_list(modules)}",
        'also_copy = ["config", "scripts", "workflow", "envs", "Snakefile", "docs", "profiles", "README.md"]',
        f"pytest_add_cli_args_test_selection = {toml_list(selection)}",
        "pytest_add_cli_args = "
        + toml_list(["-p", "no:cacheprovider", *(["-p", plugin] if plugin else []), "-q", "-m", "not slow", "-o", "addopts=",
                     *deselect]),
        'process_isolation = "forkserver"',
        # a mutant "times out" after (its tests' estimated time + this) x 15 s of wall time; the estimate
        # leaves out fixture set-up (a module fixture's UMAP or FL run), and under load mutmut's default 1 s
        # turned slow-but-correct runs into "timeouts" counted as kills
        "timeout_constant = 5.0",
        # an error's or warning's message text: its string mutants ("XX...XX") test wording, not behaviour;
        # the conditions that raise stay mutated
        f"do_not_mutate_patterns = {toml_list(MESSAGE_LINES)}",
        "",
    ])


def prepare(group: str, workdir: Path, fresh: bool) -> Path:
    """The group's copy of the repository, with sources and tests refreshed from the checkout."""
    copy = workdir / group
    if fresh and copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src, dst = ROOT / name, copy / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    pyproject = (copy / "pyproject.toml").read_text()
    pyproject = pyproject.split("[tool.mutmut]")[0].rstrip() + "\n\n" + mutmut_section(*GROUPS[group], WARMUP.get(group))
    (copy / "pyproject.toml").write_text(pyproject)
    return copy


def run_group(copy: Path, max_children: int, mutants: list[str] | None = None) -> int:
    """mutmut over the group's copy: every mutant without a result, or exactly ``mutants`` again."""
    # scripts/ on the path for the group's WARMUP plugin; numba's disk cache kept in the group's copy; numba's
    # workqueue threads, not OpenMP's: a child forked from a process that ran numba's OpenMP layer (the warm-up)
    # is killed by numba with SIGTERM as soon as it runs UMAP, and mutmut counts that death as a survivor
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(copy / ".numba_cache"),
           "NUMBA_THREADING_LAYER": "workqueue",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(copy / "scripts"), os.environ.get("PYTHONPATH")]))}
    with open(copy / "mutmut.log", "a" if mutants else "w") as log:
        return subprocess.run([str(MUTMUT), "run", "--max-children", str(max_children), *(mutants or [])], cwd=copy,
                              env=env, stdout=log, stderr=subprocess.STDOUT).returncode


def outcomes(copy: Path) -> dict[str, str]:
    """mutant name -> status ('killed', 'survived', 'no tests', 'timeout', ...) from mutmut's meta files."""
    from mutmut.stats import status_by_exit_code

    found = {}
    for meta in (copy / "mutants").rglob("*.py.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[name] = status_by_exit_code[code]
    return found


def module_of(mutant: str) -> str:
    """'fedbench.algorithms.fedmr.x_round__mutmut_3' (or '...xǁClassǁmethod__mutmut_3') -> its module's path."""
    dotted = mutant.split(".xǁ")[0] if ".xǁ" in mutant else mutant.rsplit(".x_", 1)[0]
    return dotted.replace(".", "/") + ".py"


def record_run(copy: Path, seconds: float, kind: str, selected: list[str] | None) -> None:
    """Append this run's wall time, kind ('full', 'survivors', 'selected'), mutant count and commit to
    ``runs.jsonl`` in the group's copy."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    names = list(outcomes(copy))
    count = len(names) if selected is None else sum(any(fnmatch.fnmatch(n, p) for p in selected) for n in names)
    entry = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "seconds": round(seconds), "kind": kind,
             "mutants": count}
    with open(copy / "runs.jsonl", "a") as out:
        out.write(json.dumps(entry) + "\n")


def run_times(workdir: Path) -> str:
    """One line per group: its runs' wall times (full runs and survivor re-tests)."""
    lines = []
    for copy in sorted(p for p in workdir.iterdir() if (p / "runs.jsonl").is_file()):
        runs = [json.loads(line) for line in (copy / "runs.jsonl").read_text().splitlines() if line]
        lines.append(f"- {copy.name}: " + "; ".join(
            f"{r['kind']} {r['mutants']} mutants in {r['seconds'] / 60:.1f} min ({r['date']}, {r['commit']})" for r in runs))
    return "\n".join(lines) + "\n" if lines else ""


def summary(workdir: Path) -> str:
    if not workdir.is_dir():
        return f"mutation: no runs under {workdir} yet\n"
    per_module: dict[str, Counter] = {}
    survivors = []
    for copy in sorted(p for p in workdir.iterdir() if (p / "mutants").is_dir()):
        for name, status in sorted(outcomes(copy).items()):
            per_module.setdefault(module_of(name), Counter())[status] += 1
            if status in ("survived", "no tests"):
                survivors.append((copy, name, status))
    rows = ["| module | killed | survived | no tests | other | total | killed % |", "|---|---:|---:|---:|---:|---:|---:|"]
    total = Counter()
    for module in sorted(per_module):
        c = per_module[module]
        killed = c["killed"] + c["timeout"]
        other = sum(c.values()) - killed - c["survived"] - c["no tests"]
        n = sum(c.values())
        total.update(killed=killed, survived=c["survived"], no_tests=c["no tests"], other=other, n=n)
        rows.append(f"| {module} | {killed} | {c['survived']} | {c['no tests']} | {other} | {n} | {100 * killed / max(n, 1):.1f} |")
    rows.append(f"| **all** | {total['killed']} | {total['survived']} | {total['no_tests']} | {total['other']} | {total['n']} "
                f"| {100 * total['killed'] / max(total['n'], 1):.1f} |")
    with open(workdir / "survivors.txt", "w") as out:
        for copy, name, status in survivors:
            diff = subprocess.run([str(MUTMUT), "show", name], cwd=copy, capture_output=True, text=True).stdout
            out.write(f"## {name} ({status}, group {copy.name})\n{diff}\n")
    table = "\n".join(rows) + "\n\n" + run_times(workdir)
    (workdir / "summary.md").write_text(table)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of: {', '.join(GROUPS)}")
    parser.add_argument("--workdir", type=Path, default=ROOT / "mutation")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--fresh", action="store_true", help="delete the groups' earlier results first")
    parser.add_argument("--survivors", action="store_true",
                        help="re-test only the mutants that survived (or had no test) in the group's last run")
    parser.add_argument("--mutants", default="", help="comma-separated mutant names or globs to (re-)test, e.g. "
                        "'fedbench.engine.sam_step*' after that module changed (one group)")
    parser.add_argument("--summary", action="store_true", help="only print the summary of earlier runs")
    args = parser.parse_args(argv)
    if not args.summary:
        groups = [g for g in args.groups.split(",") if g]
        unknown = sorted(set(groups) - set(GROUPS))
        if unknown:
            parser.error(f"unknown group(s) {', '.join(unknown)}; valid: {', '.join(GROUPS)}")
        if args.mutants and (args.survivors or len(groups) != 1):
            parser.error("--mutants takes exactly one group and no --survivors")
        for group in groups:
            previous = args.workdir / group
            selected = [m for m in args.mutants.split(",") if m] or None  # mutmut takes names and globs alike
            kind = "selected" if selected else "full"
            if args.survivors:
                kind = "survivors"
                found = outcomes(previous) if (previous / "mutants").is_dir() else {}
                selected = sorted(name for name, status in found.items() if status in ("survived", "no tests"))
                if not selected:
                    print(f"mutation: group {group} has no survivors to re-test", flush=True)
                    continue
            copy = prepare(group, args.workdir, args.fresh and not args.survivors)
            print(f"mutation: group {group} in {copy} (log: {copy / 'mutmut.log'})"
                  + (f", re-testing {len(selected)} {'survivors' if args.survivors else 'names or globs'}" if selected else ""),
                  flush=True)
            started = time.time()
            code = run_group(copy, args.max_children, selected)
            if code:  # a failed run (e.g. the stats phase's tests failed) is not a timing
                print(f"mutation: mutmut exited {code} for group {group}; see {copy / 'mutmut.log'}", file=sys.stderr)
                return code
            record_run(copy, time.time() - started, kind, selected)
    print(summary(args.workdir), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
