"""The :class:`Sample` record and the loss helpers shared by the sample builders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Sample:
    """One evaluation workload: a model, example inputs and how to run it.

    ``loss_fn(module, *inputs)`` returns a scalar loss (training graph = forward + this loss);
    ``forward_fn(module, *inputs)`` returns the forward output and ignores label inputs.
    """

    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    loss_fn: Callable[..., torch.Tensor] | None
    forward_fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]
    dtype: torch.dtype
    description: str
    full_size: bool


def plain_forward(module: nn.Module, x: torch.Tensor, *labels: torch.Tensor) -> torch.Tensor:
    """``module(x)`` for models with one tensor input; label/target inputs are ignored."""
    return module(x)


def classify_loss(module: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``module(x)`` against class labels (per pixel for segmentation maps)."""
    return F.cross_entropy(module(x), labels)


def check_no_dropout(module: nn.Module) -> None:
    """Raise if any dropout layer of ``module`` has a non-zero probability."""
    for name, m in module.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p != 0.0:
            raise AssertionError(f"dropout {name} has p={m.p}")
