"""How a run's training arithmetic is carried out: precision, memory layout, cuDNN autotuning, compilation.

The four ``training`` settings (docs/configuration.md, "Precision and layout"):

* ``precision``: ``fp32`` (default: FP32 tensors under PyTorch's default backend flags, as every run
  before this setting and the papers' code ran: CUDA matrix products in FP32, cuDNN free to run
  convolutions in TF32 on Ampere and later GPUs), ``tf32`` (FP32 tensors, TF32 tensor cores for CUDA matrix products and
  convolutions: 10 mantissa bits in the products), ``bf16`` (``torch.autocast`` to bfloat16 around
  each training step's forward pass; parameters, gradients, momentum and the SGD update stay FP32,
  and the loss is computed in FP32 from the logits cast back to FP32: mixed precision with FP32
  master weights).  Evaluation always runs in FP32 (under ``tf32``: with TF32 products);
* ``channels_last``: the wide step's and the reference loop's 4-D activations and convolution
  weights in NHWC memory format (the same numbers up to rounding);
* ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark`` (cuDNN times its algorithms per shape
  and keeps the fastest: the first steps of every shape are slower, the choice can vary between runs);
* ``compile``: ``torch.compile`` of the training step (the vectorised trainer's, the
  minibatch-gradient oracle's and the custom steps'), falling back to eager with a warning where
  compilation fails.

:meth:`Numerics.backends` sets the process-wide flags for the duration of a run and restores them.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch

PRECISIONS = {
    "fp32": "FP32 tensors, PyTorch's default backend flags (cuDNN may run convolutions in TF32 on Ampere and later)",
    "tf32": "FP32 tensors, TF32 tensor cores for CUDA matrix products and cuDNN convolutions",
    "bf16": "bfloat16 autocast around each training step's forward; FP32 weights, gradients, optimiser state and loss",
}
# the training settings of this module and their defaults (the papers' runs: FP32, eager, contiguous)
NUMERICS_DEFAULTS = {"precision": "fp32", "channels_last": False, "cudnn_benchmark": False, "compile": False}
# a setting's name (:attr:`Numerics.label`): the precision, then these flags' short names, in this order
SETTING_FLAGS = {"channels_last": "cl", "cudnn_benchmark": "bench", "compile": "compile"}


@dataclass(frozen=True)
class Numerics:
    precision: str = "fp32"
    channels_last: bool = False
    cudnn_benchmark: bool = False
    compile: bool = False

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: {self.precision!r} is not a precision; valid choices: {', '.join(PRECISIONS)}")
        for key in ("channels_last", "cudnn_benchmark", "compile"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key}: must be true or false, got {getattr(self, key)!r}")

    @classmethod
    def from_training(cls, training: dict) -> Numerics:
        """The settings of a ``training`` block (absent keys: :data:`NUMERICS_DEFAULTS`)."""
        return cls(**{k: training.get(k, v) for k, v in NUMERICS_DEFAULTS.items()})

    @classmethod
    def parse(cls, label: str) -> Numerics:
        """``bf16+cl+bench+compile`` -> Numerics(bf16, channels_last, cudnn_benchmark, compile): the settings'
        names in ``benchmarks/numerics_matrix.py`` and ``config/throughputs.yaml`` (:attr:`label`)."""
        precision, *flags = label.split("+")
        unknown = set(flags) - set(SETTING_FLAGS.values())
        if unknown:
            raise ValueError(f"setting {label!r}: unknown flags {sorted(unknown)} ({', '.join(SETTING_FLAGS.values())})")
        return cls(precision, **{key: flag in flags for key, flag in SETTING_FLAGS.items()})

    @property
    def label(self) -> str:
        """The setting's name: its precision, then ``+cl``, ``+bench``, ``+compile`` for the flags it sets."""
        return "+".join([self.precision, *(flag for key, flag in SETTING_FLAGS.items() if getattr(self, key))])

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    def record(self) -> dict:
        return asdict(self)

    def autocast(self, device: torch.device | str):
        """The context of a training step's forward pass: bfloat16 autocast under ``bf16``, else nothing."""
        kind = torch.device(device).type
        # no cast cache: a step may be captured as a CUDA graph, where a cache outliving the capture is unsafe
        return torch.autocast(kind, dtype=torch.bfloat16, cache_enabled=False) if self.bf16 else contextlib.nullcontext()

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in channels-last memory format where it is 4-D and ``channels_last`` is on, else as it is."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    @contextlib.contextmanager
    def backends(self):
        """Set the TF32 flags this run asks for (``tf32``: on for matrix products and convolutions; else
        PyTorch's defaults) and cuDNN autotuning; the previous flags are restored on exit."""
        matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
        saved = (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark)
        tf32 = (True, True) if self.precision == "tf32" else (False, True)  # PyTorch's defaults: FP32 products, TF32 convolutions
        (matmul.allow_tf32, cudnn.allow_tf32), cudnn.benchmark = tf32, self.cudnn_benchmark
        try:
            yield self
        finally:
            matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark = saved


def fp32_batchnorm(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every BatchNorm layer taking its input in FP32 while autocast is on (a forward
    pre-hook, installed once; a no-op without autocast, so evaluation and FP32 runs are unchanged).
    For the steps through ``torch.func.vmap`` under ``bf16``: vmap's batch-norm rule refuses a
    bfloat16 input beside FP32 weights and running statistics ("expected scalar type BFloat16 but
    found Float", CPU, torch 2.14); BatchNorm then normalises in FP32, as mixed precision usually
    keeps it, and the next convolution casts back to bfloat16.  Returns ``model``."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not getattr(module, "_fp32_under_autocast", False):
            module.register_forward_pre_hook(_fp32_input)
            module._fp32_under_autocast = True
    return model


def _fp32_input(module, args):
    x = args[0]
    if x.dtype not in (torch.bfloat16, torch.float16) or x.device.type not in ("cpu", "cuda"):
        return None  # FP32 already, or a device without autocast (the meta device's shape probes)
    return (x.float(), *args[1:]) if torch.is_autocast_enabled(x.device.type) else None


FP32 = Numerics()
# why a method whose local steps go through torch.func.vmap ignores channels_last (its ignored_training)
VMAP_LAYOUT = ("runs every client's model through torch.func.vmap, which takes no memory format "
               "(channels_last applies to the wide step and the reference loop)")
