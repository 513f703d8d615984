"""Follow one parameter from the workflow to the engine: the modules a training job's learning rate
passes through, from the training rule's params and resources (Snakemake's main process) to
``LocalSGD`` (the job), and how often that path returns to a module it already left.

    python benchmarks/parameter_path.py                 # the default suite's digits/clusters/mlp/fedavg seed 0
    python benchmarks/parameter_path.py --keep /tmp/p   # and keep the traced run's results root

It runs ``snakemake --cores 1`` for one cell's metrics.json in a scratch copy of the results, with a
profile hook in every Python process (``sitecustomize``): a call counts when one of its arguments
carries the parameter -- a config (a dict with ``experiments``), a cell spec (a dict whose
``training`` has ``lr``), a training dict (``lr`` itself) or an object holding such a spec -- and
its code is the library's (``fedbench/``), from the training rule's evaluation for this job (not what
the workflow computes for every job while it reads its files: the validation, the list of jobs) until the
job builds ``LocalSGD``.  The path is the sequence of those calls' modules, repeated
neighbours collapsed; over its distinct steps (a step repeated every round counts once), a *return* is a
step back into a module the path already entered, a *climb* a step into a higher layer
(tests/test_architecture.py's map).  Measured before and after issue 54 in reports/architecture.md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOK = r'''
import atexit, json, os, sys
_repo = os.environ["FEDBENCH_TRACE_REPO"]
_out = os.environ["FEDBENCH_TRACE_OUT"]
_calls = []

def _carries(value, depth=0):
    if isinstance(value, dict):
        if "experiments" in value or "lr" in value:
            return True
        training = value.get("training")
        if isinstance(training, dict) and "lr" in training:
            return True
    spec = getattr(value, "spec", None) if depth == 0 and not isinstance(value, (str, bytes, int, float)) else None
    return isinstance(spec, dict) and _carries(spec, 1)

_stopped = []

def _profile(frame, event, arg):
    if event != "call" or _stopped:
        return
    path = frame.f_code.co_filename
    if frame.f_code.co_name == "__init__" and type(frame.f_locals.get("self")).__name__ == "LocalSGD":
        _calls.append(("fedbench/engine/local_sgd.py", "LocalSGD"))  # the engine: where the learning rate arrives
        _stopped.append(True)
        return
    if not path.startswith(_repo + "fedbench/"):
        return
    names = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
    caller = frame
    while caller is not None:  # what the workflow does for every job when it reads its files: not this job's path
        if caller.f_code.co_name == "<module>" and caller.f_code.co_filename.endswith((".smk", "Snakefile")):
            return
        caller = caller.f_back
    try:
        if any(_carries(frame.f_locals.get(name)) for name in names):
            _calls.append((os.path.relpath(path, _repo), frame.f_code.co_name))
    except Exception:
        pass

def _dump():
    sys.setprofile(None)
    if _calls:
        with open(os.path.join(_out, f"{os.getpid()}.json"), "w") as f:
            json.dump(_calls, f)

sys.setprofile(_profile)
import threading
threading.setprofile(_profile)
atexit.register(_dump)
'''


def module_of(path: str) -> str:
    """``fedbench/run/cell.py`` -> ``fedbench.run.cell``; a workflow file stays a path."""
    if path.startswith("fedbench/"):
        parts = Path(path).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return path


def layer(module: str, layers: dict[str, int]) -> int:
    if not module.startswith("fedbench"):
        return 99  # the workflow: above every layer
    prefixes = [p for p in layers if p != "fedbench" and (module == p or module.startswith(p + "."))]
    return layers[max(prefixes, key=len)] if prefixes else layers["fedbench"]


def summarise(path: list[str], layers: dict[str, int]) -> dict:
    """Counts over the path's distinct steps (a step from one module to another, counted once however often it
    repeats, e.g. once per round): the modules, the steps back into a module the path had already entered
    (*returns*) and the steps up the layers (*climbs*); and the module entered most often."""
    collapsed = [m for i, m in enumerate(path) if i == 0 or m != path[i - 1]]
    seen, steps, returns, climbs = set(collapsed[:1]), set(), 0, 0
    for previous, module in zip(collapsed, collapsed[1:]):
        if (previous, module) not in steps:
            steps.add((previous, module))
            returns += module in seen
            climbs += layer(module, layers) > layer(previous, layers)
        seen.add(module)
    visits = {m: collapsed.count(m) for m in seen}
    return {"modules": len(seen), "steps": len(steps), "returns": returns, "climbs": climbs,
            "most_entered": max(visits.items(), key=lambda kv: kv[1]), "path": collapsed}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to trace (default: this one)")
    parser.add_argument("--target", default="runs/default/digits/clusters/mlp/fedavg/seed0/metrics.json")
    parser.add_argument("--keep", type=Path, help="keep the scratch results root here")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    sys.path.insert(0, str(repo / "tests"))
    import test_architecture  # the layer map, written once

    scratch = Path(tempfile.mkdtemp(prefix="parameter_path_"))
    hook_dir, out = scratch / "hook", scratch / "trace"
    hook_dir.mkdir(), out.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    results = (args.keep or scratch / "results").resolve()
    env = {**os.environ, "PYTHONPATH": f"{hook_dir}:{repo}", "FEDBENCH_TRACE_REPO": str(repo) + "/",
           "FEDBENCH_TRACE_OUT": str(out), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--config", f"results={results}", "--",
               f"{results}/{args.target}"]
    inputs = [*command[:-2], "--until", "partition", "--", f"{results}/{args.target}"]  # the partition first, untraced
    subprocess.run(inputs, cwd=repo, env={**env, "PYTHONPATH": str(repo)}, capture_output=True, check=True)
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    traces = sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime)  # main process ends last? order by pid start
    calls = []
    for trace in sorted(traces, key=lambda p: int(p.stem)):  # the main process has the lowest pid
        calls += json.loads(trace.read_text())
    summary = summarise([module_of(path) for path, _ in calls], test_architecture.LAYERS)
    print(f"{summary['modules']} modules, {summary['steps']} distinct steps, {summary['returns']} returns to a module "
          f"already entered, {summary['climbs']} climbs up the layers; most entered: {summary['most_entered'][0]} "
          f"({summary['most_entered'][1]} times)")
    print(" -> ".join(summary["path"]))
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
