"""Time the vectorised engine's training round for one model family under several numerics settings,
one process, one CSV row per setting as it arrives.

Each setting is the training settings ``precision`` (fp32 | tf32 | bf16), ``channels_last``,
``cudnn_benchmark`` and ``compile`` (:mod:`fedbench.engine.numerics`), written ``fp32``,
``bf16+cl``, ``bf16+cl+bench+compile``, ...  For each: a fresh trainer on the same data and weights,
``--warmup`` untimed rounds (compilation, CUDA-graph capture, cuDNN autotuning), then ``--repeats``
timed rounds; the median gives ms/round and the training FLOP/s (the cost model's FLOPs per sample,
:func:`fedbench.cost.model_flops.model_cost`, times the samples a round trains, as ``throughputs.py``
counts them).  A setting that fails is a row with its error; the next one still runs.  ``--budget-s``:
no setting starts after that many seconds (rows not started are logged as skipped).
``--start-at``: after the warm-up, wait until this Unix time before timing (to overlap the timed
rounds of several processes: ``gpu_check.sh``'s concurrent cells).  ``--profile DIR``: after the
timed rounds, one more round under ``torch.profiler`` (CPU and, on a GPU, CUDA activity), written as
``DIR/profile_<family>_<setting>.txt``: the operators and kernels by self time on the device, and the
round's device time split by kind (convolution forward, data gradient, weight gradient, BatchNorm,
matrix products, elementwise, copies, the rest) -- where the wide step's time goes.

    python benchmarks/numerics_matrix.py --family resnet9 --size paper --device cuda \\
        --settings fp32,bf16,fp32+cl,bf16+cl --csv out/matrix.csv
    python benchmarks/numerics_matrix.py --family resnet9 --size tiny --device cpu --settings fp32,bf16+cl
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from fedbench.engine.batches import make_batch_plan  # noqa: E402
from fedbench.engine.device import resolve_device  # noqa: E402
from fedbench.engine.federated_data import ClientIndex, FederatedData  # noqa: E402
from fedbench.engine.local_sgd import LocalSGD  # noqa: E402
from fedbench.engine.numerics import Numerics  # noqa: E402
from fedbench.engine.vectorised import VectorisedTrainer  # noqa: E402
from fedbench.engine.weights import broadcast, model_weights  # noqa: E402
from fedbench.models import build_model  # noqa: E402
from fedbench.cost import model_cost  # noqa: E402
from throughputs import FAMILIES, SIZES  # noqa: E402

COLUMNS = ["when", "device", "family", "setting", "precision", "channels_last", "cudnn_benchmark", "compile", "compiled",
           "step", "clients", "samples", "batch", "ms_per_round", "train_tflops", "warmup_s", "status", "error"]
TARGETS = {"resnet9": 10e12, "resnet20": 8e12}  # issue 39: FLOP/s on one H100, bf16 allowed


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--size", default="paper", choices=sorted(SIZES), help="throughputs.py's sizes (clients, samples, batch)")
    p.add_argument("--clients", type=int, default=None, help="override the size's clients")
    p.add_argument("--device", default="auto")
    p.add_argument("--settings", default="fp32,bf16,fp32+cl,bf16+cl", help="comma-separated settings (see above)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=None, help="start no setting after this many seconds")
    p.add_argument("--start-at", type=float, default=None, help="Unix time to start timing at, after the warm-up")
    p.add_argument("--csv", default=None, help="append one row per setting to this CSV (header if new)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--profile", default=None, metavar="DIR", help="profile one more round per setting into DIR")
    return p.parse_args(argv)


# Kernel and operator names by kind, first match wins (cuDNN's kernels name their pass: fprop, dgrad, wgrad;
# on the CPU the aten operators do).
KINDS = [
    ("conv weight grad", ("wgrad", "convolution_backward_weight", "conv_weight")),
    ("conv data grad", ("dgrad", "convolution_backward_input", "conv_transpose")),
    ("conv backward", ("convolution_backward", "conv2d_backward", "convolutionbackward")),
    ("conv forward", ("fprop", "conv", "implicit_gemm", "winograd")),
    ("batch norm", ("batch_norm", "bn_", "batchnorm", "welford")),
    ("matmul", ("gemm", "matmul", "aten::mm", "bmm", "addmm", "cutlass", "sm90_xmma", "ampere_")),
    ("copy", ("copy", "memcpy", "memset", "aten::to", "contiguous", "nchwtonhwc", "nhwctonchw")),
    ("elementwise", ("elementwise", "vectorized", "aten::add", "aten::mul", "aten::relu", "threshold", "reduce",
                     "aten::sum", "aten::div", "foreach", "aten::max_pool", "pool", "softmax", "nll_loss")),
]


def kernel_kind(name: str) -> str:
    """The kind of a profiled operator or kernel, by :data:`KINDS`; ``other`` where none matches."""
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def profile_round(one_round, device, out: Path, title: str) -> dict:
    """One round under ``torch.profiler``: the table of self times and the device time by kind, to ``out``;
    returns the kinds' shares, with the three largest operators or kernels of kind ``other`` under the key
    ``"other is"`` (the console keeps them where the table's file does not come back)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        one_round()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    averages = prof.key_averages()
    on_device = device.type == "cuda"

    def self_us(event) -> float:
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0))
                     if on_device else event.self_cpu_time_total)

    by_kind: dict[str, float] = {}
    unnamed: dict[str, float] = {}
    for event in averages:
        if on_device and getattr(event, "device_type", None) is not None and "CUDA" not in str(event.device_type):
            continue  # the CPU side of a CUDA run: its launches, not where the device's time goes
        kind = kernel_kind(event.key)
        by_kind[kind] = by_kind.get(kind, 0.0) + self_us(event)
        if kind == "other":
            unnamed[event.key] = unnamed.get(event.key, 0.0) + self_us(event)
    total = sum(by_kind.values()) or 1.0
    shares = {kind: round(us / total, 4) for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1])}
    largest_other = sorted(unnamed.items(), key=lambda kv: -kv[1])[:3]
    sort_by = "self_cuda_time_total" if on_device else "self_cpu_time_total"
    lines = [title, f"self {'device' if on_device else 'CPU'} time by kind ({total / 1000:.1f} ms in all):"]
    lines += [f"  {kind:<18} {100 * share:5.1f} %" for kind, share in shares.items()]
    lines += ["", averages.table(sort_by=sort_by, row_limit=30, max_name_column_width=90)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return {**shares, "other is": [(name[:80], round(us / total, 4)) for name, us in largest_other]}


def make_case(args, device):
    arch, shape, classes = FAMILIES[args.family]
    clients, samples, batch = SIZES[args.size][args.family][:3]
    clients = args.clients or clients
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(clients * samples, *shape, generator=gen)
    y = torch.randint(0, classes, (clients * samples,), generator=gen)
    index = ClientIndex.from_lists([range(c * samples, (c + 1) * samples) for c in range(clients)], device)
    data = FederatedData(x.to(device), y.to(device), index, index, classes)
    spec = {"arch": "mlp", "hidden": [200]} if args.family == "mlp" else {"arch": arch}
    torch.manual_seed(0)
    model = build_model(spec, shape, classes).to(device)
    flops = clients * samples * model_cost(spec, shape, classes).train_flops  # one epoch
    return data, model, flops, clients, samples, batch


def measure(args, device, case, numerics: Numerics, setting: str = "") -> dict:
    data, model, flops, clients, samples, batch = case
    start = broadcast(model_weights(model), clients)
    everyone = torch.arange(clients, device=device)
    hp = LocalSGD(epochs=1, batch_size=batch, lr=0.01)
    plan_gen = torch.Generator().manual_seed(1)
    with numerics.backends():
        trainer = VectorisedTrainer(model, data, numerics=numerics)

        def one_round():
            plan = make_batch_plan(data.train.counts, 1, batch, plan_gen)
            trainer.train(start, everyone, plan, hp)

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        t0 = time.perf_counter()
        for _ in range(args.warmup):
            one_round()
        sync()
        warmup_s = time.perf_counter() - t0
        if args.start_at is not None:
            time.sleep(max(0.0, args.start_at - time.time()))
        times = []
        for _ in range(args.repeats):
            sync()
            t = time.perf_counter()
            one_round()
            sync()
            times.append((time.perf_counter() - t) * 1000)
        shares = None
        if args.profile:
            out = Path(args.profile) / f"profile_{args.family}_{setting}.txt"
            shares = profile_round(one_round, device, out, f"{args.family} {setting}: one round, "
                                                           f"{clients} clients x {samples} samples, batch {batch}")
    ms = statistics.median(times)
    used = trainer.numerics_used
    if shares is not None:
        other_is = shares.pop("other is")
        print(f"{args.family} profile: " + ", ".join(f"{k} {100 * v:.1f} %" for k, v in shares.items()), flush=True)
        if other_is:
            print(f"{args.family} profile, other's largest: "
                  + "; ".join(f"{name} {100 * v:.1f} %" for name, v in other_is), flush=True)
    return {"compiled": used["compiled"], "step": used["trainer_step"], "ms_per_round": round(ms, 2),
            "train_tflops": round(flops / (ms / 1000) / 1e12, 4), "warmup_s": round(warmup_s, 1), "status": "ok"}


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    case = make_case(args, device)
    out = Path(args.csv) if args.csv else None
    if out is not None and not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(",".join(COLUMNS) + "\n")
    failures = 0
    for setting in filter(None, args.settings.split(",")):
        row = {"when": datetime.datetime.now().isoformat(timespec="seconds"), "device": name, "family": args.family,
               "setting": setting, "clients": case[3], "samples": case[4], "batch": case[5]}
        try:
            numerics = Numerics.parse(setting)
            row.update(precision=numerics.precision, channels_last=numerics.channels_last,
                       cudnn_benchmark=numerics.cudnn_benchmark, compile=numerics.compile)
            if args.budget_s is not None and time.perf_counter() - began > args.budget_s:
                row.update(status="skipped", error=f"budget of {args.budget_s:.0f} s spent")
            else:
                row.update(measure(args, device, case, numerics, setting))
        except Exception as error:  # noqa: BLE001 - one setting's failure is a row; the others still run
            failures += 1
            row.update(status="failed", error=f"{type(error).__name__}: {error}"[:300].replace("\n", " "))
            traceback.print_exc()
        target = TARGETS.get(args.family)
        met = "" if target is None or row.get("status") != "ok" else (
            f"; target {target / 1e12:.0f} TFLOP/s {'met' if row['train_tflops'] * 1e12 >= target else 'not met'}")
        print(f"{args.family:>10} {setting:<24} {row.get('status'):>7}: {row.get('ms_per_round', '-')} ms/round, "
              f"{row.get('train_tflops', '-')} TFLOP/s, step {row.get('step', '-')}, compiled {row.get('compiled', '-')}"
              f"{met}{'; ' + row['error'] if row.get('error') else ''}", flush=True)
        print(json.dumps(row), flush=True)
        if out is not None:
            with out.open("a", newline="") as f:
                csv.DictWriter(f, COLUMNS).writerow(row)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
