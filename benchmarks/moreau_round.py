"""Time one round of the Moreau family (pFedMe, Per-FedAvg, pFedMT) two ways, interleaved, medians.

(a) ``fast``: the algorithms as they run now -- every step through ``oracle.step`` (on the
    hand-written path of Linear/ReLU stacks the weight gradient goes straight into the update),
    convolutional/BatchNorm models on the wide model, recurring steps replayed as CUDA graphs on CUDA;
(b) ``before``: the round loops as they stood at deb7334, copied below: the plain oracle's
    gradients then each method's ``_foreach`` arithmetic, non-stack models on ``vmap``.

On the CPU one more round per way counts the torch operations it dispatches, views left out (about
one kernel launch each on a GPU, where the fast path replays CUDA graphs instead).  Both ways run the same rounds from the
same state and seed, so their models must agree: the largest
absolute difference of the global models after all rounds is printed beside the times (float32
rounding of another operation order; tests/test_moreau_fast_path.py bounds it).  Default setting:
pFedMT's Synthetic cells (config/experiments/pfedmt.yaml): 50 clients in 2 teams, 60 features,
10 classes, batch 20, the grid's hyper-parameters (pFedMe K = 5, R = 20; Per-FedAvg R = 20;
pFedMT K = 30, L = 20).  Prints ms per round per way, the ratio before / fast and one JSON line per
method (last lines) to quote.

    python benchmarks/moreau_round.py --model mlr,dnn --methods pfedme,pfedmt --threads 1 --clock cpu
    python benchmarks/moreau_round.py --model dnn --device cuda
    python benchmarks/moreau_round.py --model small_cnn --clients 20 --methods pfedme --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fedbench.algorithms.pfedmt as pfedmt_module
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.base import Federation
from fedbench.engine.device import resolve_device
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.weights import model_weights
from fedbench.models import build_model

import moreau_before as before  # the loops of deb7334 (this script's folder is on the path)

MODELS = {  # spec, input shape
    "mlr": ({"arch": "mlr"}, (60,)),
    "dnn": ({"arch": "mlp", "hidden": [20]}, (60,)),
    "pfedme_cnn": ({"arch": "pfedme_cnn"}, (1, 28, 28)),
    "small_cnn": ({"arch": "small_cnn"}, (1, 28, 28)),
    "resnet9": ({"arch": "resnet9"}, (3, 32, 32)),
}
CONVEX = ("mlr",)
# config/experiments/pfedmt.yaml (pfedme, perfedavg, pfedmt_convex / pfedmt_nonconvex)
HP = {
    "pfedme": {"lam": 15, "beta": 0.5, "personal_lr": 0.01, "inner_steps": 5, "local_steps": 20, "mu": 0.001},
    "perfedavg": {"beta": 0.001, "local_steps": 20},
    "pfedmt": {"team_iterations": 30, "local_iterations": 20, "alpha": 0.01, "eta": 0.03, "lam": 15, "beta": 1.0},
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda[:N]")
    p.add_argument("--model", default="mlr", help=f"comma-separated, of: {', '.join(sorted(MODELS))}")
    p.add_argument("--methods", default="pfedme,pfedmt", help="comma-separated: pfedme, perfedavg, pfedmt")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--teams", type=int, default=2, help="pFedMT's teams (sequential, equal)")
    p.add_argument("--samples", type=int, default=100, help="training rows per client")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--participation", type=float, default=0.4)
    p.add_argument("--local-steps", type=int, default=None, help="override R (pFedMe, Per-FedAvg) / L (pFedMT)")
    p.add_argument("--team-iterations", type=int, default=None, help="override pFedMT's K")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per way (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per way first")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"], help="wall-clock or this process's CPU time")
    return p.parse_args()


# ---- the round loops as they stood at deb7334 (benchmarks/moreau_before.py) -----------------------------------

def before_pfedmt(algo, fed, state, round_):
    """PFedMT.round with the device step of deb7334: the plain oracle's gradient, Eq. (10) by three ``_foreach``."""
    fast = pfedmt_module.minibatch_device_step

    pfedmt_module.minibatch_device_step = before.pfedmt_device_step
    try:
        return algo.round(fed, state, round_)
    finally:
        pfedmt_module.minibatch_device_step = fast


BEFORE = {"pfedme": before.pfedme_round, "perfedavg": before.perfedavg_round, "pfedmt": before_pfedmt}


def federation(args, device, model_name: str, before: bool) -> tuple[Federation, dict]:
    """The same random federation every call: ``before`` gets the oracle of deb7334 (vmap, unfused)."""
    spec, shape = MODELS[model_name]
    gen = torch.Generator().manual_seed(0)
    n = args.clients * args.samples
    x, y = torch.randn(n, *shape, generator=gen), torch.randint(0, 10, (n,), generator=gen)
    train = [np.arange(c * args.samples, (c + 1) * args.samples) for c in range(args.clients)]
    index = ClientIndex.from_lists(train, device)
    data = FederatedData(x.to(device), y.to(device), index, index, 10)
    torch.manual_seed(0)
    model = build_model(spec, shape, 10).to(device)
    local = LocalSGD(epochs=1, batch_size=args.batch_size, lr=0.01)
    fed = Federation(model, data, ReferenceTrainer(model, data), local, args.participation,
                     torch.Generator().manual_seed(1), seed=1)
    fed.teams = np.repeat(np.arange(args.teams), -(-args.clients // args.teams))[: args.clients]
    if before:
        fed.minibatch_gradients = lambda split="train": MinibatchGradients(
            fed.model, fed.data, getattr(fed.data, split), local.batch_size, local.weight_decay, wide=False, fused=False)
    return fed, model_weights(model)


def time_method(args, device, model_name: str, method: str) -> dict:
    hp = dict(HP[method])
    if method == "pfedmt":
        hp["gamma"] = 0.1 if model_name in CONVEX else 1.0
        if args.local_steps:
            hp["local_iterations"] = args.local_steps
        if args.team_iterations:
            hp["team_iterations"] = args.team_iterations
    elif args.local_steps:
        hp["local_steps"] = args.local_steps
    algo = ALGORITHMS[method](**hp)
    ways = {}
    for name in ("fast", "before"):
        fed, initial = federation(args, device, model_name, name == "before")
        run = (lambda a, f, s, t: a.round(f, s, t)) if name == "fast" else BEFORE[method]
        ways[name] = {"fed": fed, "state": algo.init(fed, initial), "run": run, "round": 0, "times": []}
        oracle = fed.minibatch_gradients()
        ways[name]["path"] = f"{oracle.path}{'' if oracle.fused or oracle.path != 'hand' else ' unfused'}" + (
            ", CUDA graphs" if name == "fast" and oracle.cuda_graphs else "")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for timed in [False] * args.warmup + [True] * args.repeats:
        for way in ways.values():  # interleaved: fast, before, fast, before, ...
            way["round"] += 1
            sync()
            start = clock()
            way["state"], _ = way["run"](algo, way["fed"], way["state"], way["round"])
            sync()
            if timed:
                way["times"].append((clock() - start) * 1000)
    ops = {}
    if device.type == "cpu":  # one more round per way, counting the torch operations it dispatches
        for name, way in ways.items():
            way["round"] += 1
            with CountOps() as counter:
                way["state"], _ = way["run"](algo, way["fed"], way["state"], way["round"])
            ops[name] = counter.n
    median = {name: round(statistics.median(w["times"]), 2) for name, w in ways.items()}
    spread = {name: [round(min(w["times"]), 2), round(max(w["times"]), 2)] for name, w in ways.items()}
    fast, before = (ways[k]["state"]["global"] for k in ("fast", "before"))
    diff = max(float((fast[k].double() - before[k].double()).abs().max()) for k in fast if fast[k].is_floating_point())
    scale = max(float(before[k].abs().max()) for k in before if before[k].is_floating_point())
    return {
        "benchmark": "moreau_round", "method": method, "model": model_name, "device": device_name(device),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "clock": args.clock, "clients": args.clients,
        "batch_size": args.batch_size, "hp": hp, "rounds": args.warmup + args.repeats, "repeats": args.repeats,
        "paths": {k: w["path"] for k, w in ways.items()}, "ms_per_round": median, "min_max": spread,
        "before/fast": round(median["before"] / median["fast"], 2), "ops_per_round": ops,
        "global_max_abs_diff": diff, "global_max_abs": scale,
    }


class CountOps(TorchDispatchMode):
    """Counts the torch operations dispatched that compute (about one kernel each; a ``_foreach`` op
    counts once), leaving out views (``view``, ``unsqueeze``, ``transpose``, ``detach``, ...)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += not func.is_view
        return func(*args, **(kwargs or {}))


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    models = args.model.split(",")
    if unknown := set(models) - set(MODELS):
        raise SystemExit(f"unknown model(s) {sorted(unknown)}; known: {', '.join(sorted(MODELS))}")
    results = [time_method(args, device, model, m) for model in models for m in args.methods.split(",")]
    for r in results:
        print(f"{r['method']:9s} {r['model']}: fast {r['ms_per_round']['fast']:9.2f} ms/round ({r['paths']['fast']}), "
              f"before {r['ms_per_round']['before']:9.2f} ms/round ({r['paths']['before']}), before/fast {r['before/fast']}x, "
              f"global models differ by at most {r['global_max_abs_diff']:.2e} (|values| <= {r['global_max_abs']:.2f})"
              + (f"; torch operations per round: fast {r['ops_per_round']['fast']}, before {r['ops_per_round']['before']}"
                 if r["ops_per_round"] else ""))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
