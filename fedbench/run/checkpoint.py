"""Resumable cells: a training run's whole state at the end of a round, saved atomically so a
job killed by a wall-time limit, ``scancel`` or ``kill -9`` continues from its last checkpoint
and ends with the same numbers and history as an uninterrupted run.

What a checkpoint holds (``torch.save``, one file ``checkpoint.pt`` in the run directory):

* the algorithm's state -- algorithms keep *plain state* (the dict ``init`` returns and ``round``
  passes on: global and per-client weights, cluster identities, momentum buffers, FedGen's
  generator and its Adam optimiser, ...), so pickling that dict captures all of it generically;
* the model template's ``state_dict`` (in case an algorithm writes into it);
* every random stream a round may draw from: the federation's ``torch.Generator`` (the method's own
  draws), torch's global CPU and CUDA generators (initialisations, dropout, ``vmap`` randomness; each
  round starts it on its own stream), numpy's and Python's global generators; the shared streams
  (client sampling, batch order: :mod:`fedbench.engine.streams`) are keyed by the round and hold no state;
* the run's records so far: history rows, per-client scores of the evaluated rounds, training
  losses since the last evaluation, and the wall time spent;
* a fingerprint of what the run computes (resolved cell settings + hash of the code that
  runs it): a checkpoint from other settings or other code is set aside, never resumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

import numpy as np
import torch

from fedbench.data.partition_file import atomic_write

log = logging.getLogger("fedbench")

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = 1


class CheckpointError(RuntimeError):
    """A checkpoint that exists but cannot be read: the message names the file and what to do."""


def fingerprint(settings: dict, code_hash: str | None) -> str:
    """SHA-256 of the resolved cell settings and the code hash: what a checkpoint must match to be resumed."""
    text = json.dumps({"settings": settings, "code": code_hash}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def capture_rng(generator: torch.Generator) -> dict:
    """The state of every random stream a round can draw from."""
    return {
        "federation": generator.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def restore_rng(generator: torch.Generator, states: dict) -> None:
    """Put every random stream back to ``states`` (from :func:`capture_rng`)."""
    generator.set_state(states["federation"])
    torch.set_rng_state(states["torch"])
    if states["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """Write ``payload`` (plus the format version) to ``path`` through a temporary file and a rename."""
    atomic_write(path, lambda tmp: torch.save({"format": FORMAT, **payload}, tmp))


def load_checkpoint(path: str | Path, expected_fingerprint: str, map_location=None) -> dict | None:
    """The checkpoint at ``path`` if it belongs to this run; None when there is none or it was
    written for other settings or code (then it is renamed ``*.stale`` and the run starts over).

    An unreadable file (truncated, corrupt, not a checkpoint) raises :class:`CheckpointError`
    naming it, instead of a traceback from deep inside ``torch.load`` or training."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # zip/pickle/EOF errors of every kind: one message naming the file
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(error).__name__}: {error}); it is corrupt or "
            f"truncated -- delete it to restart this cell from round 0"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or "round" not in payload:
        raise CheckpointError(
            f"checkpoint {path} is not a fedbench checkpoint of format {FORMAT}; delete it to restart this cell from round 0"
        )
    if payload.get("fingerprint") != expected_fingerprint:
        stale = path.with_name(path.name + ".stale")
        path.replace(stale)
        log.warning("checkpoint %s was written for other settings or code; set aside as %s, starting from round 0", path, stale)
        return None
    return payload


__all__ = ["CHECKPOINT_NAME", "CheckpointError", "fingerprint", "capture_rng", "restore_rng", "save_checkpoint", "load_checkpoint"]
