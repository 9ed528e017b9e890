"""Tiny models of what modern code calls (fused attention, group norm, upsampling, stochastic depth)
for the ops-registry, export and fission tests: a transformer on ``F.scaled_dot_product_attention``
and a UNet-like model with group norm and nearest / bilinear upsampling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinySDPATransformer(nn.Module):
    def __init__(self, vocab: int = 32, d: int = 16, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


class GNBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int = 4) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, cin)
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.silu(self.norm(x)))


class TinyGNUNet(nn.Module):
    """Down (stride-2 conv), up by nearest and bilinear upsampling, skip connections, group norm."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.d1 = GNBlock(c, c)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.mid = GNBlock(2 * c, 2 * c)
        self.up1 = GNBlock(2 * c, c)
        self.d2 = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.up2 = GNBlock(c, c)
        self.out = nn.Conv2d(c, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = self.d1(self.inp(x))
        h = self.mid(self.down(h0))
        h = self.up1(F.interpolate(h, scale_factor=2.0, mode="nearest")) + h0
        h2 = self.d2(h)
        h = self.up2(F.interpolate(h2, scale_factor=2.0, mode="bilinear", align_corners=False)) + h
        return self.out(h)


class Workload:
    def __init__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], name: str) -> None:
        self.module, self.inputs, self.name = module, inputs, name

    @staticmethod
    def loss_fn(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return module(x).float().square().mean()


def sdpa_transformer(batch: int = 2, seq: int = 8, dtype: torch.dtype = torch.float32) -> Workload:
    torch.manual_seed(0)
    m = TinySDPATransformer().to(dtype)
    return Workload(m, (torch.randint(0, 32, (batch, seq)),), "sdpa_tiny")


def gn_unet(batch: int = 2, size: int = 8, dtype: torch.dtype = torch.float32) -> Workload:
    torch.manual_seed(0)
    m = TinyGNUNet().to(dtype)
    return Workload(m, (torch.randn(batch, 3, size, size, dtype=dtype),), "gn_unet_tiny")


class GroupedMoE(nn.Module):
    """Top-1 routed experts through ``torch._grouped_mm`` (transformers' default MoE kernel): tokens
    sorted by expert, one grouped matmul over the experts' row blocks.  Routing is static (token i
    goes to expert i mod E) so the block sizes are known without reading values."""

    def __init__(self, d: int = 8, hidden: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.experts = experts
        self.w_in = nn.Parameter(torch.randn(experts, d, hidden) / d ** 0.5)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, d) / hidden ** 0.5)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        t = self.norm(x).reshape(b * s, d)
        n = b * s
        order = torch.arange(n).reshape(n // self.experts, self.experts).t().reshape(n)
        offs = torch.arange(1, self.experts + 1, dtype=torch.int32) * (n // self.experts)
        h = torch._grouped_mm(t[order], self.w_in, offs=offs)
        y = torch._grouped_mm(F.gelu(h), self.w_out, offs=offs)
        out = torch.empty_like(y).index_copy(0, order, y)
        return x + out.reshape(b, s, d)


def moe(batch: int = 2, seq: int = 8) -> Workload:
    torch.manual_seed(0)
    return Workload(GroupedMoE(), (torch.randn(batch, seq, 8),), "moe_tiny")
