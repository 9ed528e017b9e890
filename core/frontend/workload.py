"""A workload: what the frontend captures -- a module, example inputs and how to run them.

Any object with these attributes is one (``sample_graphs.Sample`` is, and so is whatever a user's
``path/to/file.py:factory`` returns); the frontend never needs to know where it came from:

* ``module`` -- the ``nn.Module``;
* ``inputs`` -- example inputs, the positional arguments of ``loss_fn`` / ``forward_fn``;
* ``loss_fn(module, *inputs)`` -- a scalar loss (needed for a training graph);
* ``forward_fn(module, *inputs)`` -- optional, the forward output (default ``module(*inputs)``);
* ``name`` and ``description`` -- optional, recorded on the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from ..ir.graph import Graph
from .torch_import import capture


class Workload(Protocol):
    """The attributes every workload has; ``loss_fn``, ``forward_fn``, ``name`` and
    ``description`` are optional and read with :func:`workload_fns` / ``getattr``."""

    @property
    def module(self) -> nn.Module: ...

    @property
    def inputs(self) -> Sequence[torch.Tensor]: ...


def workload_fns(w: Workload) -> tuple[Callable[..., torch.Tensor] | None, Callable[..., Any] | None]:
    """``(loss_fn, forward_fn)`` of ``w``, None where it has none."""
    return getattr(w, "loss_fn", None), getattr(w, "forward_fn", None)


def capture_workload(w: Workload, training: bool = True, name: str | None = None,
                     sgd_lr: float | None = None) -> Graph:
    """:func:`~core.frontend.torch_import.capture` of ``w``'s module on its inputs (fake tensors
    when ``w`` was built under ``FakeTensorMode``); the graph is named ``name``, else ``w.name``,
    else "model"."""
    loss_fn, forward_fn = workload_fns(w)
    return capture(w.module, tuple(w.inputs), loss_fn, forward_fn, training=training,
                   name=name or getattr(w, "name", None) or "model", sgd_lr=sgd_lr)


__all__ = ["Workload", "capture_workload", "workload_fns"]
