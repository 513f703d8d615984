"""FLT's fine-tuned client embeddings, computed once and read by every run that needs the same ones.

FLT (Enc2)'s relatedness step -- every client fine-tunes the pretrained ConvAE on its own data for J
epochs, then embeds that data (Sec. 4.3; Algorithm 2, lines 2-9) -- is two thirds of an FLT (Enc2) job's
CPU time (reports/job_profile.md), and it reads none of the knobs the claims tune (lr, gamma): a seed's
paper-setting run and its tuned run, and a method's tuning trials, fine-tune the same clients on the
same batches into the same embeddings.  :func:`cached_embeddings` keeps them in
``{results}/cache/embeddings/{key}.npz``: the first run writes them (atomically), the others read them.

The key hashes everything the embeddings depend on: the encoder file, every client's training rows and
their images, the fine-tuning settings, the state of the generator that draws the batches, the device
type, torch's version and thread count (another kernel may round differently) and the source of the
code that computes them.  The file holds the generator's state after the draws too, restored on a read,
so a run that reads its embeddings continues exactly as if it had fine-tuned (tests/test_embedding_cache.py:
a run with a warm cache writes the same files as one without).  Deleting the folder is always safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import fedbench.algorithms.flt_encoders as flt_encoders
import fedbench.engine.batches as batches
import fedbench.models.convae as convae
from fedbench.data.partition_file import atomic_write
from fedbench.engine.federated_data import FederatedData

log = logging.getLogger("fedbench")

CODE = (flt_encoders, convae, batches)  # the fine-tuning and embedding, the ConvAE, the batch order


def embedding_key(encoder_file: Path, data: FederatedData, clients: torch.Tensor, generator: torch.Generator,
                  settings: dict) -> str:
    """SHA-256 (first 32 hex digits) of what ``clients``' embeddings depend on (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(Path(encoder_file).read_bytes())
    rows = data.train.index[clients].cpu()
    counts = data.train.counts[clients].cpu()
    used = rows[torch.arange(rows.shape[1]) < counts[:, None]]
    for tensor in (rows, counts, data.x.index_select(0, used.to(data.x.device))):
        digest.update(np.ascontiguousarray(tensor.cpu().numpy()).tobytes())
    digest.update(generator.get_state().numpy().tobytes())
    context = {"settings": settings, "device": data.x.device.type, "torch": torch.__version__,
               "threads": torch.get_num_threads(), "code": [hashlib.sha256(Path(m.__file__).read_bytes()).hexdigest() for m in CODE]}
    digest.update(json.dumps(context, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def cached_embeddings(cache: Path | None, key: str, generator: torch.Generator,
                      compute: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
    """``compute()`` (which draws from ``generator``), or the embeddings an earlier run stored under ``key``
    in ``cache`` (``generator`` then set to the state ``compute`` left it in).  ``cache`` None: no cache."""
    if cache is None:
        return compute()
    path = Path(cache) / "embeddings" / f"{key}.npz"
    if path.exists():
        try:
            with np.load(path) as stored:
                rows, counts, state = stored["rows"], stored["counts"], stored["generator_state"]
            generator.set_state(torch.from_numpy(state))
            log.info("client embeddings read from %s", path)
            return np.split(rows, np.cumsum(counts)[:-1])
        except (OSError, KeyError, ValueError, RuntimeError, zipfile.BadZipFile) as err:
            log.warning("client embeddings in %s unreadable (%s): computing them again", path, err)
    embeddings = compute()
    counts = np.asarray([len(e) for e in embeddings], dtype=np.int64)
    rows = np.concatenate(embeddings) if embeddings else np.zeros((0, 0), np.float32)
    state = generator.get_state().numpy()

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, rows=rows, counts=counts, generator_state=state)

    atomic_write(path, write)
    log.info("client embeddings written to %s", path)
    return embeddings


__all__ = ["embedding_key", "cached_embeddings"]
