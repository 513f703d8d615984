"""Time one FeMAM cell of the femam_offline analogue on this checkout and baselines, interleaved, and report medians.

The cell (``config/experiments/femam_offline.yaml``: Fashion-MNIST, ``fmnist_ml2.3.5``, 30 clients,
small_cnn, FeMAM's 5 levels added at rounds 15/20/25/30/35, 40 rounds of 1 epoch at batch 32, every
round evaluated) runs through ``fedbench.run.stages`` (partition, prepare, train_round, evaluate: what
the workflow's ``train`` job runs, without writing results) once per repeat on this checkout and on
each ``--baseline`` (another checkout's root, e.g. ``git archive <commit> | tar -x -C /tmp/base``;
repeatable), alternating, each in a fresh process with one thread.  Reported per checkout: the
medians of the cell's wall time, of its CPU time (user + system of the process: steadier on a shared
machine), of the training and evaluation parts, and the ratios baseline / this.  ``--rounds``
shortens the schedule (the level rounds scale with it: a level every ``rounds/8`` rounds after
``3 rounds/8``).

    python benchmarks/femam_cell.py --baseline /tmp/base --repeats 3
    python benchmarks/femam_cell.py --baseline /tmp/main --baseline /tmp/deb7334   # speedup per baseline
    python benchmarks/femam_cell.py --run            # one cell on this checkout (what each repeat runs)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cell(rounds: int, algorithm: str, data_root: str, workdir: Path) -> dict:
    """One cell on the fedbench importable here; seconds of training and evaluation, the final accuracy."""
    import torch  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    torch.set_num_threads(1)
    from fedbench.config.cells import Cell  # noqa: PLC0415
    from fedbench.engine.weights import model_weights  # noqa: PLC0415
    from fedbench.run.partition_job import build_partition  # noqa: PLC0415
    from fedbench.run.job import cell_job  # noqa: PLC0415
    from fedbench.run.stages import evaluate, prepare, resume, train_round  # noqa: PLC0415

    config = yaml.safe_load((ROOT / "config/experiments/femam_offline.yaml").read_text())
    config["data_root"] = data_root
    if rounds != 40:  # the same schedule, scaled: first level 3/8 of the rounds, then a level every 1/8
        spec = config["algorithms"][algorithm]
        spec["init_rounds"], spec["window"] = max(1, 3 * rounds // 8), max(1, rounds // 8)
        config["experiments"]["femam_offline"]["training"]["rounds"] = rounds
    partition = "fmnist_ml2.3.5"
    workdir.mkdir(parents=True, exist_ok=True)
    npz = workdir / f"{partition}.npz"
    if not npz.exists():
        build_partition(config, "fashion_mnist", partition, 0, npz, workdir / f"{partition}.json")
    started = time.perf_counter()
    cell = Cell("femam_offline", "fashion_mnist", partition, "small_cnn", algorithm, 0)
    run = prepare(cell_job(config, cell), npz, workdir / "out")
    progress = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    train_s = eval_s = 0.0
    for t in range(1, rounds + 1):
        a = time.perf_counter()
        train_round(run, progress, t)
        b = time.perf_counter()
        evaluate(run, progress, t)
        eval_s += time.perf_counter() - b
        train_s += b - a
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime, "train_s": train_s,
            "eval_s": eval_s, "acc_mean": progress.history[-1]["acc_mean"], "levels": len(progress.state["levels"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", type=Path, action="append", default=[],
                   help="root of a checkout to compare with (its fedbench/ is imported); repeatable")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--algorithm", default="femam", help="femam_offline's FeMAM entry (femam, femam_code)")
    p.add_argument("--data-root", default=str(ROOT / "data"), help="folder with FashionMNIST/raw")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/femam_cell"))
    p.add_argument("--run", action="store_true", help="run one cell here and print its JSON line")
    args = p.parse_args()
    if args.run:
        print(json.dumps(run_cell(args.rounds, args.algorithm, args.data_root, args.workdir)))
        return
    checkouts = {"this": ROOT}
    for root in args.baseline:  # "baseline", or each by its folder's name where several
        checkouts["baseline" if len(args.baseline) == 1 else root.name] = root.resolve()
    results: dict[str, list[dict]] = {name: [] for name in checkouts}
    for r in range(args.repeats):
        for name, root in checkouts.items():  # interleaved: this, baseline, this, baseline, ...
            env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run", "--rounds", str(args.rounds),
                                  "--algorithm", args.algorithm, "--data-root", args.data_root,
                                  "--workdir", str(args.workdir)], env=env, cwd=root, check=True,
                                 capture_output=True, text=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"repeat {r + 1}/{args.repeats} {name}: " + json.dumps({k: round(v, 3) for k, v in results[name][-1].items()}),
                  flush=True)
    keys = ("wall_s", "cpu_s", "train_s", "eval_s")
    med = {name: {k: round(statistics.median(x[k] for x in rows), 2) for k in keys} for name, rows in results.items()}
    summary = {"benchmark": "femam_cell", "rounds": args.rounds, "algorithm": args.algorithm, "repeats": args.repeats,
               "medians": med}
    ratios = {name: {k: round(med[name][k] / med["this"][k], 2) for k in keys} for name in med if name != "this"}
    if len(ratios) == 1:
        summary["speedup"] = ratios["baseline"]
    elif ratios:
        summary["speedup"] = ratios
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
