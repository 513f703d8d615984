"""Time whole rounds of one algorithm (FeMAM, pFedMe, ... any registered method) on synthetic data
under a numerics setting: what a cell's training costs, not only the engine's local-SGD step.

A federation of ``--clients`` clients with ``--samples`` training (and ``--eval-samples`` test and
validation) rows of random N(0, 1) inputs of the family's shape is built as the pipeline builds
one (the trainer and the minibatch-gradient oracle with the setting's ``Numerics``); the
algorithm's ``init``, ``--warmup`` untimed rounds, then ``--repeats`` timed ``round`` calls
(median).  FLOP/s count the cost model's training FLOPs of a round
(:func:`fedbench.cost.work.local_samples` x :func:`fedbench.cost.work.training_clients` x the model's FLOPs per sample: for
FeMAM every level of its structure, so early rounds, which train fewer levels, are overcounted).
One CSV row (``--csv``, appended) and one JSON line.

    python benchmarks/algorithm_round.py --algorithm '{"method": "pfedme", "local_steps": 8}' --family resnet9 \\
        --device cuda --setting bf16
    python benchmarks/algorithm_round.py --algorithm '{"method": "femam"}' --family resnet9 --setting fp32+cl
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from fedbench.algorithms import ALGORITHMS, Federation  # noqa: E402
from fedbench.config.cells import TRAINING_DEFAULTS  # noqa: E402
from fedbench.cost.work import local_samples, training_clients  # noqa: E402
from fedbench.registry.workload import declared_workload  # noqa: E402
from fedbench.engine.device import resolve_device  # noqa: E402
from fedbench.engine.federated_data import ClientIndex, FederatedData  # noqa: E402
from fedbench.engine.local_sgd import LocalSGD  # noqa: E402
from fedbench.engine.numerics import Numerics  # noqa: E402
from fedbench.engine.vectorised import VectorisedTrainer  # noqa: E402
from fedbench.engine.weights import model_weights  # noqa: E402
from fedbench.models import build_model  # noqa: E402
from fedbench.cost import CellShape, model_cost  # noqa: E402
from throughputs import FAMILIES  # noqa: E402

COLUMNS = ["when", "device", "algorithm", "family", "setting", "clients", "samples", "batch", "ms_per_round",
           "train_tflops", "warmup_s", "status", "error"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithm", required=True, help='the algorithm entry as JSON, e.g. {"method": "pfedme", "local_steps": 8}')
    p.add_argument("--family", default="resnet9", choices=sorted(FAMILIES))
    p.add_argument("--device", default="auto")
    p.add_argument("--setting", default="fp32", help="numerics_matrix.py's setting: fp32, bf16+cl, bf16+cl+compile, ...")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--samples", type=int, default=900, help="training rows per client")
    p.add_argument("--eval-samples", type=int, default=100, help="test and validation rows per client")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--participation", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--csv", default=None)
    return p.parse_args(argv)


def federation(args, device, numerics) -> tuple[Federation, dict, float]:
    arch, shape, classes = FAMILIES[args.family]
    n, t, c = args.samples, args.eval_samples, args.clients
    gen = torch.Generator().manual_seed(0)
    rows = n + 2 * t
    x = torch.randn(c * rows, *shape, generator=gen)
    y = torch.randint(0, classes, (c * rows,), generator=gen)
    base = [k * rows for k in range(c)]
    index = {name: ClientIndex.from_lists([np.arange(b + lo, b + hi) for b in base], device)
             for name, (lo, hi) in {"train": (0, n), "test": (n, n + t), "val": (n + t, rows)}.items()}
    data = FederatedData(x.to(device), y.to(device), index["train"], index["test"], classes, val=index["val"])
    spec = {"arch": "mlp", "hidden": [200]} if args.family == "mlp" else {"arch": arch}
    torch.manual_seed(0)
    model = build_model(spec, shape, classes).to(device)
    local = LocalSGD(epochs=args.epochs, batch_size=args.batch_size, lr=0.01)
    fed = Federation(model=model, data=data, trainer=VectorisedTrainer(model, data, numerics=numerics), local=local,
                     participation=args.participation, generator=torch.Generator().manual_seed(0), seed=0,
                     numerics=numerics)
    training = {**TRAINING_DEFAULTS, "local_epochs": args.epochs, "batch_size": args.batch_size,
                "participation": args.participation}
    cell = CellShape(num_clients=c, train_samples=c * n, eval_samples=2 * c * t, largest_client=n, input_shape=shape,
                     num_classes=classes, dataset_samples=c * rows)
    entry = json.loads(args.algorithm)
    workload = declared_workload(entry, training)
    flops = training_clients(workload, training, cell) * local_samples(workload, training, cell) * model_cost(spec, shape, classes).train_flops
    return fed, entry, flops


def main(argv=None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device)
    numerics = Numerics.parse(args.setting)
    entry = json.loads(args.algorithm)
    row = {"when": datetime.datetime.now().isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "algorithm": json.dumps(entry, sort_keys=True), "family": args.family, "setting": args.setting,
           "clients": args.clients, "samples": args.samples, "batch": args.batch_size}
    status = 0
    try:
        with numerics.backends():
            fed, entry, flops = federation(args, device, numerics)
            algorithm = ALGORITHMS[entry["method"]](**{k: v for k, v in entry.items() if k != "method"})
            state = algorithm.init(fed, model_weights(fed.model))

            def sync():
                if device.type == "cuda":
                    torch.cuda.synchronize(device)

            t0 = time.perf_counter()
            round_ = 1
            for _ in range(args.warmup):
                state, _ = algorithm.round(fed, state, round_)
                round_ += 1
            sync()
            warmup_s = time.perf_counter() - t0
            times = []
            for _ in range(args.repeats):
                sync()
                t = time.perf_counter()
                state, _ = algorithm.round(fed, state, round_)
                sync()
                times.append((time.perf_counter() - t) * 1000)
                round_ += 1
        ms = statistics.median(times)
        row.update(ms_per_round=round(ms, 2), train_tflops=round(flops / (ms / 1000) / 1e12, 4),
                   warmup_s=round(warmup_s, 1), status="ok")
    except Exception as error:  # noqa: BLE001 - reported as the row's outcome
        status = 1
        row.update(status="failed", error=f"{type(error).__name__}: {error}"[:300].replace("\n", " "))
    print(f"{entry['method']:>10} {args.family} {args.setting:<20} {row['status']}: {row.get('ms_per_round', '-')} ms/round, "
          f"{row.get('train_tflops', '-')} TFLOP/s (cost model's count){'; ' + row['error'] if row.get('error') else ''}",
          flush=True)
    print(json.dumps(row), flush=True)
    if args.csv:
        out = Path(args.csv)
        new = not out.exists()
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", newline="") as f:
            writer = csv.DictWriter(f, COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(row)
    return status


if __name__ == "__main__":
    sys.exit(main())
