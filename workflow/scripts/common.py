"""Shared by the rule scripts: import fedbench from this repository, send all output to the job's log,
size the thread pools from the job's cores (``use_threads(snakemake.threads)``, before torch is imported)
and point numba's compile cache at ``.snakemake/numba_cache`` (``NUMBA_CACHE_DIR``)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

# The scripts run the fedbench of the repository they belong to, also in a conda env without it installed.
REPOSITORY = Path(__file__).resolve().parents[2]
if str(REPOSITORY) not in sys.path:
    sys.path.insert(0, str(REPOSITORY))

from fedbench.util.threads import use_threads  # noqa: E402  (re-exported for the scripts; imports no library)

# numba's compile cache, one for every job of this working directory (before any script imports numba): FLT's
# relatedness step loads UMAP's compiled kernels from it instead of compiling them in every job
# (fedbench.clustering.fcr.cache_umap_kernels; 20-25 CPU s a job).  A NUMBA_CACHE_DIR of the user's is kept.
NUMBA_CACHE = Path(".snakemake") / "numba_cache"
os.environ.setdefault("NUMBA_CACHE_DIR", str(NUMBA_CACHE.resolve()))


def log_to(path: str) -> None:
    """Redirect stdout and stderr (Python objects and file descriptors, so tqdm, warnings and native
    libraries too) and the root logger (which the ``fedbench`` logger propagates to) into ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    stream = open(path, "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(stream.fileno(), 1)
    os.dup2(stream.fileno(), 2)
    sys.stdout = sys.stderr = stream
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=stream,
        force=True,
    )
    logging.captureWarnings(True)


def config_orders(config: dict) -> dict[str, list[str]]:
    """The config's order of names per cell column, for sorting tables and legends."""
    return {
        "experiment": list(config["experiments"]),
        "dataset": list(config["datasets"]),
        "partition": list(config["partitions"]),
        "model": list(config["models"]),
        "algorithm": list(config["algorithms"]),
    }
