"""Capture a sample as a graph: built under fake tensors (nothing allocated), then captured."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.ir.graph import Graph


def capture_sample(name: str, training: bool = True, sgd_lr: float | None = None,
                   progress: Callable[[str], None] | None = None, adam_lr: float | None = None) -> Graph:
    """Build sample ``name`` under ``FakeTensorMode`` and capture it (the training step, or the
    forward pass with ``training=False``); the graph records the sample's name and description.
    ``progress(message)`` hears each stage."""
    from core.frontend.workload import build_fake, capture_workload

    from . import build

    if progress:
        progress(f"building {name} on fake tensors")
    s = build_fake(lambda: build(name))
    g = capture_workload(s, training=training, name=name, sgd_lr=sgd_lr, progress=progress, adam_lr=adam_lr)
    g.meta["sample"] = name
    g.meta["description"] = s.description
    return g
