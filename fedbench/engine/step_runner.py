"""Running the per-step function of the vectorised trainer: CUDA-graph replay and a safe ``torch.compile``."""

from __future__ import annotations

import warnings
from collections import Counter

import torch

from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.step_args import Minibatch, StepState

# capture a CUDA graph for a step shape only if the chunk runs it at least this often
# (its first run is eager, the capture costs about one more)
MIN_GRAPH_USES = 4


class EagerFallback:
    """``torch.compile(fn)`` that switches to ``fn`` for good, with a warning, when compiling fails."""

    def __init__(self, fn):
        self.eager, self.compiled = fn, torch.compile(fn)

    def __call__(self, *args):
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except Exception as err:  # noqa: BLE001 - any compiler failure: run eagerly
                warnings.warn(f"torch.compile of the training step failed, running eagerly: {err!r}", stacklevel=2)
                self.compiled = None
        return self.eager(*args)


class StepRunner:
    """Runs steps eagerly or, for a number of active clients used at least ``MIN_GRAPH_USES``
    times (``uses``), as a CUDA graph: the first such step runs eagerly on a side stream (the
    warm-up the CUDA graph recipe asks for), the second is captured on that stream against
    the same state tensors, and it and all later ones replay it.  ``step(state, batch, hp)``:
    :mod:`fedbench.engine.step_args`."""

    def __init__(self, step, uses: Counter):
        self.step, self.uses = step, uses
        self.seen: set[int] = set()
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, Minibatch]] = {}
        self.stream = torch.cuda.Stream() if uses else None
        self.pool = None  # one memory pool for all graphs: they never run concurrently and keep no outputs

    def run(self, n: int, state: StepState, batch: Minibatch, hp: LocalSGD) -> None:
        if n in self.graphs:
            graph, batch_in = self.graphs[n]
            batch_in.idx.copy_(batch.idx)
            batch_in.mask.copy_(batch.mask)
            graph.replay()
        elif self.uses[n] < MIN_GRAPH_USES:
            self.step(state, batch, hp)
        elif n not in self.seen:
            self.seen.add(n)
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                self.step(state, batch, hp)
            torch.cuda.current_stream().wait_stream(self.stream)
        else:
            self._capture(n, state, batch, hp)

    def _capture(self, n: int, state: StepState, batch: Minibatch, hp: LocalSGD) -> None:
        batch_in = Minibatch(batch.idx.clone(), batch.mask.clone())
        graph = torch.cuda.CUDAGraph()
        try:  # capture_begin/end directly: torch.cuda.graph would also sync and empty the cache
            with torch.cuda.stream(self.stream):
                graph.capture_begin(pool=self.pool)
                try:
                    self.step(state, batch_in, hp)
                finally:
                    graph.capture_end()
        except Exception as err:  # noqa: BLE001 - e.g. an op that syncs: keep this shape eager
            warnings.warn(f"CUDA graph capture of the training step failed, running eagerly: {err!r}", stacklevel=3)
            self.uses[n] = 0
            self.step(state, batch, hp)
            return
        self.pool = graph.pool()
        self.graphs[n] = (graph, batch_in)
        graph.replay()  # capturing recorded the step without running it
