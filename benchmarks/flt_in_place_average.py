"""CPU (or GPU) FLOP/s of the authors' in-place server average (FLT, FedSEM as FLT's code), for the cost model.

FLT's released code, and FedSEM as that code runs it, average the clients' models one client after
another, each new w_m read by the clients after it (``aggregation: in_place``,
:func:`fedbench.algorithms.flt.neighbour_average`): per round and floating tensor every one of the M
clients' rows is a float64 product of its M weights with all M rows, 2 M^2 P multiply-adds over the
model's P entries, whatever the graph.  The cost model (:func:`fedbench.cost.server.server_average_seconds`)
charges it at the rate measured here: M clients of FLT's 784-200-10 MLP, a graph of 5 cliques, process
CPU time (one thread unless ``--threads``), the median of ``--repeats``.  Prints the YAML to put under
the device in ``config/throughputs.yaml``.

    python benchmarks/flt_in_place_average.py                    # 100 clients, CPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedbench.algorithms.flt import neighbour_average  # noqa: E402
from flt_relatedness import clock  # noqa: E402

MLP_SHAPES = [(200, 784), (200,), (10, 200), (10,)]  # FLT Table 11's MLP


def in_place_flops(clients: int, entries: int) -> float:
    """Multiply-adds of one in-place average: every client's row of weights times all clients' entries."""
    return 2.0 * clients * clients * entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    stacked = {f"t{i}": torch.randn(args.clients, *s, generator=g).to(args.device) for i, s in enumerate(MLP_SHAPES)}
    entries = sum(v[0].numel() for v in stacked.values())
    blocks = np.arange(args.clients) % 5
    adjacency = (blocks[:, None] == blocks[None, :]).astype(float)
    samples = torch.full((args.clients,), 600)
    device = torch.device(args.device)
    times = []
    for _ in range(args.repeats):
        start = clock(device)
        neighbour_average(stacked, adjacency, samples, in_place=True)
        times.append(clock(device) - start)
    seconds = statistics.median(times)
    flops = in_place_flops(args.clients, entries)
    print(f"# {args.clients} clients x {entries} entries: {seconds:.3f} s a round (median of {args.repeats}), "
          f"{flops / 1e9:.2f} GFLOP")
    print(f"flt_in_place_average_flop_s: {flops / seconds:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
