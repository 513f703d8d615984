"""Would S runs trained as one vectorised call be faster than S calls?  Both ways side by side, interleaved, medians.

Issue 56 proposed stepping the S seeds of a look (or a method's trials) as S x C clients of one call.  This
times the two kinds of step the claims' jobs spend their training in, for S runs of C clients each:

* ``mlp``: FLT's local round (``VectorisedTrainer.train``: the hand-written Linear/ReLU step), C = 20 sampled
  clients of 600 images, one epoch of batch 10, the 784-200-10 MLP, SGD lr 0.01 momentum 0.5
  (config/experiments/flt_claims.yaml); ``--dropout`` 0.5 as FLT's mlp_dropout, 0 (default) for the check below;
* ``mlr_oracle``: pFedMT's device step (``MinibatchGradients.step``, the hand path, fused), one team iteration
  of L = 20 steps for C = 50 devices of 100 rows, 60 features, 10 classes, batch 20 (pfedmt.yaml's Synthetic MLR).

``separate``: S calls of C clients (what S jobs do); ``fused``: one call of S x C clients.  Both start from the
same weights on the same batches, and the largest difference of any client's trained weights between the two
ways is printed (0 where each client's result does not depend on who shares its call: without dropout, whose
masks come from torch's one stream per call).  Prints ms per run and the ratio separate / fused.

    python benchmarks/run_batching.py --runs 10 --threads 1 --clock cpu
    python benchmarks/run_batching.py --runs 10 --device cuda          # on a lent GPU (benchmarks/gpu_check.sh)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from fedbench.engine.batches import make_batch_plan
from fedbench.engine.device import resolve_device
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast


def federation(clients: int, rows: int, shape: tuple[int, ...], device) -> FederatedData:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(clients * rows, *shape, generator=gen)
    y = torch.randint(0, 10, (clients * rows,), generator=gen)
    index = ClientIndex(torch.arange(clients * rows).view(clients, rows), torch.full((clients,), rows))
    index = ClientIndex(index.index.to(device), index.counts.to(device))
    return FederatedData(x.to(device), y.to(device), index, index, 10)


def mlp_case(args, device):
    """(one call on ``clients``, the start weights' clients axis) for FLT's local round."""
    n = args.runs * 20
    data = federation(n, 600, (1, 28, 28), device)
    layers = [nn.Flatten(), nn.Linear(784, 200), nn.ReLU()] + ([nn.Dropout(args.dropout)] if args.dropout else [])
    torch.manual_seed(0)
    model = nn.Sequential(*layers, nn.Linear(200, 10))
    trainer = VectorisedTrainer(model, data)
    start = broadcast({k: v.detach().to(device) for k, v in model.state_dict().items()}, n)
    plan = make_batch_plan(data.train.counts.cpu(), 1, 10, [torch.Generator().manual_seed(c) for c in range(n)])
    hp = LocalSGD(1, 10, 0.01, 0.5)

    def call(clients: torch.Tensor):
        picked = {k: v[clients] for k, v in start.items()}
        sub = type(plan)(plan.order[clients.cpu()], plan.counts[clients.cpu()], plan.batch_size)
        return trainer.train(picked, clients.to(device), sub, hp)[0]

    return call, 20


def mlr_oracle_case(args, device):
    """(one call on ``clients``, clients per run) for pFedMT's device step, L = 20 steps."""
    n = args.runs * 50
    data = federation(n, 100, (60,), device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(60, 10)).to(device)
    oracle = MinibatchGradients(model, data, data.train, 20)
    start = broadcast({k: v.detach() for k, v in model.named_parameters()}, n)
    gens = [torch.Generator().manual_seed(c) for c in range(n)]
    batches = oracle.draw(20, torch.arange(n, device=device), gens)  # the same minibatches for both ways

    def call(clients: torch.Tensor):
        theta = {k: v[clients].clone() for k, v in start.items()}
        anchor = {k: v[clients] for k, v in start.items()}
        for s in range(len(batches)):
            x, y = batches[s]
            oracle.step(theta, (x[clients], y[clients]), clients, lr=0.01, decay=0.15, anchor=anchor, pull=0.15)
        return theta

    return call, 50


CASES = {"mlp": mlp_case, "mlr_oracle": mlr_oracle_case}


def measure(name: str, args, device) -> dict:
    call, per_run = CASES[name](args, device)
    runs = [torch.arange(r * per_run, (r + 1) * per_run, device=device) for r in range(args.runs)]
    everyone = torch.cat(runs)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ways = {"separate": lambda: [call(r) for r in runs], "fused": lambda: call(everyone)}
    times = {way: [] for way in ways}
    outputs = {}
    for timed in [False] * args.warmup + [True] * args.repeats:
        for way, run in ways.items():  # interleaved
            sync()
            t0 = clock()
            out = run()
            sync()
            if timed:
                times[way].append((clock() - t0) * 1000 / args.runs)
            outputs[way] = out
    separate = {k: torch.cat([o[k] for o in outputs["separate"]]) for k in outputs["fused"]}
    diff = max(float((separate[k] - outputs["fused"][k]).abs().max()) for k in separate)
    median = {way: round(statistics.median(t), 2) for way, t in times.items()}
    return {"benchmark": "run_batching", "case": name, "device": str(device), "runs": args.runs,
            "clients_per_run": per_run, "dropout": args.dropout if name == "mlp" else 0.0,
            "threads": torch.get_num_threads(), "clock": args.clock, "repeats": args.repeats,
            "ms_per_run": median, "separate/fused": round(median["separate"] / median["fused"], 2),
            "max_abs_diff": diff, "torch": torch.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="S: runs trained together")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--dropout", type=float, default=0.0, help="the MLP's dropout (FLT: 0.5)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    rows = [measure(name, args, device) for name in args.cases.split(",")]
    for r in rows:
        print(f"{r['case']:10s} {r['runs']} runs x {r['clients_per_run']} clients on {r['device']}: separate "
              f"{r['ms_per_run']['separate']:.1f} ms/run, fused {r['ms_per_run']['fused']:.1f} ms/run, "
              f"separate/fused {r['separate/fused']}x, max |difference| {r['max_abs_diff']:.3g}")
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
