"""CPU seconds of the clustering that FLT, PCA+kM+HC and FedSEM-as-FLT's-code run beside training, for the cost model.

Three steps that FLOPs of the model do not count, each timed through the library's own function:

* ``kmeans_s``: seconds per (row x centre x restart) of the clients' k-means signatures
  (:func:`fedbench.clustering.fcr.client_centres`, Algorithm 2 lines 10-11): ``--clients`` clients of
  ``--images`` rows of 128-dimensional embeddings each, k = 5, ``n_init`` 10 (FLT and PCA+kM+HC);
* ``pca_s``: seconds per row of PCA+kM+HC's per-client PCA to 128 components of the 784 pixels
  (:func:`fedbench.clustering.fcr.pca_signatures` less its k-means);
* ``umap_s``: seconds per centre of UMAP over all clients' centres, the first call of the process with
  numba's cache (:func:`fedbench.clustering.fcr.embed_centres`, as a training job meets it);
* ``fesem_kmeans_s``: seconds per (model entry x client) of one round of FedSEM's k-means on all M clients'
  flattened models (:func:`fedbench.algorithms.fesem_flt.flattened` to float64, then
  :func:`fedbench.algorithms.fesem_flt.kmeans_step` warm-started at the previous centres, ``n_init`` 1), FLT's
  784-200-10 MLP, a fifth of the clients moved by their training since the last fit; its first round
  (``n_init`` 20) is timed and printed beside it.

The rows are drawn around 10 planted centres (a client's labels), the models around 5 (the clusters), so
that k-means iterates about as it does on real data.  Process CPU time, one thread, the median of
``--repeats``.  Prints the YAML to put under ``cpu:`` in ``config/throughputs.yaml`` (``flt_clustering:``;
:func:`fedbench.cost.server.clustering_seconds`).

    python benchmarks/flt_clustering.py                  # 20 clients x 600 rows, 100 models
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedbench.algorithms.fesem_flt import flattened, kmeans_step  # noqa: E402
from fedbench.clustering.fcr import client_centres, embed_centres, pca_signatures  # noqa: E402

MLP_ENTRIES = 784 * 200 + 200 + 200 * 10 + 10  # FLT Table 11's MLP


def planted(rng: np.random.Generator, rows: int, width: int, centres: int, spread: float) -> np.ndarray:
    """``rows`` points of ``width`` around ``centres`` random centres (unit normal), each spread by ``spread``."""
    means = rng.standard_normal((centres, width))
    return means[rng.integers(0, centres, rows)] + spread * rng.standard_normal((rows, width))


def timed(repeats: int, step) -> float:
    """Median process CPU seconds of ``step()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        step()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=20, help="clients of the signature steps")
    p.add_argument("--images", type=int, default=600, help="rows per client")
    p.add_argument("--models", type=int, default=100, help="clients of FedSEM's k-means (FLT's M)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    threadpool_limits(1)  # one thread for numpy's and scikit-learn's BLAS/OpenMP (an environment variable set now would come too late)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = args.clients * args.images
    embeddings = [planted(rng, args.images, 128, 10, 0.5) for _ in range(args.clients)]
    pixels = [planted(rng, args.images, 784, 10, 0.5) for _ in range(args.clients)]
    k, n_init = 5, 10

    umap_seconds = timed(1, lambda: embed_centres(planted(rng, args.models * k, 128, 5, 0.3).reshape(args.models, k, 128)))
    kmeans = timed(args.repeats, lambda: client_centres(embeddings, k=k, n_init=n_init))
    with_pca = timed(args.repeats, lambda: pca_signatures(pixels, n_components=128, k=k, n_init=n_init))
    # the clients' models after a round: 5 clusters, each averaged to nearly one model; then a fifth of the
    # clients (participation 0.2) train and move away from their cluster's model before the next k-means
    models = planted(rng, args.models, MLP_ENTRIES, 5, 0.001).astype(np.float32)
    first = timed(1, lambda: kmeans_step(models.astype(np.float64), 5, None, 0))
    _, centres = kmeans_step(models.astype(np.float64), 5, None, 0)
    moved = models.copy()
    trained = rng.choice(args.models, max(1, args.models // 5), replace=False)
    moved[trained] += 0.05 * rng.standard_normal((len(trained), MLP_ENTRIES)).astype(np.float32)
    stacked = {"w": torch.from_numpy(moved)}  # the round flattens the stacked float32 state to float64
    warm = timed(args.repeats, lambda: kmeans_step(flattened(stacked, ["w"]), 5, centres, 0))

    print(f"# {args.clients} clients x {args.images} rows, k = {k}, n_init = {n_init}, median of {args.repeats}: "
          f"k-means {kmeans:.3f} s, PCA + k-means {with_pca:.3f} s; UMAP of {args.models * k} centres {umap_seconds:.2f} s "
          f"(first call); FedSEM k-means of {args.models} x {MLP_ENTRIES} entries: first round {first:.2f} s, "
          f"a warm-started round {warm:.3f} s")
    print("flt_clustering:")
    print(f"  kmeans_s: {kmeans / (rows * k * n_init):.3g}")
    print(f"  pca_s: {max(with_pca - kmeans, 0.0) / rows:.3g}")
    print(f"  umap_s: {umap_seconds / (args.models * k):.3g}")
    print(f"  fesem_kmeans_s: {warm / (args.models * MLP_ENTRIES):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
