"""Capture a sample as a graph: built under fake tensors (nothing allocated), then captured."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.ir.graph import Graph


def capture_sample(name: str, training: bool = True, sgd_lr: float | None = None) -> Graph:
    """Build sample ``name`` under ``FakeTensorMode`` and capture it (the training step, or the
    forward pass with ``training=False``); the graph records the sample's name and description."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from core.frontend.workload import capture_workload

    from . import build

    with FakeTensorMode(allow_non_fake_inputs=True):
        s = build(name)
    g = capture_workload(s, training=training, name=name, sgd_lr=sgd_lr)
    g.meta["sample"] = name
    g.meta["description"] = s.description
    return g
