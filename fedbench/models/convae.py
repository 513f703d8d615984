"""FLT's convolutional autoencoder (ConvAE, paper Table 13), whose encoder gives the client signatures.

Grey 28x28 (``convae``, the authors' ``ConvAutoencoder``, 51,577 parameters)::

    encoder  conv3x3(1->16, pad 1)-ReLU-maxpool2, conv3x3(16->4, pad 1)-ReLU-maxpool2,
             flatten (4*7*7 = 196), Linear(196 -> 128)                 = the embedding
    decoder  Linear(128 -> 196), view 4x7x7, convT2x2/2(4->16)-ReLU, convT2x2/2(16->1), sigmoid

Colour 32x32 (``convae_colour``): the same layers, wider (3->32->8 channels, flatten 8*8*8 = 512,
the width the authors' CIFAR autoencoder flattens to before its latent layer) and with a linear
output, since FLT's CIFAR images are normalised to [-1, 1].  The authors' CIFAR model is a
VQ-VAE-style residual network with BatchNorm (notes section 4.3); we keep the Table 13 design
instead, so that per-client fine-tuning vectorises without per-client BatchNorm statistics.

Both take any input whose height and width are multiples of 4.
"""

from __future__ import annotations

import torch
from torch import nn

OUTPUTS = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "none": nn.Identity}

# arch -> constructor defaults (``build_autoencoder`` overrides them with the spec's keys)
ARCHS = {
    "convae": {"in_channels": 1, "image_size": 28, "hidden": 16, "bottleneck": 4, "output": "sigmoid"},
    "convae_colour": {"in_channels": 3, "image_size": 32, "hidden": 32, "bottleneck": 8, "output": "none"},
}


class ConvAE(nn.Module):
    """``encoder`` (image -> ``latent_dim``) and ``decoder`` (``latent_dim`` -> image) submodules;
    ``forward`` reconstructs, :meth:`encode` embeds."""

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int | tuple[int, int] = 28,
        latent_dim: int = 128,
        hidden: int = 16,
        bottleneck: int = 4,
        output: str = "sigmoid",
    ):
        super().__init__()
        height, width = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if height % 4 or width % 4:
            raise ValueError(f"ConvAE needs height and width divisible by 4, got {height}x{width}")
        if output not in OUTPUTS:
            raise ValueError(f"unknown ConvAE output {output!r}; valid choices: {', '.join(OUTPUTS)}")
        code_shape = (bottleneck, height // 4, width // 4)
        flat = bottleneck * (height // 4) * (width // 4)
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, hidden, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(hidden, bottleneck, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Flatten(),
            nn.Linear(flat, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, flat),
            nn.Unflatten(1, code_shape),
            nn.ConvTranspose2d(bottleneck, hidden, kernel_size=2, stride=2),
            nn.ReLU(),
            nn.ConvTranspose2d(hidden, in_channels, kernel_size=2, stride=2),
            OUTPUTS[output](),
        )
        self.latent_dim = latent_dim

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, C, H, W]`` -> ``[N, latent_dim]``."""
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def autoencoder_spec(arch: str, input_shape: tuple[int, ...], latent_dim: int = 128, output: str | None = None) -> dict:
    """The full constructor spec of ``arch`` (``auto``: ``convae`` for one channel, ``convae_colour``
    otherwise) for images of ``input_shape`` ``(C, H, W)``; stored in the encoder file to rebuild it."""
    if len(input_shape) != 3:
        raise ValueError(f"ConvAE needs images [C, H, W], got input shape {tuple(input_shape)}")
    channels, height, width = input_shape
    if arch == "auto":
        arch = "convae" if channels == 1 else "convae_colour"
    if arch not in ARCHS:
        raise ValueError(f"unknown autoencoder arch {arch!r}; valid choices: auto, {', '.join(ARCHS)}")
    spec = {**ARCHS[arch], "in_channels": channels, "image_size": [height, width], "latent_dim": latent_dim}
    if output not in (None, "auto"):
        spec["output"] = output
    return {"arch": arch, **spec}


def build_autoencoder(spec: dict) -> ConvAE:
    """The :class:`ConvAE` of a spec from :func:`autoencoder_spec`."""
    params = {k: v for k, v in spec.items() if k != "arch"}
    return ConvAE(**params)
