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

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from ..ir.graph import Graph
from .torch_import import DATA_DEPENDENT, ImportErrorMAGIS, Progress, capture, describe_capture_error

W = TypeVar("W")


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
                     sgd_lr: float | None = None, progress: Progress | None = None) -> Graph:
    """:func:`~core.frontend.torch_import.capture` of ``w``'s module on its inputs (fake tensors
    when ``w`` was built under ``FakeTensorMode``); the graph is named ``name``, else ``w.name``,
    else "model"; ``progress(message)`` hears each stage of the capture."""
    module, inputs = getattr(w, "module", None), getattr(w, "inputs", None)
    if not isinstance(module, nn.Module):
        raise ImportErrorMAGIS(f"the workload's module is {type(module).__name__}, not a torch.nn.Module")
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ImportErrorMAGIS("the workload's inputs must be a tuple of example tensors")
    loss_fn, forward_fn = workload_fns(w)
    return capture(w.module, tuple(w.inputs), loss_fn, forward_fn, training=training,
                   name=name or getattr(w, "name", None) or "model", sgd_lr=sgd_lr, progress=progress)


def build_fake(make: Callable[[], W]) -> W:
    """``make()`` under ``FakeTensorMode``: every tensor it creates has a shape and a dtype but no
    storage, so a model of any size is built without allocating its weights.  Random weight
    initialisation is skipped where it would read values (:func:`no_random_init_on_fake_tensors`).
    A build that still needs a tensor's value raises :class:`ImportErrorMAGIS` naming the line."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode(allow_non_fake_inputs=True), no_random_init_on_fake_tensors():
            return make()
    except DATA_DEPENDENT as e:
        msg = describe_capture_error(e).replace("could not capture the model",
                                                "could not build the model on fake tensors", 1)
        raise ImportErrorMAGIS(msg) from e


@contextlib.contextmanager
def no_random_init_on_fake_tensors() -> Iterator[None]:
    """Inside ``FakeTensorMode``, skip ``transformers``' random weight initialisation (when the
    library is loaded); weight tying still runs, so the model has the structure it has for real.

    Fake tensors have no values, so initialising them is pointless, and some initialisers cannot
    run on them at all: ``torch.nn.init.trunc_normal_`` (ViT's position embeddings) rejects samples
    in a loop on ``mask.any()``, a value fake tensors do not have."""
    from torch._subclasses.fake_tensor import FakeTensor

    transformers = sys.modules.get("transformers")  # never imported here: only if the model uses it
    base = getattr(transformers, "PreTrainedModel", None) if transformers is not None else None
    if base is None or not isinstance(torch.empty(()), FakeTensor):
        yield
        return
    original = base.initialize_weights
    base.initialize_weights = lambda self: None
    try:
        yield
    finally:
        base.initialize_weights = original


__all__ = ["Workload", "build_fake", "capture_workload", "no_random_init_on_fake_tensors", "workload_fns"]
