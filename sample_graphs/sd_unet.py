"""A Stable-Diffusion-1.x-size UNet, written by hand for the search's scaling benchmark
(``bench/windows.py``): a graph with long skip connections and no narrow waists, of the size of the
SD-1.x UNet's training step (about 6,000 nodes).

Four down blocks (channels 320/640/1280/1280, two ResNet blocks each; the first three with a
transformer block after each ResNet block and a stride-2 convolution at the end), a middle block
(ResNet, transformer, ResNet) and four up blocks (three ResNet blocks each, every one reading a
skip connection concatenated along the channels; the last three with transformer blocks and all
but the last with a nearest 2x upsampling).  A ResNet block is group norm + SiLU + 3x3 conv twice,
the time embedding added between, and a 1x1 shortcut when the channels change.  A transformer
block is group norm, a 1x1 projection in, self-attention, cross-attention on the text context and
a GEGLU feed-forward, each after a layer norm, and a projection out; attention is written with
plain matmul and softmax.  The loss is the mean squared error against the noise.

Not a registered sample (``sample_graphs.NAMES``): ``build_sd_unet()`` returns its
:class:`~sample_graphs.sample.Sample`, captured with ``capture_sd_unet()``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .sample import Sample

GROUPS = 32


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(GROUPS, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(t))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    def __init__(self, dim: int, ctx: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(ctx, dim, bias=False)
        self.v = nn.Linear(ctx, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, t.shape[1], h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(ctx)), split(self.v(ctx))
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1)
        return self.out((w @ v).transpose(1, 2).reshape(b, n, d))


class Transformer(nn.Module):
    def __init__(self, dim: int, ctx: int, heads: int = 8) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(GROUPS, dim)
        self.proj_in = nn.Conv2d(dim, dim, 1)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim, dim, heads)
        self.attn2 = Attention(dim, ctx, heads)
        self.ff_in = nn.Linear(dim, 8 * dim)
        self.ff_out = nn.Linear(4 * dim, dim)
        self.proj_out = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, c, hh, ww = x.shape
        h = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)
        y = self.ln1(h)
        h = h + self.attn1(y, y)
        h = h + self.attn2(self.ln2(h), ctx)
        a, gate = self.ff_in(self.ln3(h)).chunk(2, dim=-1)
        h = h + self.ff_out(a * F.gelu(gate))
        return x + self.proj_out(h.transpose(1, 2).reshape(b, c, hh, ww))


class SDUNet(nn.Module):
    """The SD-1.x UNet's layout (module docstring); ``channels`` per level, ``ctx`` the context width."""

    def __init__(self, channels: tuple[int, ...] = (320, 640, 1280, 1280), ctx: int = 768,
                 in_channels: int = 4, heads: int = 8) -> None:
        super().__init__()
        c0, temb = channels[0], 4 * channels[0]
        self.time = nn.Sequential(nn.Linear(c0, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(in_channels, c0, 3, padding=1)
        levels = len(channels)
        attn = [i < levels - 1 for i in range(levels)]
        self.down = nn.ModuleList()
        skips = [c0]
        cin = c0
        for i, c in enumerate(channels):
            blocks = nn.ModuleList()
            for _ in range(2):
                blocks.append(ResBlock(cin, c, temb))
                blocks.append(Transformer(c, ctx, heads) if attn[i] else nn.Identity())
                cin = c
                skips.append(c)
            ds = nn.Conv2d(c, c, 3, stride=2, padding=1) if i < levels - 1 else None
            if ds is not None:
                skips.append(c)
            self.down.append(nn.ModuleDict({"blocks": blocks, **({"ds": ds} if ds is not None else {})}))
        self.mid = nn.ModuleList([ResBlock(cin, cin, temb), Transformer(cin, ctx, heads), ResBlock(cin, cin, temb)])
        self.up = nn.ModuleList()
        for i, c in reversed(list(enumerate(channels))):
            blocks = nn.ModuleList()
            for _ in range(3):
                blocks.append(ResBlock(cin + skips.pop(), c, temb))
                blocks.append(Transformer(c, ctx, heads) if attn[i] else nn.Identity())
                cin = c
            us = nn.Conv2d(c, c, 3, padding=1) if i > 0 else None
            self.up.append(nn.ModuleDict({"blocks": blocks, **({"us": us} if us is not None else {})}))
        self.norm_out = nn.GroupNorm(GROUPS, c0)
        self.conv_out = nn.Conv2d(c0, in_channels, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        t = self.time(t)
        x = self.conv_in(x)
        skips = [x]
        for level in self.down:
            blocks = level["blocks"]
            for k in range(0, len(blocks), 2):
                x = blocks[k + 1](blocks[k](x, t), ctx) if not isinstance(blocks[k + 1], nn.Identity) \
                    else blocks[k](x, t)
                skips.append(x)
            if "ds" in level:
                x = level["ds"](x)
                skips.append(x)
        x = self.mid[2](self.mid[1](self.mid[0](x, t), ctx), t)
        for level in self.up:
            blocks = level["blocks"]
            for k in range(0, len(blocks), 2):
                x = blocks[k](torch.cat([x, skips.pop()], dim=1), t)
                if not isinstance(blocks[k + 1], nn.Identity):
                    x = blocks[k + 1](x, ctx)
            if "us" in level:
                x = level["us"](F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(x)))


def diffusion_loss(module: nn.Module, x: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor,
                   noise: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(module(x, t, ctx), noise)


def sd_forward(module: nn.Module, x: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor,
               noise: torch.Tensor) -> torch.Tensor:
    return module(x, t, ctx)


def build_sd_unet(batch: int = 16, size: int = 64, channels: tuple[int, ...] = (320, 640, 1280, 1280),
                  ctx_len: int = 77, ctx: int = 768) -> Sample:
    """The SD-1.x-size UNet's training step: batch 16 of 4x64x64 latents, a 77x768 text context."""
    module = SDUNet(channels, ctx).train()
    x = torch.randn(batch, 4, size, size)
    t = torch.randn(batch, channels[0])
    c = torch.randn(batch, ctx_len, ctx)
    noise = torch.randn(batch, 4, size, size)
    desc = (f"SD-1.x-size UNet: channels {'/'.join(map(str, channels))}, batch {batch}, 4x{size}x{size} latents, "
            f"{ctx_len}x{ctx} context")
    return Sample("sd_unet", module, (x, t, c, noise), diffusion_loss, sd_forward, torch.float32, desc, True)


def capture_sd_unet(**kw):
    """The training graph of :func:`build_sd_unet` (built on fake tensors)."""
    from core.frontend.workload import build_fake, capture_workload

    s = build_fake(lambda: build_sd_unet(**kw))
    return capture_workload(s, training=True, name="sd_unet")
