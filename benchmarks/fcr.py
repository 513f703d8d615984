"""Time FLT's client-relatedness step FCR (Algorithm 2) stage by stage.

Synthetic embeddings: C clusters (10), each with its own k (5) Gaussian modes in R^128
(scale 5); every client draws ``--samples`` (50) points from its cluster's modes plus N(0, 1)
noise.  Stages, per M in ``--clients`` (100 and 2,400):

* kmeans: ``client_centres`` (per-client sklearn KMeans; client-side work, summed over clients);
* umap: ``embed_centres`` of the M*k centres (after a warm-up call that JIT-compiles numba;
  the warm-up is timed and reported separately as ``umap_compile_s``);
* dist_min / dist_matching: ``client_distances`` (paper min-pair / code best matching);
* threshold + hc: ``threshold_adjacency`` and Ward HC on the rows of Ã into C clusters;

then the total (kmeans + umap + the chosen distance + threshold + hc) and the ARI of the
clusters against the planted ones.  Last line: one JSON object for quoting.

    python benchmarks/fcr.py                      # M = 100 and 2,400
    python benchmarks/fcr.py --clients 100 --n-init 1
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from sklearn.metrics import adjusted_rand_score

from fedbench.clustering.fcr import (
    client_centres,
    client_distances,
    embed_centres,
    hierarchical_clusters,
    threshold_adjacency,
)


def synthetic(m: int, clusters: int, k: int, samples: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    modes = rng.normal(scale=5.0, size=(clusters, k, dim))
    truth = np.arange(m) % clusters
    emb = [modes[c][rng.integers(0, k, samples)] + rng.normal(size=(samples, dim)) for c in truth]
    return emb, truth


def clock(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="100,2400")
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--n-init", default="10", help="KMeans n_init (code: 10; 'auto' or 1 is faster)")
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--distance", choices=["min", "matching"], default="min", help="distance counted in the total")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_init = args.n_init if args.n_init == "auto" else int(args.n_init)

    _, compile_s = clock(embed_centres, np.random.default_rng(0).normal(size=(10, 5, 8)), seed=0)
    print(f"UMAP warm-up (numba compile) {compile_s:.2f} s")
    report = {"benchmark": "fcr", "cpus": os.cpu_count(), "k": args.k, "samples": args.samples, "dim": args.dim,
              "clusters": args.clusters, "n_init": n_init, "distance": args.distance,
              "umap_compile_s": round(compile_s, 2), "runs": {}}
    for m in (int(x) for x in args.clients.split(",")):
        emb, truth = synthetic(m, args.clusters, args.k, args.samples, args.dim, args.seed)
        s = {}
        centres, s["kmeans"] = clock(client_centres, emb, args.k, seed=43, n_init=n_init)
        z, s["umap"] = clock(embed_centres, centres, seed=42)
        d_min, s["dist_min"] = clock(client_distances, z, "min")
        d_match, s["dist_matching"] = clock(client_distances, z, "matching")
        dist = d_min if args.distance == "min" else d_match
        adj, s["threshold"] = clock(threshold_adjacency, dist, args.gamma)
        (labels, _), s["hc"] = clock(hierarchical_clusters, adj, args.clusters, on="rows")
        s["total"] = s["kmeans"] + s["umap"] + s[f"dist_{args.distance}"] + s["threshold"] + s["hc"]
        ari = adjusted_rand_score(truth, labels)
        print(f"M = {m:5d}: " + "  ".join(f"{n} {v:.3f}s" for n, v in s.items()) + f"  ARI {ari:.3f}")
        report["runs"][str(m)] = {**{n: round(v, 3) for n, v in s.items()}, "ari": round(float(ari), 4)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
