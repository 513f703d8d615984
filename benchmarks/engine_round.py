"""Time one FedAvg round of local training three ways, interleaved, and report medians.

(a) ``VectorisedTrainer``: every client's SGD step at once (vmap over stacked weights);
(b) ``ReferenceTrainer``: one client after another, plain autograd + ``torch.optim.SGD``;
(c) the peers' loop (PFLlib, FL-bench): per client a ``DataLoader(TensorDataset(...),
    shuffle=True)`` over CPU tensors, batches moved to the device, a fresh ``torch.optim.SGD``.

Setting (FedAvg's MNIST MLP): clients x samples random N(0, 1) features of dimension 784
with random labels in 0..9, MLP 784-200-10, batch 10, 1 epoch, lr 0.01.  Each timed round
includes everything a round needs besides aggregation: (a)/(b) draw the batch plan and
broadcast the global weights, (c) builds the DataLoaders and loads the global state.
Prints ms/round per way, the ratios, and one JSON line (last line) for quoting.

    python benchmarks/engine_round.py --device cpu --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from fedbench.engine.batches import make_batch_plan
from fedbench.engine.device import resolve_device
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.models import build_model


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per way (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds per way first")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--samples", type=int, default=600, help="training samples per client")
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--chunk-size", type=int, default=None, help="VectorisedTrainer chunk_size (default: its own)")
    p.add_argument("--generic", action="store_true", help="generic vmap step instead of the hand-written MLP step")
    p.add_argument("--compile", action="store_true", help="torch.compile the generic step (implies --generic)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="VectorisedTrainer(cuda_graphs=False)")
    p.add_argument("--skip", default="", help="comma-separated ways to leave out: vectorised,reference,dataloader")
    return p.parse_args()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"cpu: {model}, {os.cpu_count()} logical cores"


def main() -> None:
    args = parse_args()
    args.generic |= args.compile
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    C, n, d, k = args.clients, args.samples, 784, 10
    gen = torch.Generator().manual_seed(0)
    x_cpu = torch.randn(C * n, d, generator=gen)
    y_cpu = torch.randint(0, k, (C * n,), generator=gen)
    idx = [np.arange(c * n, (c + 1) * n) for c in range(C)]
    data = FederatedData(
        x_cpu.to(device), y_cpu.to(device), ClientIndex.from_lists(idx, device), ClientIndex.from_lists(idx, device), k
    )
    torch.manual_seed(0)
    model = build_model({"arch": "mlp", "hidden": [200]}, (d,), k).to(device)
    global_weights = model_weights(model)
    clients = torch.arange(C, device=device)
    hp = LocalSGD(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr)

    vectorised = VectorisedTrainer(
        model,
        data,
        chunk_size=args.chunk_size,
        compile=args.compile,
        cuda_graphs=not args.no_cuda_graphs,
        fused_mlp=not args.generic,
    )
    reference = ReferenceTrainer(model, data)
    plan_gen = torch.Generator().manual_seed(1)

    def engine_round(trainer):
        plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, plan_gen)
        return trainer.train(broadcast(global_weights, C), clients, plan, hp)[0]

    loader_model = build_model({"arch": "mlp", "hidden": [200]}, (d,), k).to(device)
    client_sets = [TensorDataset(x_cpu[i], y_cpu[i]) for i in idx]

    def dataloader_round():
        out = []
        for ds in client_sets:
            loader_model.load_state_dict(global_weights)
            loader = DataLoader(ds, batch_size=hp.batch_size, shuffle=True)
            opt = torch.optim.SGD(loader_model.parameters(), lr=hp.lr)
            loader_model.train()
            for _ in range(hp.epochs):
                for xb, yb in loader:
                    xb, yb = xb.to(device), yb.to(device)
                    opt.zero_grad()
                    F.cross_entropy(loader_model(xb), yb).backward()
                    opt.step()
            out.append({k: v.detach().clone() for k, v in loader_model.state_dict().items()})
        return out

    ways = {
        "vectorised": lambda: engine_round(vectorised),
        "reference": lambda: engine_round(reference),
        "dataloader": dataloader_round,
    }
    for name in filter(None, args.skip.split(",")):
        del ways[name]

    def timed(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - t) * 1000

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        for fn in ways.values():
            fn()
    warmup_s = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(args.repeats):  # interleaved: each repeat times every way once
        for name, fn in ways.items():
            times[name].append(timed(fn))
        print(f"repeat {r + 1}/{args.repeats}: " + "  ".join(f"{k} {v[-1]:.1f} ms" for k, v in times.items()), flush=True)

    med = {name: statistics.median(v) for name, v in times.items()}
    result = {
        "benchmark": "engine_round",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "clients": C,
        "samples": n,
        "batch_size": hp.batch_size,
        "epochs": hp.epochs,
        "steps_per_client": hp.epochs * -(-n // hp.batch_size),
        "step": "generic" if args.generic else "fused_mlp",
        "compile": args.compile,
        "cuda_graphs": vectorised.cuda_graphs,
        "chunk_size": args.chunk_size,
        "repeats": args.repeats,
        "warmup_s": round(warmup_s, 1),
        "ms_per_round": {k: round(v, 1) for k, v in med.items()},
    }
    if "vectorised" in med:
        result["speedup_vs"] = {k: round(v / med["vectorised"], 2) for k, v in med.items() if k != "vectorised"}
    print(f"\ndevice {result['device']}  torch {result['torch']}  threads {result['threads']}  warm-up {warmup_s:.1f} s")
    for name, v in med.items():
        print(f"{name:>10}: {v:8.1f} ms/round (median of {args.repeats})")
    for name, s in result.get("speedup_vs", {}).items():
        print(f"{name}/vectorised: {s:.2f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
