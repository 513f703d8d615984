"""Which measured throughput a model's time rests on: its family, as its registration declares it.

A model registers the family whose FLOP/s it runs at (``MODELS.register(name, family=...)``: several
architectures of one kind share a figure); the one model a family is benchmarked with also declares
the input it is measured at (``benchmark_input=(C, H, W)``, or ``(features,)`` for a family of matrix
products on the flattened input, whose figure then holds at any input size).  ``benchmarks/throughputs.py``
measures every family so declared.  A model that declares no family has no measured figure: the
device's ``assumed`` throughput stands in, reported uncalibrated."""

from __future__ import annotations

from dataclasses import dataclass

UNDECLARED = "undeclared"  # the family reported for a model that declares none


@dataclass(frozen=True)
class Benchmark:
    """The model a family is measured with and the input it is measured at."""

    arch: str
    input_shape: tuple[int, ...]

    @property
    def flat(self) -> bool:
        """Measured on a flat input (features, not images): one figure at any input size."""
        return len(self.input_shape) < 3


def model_family(arch: str) -> str | None:
    """The family the model ``arch`` declares; None: none (or a model the registry does not know, a plugin
    not loaded)."""
    from fedbench.models import MODELS

    try:
        return MODELS.extra(arch, "family")
    except KeyError:
        return None


def family_benchmarks() -> dict[str, Benchmark]:
    """family -> the model that declares itself the family's benchmark (``benchmark_input``), for every
    registered model that does; ``ValueError`` where two models declare one family's."""
    from fedbench.models import MODELS

    out: dict[str, Benchmark] = {}
    for arch in MODELS.names():
        shape = MODELS.extra(arch, "benchmark_input")
        if shape is None:
            continue
        family = MODELS.extra(arch, "family")
        if family in out:
            raise ValueError(f"models {out[family].arch!r} and {arch!r} both declare the benchmark of family {family!r}")
        out[family] = Benchmark(arch, tuple(shape))
    return out
