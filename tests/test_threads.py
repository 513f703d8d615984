"""Thread pools: ``use_threads`` sizes them from a job's cores, and FLT's relatedness step (UMAP, numba)
leaves torch's thread count as it found it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fedbench.util.threads import THREAD_VARIABLES, torch_threads_kept, use_threads

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_use_threads_sets_environment_and_torch(monkeypatch, torch_threads):
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    use_threads(1)
    assert all(os.environ[name] == "1" for name in THREAD_VARIABLES)
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="at least one thread"):
        use_threads(0)


def test_torch_threads_kept_restores_a_changed_count(torch_threads):
    torch.set_num_threads(1)
    with torch_threads_kept():
        torch.set_num_threads(2)  # what numba's OpenMP layer does to the shared libgomp
    assert torch.get_num_threads() == 1


def run_python(code: str, **env: str) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), **env}
    for name in THREAD_VARIABLES:
        if name not in env:
            environment.pop(name, None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_flt_relatedness_step_keeps_torch_threads():
    """In a fresh process (numba's threading layer not yet started) whose torch runs on one thread while
    numba may use two (its default on a two-core machine): the real FCR step -- k-means, UMAP, distances,
    threshold, HC -- on a planted input of 12 clients in 3 clusters leaves torch at one thread.  The step
    did start numba's threading layer, which is what used to raise torch's count."""
    result = run_python("""
        import json
        import numpy as np
        import torch
        import numba.np.ufunc.parallel as numba_parallel
        from fedbench.clustering.fcr import fcr

        torch.set_num_threads(1)
        before = torch.get_num_threads()
        started_before = bool(numba_parallel._is_initialized)
        rng = np.random.default_rng(0)
        modes = rng.normal(scale=10.0, size=(3, 2, 8))
        truth = np.arange(12) % 3
        embeddings = [modes[c][rng.integers(0, 2, 20)] + rng.normal(size=(20, 8)) for c in truth]
        result = fcr(embeddings, k=2, gamma=1.0, num_clusters=3, seed=0)
        print(json.dumps({"before": before, "after": torch.get_num_threads(),
                          "started_before": started_before, "started_after": bool(numba_parallel._is_initialized),
                          "clusters": result.clusters.tolist(), "truth": truth.tolist()}))
    """, NUMBA_NUM_THREADS="2")
    assert result["before"] == 1 and result["after"] == 1
    assert not result["started_before"] and result["started_after"]
    # the planted clusters are found (labels up to renaming)
    pairs = set(zip(result["truth"], result["clusters"]))
    assert len(pairs) == 3 and len({c for _, c in pairs}) == 3
