"""Time pFedMT's inner work -- one local iteration of every device -- three ways, interleaved, medians.

(a) ``hand``: :class:`fedbench.engine.device_gradient.MinibatchGradients` with the hand-written
    batched forward/backward for Linear/ReLU stacks (what MLR and the DNNs use);
(b) ``vmap``: the same oracle forced onto its generic ``vmap(grad_and_value)`` path;
(b') ``wide``: the same oracle on the wide model (the path of convolutional and BatchNorm models);
(c) ``loop``: one device after another, autograd on the device's own minibatch (how a per-client
    implementation such as PerMFL's computes the same gradients).

Each timed step = draw the minibatch rows, every device's gradient, and the Eq. (10) update
theta <- theta - alpha (g + lam (theta - w)).  Setting (pFedMT's Synthetic cells): 50 devices,
batch 20, 60 features, 10 classes, MLR (60-10) or DNN (60-20-10).  Prints ms per step per way,
the ratios, and one JSON line (last line) to quote.

    python benchmarks/device_gradient.py --model dnn --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.weights import broadcast, model_weights
from fedbench.models import build_model

MODELS = {"mlr": {"arch": "mlr"}, "dnn": {"arch": "mlp", "hidden": [20]}, "mnist_dnn": {"arch": "mlp", "hidden": [100]}}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="mlr")
    p.add_argument("--devices", type=int, default=50)
    p.add_argument("--samples", type=int, default=500, help="training rows per device")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--steps", type=int, default=200, help="steps per timed repeat")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    features = 784 if args.model == "mnist_dnn" else 60
    n = args.devices * args.samples
    x, y = torch.randn(n, features), torch.randint(0, 10, (n,))
    rows = [list(range(d * args.samples, (d + 1) * args.samples)) for d in range(args.devices)]
    index = ClientIndex.from_lists([torch.tensor(r).numpy() for r in rows], "cpu")
    data = FederatedData(x, y, index, index, 10)
    model = build_model(MODELS[args.model], (features,), 10)
    names = [k for k, _ in model.named_parameters()]
    anchor = {k: v for k, v in broadcast(model_weights(model), args.devices).items() if k in names}
    everyone = torch.arange(args.devices)
    alpha, lam = 0.01, 15.0

    def oracle_way(hand_written: bool, wide: bool = False):
        oracle = MinibatchGradients(model, data, data.train, args.batch_size, hand_written=hand_written, wide=wide)
        theta = {k: v.clone() for k, v in anchor.items()}
        generator = torch.Generator().manual_seed(1)

        def run():
            batches = oracle.draw(args.steps, everyone, generator)
            with torch.no_grad():
                for s in range(args.steps):
                    grads, _ = oracle(theta, batches[s], everyone)
                    t = list(theta.values())
                    torch._foreach_mul_(t, 1 - alpha * lam)
                    torch._foreach_add_(t, [grads[k] for k in theta], alpha=-alpha)
                    torch._foreach_add_(t, [anchor[k] for k in theta], alpha=alpha * lam)

        return run

    def loop_way():
        models = [build_model(MODELS[args.model], (features,), 10) for _ in range(args.devices)]
        generator = torch.Generator().manual_seed(1)

        def run():
            for _ in range(args.steps):
                for d, m in enumerate(models):
                    pick = torch.randint(0, args.samples, (args.batch_size,), generator=generator) + d * args.samples
                    loss = F.cross_entropy(m(x[pick]), y[pick])
                    grads = torch.autograd.grad(loss, list(m.parameters()))
                    with torch.no_grad():
                        for p, g, name in zip(m.parameters(), grads, names):
                            p.sub_(alpha * (g + lam * (p - anchor[name][d])))

        return run

    ways = {"hand": oracle_way(True), "vmap": oracle_way(False), "wide": oracle_way(False, wide=True), "loop": loop_way()}
    for run in ways.values():  # warm-up
        run()
    times = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) / args.steps * 1000)
    median = {name: round(statistics.median(t), 3) for name, t in times.items()}
    for name, ms in median.items():
        print(f"{name:5s} {ms:8.3f} ms per step of {args.devices} devices")
    ratios = {f"{k}/hand": round(median[k] / median["hand"], 2) for k in ("vmap", "wide", "loop")}
    print(" ".join(f"{k} {v}x" for k, v in ratios.items()))
    print(json.dumps({
        "benchmark": "device_gradient", "model": args.model, "devices": args.devices, "batch_size": args.batch_size,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "repeats": args.repeats,
        "ms_per_step": median, "ratios": ratios,
    }))


if __name__ == "__main__":
    main()
