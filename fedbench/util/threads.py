"""Thread pools of a job sized from the cores it was given, and kept that size.

Every workflow job calls :func:`use_threads` with the cores Snakemake gave it (``snakemake.threads``)
before it imports torch, numpy or numba: the environment variables reach every library that reads
them when it loads (OpenMP, MKL, OpenBLAS, numba), and the pools of libraries already loaded are
set directly (torch's intra-op pool, numba's, BLAS/OpenMP through threadpoolctl).

Why torch's thread count must also be *guarded*: torch's CPU pool is OpenMP (libgomp), and
torch's own ``libgomp.so.1`` is the one numba's OpenMP threading layer binds to (same soname).
When numba starts that layer -- the first parallel numba function, e.g. inside UMAP (FLT's
relatedness step) -- it calls ``omp_set_num_threads(NUMBA_NUM_THREADS)``, and NUMBA_NUM_THREADS
defaults to the machine's core count.  In a job given one core of a two-core machine, torch's
thread count then went from 1 to 2 for the rest of training (oversubscription).  Setting
NUMBA_NUM_THREADS before numba loads removes the cause; :func:`torch_threads_kept` around the
UMAP call restores torch's count whatever a library does.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def use_threads(threads: int) -> None:
    """Size every thread pool of this process to ``threads`` (a job's ``snakemake.threads``)."""
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"a job needs at least one thread, got {threads}")
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    if "numba" in sys.modules:  # loaded already: its pool size was fixed at import, cap the threads used
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if "numpy" in sys.modules or "torch" in sys.modules:  # BLAS / OpenMP pools already loaded
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(threads)


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[None]:
    """Restore torch's intra-op thread count on exit if the code inside changed it (numba's OpenMP
    layer does, see the module docstring).  A no-op when torch is not loaded."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    try:
        yield
    finally:
        if torch is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)
