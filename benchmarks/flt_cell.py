"""Where one cell of FLT's claims analogue spends its CPU time, and the same cell on two checkouts.

The cell (``config/experiments/flt_claims.yaml``: Fashion-MNIST, 100 clients in 5 clusters, the
784-200-10 dropout MLP, 100 rounds at participation 0.2, batch 10, evaluated every 10 rounds) runs
through ``fedbench.run.stages`` -- prepare, the algorithm's ``init``, ``train_round``, ``evaluate``,
``checkpoint`` and ``write``: what the workflow's ``train_cell`` job runs -- in a fresh process with one
thread.  Its process CPU time (user + system, from the interpreter's start: imports included) is
split by timers wrapped around the library's functions, each exclusive of the timers inside it:

* ``startup``: the interpreter, the imports, until the cell is prepared;  ``prepare``: data and model;
* the one-off relatedness step of FLT / PCA+kM+HC (``init``): ``finetune`` (Enc2's J epochs),
  ``encode`` (the encoder's embeddings), ``kmeans`` (the clients' k-means centres, PCA+kM+HC's PCA
  too), ``umap`` (UMAP of the centres, numba's compilation included), the rest of ``init``
  (distances, HC, the encoder's loading);
* per round: ``train`` (the clients' local SGD, ``trainer.train``), ``ifca_losses`` (IFCA's centre
  losses on the sampled clients' training rows), ``round_other`` (the rest of the round: sampling,
  aggregation, FeSEM's k-means, CFL's update norms and splits, the traffic count);
* ``evaluate`` (every 10th round: the clients' models on their test and training rows, the
  clusters' scores), ``io`` (checkpoints, the outputs).

    python benchmarks/flt_cell.py --run --algorithm ifca_k5                     # one cell here, a JSON line
    python benchmarks/flt_cell.py --run --algorithm fesem --profile /tmp/f.prof  # ... under cProfile
    python benchmarks/flt_cell.py --baseline /tmp/flt_base --algorithms fedavg,ifca_k5 --repeats 3

With ``--baseline`` (another checkout's root, e.g. ``git archive main | tar -x -C /tmp/flt_base``) each
repeat runs the cell on this checkout and on the baseline, alternating, each a fresh process with
``PYTHONPATH`` set to its root, and prints the medians of the CPU seconds per phase and the ratios
baseline / this, whether both gave the same final numbers, and at the end a Markdown table of
every algorithm.  The partition is built under ``--workdir`` once; FLT's encoders are read from
``--encoders`` (pretrained there, 1 epoch on 5,000 images, when absent: the encoders' quality does not
change the cost of a cell).  Every cell runs with ``NUMBA_CACHE_DIR=WORKDIR/numba_cache`` as the
workflow's jobs run with theirs: a checkout that keeps UMAP's kernels there compiles them in its first
FLT cell only (the medians of 3 repeats are then cells that load them).
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
CONFIG = ROOT / "config/experiments/flt_claims.yaml"
PHASES = ("startup", "prepare", "finetune", "encode", "kmeans", "umap", "init", "train", "ifca_losses", "round_other",
          "evaluate", "io")


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Timers:
    """Exclusive CPU seconds per label: a wrapped call's time less that of the wrapped calls inside it."""

    def __init__(self):
        self.spent = dict.fromkeys(PHASES, 0.0)
        self.stack: list[list] = []

    def wrap(self, label: str, fn):
        def timed(*args, **kwargs):
            self.stack.append([label, cpu_now(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, start, inner = self.stack.pop()
                total = cpu_now() - start
                self.spent[name] += total - inner
                if self.stack:
                    self.stack[-1][2] += total

        return timed

    def patch(self, owner, attribute: str, label: str) -> None:
        """Time ``owner.attribute`` under ``label``, where the checkout has it."""
        if hasattr(owner, attribute):
            setattr(owner, attribute, self.wrap(label, getattr(owner, attribute)))


def pretrain_encoders(config: dict, encoders: Path) -> None:
    from fedbench.algorithms.flt_encoders import pretrain_encoder  # noqa: PLC0415

    quick = {**config, "encoders": {name: {**entry, "epochs": 1, **({"max_samples": 5000} if name == "enc_fashion" else {})}
                                    for name, entry in config["encoders"].items()}}
    encoders.mkdir(parents=True, exist_ok=True)
    for name in quick["encoders"]:
        if not (encoders / f"{name}.pt").exists():
            pretrain_encoder(quick, name, encoders / f"{name}.pt", encoders / f"{name}_loss.csv")


def run_cell(algorithm: str, partition: str, rounds: int, data_root: str, workdir: Path, encoders: Path,
             profile: str | None) -> dict:
    """One cell on the fedbench importable here: CPU seconds per phase, the final numbers."""
    import torch  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    torch.set_num_threads(1)
    from importlib import import_module  # noqa: PLC0415

    # the modules themselves (fedbench.clustering re-exports a function named fcr, which `import ... as` would bind)
    flt, flt_encoders, ifca, fcr, stages, outputs = (import_module(f"fedbench.{name}") for name in (
        "algorithms.flt", "algorithms.flt_encoders", "algorithms.ifca", "clustering.fcr", "run.stages", "run.outputs"))
    from fedbench.config.cells import Cell  # noqa: PLC0415
    from fedbench.engine.weights import model_weights  # noqa: PLC0415
    from fedbench.run.job import cell_job  # noqa: PLC0415
    from fedbench.run.partition_job import build_partition  # noqa: PLC0415

    config = yaml.safe_load(CONFIG.read_text())
    config["data_root"] = data_root
    config["results"] = str(encoders.parent)  # FLT reads <results>/encoders/<name>.pt
    experiment = "flt_claims"
    if rounds != 100:
        config["experiments"][experiment]["training"]["rounds"] = rounds
    setup = cpu_now()  # the quick encoders and the partition, once per workdir: not part of the cell
    pretrain_encoders(config, encoders)
    workdir.mkdir(parents=True, exist_ok=True)
    npz = workdir / f"{partition}.npz"
    if not npz.exists():
        build_partition(config, "fashion_mnist", partition, 0, npz, workdir / f"{partition}.json")
    setup = cpu_now() - setup

    timers = Timers()
    timers.patch(flt, "embed_clients", "encode")
    timers.patch(flt_encoders, "_finetune_chunk", "finetune")
    for name in ("client_centres", "pca_signatures"):
        timers.patch(fcr, name, "kmeans")
    timers.patch(flt, "pca_signatures", "kmeans")
    timers.patch(fcr, "embed_centres", "umap")
    timers.patch(ifca.IFCA, "train_losses", "ifca_losses")
    timers.patch(stages, "train_round", "round_other")
    timers.patch(stages, "evaluate", "evaluate")
    timers.patch(stages, "checkpoint", "io")
    timers.patch(outputs, "write", "io")

    profiler = None
    if profile:
        import cProfile  # noqa: PLC0415

        profiler = cProfile.Profile(time.process_time)  # CPU seconds: the machine is shared
        profiler.enable()
    timers.spent["startup"] = cpu_now() - setup
    started = time.perf_counter()
    cell = Cell(experiment, "fashion_mnist", partition, "mlp", algorithm, 0)
    run = timers.wrap("prepare", stages.prepare)(cell_job(config, cell), npz, workdir / "out" / algorithm)
    run.fed.trainer.train = timers.wrap("train", run.fed.trainer.train)
    progress = stages.resume(run, timers.wrap("init", run.algorithm.init)(run.fed, model_weights(run.fed.model)))
    every = run.training["eval_every"]
    for t in range(progress.first, rounds + 1):
        stages.train_round(run, progress, t)
        if stages.due(t, every, rounds):
            stages.evaluate(run, progress, t)
        stages.checkpoint(run, progress, t)
    metrics = outputs.write(run, progress)
    wall = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    total = cpu_now() - setup
    history = progress.history[-1]
    return {"algorithm": algorithm, "fedbench": str(Path(stages.__file__).parents[2]), "partition": partition,
            "rounds": rounds, "cpu_s": total, "wall_s": wall,
            **{k: round(v, 3) for k, v in timers.spent.items()},
            "unattributed": round(total - sum(timers.spent.values()), 3),
            "acc_mean": history["acc_mean"], "train_acc_mean": history.get("train_acc_mean"),
            "ari": history.get("ari"), "final": metrics["final"]["accuracy"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", type=Path, help="root of the checkout to compare with (its fedbench/ is imported)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--algorithm", default="flt_enc1", help="one algorithm entry of flt_claims.yaml (--run)")
    p.add_argument("--algorithms", default="flt_enc1", help="comma-separated entries, each compared in turn")
    p.add_argument("--partition", default="scenario1", help="scenario1 or scenario2")
    p.add_argument("--data-root", default=str(ROOT / "data"), help="folder with FashionMNIST/raw")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/flt_cell"))
    p.add_argument("--encoders", type=Path, default=None, help="folder of enc_fashion.pt, enc_digits.pt "
                   "(default: WORKDIR/results/encoders, pretrained quickly when absent)")
    p.add_argument("--profile", help="--run: write a cProfile of the cell (after startup) here")
    p.add_argument("--run", action="store_true", help="run one cell here and print its JSON line")
    args = p.parse_args()
    encoders = (args.encoders or args.workdir / "results" / "encoders").resolve()
    if args.run:
        print(json.dumps(run_cell(args.algorithm, args.partition, args.rounds, args.data_root, args.workdir, encoders,
                                  args.profile)))
        return
    checkouts = {"this": ROOT}
    if args.baseline:
        checkouts["baseline"] = args.baseline.resolve()
    numba_cache = os.environ.get("NUMBA_CACHE_DIR") or str(args.workdir.resolve() / "numba_cache")
    summaries = []
    for algorithm in args.algorithms.split(","):
        results: dict[str, list[dict]] = {name: [] for name in checkouts}
        for r in range(args.repeats):
            for name, root in checkouts.items():  # interleaved: this, baseline, this, baseline, ...
                env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "NUMBA_CACHE_DIR": numba_cache}
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--run", "--rounds", str(args.rounds),
                     "--algorithm", algorithm, "--partition", args.partition, "--data-root", args.data_root,
                     "--workdir", str(args.workdir.resolve()), "--encoders", str(encoders)],
                    env=env, cwd=root, check=True, capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                assert Path(row["fedbench"]) == root, (row["fedbench"], root)  # the checkout's fedbench ran
                results[name].append(row)
                print(f"{algorithm} repeat {r + 1}/{args.repeats} {name}: cpu_s {row['cpu_s']:.1f} wall_s {row['wall_s']:.1f} "
                      + " ".join(f"{k} {row[k]:.1f}" for k in PHASES if row[k] >= 0.05) + f" final {row['final']}", flush=True)
        keys = ("cpu_s", "wall_s", *PHASES)
        med = {name: {k: round(statistics.median(x[k] for x in rows), 2) for k in keys} for name, rows in results.items()}
        summary = {"benchmark": "flt_cell", "algorithm": algorithm, "partition": args.partition, "rounds": args.rounds,
                   "repeats": args.repeats, "medians": med}
        if "baseline" in med:
            summary["ratios"] = {k: round(med["baseline"][k] / med["this"][k], 2) for k in keys
                                 if med["this"][k] >= 0.05 or med["baseline"][k] >= 0.05}
            summary["speedup_cpu"] = summary["ratios"]["cpu_s"]
            finals = {name: {(x["final"], x["acc_mean"], x["ari"]) for x in rows} for name, rows in results.items()}
            summary["same_final_numbers"] = finals["this"] == finals["baseline"]
            summary["finals"] = {name: sorted(v, key=str) for name, v in finals.items()}
        summaries.append(summary)
        print(json.dumps(summary), flush=True)
    print(markdown_table(summaries))


def markdown_table(summaries: list[dict]) -> str:
    """One row per algorithm: median CPU seconds of the whole cell and of its phases (baseline -> this
    checkout where there is a baseline), the ratios baseline / this, and whether the final numbers agree."""
    phases = [k for k in PHASES if any(max(m[k] for m in s["medians"].values()) >= 0.5 for s in summaries)]
    compare = "baseline" in summaries[0]["medians"]

    def cell(s: dict, key: str) -> str:
        m = s["medians"]
        if not compare:
            return f"{m['this'][key]:.1f}"
        ratio = s["ratios"].get(key)
        return f"{m['baseline'][key]:.1f} → {m['this'][key]:.1f}" + (f" ({ratio:.2f}×)" if ratio else "")

    head = ["algorithm", "CPU s", *phases] + (["same final numbers"] if compare else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        row = [s["algorithm"], cell(s, "cpu_s"), *(cell(s, k) for k in phases)]
        lines.append("| " + " | ".join(row + ([str(s["same_final_numbers"])] if compare else [])) + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
