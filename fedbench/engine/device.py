"""Device choice and memory accounting."""

from __future__ import annotations

import resource
import sys

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cpu``/``cuda``/``cuda:N`` as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available; use device: auto or cpu")
    return device


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """Peak resident memory of this process and, on CUDA, peak allocated device memory (MiB)."""
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mb = rss_kb / 1024 if sys.platform != "darwin" else rss_kb / 2**20
    out = {"peak_host_rss_mb": round(rss_mb, 1)}
    if device.type == "cuda":
        out["peak_device_allocated_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return out
