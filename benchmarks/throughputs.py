"""Measure the engine for every model family and refresh the cost model's throughputs.

For each family (MLP, FedAvg CNN, LEAF CNN, LeNet, ResNet-9, ResNet-20, VGG-16) this runs
``benchmarks/engine_round.py`` (vectorised engine vs reference loop vs DataLoader loop, training
and evaluation, interleaved, medians) at a size, converts the vectorised engine's times into
FLOP/s with the model's FLOPs per sample (``fedbench.cost.model_cost``), and writes them under the
device's ``families`` in ``config/throughputs.yaml`` (the file ``fedbench.cost.rates`` reads), with the
setting, the date and the speed-ups.  ``--size paper`` is the papers' client counts (for a GPU:
``make bench-gpu``), ``cpu`` a few clients (what a shared CPU measures in minutes: ``make
bench-cpu``), ``tiny`` the smallest run (tests; its figures mean nothing and it never writes
unless ``--output`` names a file).

    python benchmarks/throughputs.py --device cuda --size paper
    python benchmarks/throughputs.py --device cpu --size cpu --threads 2
    python benchmarks/throughputs.py --device cpu --size cpu --threads 1 --families lenet --clock cpu --skip reference,dataloader
    python benchmarks/throughputs.py --device cpu --size tiny --families mlp --output /tmp/t.yaml
    python benchmarks/throughputs.py --device cuda --size paper --families resnet9 --image-size 64   # Tiny ImageNet

The families are the models' registrations' (``MODELS.register(name, family=..., benchmark_input=...)``,
:mod:`fedbench.cost.families`): each family's benchmark model at its declared input.
The cost model keys a convolutional family's figure by input resolution (``fedbench.cost.rates.family_rate``):
every entry records its ``input``; ``--image-size N`` measures at N x N and writes ``<family>@NxN``
beside the family's own figure (a cell at a resolution without a figure is estimated from the
nearest one and reported uncalibrated).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedbench.cost import THROUGHPUTS, device_kind, model_cost  # noqa: E402
from fedbench.cost.families import family_benchmarks  # noqa: E402

# family -> (engine_round --model, input shape, classes): the model each family's registration benchmarks it with
BENCHMARKS = family_benchmarks()
FAMILIES = {family: (benchmark.arch, benchmark.input_shape, 10) for family, benchmark in BENCHMARKS.items()}
# size -> family -> (clients, samples per client, batch, test samples per client, repeats, warm-up)
SIZES = {
    # the papers' settings: FedAvg's 20 clients x 600 at batch 10 (MLP, CNNs), FeMAM's 50 x 900 at
    # batch 32 (ResNet-9), FedMR's 10 sampled clients x 500 at batch 50 (ResNet-20, VGG-16, LeNet)
    "paper": {"mlp": (20, 600, 10, 100, 7, 2), "fedavg_cnn": (20, 600, 10, 100, 5, 2), "leaf_cnn": (20, 600, 10, 100, 5, 2),
              "lenet": (10, 500, 50, 100, 3, 1), "small_cnn": (30, 200, 32, 100, 3, 1),
              "resnet9": (50, 900, 32, 100, 3, 1), "resnet20": (10, 500, 50, 100, 3, 1), "vgg16": (10, 500, 50, 100, 3, 1)},
    "cpu": {"mlp": (20, 600, 10, 100, 3, 1), "fedavg_cnn": (4, 100, 10, 50, 3, 1), "leaf_cnn": (4, 100, 10, 50, 3, 1),
            "lenet": (10, 100, 50, 50, 7, 1), "small_cnn": (10, 100, 32, 50, 7, 1),
            "resnet9": (4, 64, 32, 32, 3, 1), "resnet20": (2, 50, 50, 25, 3, 1), "vgg16": (2, 50, 50, 25, 3, 1)},
    "tiny": {name: (2, 8, 4, 4, 1, 0) for name in FAMILIES},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    p.add_argument("--size", default="paper", choices=sorted(SIZES))
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of: " + ", ".join(FAMILIES))
    p.add_argument("--threads", type=int, default=None, help="torch threads in each benchmark")
    p.add_argument("--skip", default="", help="engine_round --skip (e.g. reference: the slow per-client loop)")
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the square input images (convolutional families); written as <family>@<N>x<N>")
    p.add_argument("--output", default=None, help=f"throughput file to update (default {THROUGHPUTS.relative_to(REPO)}; "
                                                  "--size tiny, or any of the four settings below, writes only with this)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"], help="training.precision")
    p.add_argument("--channels-last", action="store_true", help="training.channels_last")
    p.add_argument("--cudnn-benchmark", action="store_true", help="training.cudnn_benchmark")
    p.add_argument("--compile", action="store_true", help="training.compile")
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="engine_round's clock: wall time, or the process's CPU time (steadier on a shared machine, with --threads 1)")
    return p.parse_args(argv)


def input_shape(family: str, image_size: int | None) -> tuple[int, ...]:
    """The input ``family`` is measured at: the benchmark's, or N x N images (``--image-size``)."""
    shape = FAMILIES[family][1]
    return shape if image_size is None or BENCHMARKS[family].flat else (shape[0], image_size, image_size)


def numerics_flags(args) -> list[str]:
    """engine_round's flags for the settings other than the defaults (none: the cost model's setting)."""
    flags = [] if args.precision == "fp32" else ["--precision", args.precision]
    return flags + [flag for flag, on in (("--channels-last", args.channels_last), ("--cudnn-benchmark", args.cudnn_benchmark),
                                          ("--compile", args.compile)) if on]


def run_family(family: str, size: str, device: str, threads: int | None, skip: str, image_size: int | None = None,
               extra: tuple[str, ...] = (), clock: str = "wall") -> dict:
    """One engine_round run of ``family``; its JSON result."""
    model, _, classes = FAMILIES[family]
    clients, samples, batch, test, repeats, warmup = SIZES[size][family]
    command = [sys.executable, str(REPO / "benchmarks" / "engine_round.py"), "--device", device, "--model", model,
               "--clients", str(clients), "--samples", str(samples), "--batch-size", str(batch), "--classes", str(classes),
               "--eval", "--test-samples", str(test), "--repeats", str(repeats), "--warmup", str(warmup)]
    command += ["--threads", str(threads)] if threads else []
    command += ["--skip", skip] if skip else []
    command += ["--image-size", str(image_size)] if image_size and not BENCHMARKS[family].flat else []
    command += list(extra) + (["--clock", clock] if clock != "wall" else [])
    process = subprocess.run(command, capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def throughput(family: str, result: dict, image_size: int | None = None) -> dict:
    """FLOP/s of the vectorised engine's training and evaluation in ``result``."""
    _, _, classes = FAMILIES[family]
    shape = input_shape(family, image_size)
    cost = model_cost({"arch": "mlp", "hidden": [200]} if family == "mlp" else {"arch": FAMILIES[family][0]}, shape, classes)
    ms = result["ms_per_round"]
    trained = result["clients"] * result["samples"] * result["epochs"] * cost.train_flops
    scored = result["clients"] * result["test_samples"] * cost.eval_flops
    return {
        "train": float(f"{trained / (ms['vectorised'] / 1000):.4g}"),
        "eval": float(f"{scored / (ms['eval_vectorised'] / 1000):.4g}"),
        "measured": f"{datetime.date.today()}, {result['device']}, torch {result['torch']}, {result['threads']} threads",
        "input": list(shape),
        "setting": f"{result['clients']} clients x {result['samples']} samples, batch {result['batch_size']}, "
                   f"{result['test_samples']} test samples each, median of {result['repeats']}, precision "
                   f"{result.get('precision', 'fp32')}" + "".join(f", {k}" for k in ("channels_last", "cudnn_benchmark", "compile")
                                                                  if result.get(k))
                   + (f", {result['clock']} clock" if result.get("clock", "wall") != "wall" else ""),
        "ms_per_round": result["ms_per_round"],
        "speedup_vs": result.get("speedup_vs", {}),
        "eval_speedup": result.get("eval_speedup"),
    }


def write_table(output: Path, table: dict) -> None:
    """``table`` to the throughput file ``output``, after the comment lines at its top (the rest is rewritten)."""
    header = "".join(line + "\n" for line in output.read_text().splitlines() if line.startswith("#")) if output.exists() else ""
    output.write_text(header + yaml.safe_dump(table, sort_keys=False, width=120))


def main(argv=None) -> int:
    args = parse_args(argv)
    kind = device_kind(args.device)
    extra = numerics_flags(args)
    output = Path(args.output) if args.output else (None if args.size == "tiny" or extra else THROUGHPUTS)
    measured = {}
    for family in filter(None, args.families.split(",")):
        result = run_family(family, args.size, args.device, args.threads, args.skip, args.image_size, tuple(extra), args.clock)
        result["test_samples"] = SIZES[args.size][family][3]
        shape = input_shape(family, args.image_size)
        key = family if shape == FAMILIES[family][1] else f"{family}@{shape[-2]}x{shape[-1]}"
        measured[key] = throughput(family, result, args.image_size)
        row = measured[key]
        print(f"{key:>10}: train {row['train'] / 1e9:8.2f} GFLOP/s, eval {row['eval'] / 1e9:8.2f} GFLOP/s; "
              f"ms/round {row['ms_per_round']}; DataLoader/vectorised {row['speedup_vs'].get('dataloader', '-')}x", flush=True)
    if output is None:
        return 0
    table = yaml.safe_load(output.read_text()) if output.exists() else {}
    families = table.setdefault(kind, {}).setdefault("families", {})
    for key, row in measured.items():  # a refreshed fp32 figure keeps the other settings' (matrix_settings.py)
        if "settings" in (families.get(key) or {}):
            row["settings"] = families[key]["settings"]
    families.update(measured)
    write_table(output, table)
    print(f"{len(measured)} families written to {output} under {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
