"""U-Net++ (Zhou et al. 2018): U-Net with nested, dense skip pathways, written from the paper.  Its
convolution units are U-Net's (two 3x3 convolutions with ReLU, no batch normalization, as in the
authors' reference code; ``norm=True`` adds BatchNorm after each convolution).

Nodes ``X[i][j]`` (row ``i`` = resolution level, column ``j`` = position on the skip pathway,
``i + j <= depth``):

* ``X[i][0]`` is the encoder: a double conv on the input (``i = 0``) or on ``maxpool(X[i-1][0])``;
* ``X[i][j]`` for ``j >= 1`` is a double conv on the concatenation of all earlier nodes of its row
  ``X[i][0..j-1]`` and the upsampled ``X[i+1][j-1]`` (2x2 stride-2 transposed convolution, as in the
  authors' reference code).

The prediction is a 1x1 convolution on ``X[0][depth]`` (no deep supervision). Level ``i`` has
``widths[i]`` channels; the paper's reference configuration is ``[32, 64, 128, 256, 512]``.
"""

from __future__ import annotations

import torch
from torch import nn

from .sample import Sample, classify_loss, plain_forward
from .unet import DoubleConv


class UNetPlusPlus(nn.Module):
    """U-Net++ of depth ``len(widths) - 1`` without deep supervision."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2,
                 widths: tuple[int, ...] = (32, 64, 128, 256, 512), norm: bool = False) -> None:
        super().__init__()
        self.depth = len(widths) - 1
        self.pool = nn.MaxPool2d(2)
        self.conv = nn.ModuleDict()
        self.up = nn.ModuleDict()
        for i in range(self.depth + 1):
            cin = in_channels if i == 0 else widths[i - 1]
            self.conv[f"x{i}_0"] = DoubleConv(cin, widths[i], norm)
            for j in range(1, self.depth - i + 1):
                self.up[f"x{i}_{j}"] = nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                self.conv[f"x{i}_{j}"] = DoubleConv((j + 1) * widths[i], widths[i], norm)
        self.head = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows: list[list[torch.Tensor]] = [[] for _ in range(self.depth + 1)]
        for i in range(self.depth + 1):
            rows[i].append(self.conv[f"x{i}_0"](x if i == 0 else self.pool(rows[i - 1][0])))
            # each new encoder node completes one anti-diagonal of the nested pathways
            for k in range(i - 1, -1, -1):
                j = i - k
                up = self.up[f"x{k}_{j}"](rows[k + 1][j - 1])
                rows[k].append(self.conv[f"x{k}_{j}"](torch.cat([*rows[k], up], dim=1)))
        return self.head(rows[0][self.depth])


def build_unetpp(name: str, tiny: bool, norm: bool = False) -> Sample:
    """U-Net++ depth 4, widths [32..512], batch 16 at 256x256; tiny: depth 2, widths [8,16,32], batch 2, 32x32.
    ``norm=True``: with BatchNorm (not in the paper, nor in the samples)."""
    bn = "BatchNorm" if norm else "no BatchNorm"
    if tiny:
        widths, batch, size = (8, 16, 32), 2, 32
        desc = f"U-Net++ tiny: depth 2, widths [8,16,32], {bn}, batch 2, 3x32x32 -> 2 classes per pixel"
    else:
        widths, batch, size = (32, 64, 128, 256, 512), 16, 256
        desc = (f"U-Net++: depth 4, widths [32,64,128,256,512], {bn}, no deep supervision, batch 16, "
                "3x256x256 -> 2 classes per pixel")
    classes = 2
    module = UNetPlusPlus(3, classes, widths, norm).train()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch, size, size))
    return Sample(name, module, (x, y), classify_loss, plain_forward, torch.float32, desc, not tiny)
