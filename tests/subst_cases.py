"""One small inference module per substitution rule, built so that the rule matches: the rule
tests apply it, run the exported script against eager PyTorch and take it back."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from core.frontend.torch_import import capture
from core.ir.graph import Graph

D = torch.float64


class Fn(nn.Module):
    """``fn(self, x)`` with parameters made by ``params(self)``."""

    def __init__(self, fn: Callable, **params: tuple[int, ...]) -> None:
        super().__init__()
        for k, shape in params.items():
            setattr(self, k, nn.Parameter(torch.randn(*shape, dtype=D) * 0.3))
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


class Fig1(nn.Module):
    """OCGGS Fig. 1: a 1x1 and a 3x3 convolution of one input, summed."""

    def __init__(self, c: int = 8, bias: bool = True) -> None:
        super().__init__()
        self.a = nn.Conv2d(c, c, 1, bias=bias)
        self.b = nn.Conv2d(c, c, 3, padding=1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


class TwoConvs(nn.Module):
    def __init__(self, c: int = 6, k: int = 3, bias: bool = True, groups: int = 1, k2: int | None = None) -> None:
        super().__init__()
        self.a = nn.Conv2d(c, c, k, padding=k // 2, bias=bias, groups=groups)
        k2 = k2 or k
        self.b = nn.Conv2d(c, c, k2, padding=k2 // 2, bias=bias, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) * self.b(x)


class ConvBN(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(6)
        with torch.no_grad():  # statistics away from (0, 1), so a wrong fold shows
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class TwoLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 6)
        self.k = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x).sum(1) + self.k(x).sum(1)


IMG = (1, 6, 7, 7)
VEC = (5, 8)

# rule -> (module factory, input shape)
CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "merge_matmul": (lambda: Fn(lambda s, x: torch.mm(x, s.a).sum(1) + torch.mm(x, s.b).sum(1), a=(8, 4), b=(8, 3)),
                     VEC),
    "merge_matmul_rhs": (lambda: Fn(lambda s, x: torch.mm(torch.sin(x), s.w).sum() + torch.mm(torch.cos(x), s.w).sum(),
                                    w=(8, 4)), VEC),
    "merge_linear": (TwoLinear, VEC),
    "merge_conv": (lambda: TwoConvs(), IMG),
    "merge_conv_nobias": (lambda: TwoConvs(bias=False), IMG),
    "merge_dwconv": (lambda: TwoConvs(groups=6), (2, 6, 7, 7)),
    "merge_dwconv_nobias": (lambda: TwoConvs(groups=6, bias=False), (2, 6, 7, 7)),
    "cat_relu": (lambda: Fn(lambda s, x: torch.cat([torch.relu(x), torch.relu(x * s.a)], 1), a=(8,)), VEC),
    "factor_mul": (lambda: Fn(lambda s, x: x * s.c + torch.sin(x) * s.c, c=(8,)), VEC),
    "fold_bn": (lambda: ConvBN(True), (2, 4, 5, 5)),
    "fold_bn_nobias": (lambda: ConvBN(False), (2, 4, 5, 5)),
    "enlarge_conv": (lambda: Fig1(), (1, 8, 6, 6)),
    "split_relu": (lambda: Fn(lambda s, x: torch.relu(torch.cat([x, x * s.a], 0)), a=(8,)), VEC),
    "distribute_mul": (lambda: Fn(lambda s, x: (x + torch.sin(x)) * s.c, c=(8,)), VEC),
    "add_comm": (lambda: Fn(lambda s, x: torch.relu(x + s.a), a=(8,)), VEC),
    "mul_comm": (lambda: Fn(lambda s, x: torch.relu(x * s.a), a=(8,)), VEC),
    "add_assoc": (lambda: Fn(lambda s, x: (x + torch.sin(x)) + torch.cos(x)), VEC),
    "mul_assoc": (lambda: Fn(lambda s, x: (x * torch.sin(x)) * torch.cos(x)), VEC),
    "transpose_mm": (lambda: Fn(lambda s, x: torch.mm(x, s.w).t() * 2, w=(8, 3)), VEC),
    "mm_transpose": (lambda: Fn(lambda s, x: torch.mm(s.w.t(), x.t()) * 2, w=(8, 3)), VEC),
    "cse_view": (lambda: Fn(lambda s, x: x.view(40).sin() + x.view(40).cos()), VEC),
    "cse_t": (lambda: Fn(lambda s, x: torch.mm(x, s.w.t()).sum() + s.w.t().sum(), w=(4, 8)), VEC),
    "cse_relu": (lambda: Fn(lambda s, x: torch.relu(x).sin() + torch.relu(x).cos()), VEC),
}


def build(rule: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...], Graph]:
    """The rule's module (float64, eval), its input and its captured forward graph."""
    factory, shape = CASES[rule]
    torch.manual_seed(seed)
    m = factory().to(D).eval()
    x = (torch.randn(*shape, dtype=D),)
    return m, x, capture(m, x, training=False, name=f"subst_{rule}")


def module_fig1(c: int = 32, hw: int = 16) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Fig1(c).eval(), (torch.randn(1, c, hw, hw),)


class Fig3(nn.Module):
    """OCGGS Fig. 3a: two pairs of sibling 3x3 convolutions, each pair concatenated."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.v2 = nn.Conv2d(c, c, 3, padding=1)
        self.v3 = nn.Conv2d(c, c, 3, padding=1)
        self.v6 = nn.Conv2d(2 * c, c, 3, padding=1)
        self.v7 = nn.Conv2d(2 * c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([self.v2(x), self.v3(x)], 1)
        return torch.cat([self.v6(y), self.v7(y)], 1)


def random_module(seed: int, c: int = 8) -> nn.Module:
    """A random small CNN DAG over ReLU, 1x1 / 3x3 convolutions (siblings of one input), add and
    concat: graphs on which several rules match and interact."""
    import random

    rng = random.Random(seed)

    class Rand(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.plan = []
            self.convs = nn.ModuleList()
            n = rng.randint(4, 7)
            for i in range(n):
                kind = rng.choice(["conv", "conv", "relu", "add", "cat"])
                src = rng.randrange(i + 1)
                other = rng.randrange(i + 1)
                if kind == "conv":
                    k = rng.choice([1, 3])
                    self.convs.append(nn.Conv2d(c, c, k, padding=k // 2))
                    self.plan.append(("conv", src, len(self.convs) - 1))
                else:
                    self.plan.append((kind, src, other))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            vals = [x]
            for kind, a, b in self.plan:
                if kind == "conv":
                    vals.append(self.convs[b](vals[a]))
                elif kind == "relu":
                    vals.append(torch.relu(vals[a]))
                elif kind == "add":
                    vals.append(vals[a] + vals[b])
                else:
                    vals.append(torch.cat([vals[a], vals[b]], 1)[:, :c])
            return sum(vals[1:])

    torch.manual_seed(seed)
    return Rand().eval()


__all__ = ["CASES", "Fig1", "Fig3", "build", "module_fig1", "random_module"]

