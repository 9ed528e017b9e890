"""NAS networks of the HMCOS evaluation (DAC'22, section 4.1) as our own nn.Modules.

* NASNet-A (Zoph et al.), AmoebaNet-A (Real et al.) and DARTS (Liu et al., "DARTS_V2") cells with
  their published genotypes, stacked as in the HMCOS evaluation: CIFAR-10 -- a stride-1 3x3 stem of
  32 filters, then N normal / reduction / N normal / reduction / N normal cells with N = 6 (initial
  filters 32 / 36 / 36); ImageNet (mobile setting) -- a stride-2 stem, two reduction cells, then the
  same stack with N = 4 (initial filters 11 / 12 / 12).  Each cell first squeezes its two inputs to
  the cell's width (ReLU-1x1 conv; a factorized reduction when the previous-previous input is twice
  the resolution), then computes its blocks (sum of two ops) and concatenates the chosen blocks.
* RandWire (Xie et al.) small regime with WS(N=32, K=4, P=0.75) random graphs (seeded): stem
  conv(C/2, s2) and conv(C, s2), three random stages of C, 2C, 4C channels (C = 78), a 1x1 conv to
  1280, pooling and a classifier.  A node aggregates its inputs by a weighted sum (a stack and a
  matrix-vector product with sigmoid-positive weights, folded into a buffer as a deployment
  compiler would), then ReLU - separable 3x3 conv; stage inputs enter with stride 2 and a stage
  outputs the average of its sink nodes.

Batch normalisation is folded into the preceding convolution's bias, as the HMCOS models were
(ONNX ``fuse_bn_into_conv``); inference graphs are captured with batch 1 in fp32.  HMCOS counts
memory with graph inputs freed after their last use and weights left out
(``free_inputs=True, count_weights=False``) -- use :data:`NAS_MEMORY_MODEL`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

NAS_NAMES: list[str] = [
    "nasnet_cifar", "amoebanet_cifar", "darts_cifar",
    "nasnet_imagenet", "amoebanet_imagenet", "darts_imagenet",
    "randwire_1", "randwire_2", "randwire_3",
]
NAS_MEMORY_MODEL = {"free_inputs": True, "count_weights": False}

# genotypes: per block ((op, input), (op, input)); inputs 0 = prev-prev, 1 = prev, k >= 2 = block k-2
Genotype = tuple[list[tuple[tuple[str, int], tuple[str, int]]], list[int],
                 list[tuple[tuple[str, int], tuple[str, int]]], list[int]]

GENOTYPES: dict[str, Genotype] = {
    "nasnet": (
        [(("sep5x5", 1), ("sep3x3", 0)), (("sep5x5", 0), ("sep3x3", 0)), (("avg3x3", 1), ("id", 0)),
         (("avg3x3", 0), ("avg3x3", 0)), (("sep3x3", 1), ("id", 1))],
        [0, 2, 3, 4, 5, 6],
        [(("sep5x5", 1), ("sep7x7", 0)), (("max3x3", 1), ("sep5x5", 0)), (("avg3x3", 1), ("sep5x5", 0)),
         (("id", 3), ("avg3x3", 2)), (("sep3x3", 2), ("max3x3", 1))],
        [3, 4, 5, 6],
    ),
    "amoebanet": (
        [(("avg3x3", 0), ("max3x3", 0)), (("id", 0), ("avg3x3", 1)), (("sep5x5", 2), ("sep3x3", 1)),
         (("sep3x3", 2), ("id", 1)), (("avg3x3", 4), ("sep3x3", 0))],
        [3, 5, 6],
        [(("avg3x3", 0), ("sep3x3", 1)), (("max3x3", 1), ("max3x3", 0)), (("max3x3", 0), ("sep7x7", 2)),
         (("sep7x7", 0), ("avg3x3", 1)), (("sep3x3", 3), ("1x7_7x1", 0))],
        [4, 5, 6],
    ),
    "darts": (
        [(("sep3x3", 0), ("sep3x3", 1)), (("sep3x3", 0), ("sep3x3", 1)), (("sep3x3", 1), ("id", 0)),
         (("id", 0), ("dil3x3", 2))],
        [2, 3, 4, 5],
        [(("max3x3", 0), ("max3x3", 1)), (("id", 2), ("max3x3", 1)), (("max3x3", 0), ("id", 2)),
         (("id", 2), ("max3x3", 1))],
        [2, 3, 4, 5],
    ),
}
# (stacked normal cells N, initial filters) per dataset, as in the HMCOS evaluation scripts
CONFIGS: dict[str, dict[str, int]] = {
    "cifar": {"nasnet": 32, "amoebanet": 36, "darts": 36, "N": 6},
    "imagenet": {"nasnet": 11, "amoebanet": 12, "darts": 12, "N": 4},
}


def _conv(cin: int, cout: int, k: int | tuple[int, int] = 1, stride: int = 1, groups: int = 1,
          dilation: int = 1) -> nn.Conv2d:
    kh, kw = (k, k) if isinstance(k, int) else k
    pad = (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
    return nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=pad, groups=groups, dilation=dilation,
                     bias=True)  # bias = folded batch norm


class SepConv(nn.Module):
    """ReLU - depthwise k x k - pointwise 1x1 (BN folded), twice (NASNet's separable conv);
    ``repeat=1`` with ``dilation=2`` is DARTS's dilated conv."""

    def __init__(self, c: int, k: int, stride: int, repeat: int = 2, dilation: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for r in range(repeat):
            layers += [nn.ReLU(), _conv(c, c, k, stride if r == 0 else 1, groups=c, dilation=dilation),
                       _conv(c, c, 1)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Conv1x7_7x1(nn.Module):
    def __init__(self, c: int, stride: int) -> None:
        super().__init__()
        self.a = _conv(c, c, (1, 7), stride)
        self.b = _conv(c, c, (7, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(F.relu(x)))


class Pool(nn.Module):
    def __init__(self, kind: str, stride: int) -> None:
        super().__init__()
        self.kind, self.stride = kind, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "max":
            return F.max_pool2d(x, 3, self.stride, 1)
        return F.avg_pool2d(x, 3, self.stride, 1, count_include_pad=False)


class FactorizedReduce(nn.Module):
    """ReLU, two stride-2 1x1 convs on the input and on it shifted by one pixel, concatenated, BN."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout // 2, 1, bias=False)
        self.c2 = nn.Conv2d(cin, cout - cout // 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        a = self.c1(F.avg_pool2d(x, 1, 2))
        y = F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        b = self.c2(F.avg_pool2d(y, 1, 2))
        return self.bn(torch.cat([a, b], dim=1))


class Squeeze(nn.Module):
    """ReLU - 1x1 conv (BN folded): brings a cell input to the cell's width."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = _conv(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.relu(x))


def _make_op(name: str, c: int, stride: int) -> nn.Module:
    if name == "id":
        return nn.Identity() if stride == 1 else FactorizedReduce(c, c)
    if name.startswith("sep"):
        return SepConv(c, int(name[3]), stride)
    if name == "dil3x3":
        return SepConv(c, 3, stride, repeat=1, dilation=2)
    if name in ("avg3x3", "max3x3"):
        return Pool(name[:3], stride)
    if name == "1x7_7x1":
        return Conv1x7_7x1(c, stride)
    raise ValueError(f"unknown NAS op {name!r}")


class Cell(nn.Module):
    def __init__(self, blocks, concat: list[int], c_pp: int, c_p: int, c: int, reduction: bool,
                 pp_reduce: bool) -> None:
        super().__init__()
        self.pre0 = FactorizedReduce(c_pp, c) if pp_reduce else Squeeze(c_pp, c)
        self.pre1 = Squeeze(c_p, c)
        self.ops = nn.ModuleList()
        self.inputs: list[tuple[int, int]] = []
        for (n1, i1), (n2, i2) in blocks:
            self.ops.append(_make_op(n1, c, 2 if reduction and i1 < 2 else 1))
            self.ops.append(_make_op(n2, c, 2 if reduction and i2 < 2 else 1))
            self.inputs.append((i1, i2))
        self.concat = list(concat)

    def forward(self, s0: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
        states = [self.pre0(s0), self.pre1(s1)]
        for k, (i1, i2) in enumerate(self.inputs):
            states.append(self.ops[2 * k](states[i1]) + self.ops[2 * k + 1](states[i2]))
        return torch.cat([states[i] for i in self.concat], dim=1)


class NASNetwork(nn.Module):
    """A stack of NAS cells with the given genotype (NASNet-A, AmoebaNet-A or DARTS)."""

    def __init__(self, arch: str, dataset: str, num_classes: int | None = None) -> None:
        super().__init__()
        normal, normal_cat, reduce, reduce_cat = GENOTYPES[arch]
        cfg = CONFIGS[dataset]
        n, c = cfg["N"], cfg[arch]
        stem_c = 32
        if dataset == "cifar":
            self.stem = _conv(3, stem_c, 3, 1)
            kinds = ["N"] * n + ["R"] + ["N"] * n + ["R"] + ["N"] * n
            num_classes = num_classes or 10
        else:
            self.stem = _conv(3, stem_c, 3, 2)
            kinds = ["R", "R"] + ["N"] * n + ["R"] + ["N"] * n + ["R"] + ["N"] * n
            num_classes = num_classes or 1000
        self.cells = nn.ModuleList()
        c_pp, c_p = stem_c, stem_c
        red_pp = False  # is the prev-prev input at twice the resolution of the prev one?
        for kind in kinds:
            reduction = kind == "R"
            if reduction:
                c *= 2
            blocks, cat = (reduce, reduce_cat) if reduction else (normal, normal_cat)
            self.cells.append(Cell(blocks, cat, c_pp, c_p, c, reduction, red_pp))
            c_pp, c_p = c_p, c * len(cat)
            red_pp = reduction
        self.classifier = nn.Linear(c_p, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        y = F.adaptive_avg_pool2d(F.relu(s1), 1).flatten(1)
        return self.classifier(y)


# ------------------------------------------------------------------------------------------------
# RandWire
# ------------------------------------------------------------------------------------------------
def ws_graph(n: int, k: int, p: float, rng: random.Random) -> list[list[int]]:
    """Watts-Strogatz WS(n, k, p) made a DAG (edges from lower to higher node): preds per node."""
    adj = [[i == j for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(i - k // 2, i + k // 2 + 1):
            jj = j % n
            if jj != i:
                adj[i][jj] = adj[jj][i] = True
    for i in range(n):
        for j in range(k // 2):
            cur = (i + j + 1) % n
            if rng.random() < p:
                free = [x for x in range(n) if not adj[i][x]]
                if not free:
                    continue
                new = rng.choice(free)
                adj[i][cur] = adj[cur][i] = False
                adj[i][new] = adj[new][i] = True
    return [[i for i in range(v) if adj[i][v]] for v in range(n)]


class RandNode(nn.Module):
    def __init__(self, n_in: int, c_in: int, c: int, stride: int) -> None:
        super().__init__()
        # sigmoid(learned aggregation weights), folded into a constant for inference
        self.register_buffer("agg", torch.sigmoid(torch.zeros(n_in)) if n_in > 1 else torch.ones(1))
        self.n_in = n_in
        self.dw = _conv(c_in, c_in, 3, stride, groups=c_in)
        self.pw = _conv(c_in, c, 1)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        x = xs[0] if self.n_in == 1 else torch.stack(xs, dim=-1) @ self.agg
        return self.pw(self.dw(F.relu(x)))


class RandStage(nn.Module):
    def __init__(self, preds: list[list[int]], c_in: int, c: int) -> None:
        super().__init__()
        self.preds = preds
        self.nodes = nn.ModuleList(
            RandNode(max(1, len(p)), c if p else c_in, c, 1 if p else 2) for p in preds)
        has_succ = {q for p in preds for q in p}
        self.sinks = [v for v in range(len(preds)) if v not in has_succ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        for v, p in enumerate(self.preds):
            outs.append(self.nodes[v]([outs[q] for q in p] if p else [x]))
        return torch.stack([outs[v] for v in self.sinks]).mean(0)


class RandWire(nn.Module):
    """RandWire small regime (Xie et al. 2019) with three seeded WS(32, 4, 0.75) stages."""

    def __init__(self, seed: int, channels: int = 78, nodes: int = 32, k: int = 4, p: float = 0.75,
                 num_classes: int = 1000) -> None:
        super().__init__()
        gen = random.Random(seed)
        c = channels
        self.conv1 = _conv(3, c // 2, 3, 2)
        self.conv2 = _conv(c // 2, c, 3, 2)
        self.stages = nn.ModuleList([
            RandStage(ws_graph(nodes, k, p, gen), c, c),
            RandStage(ws_graph(nodes, k, p, gen), c, 2 * c),
            RandStage(ws_graph(nodes, k, p, gen), 2 * c, 4 * c),
        ])
        self.head = _conv(4 * c, 1280, 1)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(F.relu(self.conv1(x)))
        for s in self.stages:
            x = s(x)
        x = self.head(F.relu(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# ------------------------------------------------------------------------------------------------
_BUILDERS: dict[str, Callable[[], tuple[nn.Module, tuple[int, ...]]]] = {
    "nasnet_cifar": lambda: (NASNetwork("nasnet", "cifar"), (1, 3, 32, 32)),
    "amoebanet_cifar": lambda: (NASNetwork("amoebanet", "cifar"), (1, 3, 32, 32)),
    "darts_cifar": lambda: (NASNetwork("darts", "cifar"), (1, 3, 32, 32)),
    "nasnet_imagenet": lambda: (NASNetwork("nasnet", "imagenet"), (1, 3, 224, 224)),
    "amoebanet_imagenet": lambda: (NASNetwork("amoebanet", "imagenet"), (1, 3, 224, 224)),
    "darts_imagenet": lambda: (NASNetwork("darts", "imagenet"), (1, 3, 224, 224)),
    "randwire_1": lambda: (RandWire(1), (1, 3, 224, 224)),
    "randwire_2": lambda: (RandWire(2), (1, 3, 224, 224)),
    "randwire_3": lambda: (RandWire(3), (1, 3, 224, 224)),
}


def build_nas(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """(module in eval mode, example inputs) of a NAS workload.  Call under ``FakeTensorMode`` to
    avoid allocating weights."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown NAS network {name!r}; known: {', '.join(NAS_NAMES)}")
    module, shape = _BUILDERS[name]()
    module.eval()
    return module, (torch.randn(*shape),)


@cache
def nas_graph(name: str):
    """The captured inference graph (batch 1, fp32) of a NAS workload, memoised in-process."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from core.frontend.torch_import import capture

    with FakeTensorMode(allow_non_fake_inputs=True):
        module, inputs = build_nas(name)
    g = capture(module, inputs, training=False, name=name)
    g.meta["description"] = f"NAS network {name} (HMCOS evaluation), inference, batch 1"
    return g


__all__ = ["NAS_MEMORY_MODEL", "NAS_NAMES", "build_nas", "nas_graph"]
