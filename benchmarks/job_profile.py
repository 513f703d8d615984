"""Where one claims job's time goes, per paper: seconds by phase of a training job as the workflow runs it.

A ``train_cell`` job is a fresh Python process (Snakemake's ``script:`` directive) that unpickles the
job, imports torch and fedbench, loads the dataset and the partition, builds the model and the
algorithm, runs the rounds with an evaluation every ``eval_every`` rounds, and writes its three
files.  Each job below runs here the same way -- a fresh process with one thread
(``OMP_NUM_THREADS=1``, as Snakemake gives ``threads: 1``), ``NUMBA_CACHE_DIR`` as the workflow sets
it, the job from :func:`fedbench.run.job.cell_job` on the CPU, the stages of
:mod:`fedbench.run.stages` -- with timers wrapped around the library's functions, each exclusive of
the timers inside it (wall and CPU seconds).  Phases:

* ``interpreter``: from the parent's launch of the process to its first line;
* ``imports``: Snakemake's script preamble (``snakemake.script``), torch, fedbench's run stages;
* ``dataset`` (the dataset's files read and decoded), ``partition`` (the partition file read, the
  validation hold-out), ``to_tensors`` (the clients' rows on the device);
* ``model_build`` (model, federation, trainer), ``provenance`` (the hash of the code that runs),
  ``prepare_other`` (plugins, the algorithm object);
* ``train`` (the clients' local SGD, ``trainer.train``), ``round_other`` (the rest of each round:
  sampling, aggregation, the proximal and Moreau steps that do not go through ``trainer.train``,
  FeMAM's level rules, FedMR's recombination);
* ``evaluation`` (every evaluated round: the clients' models on their test, validation and training
  rows, the global model, the recovered clusters);
* ``finetune``, ``encode``, ``kmeans``, ``umap``, ``clustering``: FLT's encoder fine-tuning (Enc2),
  the clients' embeddings, the k-means centres, UMAP (with numba's compilation or cache load), and
  the other k-means / hierarchical clusterings (FeMAM's and FeSEM's groups);
* ``init_other`` (the rest of the algorithm's ``init``: the encoder's loading, distances, HC);
* ``outputs`` (checkpoints, metrics.json, history.csv, clients.csv);
* ``unattributed``: what no timer covers (the loop itself, logging, tqdm).

Not inside a training job, so reported on their own lines: the partition rule (one job per dataset,
partition and seed, shared by every method of a cell) and the first FLT job's UMAP compilation
(``--cold``: an empty numba cache; the workflow keeps one cache for all its jobs).

    python benchmarks/job_profile.py                          # the five jobs below, 1 repeat, a table
    python benchmarks/job_profile.py --jobs flt_enc2,pfedmt_mlr --repeats 3
    python benchmarks/job_profile.py --child flt_enc2 ...     # (internal) one job in this process

FLT reads its pretrained encoders from ``--encoders`` (default ``results/flt_claims/encoders``, from
``reports/flt_claims/runs.tgz``; pretrained quickly, 1 epoch, when absent: their quality does not
change the job's cost).  Recorded in reports/job_profile.md and docs/performance.md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from flt_cell import cpu_now  # noqa: E402  (this folder is the script's first path entry)

ROOT = Path(__file__).resolve().parents[1]

# name: (experiment config, experiment, dataset, partition, model, algorithm) -- one claims job per paper
JOBS = {
    "flt_enc2": ("flt_claims", "flt_claims", "fashion_mnist", "scenario1", "mlp", "flt_enc2"),
    # the same job again, reading the client embeddings flt_enc2 kept (fedbench.algorithms.embedding_cache)
    "flt_enc2_warm": ("flt_claims", "flt_claims", "fashion_mnist", "scenario1", "mlp", "flt_enc2"),
    "flt_fedavg": ("flt_claims", "flt_claims", "fashion_mnist", "scenario1", "mlp", "fedavg"),
    "femam_starved": ("femam_offline", "femam_offline_starved", "fashion_mnist", "fmnist_starved_ml1.2.4", "small_cnn",
                      "femam_starved"),
    "fedmr": ("fedmr_claims", "claims", "fashion_mnist", "dir0.1_s0.1", "cnn", "fedmr"),
    "pfedmt_mlr": ("pfedmt", "synthetic_mlr", "synthetic", "teams2x25", "mlr", "pfedmt_convex"),
}
PHASES = ("interpreter", "imports", "dataset", "partition", "to_tensors", "model_build", "provenance", "prepare_other",
          "train", "round_other", "evaluation", "finetune", "encode", "kmeans", "umap", "clustering", "init_other",
          "outputs", "unattributed")
# the groups of phases, for the summary table
GROUPS = {
    "interpreter + imports": ("interpreter", "imports"),
    "data + partition": ("dataset", "partition", "to_tensors"),
    "model build": ("model_build", "provenance", "prepare_other"),
    "training": ("train", "round_other"),
    "evaluation": ("evaluation",),
    "encoder / embedding / UMAP / clustering": ("finetune", "encode", "kmeans", "umap", "clustering", "init_other"),
    "outputs": ("outputs",),
    "unattributed": ("unattributed",),
}


class Timers:
    """Exclusive wall and CPU seconds per label: a wrapped call's time less that of the wrapped calls inside it."""

    def __init__(self):
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.stack: list[list] = []

    def wrap(self, label: str, fn, unless_inside: tuple[str, ...] = ()):
        """``fn`` timed under ``label``, or untimed where called inside one of ``unless_inside``."""

        def timed(*args, **kwargs):
            if self.stack and self.stack[-1][0] in unless_inside:
                return fn(*args, **kwargs)
            self.stack.append([label, time.perf_counter(), cpu_now(), 0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, wall0, cpu0, inner_wall, inner_cpu = self.stack.pop()
                wall, cpu = time.perf_counter() - wall0, cpu_now() - cpu0
                self.wall[name] += wall - inner_wall
                self.cpu[name] += cpu - inner_cpu
                if self.stack:
                    self.stack[-1][3] += wall
                    self.stack[-1][4] += cpu

        timed.__wrapped__ = fn
        return timed

    def patch(self, owner, attribute: str, label: str) -> None:
        """Time ``owner.attribute`` under ``label`` in every fedbench module that binds the same object
        (``from x import f`` copies the name: patching only ``x.f`` would miss the caller's)."""
        original = getattr(owner, attribute, None)
        if original is None:
            return
        timed = self.wrap(label, original)
        setattr(owner, attribute, timed)
        for name, module in list(sys.modules.items()):
            if name.startswith("fedbench") and getattr(module, attribute, None) is original:
                setattr(module, attribute, timed)


def load_config(config_name: str, data_root: str, results: Path) -> dict:
    import yaml  # noqa: PLC0415

    config = yaml.safe_load((ROOT / "config/experiments" / f"{config_name}.yaml").read_text())
    config["data_root"] = data_root
    config["results"] = str(results)  # FLT reads <results>/encoders/<name>.pt
    return config


def child(name: str, launched: float, data_root: str, workdir: Path, encoders: Path, rounds: int | None) -> dict:
    """Run job ``name`` in this process (a fresh one): the seconds per phase and its final numbers."""
    first_line, interpreter_cpu = time.time(), cpu_now()
    timers = Timers()
    wall0, cpu0 = time.perf_counter(), cpu_now()
    import snakemake.script  # noqa: F401, PLC0415  (what a script: job's preamble imports to unpickle its job)
    import torch  # noqa: PLC0415

    from fedbench.run import stages  # noqa: PLC0415  (the imports of workflow/scripts/train.py)
    from fedbench.run.job import CellJob  # noqa: F401, PLC0415
    from fedbench.run.reuse import copy_run  # noqa: F401, PLC0415

    timers.wall["imports"], timers.cpu["imports"] = time.perf_counter() - wall0, cpu_now() - cpu0
    timers.wall["interpreter"], timers.cpu["interpreter"] = first_line - launched, interpreter_cpu
    torch.set_num_threads(1)
    setup_wall, setup_cpu = time.perf_counter(), cpu_now()  # the partition and encoders: other jobs, not this one
    config_name, experiment, dataset, partition, model, algorithm = JOBS[name]
    config = load_config(config_name, data_root, encoders.parent)
    if rounds:
        config["experiments"][experiment].setdefault("training", {})["rounds"] = rounds
    npz = ensure_partition(config, dataset, partition, workdir)
    setup_wall, setup_cpu = time.perf_counter() - setup_wall, cpu_now() - setup_cpu

    from importlib import import_module  # noqa: PLC0415

    from fedbench.config.cells import Cell  # noqa: PLC0415
    from fedbench.run.job import cell_job  # noqa: PLC0415

    modules = {m: import_module(f"fedbench.{m}") for m in (
        "data", "data.partition", "data.partition_file", "engine.federated_data", "run.provenance", "run.outputs",
        "algorithms.flt_encoders", "clustering.fcr", "algorithms.femam_rules")}
    timers.patch(modules["data"], "load_dataset", "dataset")
    timers.patch(modules["data.partition_file"], "load_partition", "partition")
    timers.patch(modules["data.partition"], "hold_out_validation", "partition")
    timers.patch(modules["engine.federated_data"].FederatedData, "build", "to_tensors")
    timers.patch(stages, "_federation", "model_build")
    timers.patch(modules["run.provenance"], "provenance", "provenance")
    timers.patch(modules["algorithms.flt_encoders"], "embed_clients", "encode")
    timers.patch(modules["algorithms.flt_encoders"], "_finetune_chunk", "finetune")
    for fn in ("client_centres", "pca_signatures"):
        timers.patch(modules["clustering.fcr"], fn, "kmeans")
    timers.patch(modules["clustering.fcr"], "embed_centres", "umap")
    timers.patch(modules["clustering.fcr"], "hierarchical_clusters", "clustering")
    timers.patch(modules["algorithms.femam_rules"], "kmeans_groups", "clustering")
    from sklearn.cluster import KMeans  # noqa: PLC0415  (FeSEM's and the other k-means, where not inside a label above)

    KMeans.fit = timers.wrap("clustering", KMeans.fit, unless_inside=("kmeans", "clustering"))
    timers.patch(stages, "train_round", "round_other")
    timers.patch(stages, "evaluate", "evaluation")
    timers.patch(stages, "checkpoint", "outputs")
    timers.patch(modules["run.outputs"], "write", "outputs")

    started_wall, started_cpu = time.perf_counter(), cpu_now()
    cell = Cell(experiment, dataset, partition, model, algorithm, 0)
    # the run keeps what it may share under <workdir>/results/cache (FLT's embeddings): emptied for a cold job
    cache_root = workdir / "results"
    if name == "flt_enc2":
        shutil.rmtree(cache_root / "cache", ignore_errors=True)
    elif name == "flt_enc2_warm" and not (cache_root / "cache" / "embeddings").is_dir():
        raise SystemExit("flt_enc2_warm reads the embeddings flt_enc2 keeps: run --jobs flt_enc2,flt_enc2_warm")
    job = replace(cell_job(config, cell, device="cpu"), results=str(cache_root))
    run = timers.wrap("prepare_other", stages.prepare)(job, npz, workdir / "out" / name)
    run.fed.trainer.train = timers.wrap("train", run.fed.trainer.train)
    from fedbench.engine.weights import model_weights  # noqa: PLC0415

    initial = timers.wrap("init_other", run.algorithm.init)(run.fed, model_weights(run.fed.model))
    progress = stages.resume(run, initial)
    total_rounds, every = run.training["rounds"], run.training["eval_every"]
    for t in range(progress.first, total_rounds + 1):
        if not stages.train_round(run, progress, t):
            break
        if stages.due(t, every, total_rounds):
            stages.evaluate(run, progress, t)
        stages.checkpoint(run, progress, t)
    metrics = stages.write(run, progress)
    job_wall, job_cpu = time.perf_counter() - started_wall, cpu_now() - started_cpu
    timed_wall = sum(v for k, v in timers.wall.items() if k not in ("interpreter", "imports"))
    timed_cpu = sum(v for k, v in timers.cpu.items() if k not in ("interpreter", "imports"))
    timers.wall["unattributed"], timers.cpu["unattributed"] = job_wall - timed_wall, job_cpu - timed_cpu
    return {"job": name, "cell": "/".join(JOBS[name][1:]), "rounds": total_rounds, "eval_every": every,
            "clients": run.fed.num_clients,
            "wall_s": round(timers.wall["interpreter"] + timers.wall["imports"] + job_wall, 3),
            "cpu_s": round(timers.cpu["interpreter"] + timers.cpu["imports"] + job_cpu, 3),
            "setup_not_counted_wall_s": round(setup_wall, 3), "setup_not_counted_cpu_s": round(setup_cpu, 3),
            "wall": {k: round(v, 3) for k, v in timers.wall.items()},
            "cpu": {k: round(v, 3) for k, v in timers.cpu.items()},
            "final": metrics["final"].get("accuracy")}


def ensure_partition(config: dict, dataset: str, partition: str, workdir: Path) -> Path:
    """The cell's seed-0 partition file under ``workdir`` (built once, as the partition rule builds it)."""
    from fedbench.run.partition_job import build_partition  # noqa: PLC0415

    npz = workdir / "partitions" / dataset / partition / "seed0.npz"
    if not npz.exists():
        npz.parent.mkdir(parents=True, exist_ok=True)
        build_partition(config, dataset, partition, 0, npz, npz.with_suffix(".json"))
    return npz


def ensure_encoders(encoders: Path, data_root: str) -> None:
    """FLT's pretrained encoders (quickly pretrained, 1 epoch on 5,000 images, where absent)."""
    from fedbench.algorithms.flt_encoders import pretrain_encoder  # noqa: PLC0415

    config = load_config("flt_claims", data_root, encoders.parent)
    encoders.mkdir(parents=True, exist_ok=True)
    for name, entry in config["encoders"].items():
        if not (encoders / f"{name}.pt").exists():
            quick = {**config, "encoders": {name: {**entry, "epochs": 1, "max_samples": 5000}}}
            pretrain_encoder(quick, name, encoders / f"{name}.pt", encoders / f"{name}_loss.csv")


def partition_rule(name: str, data_root: str, workdir: Path) -> dict:
    """The partition rule's job for ``name``'s cell, in a fresh process: its wall and CPU seconds."""
    code = ("import sys, time, json, resource; t = time.perf_counter(); sys.path.insert(0, sys.argv[1]); "
            "import job_profile as p; from pathlib import Path; "
            "c = p.load_config(p.JOBS[sys.argv[2]][0], sys.argv[3], Path(sys.argv[4])); "
            "p.ensure_partition(c, p.JOBS[sys.argv[2]][2], p.JOBS[sys.argv[2]][3], Path(sys.argv[4])); "
            "print(json.dumps({'wall_s': time.perf_counter() - t, 'cpu_s': p.cpu_now()}))")
    scratch = workdir / "partition_rule"
    subprocess.run(["rm", "-rf", str(scratch)], check=True)
    launched = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), name, data_root, str(scratch)],
                         env=job_env(workdir), cwd=ROOT, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return {"wall_s": round(time.perf_counter() - launched, 2), "cpu_s": round(row["cpu_s"], 2)}


def job_env(workdir: Path, numba_cache: Path | None = None) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMBA_CACHE_DIR": str(numba_cache or workdir / "numba_cache")}


def launch(name: str, args, numba_cache: Path | None = None) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--launched", repr(time.time()),
               "--data-root", args.data_root, "--workdir", str(args.workdir), "--encoders", str(args.encoders)]
    if args.rounds:
        command += ["--rounds", str(args.rounds)]
    out = subprocess.run(command, env=job_env(args.workdir, numba_cache), cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def grouped(row: dict, kind: str) -> dict:
    return {group: sum(row[kind][p] for p in phases) for group, phases in GROUPS.items()}


def table(rows: dict[str, list[dict]], kind: str) -> str:
    """Median seconds per group of phases (and share of the job), one row per job."""
    head = ["job", "cell", f"{kind} s", *GROUPS]
    lines = ["| " + " | ".join(head) + " |", "|:--|:--|" + "--:|" * (len(head) - 2)]
    for name, runs in rows.items():
        total = statistics.median(r[f"{kind}_s"] for r in runs)
        groups = {g: statistics.median(grouped(r, kind)[g] for r in runs) for g in GROUPS}
        cells = [f"{v:.1f} ({100 * v / total:.0f} %)" for v in groups.values()]
        lines.append("| " + " | ".join([name, runs[0]["cell"], f"{total:.1f}", *cells]) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, of {', '.join(JOBS)}")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rounds", type=int, help="fewer rounds than the config's (a quick look; not the profile)")
    p.add_argument("--data-root", default=str(ROOT / "data"), help="folder with FashionMNIST/raw")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/job_profile"))
    p.add_argument("--encoders", type=Path, default=ROOT / "results/flt_claims/encoders")
    p.add_argument("--cold", action="store_true", help="also one FLT job with an empty numba cache (UMAP compiles)")
    p.add_argument("--output", type=Path, help="write every run's JSON line here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.workdir, args.encoders = args.workdir.resolve(), args.encoders.resolve()
    if args.child:
        print(json.dumps(child(args.child, args.launched, args.data_root, args.workdir, args.encoders, args.rounds)))
        return
    names = args.jobs.split(",")
    if any(JOBS[n][0] == "flt_claims" for n in names):
        ensure_encoders(args.encoders, args.data_root)
    rows: dict[str, list[dict]] = {n: [] for n in names}
    for n in names:  # the partition first (not timed: the partition rule, below) and numba's cache warm
        launch(n, argparse.Namespace(**{**vars(args), "rounds": 1}))
    lines = []
    for r in range(args.repeats):
        for n in names:
            row = launch(n, args)
            rows[n].append(row)
            lines.append(row)
            print(f"{n} repeat {r + 1}: wall {row['wall_s']:.1f} s cpu {row['cpu_s']:.1f} s  "
                  + " ".join(f"{k} {v:.1f}" for k, v in row["wall"].items() if v >= 0.05), flush=True)
    extra = {}
    for n in names:
        extra[f"partition rule ({n})"] = partition_rule(n, args.data_root, args.workdir)
    if args.cold and "flt_enc2" in names:
        cold = args.workdir / "numba_cold"
        subprocess.run(["rm", "-rf", str(cold)], check=True)
        row = launch("flt_enc2", argparse.Namespace(**{**vars(args), "rounds": 1}), numba_cache=cold)  # UMAP runs in init
        extra["flt_enc2, empty numba cache: umap phase"] = {"wall_s": row["wall"]["umap"], "cpu_s": row["cpu"]["umap"]}
        lines.append({**row, "numba_cache": "empty"})
    if args.output:
        args.output.write_text("".join(json.dumps(x) + "\n" for x in lines))
    print("\nWall seconds per phase group (median of", args.repeats, "repeat(s)), share of the job:\n")
    print(table(rows, "wall"))
    print("\nCPU seconds:\n")
    print(table(rows, "cpu"))
    print("\nEvery phase, median wall seconds:\n")
    print("| job | " + " | ".join(PHASES) + " |\n|:--|" + "--:|" * len(PHASES))
    for n, runs in rows.items():
        print(f"| {n} | " + " | ".join(f"{statistics.median(r['wall'][k] for r in runs):.2f}" for k in PHASES) + " |")
    print("\nOther jobs' one-off costs:\n")
    for k, v in extra.items():
        print(f"- {k}: wall {v['wall_s']:.1f} s, CPU {v['cpu_s']:.1f} s")


if __name__ == "__main__":
    main()
