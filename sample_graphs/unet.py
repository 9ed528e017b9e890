"""U-Net (Ronneberger et al. 2015), written from the paper's description: no batch normalization, as
the paper has it (``norm=True``: BatchNorm after every convolution, as many re-implementations add).

An encoder of ``levels`` down-steps (double 3x3 conv + ReLU, then 2x2 max-pool), a
bottleneck double conv, and a decoder that upsamples with a 2x2 stride-2 transposed convolution,
concatenates the encoder feature map of the same resolution (the long skip connection) and applies
another double conv. Convolutions are padded so the output map has the input resolution; a final
1x1 convolution produces per-pixel class scores.
"""

from __future__ import annotations

import torch
from torch import nn

from .sample import Sample, classify_loss, plain_forward


class DoubleConv(nn.Sequential):
    """(3x3 conv with bias, ReLU) twice; ``norm=True``: (3x3 conv, BatchNorm, ReLU) twice."""

    def __init__(self, cin: int, cout: int, norm: bool = False) -> None:
        if norm:
            super().__init__(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            )
        else:
            super().__init__(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    """U-Net with ``levels`` down/up steps; level ``i`` has ``width * 2**i`` channels."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2, width: int = 64, levels: int = 4,
                 norm: bool = False) -> None:
        super().__init__()
        widths = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList([DoubleConv(in_channels, widths[0], norm)])
        self.down.extend(DoubleConv(widths[i], widths[i + 1], norm) for i in range(levels))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                                for i in reversed(range(levels)))
        self.up_conv = nn.ModuleList(DoubleConv(2 * widths[i], widths[i], norm) for i in reversed(range(levels)))
        self.head = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips: list[torch.Tensor] = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        x = skips.pop()
        for up, conv in zip(self.up, self.up_conv, strict=True):
            x = conv(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


def build_unet(name: str, tiny: bool, norm: bool = False) -> Sample:
    """U-Net, 4 levels, width 64, batch 32 at 256x256, 2 classes; tiny: 2 levels, width 8, batch 2, 32x32.
    ``norm=True``: with BatchNorm (not in the paper, nor in the samples)."""
    bn = "BatchNorm" if norm else "no BatchNorm"
    if tiny:
        levels, width, batch, size = 2, 8, 2, 32
        desc = f"U-Net tiny: 2 levels, base width 8, {bn}, batch 2, 3x32x32 -> 2 classes per pixel"
    else:
        levels, width, batch, size = 4, 64, 32, 256
        desc = f"U-Net: 4 levels, base width 64, {bn}, batch 32, 3x256x256 -> 2 classes per pixel"
    classes = 2
    module = UNet(3, classes, width, levels, norm).train()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch, size, size))
    return Sample(name, module, (x, y), classify_loss, plain_forward, torch.float32, desc, not tiny)
