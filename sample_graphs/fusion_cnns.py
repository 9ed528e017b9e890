"""Inference CNNs for layer fusion (GET, Mills et al. 2025): EfficientNet-B3-, ResNet-152- and
MobileNetV2-style models, written from their papers, captured as forward graphs at batch 1.

As deployed for inference, batch normalisation is folded into the convolutions (each convolution has
a bias and no BatchNorm follows it); the modules are in ``eval()`` mode.

* ``efficientnet_b3`` -- EfficientNet-B0's MBConv stages scaled by width 1.2 and depth 1.4 (Tan & Le
  2019): 26 blocks of 1x1 expand (x6), depthwise 3x3/5x5, squeeze-excite (ratio 0.25), 1x1 project,
  SiLU, identity skips; 3x300x300 input, 1536-channel head, 1000 classes.
* ``resnet152`` -- bottleneck blocks [3, 8, 36, 3] (He et al. 2016), 3x224x224.
* ``mobilenet_v2`` -- inverted residuals (Sandler et al. 2018), ReLU6, width 1.0, 3x224x224.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .sample import Sample, plain_forward


def _conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=True)


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeezed: int) -> None:
        super().__init__()
        self.reduce = _conv(c, squeezed, 1)
        self.expand = _conv(squeezed, c, 1)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(self.act(self.reduce(s))))


class MBConv(nn.Module):
    """EfficientNet's mobile inverted bottleneck with squeeze-excite."""

    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [_conv(cin, mid, 1), nn.SiLU()]
        layers += [_conv(mid, mid, k, stride, groups=mid), nn.SiLU(), SqueezeExcite(mid, max(1, cin // 4)),
                   _conv(mid, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.skip else y


def _round_filters(c: int, width: float) -> int:
    c = c * width
    return max(8, int(c + 4) // 8 * 8)


class EfficientNet(nn.Module):
    B0 = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
          (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]  # expand, channels, repeats, stride, kernel

    def __init__(self, width: float = 1.2, depth: float = 1.4, num_classes: int = 1000) -> None:
        super().__init__()
        stem = _round_filters(32, width)
        self.stem = nn.Sequential(_conv(3, stem, 3, 2), nn.SiLU())
        blocks: list[nn.Module] = []
        cin = stem
        for e, c, r, s, k in self.B0:
            cout = _round_filters(c, width)
            for i in range(int(math.ceil(r * depth))):
                blocks.append(MBConv(cin, cout, e, k, s if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        head = _round_filters(1280, width)
        self.head = nn.Sequential(_conv(cin, head, 1), nn.SiLU())
        self.fc = nn.Linear(head, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(x.mean((2, 3)))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(_conv(cin, mid, 1), nn.ReLU(), _conv(mid, mid, 3, stride), nn.ReLU(),
                                  _conv(mid, cout, 1))
        self.shortcut: nn.Module = _conv(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNetInference(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (3, 8, 36, 3), num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = 64
        for i, n in enumerate(layers):
            mid = 64 * 2**i
            for b in range(n):
                blocks.append(Bottleneck(cin, mid, 2 if (b == 0 and i > 0) else 1))
                cin = mid * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [_conv(cin, mid, 1), nn.ReLU6()]
        layers += [_conv(mid, mid, 3, stride, groups=mid), nn.ReLU6(), _conv(mid, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.skip else y


class MobileNetV2(nn.Module):
    CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
           (6, 320, 1, 1)]  # expand, channels, repeats, stride

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv(3, 32, 3, 2), nn.ReLU6())
        blocks: list[nn.Module] = []
        cin = 32
        for t, c, n, s in self.CFG:
            for i in range(n):
                blocks.append(InvertedResidual(cin, c, t, s if i == 0 else 1))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(_conv(cin, 1280, 1), nn.ReLU6())
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


_MODELS = {
    "efficientnet_b3": (EfficientNet, 300, "EfficientNet-B3-style (width 1.2, depth 1.4, squeeze-excite, SiLU), "
                                            "BN folded, inference, batch 1, 3x300x300"),
    "resnet152": (ResNetInference, 224, "ResNet-152-style bottleneck blocks [3,8,36,3], BN folded, inference, "
                                       "batch 1, 3x224x224"),
    "mobilenet_v2": (MobileNetV2, 224, "MobileNetV2-style inverted residuals, ReLU6, BN folded, inference, "
                                      "batch 1, 3x224x224"),
}


def build_fusion_cnn(name: str, tiny: bool) -> Sample:
    """One of the inference CNNs (forward graphs only: ``loss_fn`` is None)."""
    cls, size, desc = _MODELS[name]
    module = cls().eval()
    x = torch.randn(1, 3, size, size)
    return Sample(name, module, (x,), None, plain_forward, torch.float32, desc, True)
