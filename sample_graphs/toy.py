"""Toy graphs modelled on the MAGIS paper's illustrations (ASPLOS'24, Figures 2 and 6).

The paper shows these graphs only as pictures; the text gives a few facts that we match (noted in
each class docstring) and the rest is our reconstruction. Both take ``(x, target)`` and are trained
with a mean-squared-error loss so that they also have training graphs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .sample import Sample, plain_forward


class Fig2Skip(nn.Module):
    """U-shaped chain with long skip connections (MAGIS Fig. 2 (a)).

    From the text: "a simplified graph structure commonly observed in DNN training or some DNNs with
    long skip-connections", every tensor has the same size (32), and the peak is reached in the
    middle of the chain, when the output of every earlier operator is still alive. Reconstruction:
    encoder ``h_k = relu(W_k h_{k-1})`` (``h_0 = x``) for ``k = 1..depth``, then decoder
    ``g_k = relu(V_k g_{k-1}) + h_{depth-k}`` (``g_0 = h_depth``), so ``h_0`` is consumed last,
    ``h_1`` second to last, and so on. With ``batch * width == 32`` each activation has 32 elements,
    as in the figure; the default depth 4 gives 20 forward operators (the paper's picture is longer).
    """

    def __init__(self, width: int = 8, depth: int = 4) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.decoder = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [x]
        for layer in self.encoder:
            skips.append(torch.relu(layer(skips[-1])))
        g = skips.pop()
        for layer in self.decoder:
            g = torch.relu(layer(g)) + skips.pop()
        return g


class Fig6FTree(nn.Module):
    """Small graph with nested single-entry regions for F-Tree construction (MAGIS Fig. 6).

    From the text: the graph is "simplified from the training graphs of various models", every
    tensor has size 1 (here: equal sizes), the example shows one connected component of the D-Graph
    (here: the batch dimension runs through every activation; weights are outside it and shared by
    the split parts), and Algorithm 1 picks sub-graphs dominated by nodes of different scores, which
    yields a tree of nested fission candidates. The exact topology is not recoverable from the text;
    we use nested regions so the dominator tree has several levels::

        v1 = fc1(x); v2 = relu(v1)                  # v2 dominates everything below
          v3 = fc2(v2); v4 = relu(v3)               # v4 dominates the inner diamond
            v5 = fc3(v4); v6 = fc3(sigmoid(v4))     # two branches sharing weight W3
            v7 = v5 * v6
          v8 = v7 + v2                              # residual join closes the middle region
        v9 = fc4(v8); out = tanh(v9) * v9           # a last small region dominated by v9
    """

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, width)
        self.fc4 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v2 = torch.relu(self.fc1(x))
        v4 = torch.relu(self.fc2(v2))
        v7 = self.fc3(v4) * self.fc3(torch.sigmoid(v4))
        v9 = self.fc4(v7 + v2)
        return torch.tanh(v9) * v9


def mse_loss(module: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of ``module(x)`` against ``target``."""
    return F.mse_loss(module(x), target)


def build_fig2(name: str, tiny: bool) -> Sample:
    """Fig. 2 long-skip chain: depth 4 + 4 linear layers, batch 4 x width 8 (one size; ``tiny`` unused)."""
    batch, width = 4, 8
    module = Fig2Skip(width, depth=4).train()
    x = torch.randn(batch, width)
    target = torch.randn(batch, width)
    desc = ("MAGIS Fig. 2-like toy: U-shaped chain of 4+4 linear+ReLU layers with long skip adds, "
            "batch 4 x width 8 (32 elements per tensor), MSE loss")
    return Sample(name, module, (x, target), mse_loss, plain_forward, torch.float32, desc, False)


def build_fig6(name: str, tiny: bool) -> Sample:
    """Fig. 6 F-Tree example: nested single-entry regions, batch 8 x width 8 (one size; ``tiny`` unused)."""
    batch, width = 8, 8
    module = Fig6FTree(width).train()
    x = torch.randn(batch, width)
    target = torch.randn(batch, width)
    desc = ("MAGIS Fig. 6-like toy: nested single-entry regions (residual block around a diamond with a "
            "shared weight) for F-Tree construction, batch 8 x width 8, MSE loss")
    return Sample(name, module, (x, target), mse_loss, plain_forward, torch.float32, desc, False)
