"""Bridge from IR values to torch objects (ops, dtypes, constants) for running a graph in-process."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from .graph import TorchConst, TRef


@cache
def resolve_op(name: str) -> Any:
    """``"aten.mm.default"`` -> ``torch.ops.aten.mm.default``."""
    ns, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def torch_const(c: TorchConst, device: str | torch.device) -> Any:
    if c.kind == "device":
        return torch.device(device)
    return getattr(torch, c.value)


def materialize(obj: Any, lookup, device: str | torch.device) -> Any:
    """Replace TRefs with ``lookup(ref)`` and TorchConsts with torch objects."""
    if isinstance(obj, TRef):
        return lookup(obj)
    if isinstance(obj, TorchConst):
        return torch_const(obj, device)
    if isinstance(obj, list):
        return [materialize(x, lookup, device) for x in obj]
    if isinstance(obj, tuple):
        return tuple(materialize(x, lookup, device) for x in obj)
    if isinstance(obj, dict):
        return {k: materialize(v, lookup, device) for k, v in obj.items()}
    return obj
