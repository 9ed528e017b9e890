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
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from ..ir.graph import Graph
from .torch_import import (
    DATA_DEPENDENT,
    MAX_NODES,
    ImportErrorMAGIS,
    Progress,
    capture,
    describe_capture_error,
    held_torch_logs,
)

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
                     sgd_lr: float | None = None, progress: Progress | None = None,
                     adam_lr: float | None = None, fix_random_reads: bool = False,
                     max_nodes: int | None = MAX_NODES) -> Graph:
    """:func:`~core.frontend.torch_import.capture` of ``w``'s module on its inputs (fake tensors
    when ``w`` was built under ``FakeTensorMode``); the graph is named ``name``, else ``w.name``,
    else "model"; ``progress(message)`` hears each stage of the capture; ``fix_random_reads``:
    random draws the model branches on are fixed (layer drop off, recorded in the graph's meta);
    ``max_nodes``: the bound on the graph's size (``GraphTooLarge`` while tracing; None: none)."""
    module, inputs = getattr(w, "module", None), getattr(w, "inputs", None)
    if not isinstance(module, nn.Module):
        raise ImportErrorMAGIS(f"the workload's module is {type(module).__name__}, not a torch.nn.Module")
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ImportErrorMAGIS("the workload's inputs must be a tuple of example tensors")
    loss_fn, forward_fn = workload_fns(w)
    return capture(w.module, tuple(w.inputs), loss_fn, forward_fn, training=training,
                   name=name or getattr(w, "name", None) or "model", sgd_lr=sgd_lr, progress=progress,
                   adam_lr=adam_lr, fix_random_reads=fix_random_reads, max_nodes=max_nodes)


def build_fake(make: Callable[[], W]) -> W:
    """``make()`` under ``FakeTensorMode``: every tensor it creates has a shape and a dtype but no
    storage, so a model of any size is built without allocating its weights.  Weight initialisation
    is skipped on fake tensors (:func:`no_random_init_on_fake_tensors`), dtype conversions of the
    built modules (``.to(dtype)``, ``.half()``, ``.bfloat16()``) convert the fake parameters
    (:func:`fake_module_conversion`), schedules computed from Python numbers alone are real
    (:func:`constant_schedules`), and torch's log records go to the error's ``detail``.  A
    build that still needs a tensor's value raises :class:`ImportErrorMAGIS` naming the line."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    logs: list[str] = []
    try:
        with held_torch_logs(logs), FakeTensorMode(allow_non_fake_inputs=True), \
                no_random_init_on_fake_tensors(), fake_module_conversion(), constant_schedules():
            return make()
    except DATA_DEPENDENT as e:
        msg = describe_capture_error(e).replace("could not capture the model",
                                                "could not build the model on fake tensors", 1)
        err = ImportErrorMAGIS(msg)
        err.detail = "\n".join(logs)
        raise err from e


SCHEDULE_FACTORIES = (torch.linspace, torch.logspace, torch.arange)
SCHEDULE_MAX = 1 << 16  # elements: a schedule of per-layer rates, never a weight


@contextlib.contextmanager
def constant_schedules() -> Iterator[None]:
    """Inside ``FakeTensorMode``, ``torch.linspace`` / ``logspace`` / ``arange`` of Python numbers
    (with at most ``SCHEDULE_MAX`` elements), and every op whose tensor inputs are all such
    tensors, run for real.  Models compute per-layer schedules that way in ``__init__`` and read
    them back as Python numbers -- ConvNeXt's and Swin's stochastic-depth rates are
    ``[x.tolist() for x in torch.linspace(0, rate, sum(depths)).split(depths)]`` -- which a fake
    tensor cannot give.  The values depend on no weight and no input, so computing them is what
    eager PyTorch does; nothing else changes (weights and everything computed from them stay
    fake, and so does any tensor outside the factories' results and what derives from them)."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    if not isinstance(torch.empty(()), FakeTensor):
        yield
        return
    real: dict[int, torch.Tensor] = {}  # id -> tensor, held until the build ends

    class Schedules(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            ours = bool(tensors) and all(real.get(id(t)) is t for t in tensors)
            if ours or (func in SCHEDULE_FACTORIES and not tensors):
                with unset_fake_temporarily():
                    out = func(*args, **kwargs)
                made = [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]
                if ours or all(x.numel() <= SCHEDULE_MAX for x in made):
                    real.update((id(x), x) for x in made)
                    return out
            return func(*args, **kwargs)

    with Schedules():
        yield


def _init_functions() -> dict[str, Callable[..., Any]]:
    """The public initialisers of ``torch.nn.init`` (in place: ``uniform_``, ``trunc_normal_``,
    ``kaiming_normal_`` ...)."""
    from torch.nn import init

    return {n: f for n, f in vars(init).items()
            if n.endswith("_") and not n.startswith("_") and callable(f)}


@contextlib.contextmanager
def no_random_init_on_fake_tensors() -> Iterator[None]:
    """Inside ``FakeTensorMode``, weight initialisation returns the (fake) tensor untouched: every
    ``torch.nn.init`` initialiser -- wherever the model's code took it from (``nn.init.x``,
    ``from torch.nn.init import x``) -- and ``transformers``' own initialisation (when the library
    is loaded; weight tying still runs, so the model has the structure it has for real).

    Fake tensors have no values, so initialising them is pointless, and some initialisers cannot
    run on them at all: ``torch.nn.init.trunc_normal_`` (ViT's position embeddings) rejects samples
    in a loop on ``mask.any()``, a value fake tensors do not have.  What eager PyTorch computes is
    unchanged: outside ``FakeTensorMode`` (or on a real tensor) every initialiser runs as written."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not isinstance(torch.empty(()), FakeTensor):
        yield
        return
    originals = _init_functions()

    def skipping(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            return tensor if isinstance(tensor, FakeTensor) else f(tensor, *args, **kwargs)
        return init

    wrapped = {n: skipping(f) for n, f in originals.items()}
    by_id = {id(f): n for n, f in originals.items()}
    patched: list[tuple[Any, str, Any]] = []
    for mod in list(sys.modules.values()):  # the module itself, and names imported from it
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for attr, v in list(d.items()):
            n = by_id.get(id(v))
            if n is not None and v is originals[n]:
                patched.append((mod, attr, v))
                setattr(mod, attr, wrapped[n])
    transformers = sys.modules.get("transformers")  # never imported here: only if the model uses it
    base = getattr(transformers, "PreTrainedModel", None) if transformers is not None else None
    original_hf = base.initialize_weights if base is not None else None
    if base is not None:
        base.initialize_weights = lambda self: None
    try:
        yield
    finally:
        for mod, attr, v in patched:
            setattr(mod, attr, v)
        if base is not None:
            base.initialize_weights = original_hf


@contextlib.contextmanager
def fake_module_conversion() -> Iterator[None]:
    """``module.to(dtype)`` / ``.half()`` / ``.bfloat16()`` (every ``nn.Module._apply``) on fake
    parameters: torch swaps each converted tensor into the old parameter object
    (``torch.utils.swap_tensors``), which fake tensors refuse ("_apply(): Couldn't swap
    Embedding.weight").  A module holding fake tensors is converted by putting new ``Parameter``
    objects in place instead -- one per old object, so tied weights stay tied; modules of real
    tensors convert as torch does."""
    from torch._subclasses.fake_tensor import FakeTensor

    original = nn.Module._apply

    def _apply(self: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        tensors = [*self.parameters(recurse=recurse), *self.buffers(recurse=recurse)]
        if not any(isinstance(t, FakeTensor) for t in tensors):
            return original(self, fn, recurse)
        memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(old) -> (old, new): old kept alive

        def convert(old: torch.Tensor) -> torch.Tensor:
            if id(old) not in memo:
                with torch.no_grad():
                    new = fn(old)
                if isinstance(old, nn.Parameter):
                    new = nn.Parameter(new, requires_grad=old.requires_grad)
                memo[id(old)] = (old, new)
            return memo[id(old)][1]

        for m in self.modules() if recurse else [self]:
            for k, p in m._parameters.items():
                if p is not None:
                    m._parameters[k] = convert(p)
            for k, b in m._buffers.items():
                if b is not None:
                    m._buffers[k] = convert(b)
        return self

    nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module._apply = original  # type: ignore[method-assign]


__all__ = ["Workload", "build_fake", "capture_workload", "fake_module_conversion", "no_random_init_on_fake_tensors",
           "workload_fns"]
