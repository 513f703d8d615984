"""CPU (or GPU) seconds per sample of FLT's one-off relatedness step, for the cost model.

FLT (Algorithm 2) embeds every client's training images with the ConvAE's encoder, after fine-tuning
each client's own copy of the whole autoencoder for ``finetune_epochs`` epochs (Enc2; Adam 1e-3,
batch 64).  Both scale with the training rows and, for the fine-tuning, the epochs, so the cost model
(:func:`fedbench.cost.server.relatedness_seconds`) prices them per sample from two figures measured here
through the library's own :func:`fedbench.algorithms.flt_encoders.embed_clients`:

* ``encode_s``: seconds per image embedded (``finetune_epochs=0``, one shared encoder);
* ``finetune_s``: seconds per image and epoch of fine-tuning, the embedding with each client's own
  copy included: (time with ``--epochs`` epochs - the shared embedding's time) / (images x epochs).

Random 28x28 grey images (the cost does not depend on their content), ``--clients`` clients of
``--images`` each, process CPU time (one thread unless ``--threads``), the median of ``--repeats``.
Prints the figures as the YAML to put under the device in ``config/throughputs.yaml``
(``flt_relatedness:``).

    python benchmarks/flt_relatedness.py                    # 10 clients x 600 images (FLT's cells), 2 epochs, CPU
    python benchmarks/flt_relatedness.py --device cuda --clients 100 --images 600
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedbench.algorithms.flt_encoders import ENCODER_DEFAULTS, embed_clients  # noqa: E402
from fedbench.engine.federated_data import ClientIndex, FederatedData  # noqa: E402
from fedbench.models.convae import autoencoder_spec, build_autoencoder  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=10)
    # a client's fine-tuning pays fixed costs (its own autoencoder and optimiser, a short last batch), so the
    # figures hold for clients of this size: FLT's claims cells give each client 600 images
    p.add_argument("--images", type=int, default=600, help="training images per client")
    p.add_argument("--epochs", type=int, default=2, help="fine-tuning epochs of the second measurement")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def clock(device: torch.device) -> float:
    """Process CPU seconds on the CPU; wall seconds after a synchronisation on a GPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return time.process_time()


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    n = args.clients * args.images
    x = torch.rand(n, 1, 28, 28, generator=gen)
    y = torch.zeros(n, dtype=torch.long)
    index = ClientIndex.from_lists([range(c * args.images, (c + 1) * args.images) for c in range(args.clients)], device)
    data = FederatedData(x.to(device), y.to(device), index, index, 10)
    torch.manual_seed(0)
    encoder = build_autoencoder(autoencoder_spec("convae", (1, 28, 28), ENCODER_DEFAULTS["latent_dim"])).to(device)
    clients = torch.arange(args.clients, device=device)
    times = {0: [], args.epochs: []}
    for _ in range(args.repeats):
        for epochs in times:
            start = clock(device)
            embed_clients(encoder, data, clients, finetune_epochs=epochs, generator=torch.Generator().manual_seed(1))
            times[epochs].append(clock(device) - start)
    shared, tuned = statistics.median(times[0]), statistics.median(times[args.epochs])
    encode_s = shared / n
    finetune_s = max(tuned - shared, 0.0) / (n * args.epochs)
    print(f"# {args.clients} clients x {args.images} images on {device}, {args.threads} thread(s), median of "
          f"{args.repeats}: embedding {shared:.3f} s, with {args.epochs} fine-tuning epochs {tuned:.3f} s")
    print(f"flt_relatedness:\n  encode_s: {encode_s:.3g}\n  finetune_s: {finetune_s:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
