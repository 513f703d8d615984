"""A step that recurs on the same state tensors, replayed as a CUDA graph (CUDA only).

The Moreau family (pFedMe, Per-FedAvg, pFedMT) runs many small steps of one shape on tensors that
stay put through a round: pFedMe's local round (K personal steps and the Moreau step), pFedMT's
device step (Eq. 10), Per-FedAvg's inner and meta step.  Eagerly each costs tens of kernel
launches; :class:`Recurring` runs ``step(*inputs)`` -- which works in place on tensors it holds
(parameters, anchors, running statistics, loss sums) and reads only those and ``inputs`` (the
step's minibatch) -- as the vectorised trainer's :class:`~fedbench.engine.step_runner.StepRunner`
runs its steps: the first call eagerly on a side stream (the warm-up the CUDA graph recipe asks
for), the second captured against static copies of ``inputs`` and replayed, every later call
copying its ``inputs`` into them and replaying.  ``uses`` below
:data:`~fedbench.engine.step_runner.MIN_GRAPH_USES` (and everywhere off CUDA: ``uses=0``) runs
eagerly; a capture that fails warns and stays eager.  The state must not be reallocated between
calls (a replay writes into the tensors captured): the callers update it in place only.
"""

from __future__ import annotations

import warnings

import torch

from fedbench.engine.step_runner import MIN_GRAPH_USES


class Recurring:
    def __init__(self, step, uses: int):
        self.step, self.eager = step, uses < MIN_GRAPH_USES
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: tuple[torch.Tensor, ...] = ()
        self.stream = None if self.eager else torch.cuda.Stream()

    def __call__(self, *inputs: torch.Tensor) -> None:
        if self.graph is not None:
            for static, value in zip(self.inputs, inputs):
                static.copy_(value)
            self.graph.replay()
            return
        if self.eager:
            self.step(*inputs)
            return
        self.calls += 1
        if self.calls == 1:  # warm-up, eagerly on the side stream
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                self.step(*inputs)
            torch.cuda.current_stream().wait_stream(self.stream)
            return
        self._capture(inputs)

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> None:
        static = tuple(v.clone() for v in inputs)
        graph = torch.cuda.CUDAGraph()
        self.stream.wait_stream(torch.cuda.current_stream())
        try:  # capture_begin/end directly: torch.cuda.graph would also sync and empty the cache
            with torch.cuda.stream(self.stream):
                graph.capture_begin()
                try:
                    self.step(*static)
                finally:
                    graph.capture_end()
        except Exception as err:  # noqa: BLE001 - e.g. an op that syncs: stay eager
            warnings.warn(f"CUDA graph capture of a recurring oracle step failed, running eagerly: {err!r}", stacklevel=3)
            self.eager = True
            self.step(*inputs)
            return
        torch.cuda.current_stream().wait_stream(self.stream)
        self.graph, self.inputs = graph, static
        graph.replay()  # capturing recorded the step without running it
