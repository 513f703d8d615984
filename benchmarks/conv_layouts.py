"""Time one layer's forward + backward for k clients three ways, interleaved, medians and ratios.

The wide step (fedbench/engine/wide_model.py) computes a convolution for k clients as one grouped
convolution and a Linear layer as one batched matmul.  This script measures, for one layer of the
FedAvg CNN (McMahan et al.: conv 5x5 32 -> 64 on 14x14, then fc 3136 -> 512) and k clients with
batch b each, the ways that were tried:

  conv:   grouped  (one F.conv2d with groups=k, what the wide step runs)
          loop     (one F.conv2d per client, what a per-client loop runs)
          unfold   (F.unfold + torch.bmm over clients, the MLP step's approach)
  linear: bmm      (W_j x_j^T batched, what WideLinear runs)
          loop     (one matmul per client)

    python benchmarks/conv_layouts.py --clients 20 --batch 10 --threads 2
    python benchmarks/conv_layouts.py --device cuda --dtype bf16 --clients 50 --batch 32 \
        --conv 128,128,16,3 --linear 512,10          # a ResNet-9 block's convolution at FeMAM's 50 clients

``--conv cin,cout,side,kernel`` and ``--linear in,out`` choose the layers (default the FedAvg CNN's);
``--device cuda`` times with synchronisation, ``--dtype bf16`` runs the layers in bfloat16 (as the
``bf16`` autocast setting computes convolutions and matmuls).  Prints ms per call for each way and the
loop/way ratios, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--conv", default="32,64,14,5", help="cin,cout,side,kernel of the convolution (FedAvg CNN's conv2)")
    p.add_argument("--linear", default="3136,512", help="in,out of the Linear layer (FedAvg CNN's fc1)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    return p.parse_args()


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def conv_ways(k: int, b: int, cin: int = 32, cout: int = 64, side: int = 14, kernel: int = 5, **where) -> dict:
    pad = kernel // 2
    x = torch.randn(b, k * cin, side, side, **where).requires_grad_()
    w = torch.randn(k * cout, cin, kernel, kernel, **where).requires_grad_()
    xs = torch.randn(k, b, cin, side, side, **where).requires_grad_()
    ws = torch.randn(k, cout, cin * kernel * kernel, **where).requires_grad_()
    # the loop's clients as separate leaves (a slice of one leaf would accumulate a full-size gradient)
    x_each = [xs[j].detach().clone().requires_grad_() for j in range(k)]
    w_each = [ws[j].detach().view(cout, cin, kernel, kernel).clone().requires_grad_() for j in range(k)]

    def grouped():
        F.conv2d(x, w, padding=pad, groups=k).sum().backward()

    def loop():
        for xj, wj in zip(x_each, w_each):
            F.conv2d(xj, wj, padding=pad).sum().backward()

    def unfold():
        cols = F.unfold(xs.view(k * b, cin, side, side), kernel, padding=pad)  # [k*b, cin*kernel^2, L]
        cols = cols.view(k, b, cin * kernel * kernel, -1).transpose(1, 2).reshape(k, cin * kernel * kernel, -1)
        torch.bmm(ws, cols).sum().backward()

    return {"conv_grouped": grouped, "conv_loop": loop, "conv_unfold": unfold}


def linear_ways(k: int, b: int, fin: int = 3136, fout: int = 512, **where) -> dict:
    w = torch.randn(k, fout, fin, **where).requires_grad_()
    x = torch.randn(k, fin, b, **where)
    w_each = [w[j].detach().clone().requires_grad_() for j in range(k)]

    def bmm():
        torch.bmm(w, x).sum().backward()

    def loop():
        for j, wj in enumerate(w_each):
            (wj @ x[j]).sum().backward()

    return {"linear_bmm": bmm, "linear_loop": loop}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = {"device": device, "dtype": DTYPES[args.dtype]}
    cin, cout, side, kernel = (int(v) for v in args.conv.split(","))
    fin, fout = (int(v) for v in args.linear.split(","))
    ways = (conv_ways(args.clients, args.batch, cin, cout, side, kernel, **where)
            | linear_ways(args.clients, args.batch, fin, fout, **where))

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times: dict[str, list[float]] = {name: [] for name in ways}
    for fn in ways.values():
        fn()  # warm-up
    for _ in range(args.repeats):
        for name, fn in ways.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    ms = {name: round(statistics.median(t), 1) for name, t in times.items()}
    for name, value in ms.items():
        print(f"{name:>13}: {value:8.1f} ms")
    ratios = {
        "conv_loop/grouped": round(ms["conv_loop"] / ms["conv_grouped"], 2),
        "conv_loop/unfold": round(ms["conv_loop"] / ms["conv_unfold"], 2),
        "conv_grouped/unfold": round(ms["conv_grouped"] / ms["conv_unfold"], 2),
        "linear_loop/bmm": round(ms["linear_loop"] / ms["linear_bmm"], 2),
    }
    for name, value in ratios.items():
        print(f"{name}: {value}x")
    print(json.dumps({"benchmark": "conv_layouts", "clients": args.clients, "batch": args.batch, "conv": args.conv,
                      "linear": args.linear, "device": str(device), "dtype": args.dtype,
                      "threads": torch.get_num_threads(), "torch": torch.__version__, "ms": ms, "ratios": ratios}))


if __name__ == "__main__":
    main()
