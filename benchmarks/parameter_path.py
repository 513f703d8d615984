"""Follow one parameter from the workflow to the engine: the modules a training job's learning rate
passes through, from the training rule's params and resources (Snakemake's main process) to
``LocalSGD`` (the job), and how often that path returns to a module it already left.

    python benchmarks/parameter_path.py                 # the default suite's digits/clusters/mlp/fedavg seed 0
    python benchmarks/parameter_path.py --keep /tmp/p   # and keep the traced run's results root

It runs ``snakemake --cores 1`` for one cell's metrics.json in a scratch copy of the results, with a
profile hook in every Python process (``sitecustomize``): a call counts when one of its arguments
carries the parameter -- a config (a dict with ``experiments``), a cell spec (a dict whose
``training`` has ``lr``), a training dict (``lr`` itself) or an object holding such a spec -- and
its code is the library's (``fedbench/``), outside the plan-wide validation that checks every cell
before any job (``validate_config``).  The path is the sequence of those
calls' modules, repeated neighbours collapsed; a *return* is a step into a module the path already
left; a *climb* is a step into a higher layer (tests/test_architecture.py's map; workflow files are
above every layer).  Measured before and after issue 54 in reports/architecture.md."""

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

def _profile(frame, event, arg):
    if event != "call":
        return
    path = frame.f_code.co_filename
    if not path.startswith(_repo + "fedbench/"):
        return
    names = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
    caller = frame
    while caller is not None:  # the plan-wide validation checks every cell: not this parameter's path
        if caller.f_code.co_name == "validate_config":
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
    collapsed = [m for i, m in enumerate(path) if i == 0 or m != path[i - 1]]
    seen, returns, climbs = set(), 0, 0
    for i, module in enumerate(collapsed):
        if i and module in seen:
            returns += 1
        if i and layer(module, layers) > layer(collapsed[i - 1], layers):
            climbs += 1
        seen.add(module)
    visits = {m: collapsed.count(m) for m in seen}
    return {"modules": len(seen), "steps": len(collapsed), "returns": returns, "climbs": climbs,
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
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    traces = sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime)  # main process ends last? order by pid start
    calls = []
    for trace in sorted(traces, key=lambda p: int(p.stem)):  # the main process has the lowest pid
        calls += json.loads(trace.read_text())
    summary = summarise([module_of(path) for path, _ in calls], test_architecture.LAYERS)
    print(f"{summary['modules']} modules, {summary['steps']} steps, {summary['returns']} returns to a module already "
          f"left, {summary['climbs']} climbs up the layers; most entered: {summary['most_entered'][0]} "
          f"({summary['most_entered'][1]} times)")
    print(" -> ".join(summary["path"]))
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
