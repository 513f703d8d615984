"""Time one FedAvg round of local training three ways, interleaved, and report medians.

(a) ``VectorisedTrainer``: every client's SGD step at once (the hand-written MLP step, the wide
    model or vmap, whichever the trainer picks for the model; ``--step`` forces one);
(b) ``ReferenceTrainer``: one client after another, plain autograd + ``torch.optim.SGD``;
(c) the peers' loop (PFLlib, FL-bench): per client a ``DataLoader(TensorDataset(...),
    shuffle=True)`` over CPU tensors, batches moved to the device, a fresh ``torch.optim.SGD``.

``--femam-levels L`` trains FeMAM's additive model of L levels of ``--model`` instead (the newest
level trains, the L-1 earlier ones frozen, each client its own levels and every level active):
(a) the fast path (the wide step, the frozen levels' logits from the table of
:mod:`fedbench.engine.frozen_levels`, reused from round to round as within one FeMAM level),
(a') ``vectorised_table_per_round`` (the table computed in every round: the first round of a level),
(a'') ``vectorised_vmap`` (every level in every step through ``vmap``: the path before issue 39), and
(b) the reference loop; no DataLoader loop.

Then, with ``--eval``, evaluation of every client's model on its own test samples two ways:
``evaluate_clients`` (all clients at once, in inference mode, within the memory budget) and a
per-client loop (each model in eval mode over its test set in batches of 256).

``--model``: mlp (784-200-10 on flattened 28x28), mlp_dropout (FLT's 784-200-10 with dropout 0.5), fedavg_cnn, leaf_cnn, lenet_cifar (1x28x28),
fedmr_cnn (1x28x28 or 3x32x32), resnet9 (3x32x32, ``--image-size 64`` for Tiny ImageNet's 64x64), resnet20, vgg16
(3x32x32).  ``--data fashion_mnist`` uses the real Fashion-MNIST images (1x28x28, the Debian
package's files) instead of random N(0, 1) inputs.  Each timed round includes everything a round
needs besides aggregation: (a)/(b) draw the batch plan and broadcast the global weights, (c)
builds the DataLoaders and loads the global state.  Prints ms/round per way, the ratios, and
one JSON line (last line) for quoting.

    python benchmarks/engine_round.py --device cpu --repeats 7
    python benchmarks/engine_round.py --model fedavg_cnn --data fashion_mnist --eval
    python benchmarks/engine_round.py --model resnet9 --clients 10 --samples 500 --batch-size 32
    python benchmarks/engine_round.py --model small_cnn --femam-levels 5 --clients 30 --samples 180 --batch-size 32 \
        --lr 0.05 --data fashion_mnist --skip reference --clock cpu --threads 1   # femam_offline's shapes

``--precision fp32|tf32|bf16``, ``--channels-last``, ``--cudnn-benchmark`` and ``--compile`` are the
training settings of the same names (:mod:`fedbench.engine.numerics`), applied to every way (the
reference and DataLoader loops run the same autocast and layout; ``--compile`` is the vectorised
engine's only).  Default ``--precision fp32``: PyTorch's default backend flags.
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
from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.frozen_levels import WeightsIdentity
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import PRECISIONS, Numerics
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.models import build_model
from fedbench.models.additive import AdditiveLevels


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    p.add_argument("--model", default="mlp", choices=sorted(INPUTS), help="registry model (default mlp)")
    p.add_argument("--image-size", type=int, default=None, help="side of the square input images (default per model)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--data", default="noise", choices=["noise", "fashion_mnist"], help="random inputs or real images")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--step", default="auto", choices=["auto", "fused", "wide", "vmap"], help="vectorised step to force")
    p.add_argument("--eval", action="store_true", help="also time evaluation of every client's model")
    p.add_argument("--test-samples", type=int, default=100, help="test samples per client (--eval)")
    p.add_argument("--memory-mb", type=float, default=None, help="VectorisedTrainer / evaluation memory budget")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per way (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds per way first")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--samples", type=int, default=600, help="training samples per client")
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="wall-clock time, or this process's CPU time (steadier on a shared machine; use with --threads 1)")
    p.add_argument("--chunk-size", type=int, default=None, help="VectorisedTrainer chunk_size (default: its own)")
    p.add_argument("--compile", action="store_true", help="torch.compile the vectorised step (training.compile)")
    p.add_argument("--precision", default="fp32", choices=list(PRECISIONS), help="training.precision (default fp32)")
    p.add_argument("--channels-last", action="store_true", help="training.channels_last")
    p.add_argument("--cudnn-benchmark", action="store_true", help="training.cudnn_benchmark")
    p.add_argument("--no-cuda-graphs", action="store_true", help="VectorisedTrainer(cuda_graphs=False)")
    p.add_argument("--femam-levels", type=int, default=0, help="train FeMAM's additive model of this many levels")
    p.add_argument("--skip", default="", help="comma-separated ways to leave out: vectorised,reference,dataloader")
    return p.parse_args()


# model -> input shape (C, H, W); None: flat 784 features
INPUTS = {
    "mlp": None,
    "mlp_dropout": None,
    "fedavg_cnn": (1, 28),
    "leaf_cnn": (1, 28),
    "fedmr_cnn": (3, 32),
    "lenet_cifar": (1, 28),  # the cost model's LeNet family: FedMR's CNNCifar on Fashion-MNIST (fedmr_claims)
    "small_cnn": (1, 28),
    "resnet9": (3, 32),
    "resnet20": (3, 32),
    "vgg16": (3, 32),
}


def make_inputs(args, total: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """``total`` inputs and labels for the model: random, or real Fashion-MNIST images resized/coloured
    to the model's shape."""
    spec = INPUTS[args.model]
    shape = (784,) if spec is None else (spec[0], args.image_size or spec[1], args.image_size or spec[1])
    if args.data == "noise":
        return torch.randn(total, *shape, generator=gen), torch.randint(0, args.classes, (total,), generator=gen), shape
    from fedbench.data.sources import load_dataset  # noqa: PLC0415 - only for real images

    images = load_dataset({"source": "fashion_mnist"}, "data")
    pick = torch.randperm(len(images.y), generator=gen)[:total]
    x = torch.from_numpy(images.x)[pick].float()
    if spec is not None and (x.shape[-1] != shape[-1] or x.shape[1] != shape[0]):
        x = F.interpolate(x, size=shape[1:], mode="bilinear").expand(-1, shape[0], -1, -1).contiguous()
    y = torch.from_numpy(images.y)[pick].long() % args.classes
    return x.reshape(total, *shape), y, shape


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"cpu: {model}, {os.cpu_count()} logical cores"


def main() -> None:
    args = parse_args()
    if args.femam_levels and args.eval:
        raise SystemExit("engine_round.py: --femam-levels times training only (no --eval)")
    numerics = Numerics(args.precision, args.channels_last, args.cudnn_benchmark, args.compile)
    with numerics.backends():
        run(args, numerics)


def run(args, numerics: Numerics) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    C, n, t, k = args.clients, args.samples, args.test_samples if args.eval else 0, args.classes
    gen = torch.Generator().manual_seed(0)
    x_cpu, y_cpu, shape = make_inputs(args, C * (n + t), gen)
    idx = [np.arange(c * n, (c + 1) * n) for c in range(C)]
    test_idx = [C * n + np.arange(c * t, (c + 1) * t) for c in range(C)]
    data = FederatedData(
        x_cpu.to(device), y_cpu.to(device), ClientIndex.from_lists(idx, device), ClientIndex.from_lists(test_idx, device), k
    )
    torch.manual_seed(0)
    spec = {"arch": "mlp", "hidden": [200]} if args.model == "mlp" else {"arch": args.model}
    model = build_model(spec, shape, k).to(device)
    start_weights = broadcast(model_weights(model), C)
    frozen_key = None
    if args.femam_levels:
        model = AdditiveLevels(model, args.femam_levels).to(device)
        perturb = torch.Generator().manual_seed(2)  # every client its own levels
        start_weights = {name: v + 0.01 * torch.randn(v.shape, generator=perturb).to(device) if v.is_floating_point() else v
                         for name, v in broadcast(model_weights(model), C).items()}
        start_weights["active"] = torch.ones(C, args.femam_levels, device=device)
        frozen_key = WeightsIdentity([{k: v for k, v in start_weights.items() if k.startswith(f"levels.{l}.")}
                                      for l in range(args.femam_levels - 1)])
    global_weights = model_weights(model)
    clients = torch.arange(C, device=device)
    hp = LocalSGD(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, momentum=args.momentum)

    vectorised = VectorisedTrainer(
        model,
        data,
        chunk_size=args.chunk_size,
        cuda_graphs=not args.no_cuda_graphs,
        fused_mlp=args.step in ("auto", "fused"),
        wide=args.step in ("auto", "wide"),
        memory_mb=args.memory_mb,
        numerics=numerics,
    )
    eager = Numerics(numerics.precision, numerics.channels_last, numerics.cudnn_benchmark)  # the loops: no compile
    reference = ReferenceTrainer(model, data, numerics=eager)
    plan_gen = torch.Generator().manual_seed(1)

    def engine_round(trainer, key=None):
        plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, plan_gen)
        start = {k: v.clone() for k, v in start_weights.items()} if args.femam_levels else broadcast(global_weights, C)
        if key is not None:
            return trainer.train(start_weights, clients, plan, hp, frozen_key=key)[0]  # the frozen tensors themselves
        return trainer.train(start, clients, plan, hp)[0]

    loader_model = build_model(spec, shape, k).to(device)
    if numerics.channels_last:
        loader_model = loader_model.to(memory_format=torch.channels_last)
    client_sets = [TensorDataset(x_cpu[i], y_cpu[i]) for i in idx]

    def dataloader_round():
        out = []
        for ds in client_sets:
            loader_model.load_state_dict(global_weights)
            loader = DataLoader(ds, batch_size=hp.batch_size, shuffle=True)
            opt = torch.optim.SGD(loader_model.parameters(), lr=hp.lr, momentum=hp.momentum)
            loader_model.train()
            for _ in range(hp.epochs):
                for xb, yb in loader:
                    xb, yb = eager.layout(xb.to(device)), yb.to(device)
                    opt.zero_grad()
                    with eager.autocast(device):
                        logits = loader_model(xb)
                    F.cross_entropy(logits.float(), yb).backward()
                    opt.step()
            out.append({k: v.detach().clone() for k, v in loader_model.state_dict().items()})
        return out

    # every client's own model (one vectorised round from the global one): per-client evaluation,
    # not the shared-model shortcut evaluate_clients takes when all rows are equal
    stacked = engine_round(vectorised)
    test_sets = [(x_cpu[i].to(device), y_cpu[i].to(device)) for i in test_idx]

    def loop_evaluation():
        """Per client: its model in eval mode over its test set in batches of 256; loss, accuracy and
        the confusion matrix (what evaluate_clients computes, for macro-F1)."""
        out = []
        with torch.inference_mode():
            loader_model.eval()
            for c, (xs, ys) in enumerate(test_sets):
                loader_model.load_state_dict({name: v[c] for name, v in stacked.items()})
                confusion = torch.zeros(k * k, dtype=torch.long, device=device)
                loss = torch.zeros((), device=device)
                for i in range(0, len(xs), 256):
                    logits, yb = loader_model(xs[i : i + 256]), ys[i : i + 256]
                    loss += F.cross_entropy(logits, yb, reduction="sum")
                    confusion += torch.bincount(yb * k + logits.argmax(1), minlength=k * k)
                out.append((float(loss), confusion.view(k, k).diagonal().sum().item()))
            loader_model.train()
        return out

    ways = {
        "vectorised": lambda: engine_round(vectorised, frozen_key),
        "reference": lambda: engine_round(reference),
        "dataloader": dataloader_round,
    }
    if args.femam_levels:
        del ways["dataloader"]
        per_round = VectorisedTrainer(model, data, chunk_size=args.chunk_size, fused_mlp=False, memory_mb=args.memory_mb)
        ways["vectorised_table_per_round"] = lambda: engine_round(per_round)  # its own trainer: keeps no table
        vmapped = VectorisedTrainer(model, data, chunk_size=args.chunk_size, fused_mlp=False, wide=False, memory_mb=args.memory_mb)
        ways["vectorised_vmap"] = lambda: engine_round(vmapped)
    if args.eval:
        ways["eval_vectorised"] = lambda: evaluate_clients(model, stacked, data, data.test, clients, memory_mb=args.memory_mb)
        ways["eval_loop"] = loop_evaluation
    for name in filter(None, args.skip.split(",")):
        ways.pop(name, None)

    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    def timed(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (clock() - t) * 1000

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
        "model": args.model,
        "input": list(shape),
        "data": args.data,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "clients": C,
        "samples": n,
        "batch_size": hp.batch_size,
        "epochs": hp.epochs,
        "steps_per_client": hp.epochs * -(-n // hp.batch_size),
        "step": vectorised.step_kind,
        "momentum": hp.momentum,
        "compile": args.compile,
        "compiled": vectorised.numerics_used["compiled"],
        "precision": args.precision,
        "channels_last": args.channels_last,
        "cudnn_benchmark": args.cudnn_benchmark,
        "cuda_graphs": vectorised.cuda_graphs,
        "chunk_size": args.chunk_size,
        "repeats": args.repeats,
        "clock": args.clock,
        "warmup_s": round(warmup_s, 1),
        "ms_per_round": {k: round(v, 1) for k, v in med.items()},
    }
    if args.femam_levels:
        result["femam_levels"] = args.femam_levels
    if "vectorised" in med:
        others = ("reference", "dataloader", "vectorised_table_per_round", "vectorised_vmap")
        result["speedup_vs"] = {k: round(med[k] / med["vectorised"], 2) for k in others if k in med}
    if "eval_vectorised" in med and "eval_loop" in med:
        result["eval_speedup"] = round(med["eval_loop"] / med["eval_vectorised"], 2)
    print(f"\ndevice {result['device']}  torch {result['torch']}  threads {result['threads']}  warm-up {warmup_s:.1f} s")
    for name, v in med.items():
        print(f"{name:>10}: {v:8.1f} ms/round (median of {args.repeats})")
    for name, s in result.get("speedup_vs", {}).items():
        print(f"{name}/vectorised: {s:.2f}x")
    if "eval_speedup" in result:
        print(f"eval_loop/eval_vectorised: {result['eval_speedup']:.2f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
