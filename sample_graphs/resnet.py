"""ResNet with bottleneck blocks (He et al. 2016), written from the paper's description.

ResNet-50 is ``ResNet(layers=(3, 4, 6, 3), width=64)``: a 7x7/2 stem convolution, 3x3/2 max-pool,
four stages of bottleneck blocks (1x1 reduce, 3x3, 1x1 expand x4, BatchNorm + ReLU, projection
shortcut where the shape changes; the stride sits on the 3x3 convolution), global average pooling
and a linear classifier.
"""

from __future__ import annotations

import torch
from torch import nn

from .sample import Sample, classify_loss, plain_forward

EXPANSION = 4


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride) -> 1x1 (x4 channels) with an identity or projection shortcut."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * EXPANSION
        self.body = nn.Sequential(
            *_conv_bn(cin, mid, 1), nn.ReLU(),
            *_conv_bn(mid, mid, 3, stride), nn.ReLU(),
            *_conv_bn(mid, cout, 1),
        )
        self.shortcut: nn.Module = (
            nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()
        )
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Bottleneck ResNet; ``layers`` blocks per stage, stage widths ``width * 2**i``."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000,
                 in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(in_channels, width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        cin = width
        for i, n in enumerate(layers):
            mid = width * 2**i
            blocks = [Bottleneck(cin if b == 0 else mid * EXPANSION, mid, 2 if (b == 0 and i > 0) else 1)
                      for b in range(n)]
            stages.append(nn.Sequential(*blocks))
            cin = mid * EXPANSION
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def build_resnet(name: str, tiny: bool) -> Sample:
    """ResNet-50, batch 64 at 224x224 / 1000 classes; tiny: [1,1,1,1] blocks, width 8, batch 2, 32x32."""
    if tiny:
        layers, width, classes, batch, size = (1, 1, 1, 1), 8, 10, 2, 32
        desc = "ResNet-50-like tiny: bottleneck blocks [1,1,1,1], base width 8, batch 2, 3x32x32, 10 classes"
    else:
        layers, width, classes, batch, size = (3, 4, 6, 3), 64, 1000, 64, 224
        desc = "ResNet-50: bottleneck blocks [3,4,6,3], BatchNorm, batch 64, 3x224x224, 1000 classes"
    module = ResNet(layers, width, classes).train()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch,))
    return Sample(name, module, (x, y), classify_loss, plain_forward, torch.float32, desc, not tiny)
