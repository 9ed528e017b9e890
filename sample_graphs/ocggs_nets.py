"""Inference models of the graph-substitution benchmark of OCGGS (Fang et al., PVLDB 2020, Table 3
and Figures 4/5), written from the original papers, captured as forward graphs at batch 1 in fp32.

Unlike :mod:`sample_graphs.fusion_cnns`, the CNNs keep their BatchNorm layers (``eval()`` mode, so
they trace to ``aten._native_batch_norm_legit_no_training``): folding batch norm into the preceding
convolution is one of the substitutions being benchmarked.  Every convolution is
``Conv2d(bias=False)`` + ``BatchNorm2d`` (+ ReLU).

* ``inception_v3`` -- Inception-v3 (Szegedy et al. 2016) at 3x299x299: the stem (five convolutions,
  two max pools), 3x InceptionA (35x35), InceptionB (grid reduction to 17x17), 4x InceptionC (1x7 /
  7x1 factorised, 128/160/160/192 inner channels), InceptionD (reduction to 8x8), 2x InceptionE
  (the expanded filter bank: 1x3 and 3x1 branches concatenated), global average pool, fc 1000;
  BatchNorm eps 1e-3, no auxiliary classifier, no dropout.  94 convolutions.
* ``resnext50`` -- ResNeXt-50 32x4d (Xie et al. 2017) at 3x224x224: 7x7/2 stem and max pool,
  bottleneck blocks [3, 4, 6, 3] whose 3x3 convolution is grouped (32 groups of 4, 8, 16, 32
  channels; it carries the stage's stride), a 1x1 conv + BN projection shortcut on the first block
  of each stage.  53 convolutions.
* ``sru`` -- a two-layer Simple Recurrent Unit (Lei et al. 2018) stack, hidden 512, on a
  (T=16, batch=16, 512) input, unrolled over time.  Per layer and step the three projections of
  x_t -- candidate ``W x_t``, forget gate ``W_f x_t + b_f``, reset gate ``W_r x_t + b_r`` -- are
  separate ``nn.Linear`` layers reading the same tensor (so a "merge matmuls sharing an input"
  rewrite has something to find), then ``f = sigmoid(.)``, ``r = sigmoid(.)``,
  ``c_t = f * c_{t-1} + (1 - f) * x~_t``, ``h_t = r * tanh(c_t) + (1 - r) * x_t`` with c_0 = 0.  The
  gates are the form without the point-wise ``v * c_{t-1}`` terms of the paper's later version.
  The projections are applied per step (not to the whole sequence at once, as SRU's CUDA kernel
  does) so every step's matmuls are in the graph.  Output: the last layer's h stacked, (T, B, 512).
* ``nasrnn`` -- the recurrent cell found by Neural Architecture Search for Penn Treebank (Zoph & Le
  2017, its Figure 8 / appendix), hidden 512, one layer unrolled over T=16 steps at batch 16.  The
  cell is a tree of 8 leaves, each ``act(W_i x_t (+|*) U_i h_{t-1})`` with its own ``nn.Linear`` for
  x_t and for h_{t-1} (bias on the x side only); leaves are combined pairwise by add or element-wise
  multiply under tanh / sigmoid / relu / identity, and the previous cell state c_{t-1} is injected
  into the first combination of the second level, as published:

  - leaves l0..l7: sigmoid(+), relu(+), sigmoid(+), relu(*), tanh(+), sigmoid(+), tanh(+),
    sigmoid(+);
  - level 2: m0 = tanh(l0 * l1), m1 = tanh(l2 + l3), m2 = tanh(l4 * l5), m3 = sigmoid(l6 + l7);
    the cell state enters as m0 = tanh(m0 + c_{t-1});
  - level 3: c_t = m0 * m1 (identity), n = tanh(m2 + m3); output h_t = tanh(c_t * n).

  This is our reading of the published figure, checked against the structure of TensorFlow's
  ``NASCell`` (the paper's figure is small); the one multiplicative leaf (l3) follows the published
  cell rather than the all-additive ``act(W x + U h)`` simplification.  h_0 = c_0 = 0.  Output: h
  stacked over time, (T, B, 512).

Two parametrised stacks for the scaling figures (not registered as sample names):
:func:`resnet_blocks` (``n`` basic residual blocks, 64 channels at 56x56, after a 3x3 stem) and
:func:`inception_e_blocks` (``n`` InceptionE blocks at 8x8, 1280 channels into the first, 2048 out).
"""

from __future__ import annotations

import torch
from torch import nn

from .sample import Sample, plain_forward

Size = int | tuple[int, int]


def _pair(v: Size) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


class ConvBN(nn.Module):
    """``Conv2d(bias=False)`` + ``BatchNorm2d`` (+ ReLU); padding defaults to "same" for stride 1."""

    def __init__(self, cin: int, cout: int, k: Size, stride: int = 1, padding: Size | None = None,
                 groups: int = 1, eps: float = 1e-5, relu: bool = True) -> None:
        super().__init__()
        kh, kw = _pair(k)
        pad = (kh // 2, kw // 2) if padding is None else _pair(padding)
        self.conv = nn.Conv2d(cin, cout, (kh, kw), stride, pad, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=eps)
        self.relu = nn.ReLU() if relu else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


# ---- Inception-v3 ---------------------------------------------------------------------------------

def _icv(cin: int, cout: int, k: Size, stride: int = 1, padding: Size | None = None) -> ConvBN:
    return ConvBN(cin, cout, k, stride, padding, eps=1e-3)


class InceptionA(nn.Module):
    """35x35 module (Figure 5): 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1."""

    def __init__(self, cin: int, pool_features: int) -> None:
        super().__init__()
        self.b1 = _icv(cin, 64, 1)
        self.b5 = nn.Sequential(_icv(cin, 48, 1), _icv(48, 64, 5))
        self.b3 = nn.Sequential(_icv(cin, 64, 1), _icv(64, 96, 3), _icv(96, 96, 3))
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), _icv(cin, pool_features, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.pool(x)], 1)


class InceptionB(nn.Module):
    """Grid reduction 35x35 -> 17x17: 3x3/2 | 1x1-3x3-3x3/2 | maxpool/2."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = _icv(cin, 384, 3, 2, 0)
        self.b3dbl = nn.Sequential(_icv(cin, 64, 1), _icv(64, 96, 3), _icv(96, 96, 3, 2, 0))
        self.pool = nn.MaxPool2d(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b3dbl(x), self.pool(x)], 1)


class InceptionC(nn.Module):
    """17x17 module with n x n convolutions factorised into 1x7 and 7x1 (Figure 6), c7 inner channels."""

    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.b1 = _icv(cin, 192, 1)
        self.b7 = nn.Sequential(_icv(cin, c7, 1), _icv(c7, c7, (1, 7)), _icv(c7, 192, (7, 1)))
        self.b7dbl = nn.Sequential(_icv(cin, c7, 1), _icv(c7, c7, (7, 1)), _icv(c7, c7, (1, 7)),
                                   _icv(c7, c7, (7, 1)), _icv(c7, 192, (1, 7)))
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), _icv(cin, 192, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.b7dbl(x), self.pool(x)], 1)


class InceptionD(nn.Module):
    """Grid reduction 17x17 -> 8x8: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | maxpool/2."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = nn.Sequential(_icv(cin, 192, 1), _icv(192, 320, 3, 2, 0))
        self.b7x3 = nn.Sequential(_icv(cin, 192, 1), _icv(192, 192, (1, 7)), _icv(192, 192, (7, 1)),
                                  _icv(192, 192, 3, 2, 0))
        self.pool = nn.MaxPool2d(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7x3(x), self.pool(x)], 1)


class InceptionE(nn.Module):
    """8x8 module with expanded filter banks (Figure 7): 1x1 | 1x1-(1x3, 3x1) | 1x1-3x3-(1x3, 3x1) |
    avgpool-1x1; 320 + 768 + 768 + 192 = 2048 channels out."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b1 = _icv(cin, 320, 1)
        self.b3_1 = _icv(cin, 384, 1)
        self.b3_2a = _icv(384, 384, (1, 3))
        self.b3_2b = _icv(384, 384, (3, 1))
        self.b3dbl_1 = _icv(cin, 448, 1)
        self.b3dbl_2 = _icv(448, 384, 3)
        self.b3dbl_3a = _icv(384, 384, (1, 3))
        self.b3dbl_3b = _icv(384, 384, (3, 1))
        self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), _icv(cin, 192, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b3_1(x)
        b3 = torch.cat([self.b3_2a(y), self.b3_2b(y)], 1)
        z = self.b3dbl_2(self.b3dbl_1(x))
        b3dbl = torch.cat([self.b3dbl_3a(z), self.b3dbl_3b(z)], 1)
        return torch.cat([self.b1(x), b3, b3dbl, self.pool(x)], 1)


class InceptionV3(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _icv(3, 32, 3, 2, 0), _icv(32, 32, 3, 1, 0), _icv(32, 64, 3), nn.MaxPool2d(3, 2),  # 299 -> 73
            _icv(64, 80, 1), _icv(80, 192, 3, 1, 0), nn.MaxPool2d(3, 2))  # -> 35x35x192
        self.blocks = nn.Sequential(
            InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64),  # 35x35x288
            InceptionB(288),  # 17x17x768
            InceptionC(768, 128), InceptionC(768, 160), InceptionC(768, 160), InceptionC(768, 192),
            InceptionD(768),  # 8x8x1280
            InceptionE(1280), InceptionE(2048))  # 8x8x2048
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


# ---- ResNeXt-50 32x4d -----------------------------------------------------------------------------

class ResNeXtBlock(nn.Module):
    """1x1 -> grouped 3x3 (stride here) -> 1x1 (no ReLU), plus the shortcut, then ReLU."""

    def __init__(self, cin: int, width: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(ConvBN(cin, width, 1), ConvBN(width, width, 3, stride, groups=groups),
                                  ConvBN(width, cout, 1, relu=False))
        self.shortcut: nn.Module = (ConvBN(cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout
                                    else nn.Identity())
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNeXt(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), groups: int = 32, width_per_group: int = 4,
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvBN(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = 64
        for i, n in enumerate(layers):
            width, cout = groups * width_per_group * 2**i, 256 * 2**i
            for b in range(n):
                blocks.append(ResNeXtBlock(cin, width, cout, 2 if (b == 0 and i > 0) else 1, groups))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


# ---- SRU ------------------------------------------------------------------------------------------

class SRULayer(nn.Module):
    """One SRU layer; the three projections of x_t are separate linears on the same input."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.w = nn.Linear(hidden, hidden, bias=False)  # candidate x~_t = W x_t
        self.w_f = nn.Linear(hidden, hidden)  # forget gate
        self.w_r = nn.Linear(hidden, hidden)  # reset (highway) gate

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        c = xs[0].new_zeros(xs[0].shape)
        hs = []
        for x in xs:
            cand = self.w(x)
            f = torch.sigmoid(self.w_f(x))
            r = torch.sigmoid(self.w_r(x))
            c = f * c + (1 - f) * cand
            hs.append(r * torch.tanh(c) + (1 - r) * x)
        return hs


class SRU(nn.Module):
    def __init__(self, hidden: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SRULayer(hidden) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = list(x.unbind(0))
        for layer in self.layers:
            xs = layer(xs)
        return torch.stack(xs)


# ---- NAS RNN --------------------------------------------------------------------------------------

class NASCell(nn.Module):
    """Zoph & Le's Penn Treebank cell: 8 leaves of separate x_t / h_{t-1} linears (see the module doc)."""

    LEAVES = (("sigmoid", "add"), ("relu", "add"), ("sigmoid", "add"), ("relu", "mul"),
              ("tanh", "add"), ("sigmoid", "add"), ("tanh", "add"), ("sigmoid", "add"))
    ACT = {"sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh}

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.wx = nn.ModuleList(nn.Linear(hidden, hidden) for _ in self.LEAVES)
        self.uh = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in self.LEAVES)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = []
        for (act, comb), wx, uh in zip(self.LEAVES, self.wx, self.uh, strict=True):
            a, b = wx(x), uh(h)
            leaf.append(self.ACT[act](a + b if comb == "add" else a * b))
        m0 = torch.tanh(leaf[0] * leaf[1])
        m1 = torch.tanh(leaf[2] + leaf[3])
        m2 = torch.tanh(leaf[4] * leaf[5])
        m3 = torch.sigmoid(leaf[6] + leaf[7])
        m0 = torch.tanh(m0 + c)  # the cell state is injected here
        c_new = m0 * m1
        n = torch.tanh(m2 + m3)
        return torch.tanh(c_new * n), c_new


class NASRNN(nn.Module):
    def __init__(self, hidden: int = 512) -> None:
        super().__init__()
        self.cell = NASCell(hidden)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], self.hidden)
        c = x.new_zeros(x.shape[1], self.hidden)
        hs = []
        for xt in x.unbind(0):
            h, c = self.cell(xt, h, c)
            hs.append(h)
        return torch.stack(hs)


# ---- scaling stacks -------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(ConvBN(c, c, 3), ConvBN(c, c, 3, relu=False))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + x)


def resnet_blocks(n: int) -> Sample:
    """A 3x3 stem conv (3 -> 64) + BN + ReLU, then ``n`` basic residual blocks of 3x3 Conv+BN(+ReLU),
    64 channels at 56x56, batch 1; output (1, 64, 56, 56); 1 + 2n convolutions."""
    module = nn.Sequential(ConvBN(3, 64, 3), *(BasicBlock(64) for _ in range(n))).eval()
    x = torch.randn(1, 3, 56, 56)
    return Sample(f"resnet_blocks_{n}", module, (x,), None, plain_forward, torch.float32,
                  f"{n} ResNet basic blocks (3x3 Conv+BN+ReLU, 64 channels, 56x56) after a stem conv, "
                  "inference, batch 1", True)


def inception_e_blocks(n: int) -> Sample:
    """``n`` Inception-v3 InceptionE blocks at 8x8 (1280 channels into the first, 2048 after each),
    batch 1; output (1, 2048, 8, 8); 9n convolutions."""
    module = nn.Sequential(*(InceptionE(1280 if i == 0 else 2048) for i in range(n))).eval()
    x = torch.randn(1, 1280, 8, 8)
    return Sample(f"inception_e_blocks_{n}", module, (x,), None, plain_forward, torch.float32,
                  f"{n} Inception-v3 InceptionE blocks (8x8, 2048 channels), inference, batch 1", True)


# ---- registered builders --------------------------------------------------------------------------

SEQ, BATCH, HIDDEN = 16, 16, 512

_MODELS = {
    "inception_v3": (InceptionV3, (1, 3, 299, 299),
                     "Inception-v3 (A x3, B, C x4, D, E x2; Conv+BN+ReLU, BN kept), inference, batch 1, "
                     "3x299x299"),
    "resnext50": (ResNeXt, (1, 3, 224, 224),
                  "ResNeXt-50 32x4d bottlenecks [3,4,6,3] (Conv+BN+ReLU, BN kept), inference, batch 1, "
                  "3x224x224"),
    "sru": (SRU, (SEQ, BATCH, HIDDEN),
            f"SRU, 2 layers, hidden {HIDDEN}, unrolled over {SEQ} steps, batch {BATCH}, separate "
            "linears per projection"),
    "nasrnn": (NASRNN, (SEQ, BATCH, HIDDEN),
               f"NAS RNN cell (Zoph & Le, Penn Treebank), hidden {HIDDEN}, unrolled over {SEQ} steps, "
               f"batch {BATCH}, separate linears per leaf"),
}
OCGGS_NAMES: list[str] = list(_MODELS)


def build_ocggs_net(name: str, small: bool) -> Sample:
    """One of the OCGGS benchmark models (forward graphs only: ``loss_fn`` is None); ``small`` changes
    nothing."""
    cls, shape, desc = _MODELS[name]
    module = cls().eval()
    x = torch.randn(*shape)
    # not full_size: an inference pass at these sizes runs in about a second on a CPU, so
    # ``magis verify`` may run it (the flag keeps the paper-size training steps off the CPU)
    return Sample(name, module, (x,), None, plain_forward, torch.float32, desc, False)


__all__ = ["OCGGS_NAMES", "build_ocggs_net", "inception_e_blocks", "resnet_blocks"]
