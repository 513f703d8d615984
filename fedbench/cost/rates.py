"""The measured rates a cell's time rests on, from ``config/throughputs.yaml`` (``benchmarks/throughputs.py``
refreshes it): a family's FLOP/s on a device at the cell's input resolution (:func:`family_rate`) and
numerics setting (:func:`setting_rate`), the device's ``assumed`` throughput where nothing was measured,
and the fixed costs FLOPs do not count (:data:`OVERHEADS`, :func:`overhead`)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import yaml

from fedbench.cost.families import family_benchmarks

THROUGHPUTS = Path(__file__).resolve().parents[2] / "config" / "throughputs.yaml"

# the fixed costs FLOPs do not count, in seconds, per device in config/throughputs.yaml (a device's
# entry first, else the file's top level; absent: 0): a job's start-up, a round's bookkeeping, a
# local minibatch step's fixed part (Python, op dispatch: the engine steps all of a round's clients
# together, so a round pays it once per step of one client), an evaluated round's fixed part
OVERHEADS = ("job_overhead_s", "round_overhead_s", "step_overhead_s", "eval_overhead_s")


@functools.lru_cache(maxsize=4)
def _load_throughputs(path: str) -> dict:
    return yaml.safe_load(Path(path).read_text())


def throughputs(path: Path | str = THROUGHPUTS) -> dict:
    """The throughput file: ``safety_factor``, ``job_overhead_s`` and per device ``assumed``, the
    :data:`OVERHEADS` and per-family figures."""
    return _load_throughputs(str(path))


def overhead(table: dict, device: str, name: str) -> float:
    """The overhead constant ``name`` on ``device``: the device's entry, else the file's top level, else 0."""
    return float(table.get(device, {}).get(name, table.get(name, 0.0)) or 0.0)


def resolution(input_shape) -> str | None:
    """``HxW`` of an image input (``C, H, W``); None for a flat one (its figure holds at any width)."""
    shape = tuple(input_shape)
    return f"{shape[-2]}x{shape[-1]}" if len(shape) >= 3 else None


def family_rate(table: dict, device: str, family: str | None, input_shape) -> tuple[dict | None, bool, str]:
    """(FLOP/s figures, calibrated, what they are) of ``family`` on ``device`` for inputs of ``input_shape``.

    A convolutional family is measured at an input size (a family benchmarked on a flat input holds at any:
    :attr:`fedbench.cost.families.Benchmark.flat`): its entry ``<family>`` at the size its ``input`` names
    (else its benchmark's, :func:`fedbench.cost.families.family_benchmarks`), further sizes under
    ``<family>@<H>x<W>`` (``benchmarks/throughputs.py --image-size``).  The figure at the cell's resolution
    is calibrated; without one, the figure of the nearest measured resolution stands in, uncalibrated (a
    kernel's FLOP/s changes with the size of its activations: ResNet-9's 32x32 figure is no measurement of
    64x64); without any figure of the family, or without a family (None), None (the device's ``assumed``
    throughput)."""
    if family is None:
        return None, False, f"{device} assumed {table[device]['assumed']:.3g} FLOP/s (the model declares no throughput family)"
    families = table[device].get("families", {}) or {}
    benchmark = family_benchmarks().get(family)
    want = None if benchmark is not None and benchmark.flat else resolution(input_shape)
    measured = {}
    for key, figures in families.items():
        name, _, size = key.partition("@")
        if name == family:
            default_input = benchmark.input_shape if benchmark is not None else ()
            measured[size or resolution(figures.get("input") or default_input) or ""] = (key, figures)
    if not measured:
        return None, False, f"{device} assumed {table[device]['assumed']:.3g} FLOP/s (no {family} figure)"
    if want is None or want in measured:
        key, figures = measured.get(want) or measured.get("") or next(iter(measured.values()))
        return figures, True, f"{device} {key}" + (f" at {want}" if want and "@" not in key else "")

    def pixels(size: str) -> float:
        h, _, w = size.partition("x")
        return math.log(int(h) * int(w)) if h.isdigit() and w.isdigit() else math.inf

    size = min(measured, key=lambda m: abs(pixels(m) - pixels(want)))
    key, figures = measured[size]
    return figures, False, f"{device} {key} measured at {size or 'another size'}, not {want}"


def setting_rate(figures: dict | None, calibrated: bool, note: str, setting: str) -> tuple[dict | None, bool, str]:
    """A family's figures for the cell's numerics ``setting`` (:attr:`Numerics.label`, ``fp32`` the default).

    A family's ``train`` figure is its ``fp32`` run; the others ``benchmarks/numerics_matrix.py`` measured sit
    under its ``settings`` (``benchmarks/matrix_settings.py`` writes them), each with its own ``train`` rate
    and where it was ``measured``.  Evaluation runs in FP32 under every setting (:mod:`fedbench.engine.numerics`),
    so ``eval`` stays the family's.  A setting without a figure takes ``fp32``'s, uncalibrated."""
    if figures is None or setting == "fp32":
        return figures, calibrated, note
    measured = (figures.get("settings") or {}).get(setting)
    if measured is None:
        return figures, False, f"{note}, fp32's figure (no {setting} figure)"
    return {**figures, "train": measured["train"]}, calibrated, f"{note}, {setting} ({measured['measured']})"
