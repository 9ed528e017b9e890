"""Fake-tensor kernels that capture needs and torch does not give, installed only while a capture
traces (:func:`capture_kernels`): importing the frontend leaves torch's tables as they are.

Grouped matmul.  ``aten._grouped_mm`` (transformers' MoE kernel) has a meta kernel for bfloat16
only; the CPU kernel also takes float32, so a float32 MoE gets its shape here.

CTC loss.  ``aten._ctc_loss`` is tagged ``dynamic_output_shape``, so ``FakeTensorMode`` refuses it
outright ("returns a shape that depends on tensor values"), and its backward has no meta kernel.
The CPU and CUDA kernels return

* ``neg_log_likelihood`` -- ``[batch]``, the dtype of ``log_probs``;
* ``log_alpha`` -- ``[batch, T, 2 * max(target_lengths) + 1]`` (the forward variables of every
  extended target: each label with a blank either side), contiguous;

and the backward returns the gradient of ``log_probs`` -- its shape, contiguous.  Only the last
dim of ``log_alpha`` depends on a value, the longest target.  With the lengths given as Python ints
(``aten._ctc_loss.default``) it is known exactly.  With tensor lengths (``aten._ctc_loss.Tensor``,
e.g. ``target_lengths = (labels >= 0).sum(-1)``) it is known when the lengths are constants of the
trace; otherwise, for padded 2-D targets ``[batch, S]``, it is taken to be ``S``: the longest
target of a batch padded to its longest label (as ``transformers``' CTC collators pad it) -- for a
batch padded wider, the graph's ``log_alpha`` is that much larger than the kernel's (an
over-estimate of memory, never an under-estimate; the values are unaffected).  Concatenated 1-D
targets with tensor lengths have no such bound and are still refused.

Where a value-dependent shape was asked for.  An op whose output shape depends on values
(``nonzero`` behind boolean-mask indexing, ``masked_select``) fails in the backward pass as well as
in the forward: ``x[mask] = v`` traces, its backward's ``nonzero`` does not.  A backward op runs
from the autograd engine, so the error's traceback holds no line of the model.  Each such op notes
the sequence number of the autograd node running it (``torch.fx.traceback``'s ``grad_fn_seq_nr``,
which AOTAutograd sets for every backward node) in :func:`last_dynamic_op` before torch's own rule
raises; the capture maps it back to the forward call that made that node.

Why scoped: the kernels go into ``torch._subclasses.fake_impls.op_implementations_checks``, a
process-wide list every ``FakeTensorMode`` consults.  Installing them at import would change what
unrelated code (a user's own fake-tensor tracing, torch.export elsewhere in the process) sees, so
they are inserted when a capture starts and removed when the last concurrent capture ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch


def _values(t: Any) -> list[int] | None:
    """The integer values of ``t`` when the trace knows them: a Python list, or a tensor that is a
    constant of the trace (a fake tensor made from Python data); None when only its shape is known."""
    if isinstance(t, (list, tuple)):
        return [int(v) for v in t]
    const = getattr(t, "constant", None)
    if isinstance(const, torch.Tensor):
        return [int(v) for v in const.reshape(-1).tolist()]
    return None


def ctc_log_alpha_width(func: Any, log_probs: torch.Tensor, targets: torch.Tensor,
                        input_lengths: Any, target_lengths: Any) -> int:
    """``2 * max(target_lengths) + 1``, the last dim of ``log_alpha`` (see the module docstring),
    after the checks the real kernel makes on the shapes and the known lengths."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    if log_probs.dim() != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.dim()}-dimensional tensor "
                           f"for argument #1 'log_probs' (while checking arguments for ctc_loss_allocate_outputs)")
    steps, batch = log_probs.shape[0], log_probs.shape[1]
    lengths = _values(target_lengths)
    for name, vals in (("input_lengths", _values(input_lengths)), ("target_lengths", lengths)):
        if vals is not None and len(vals) != batch:
            raise RuntimeError(f"{name} must be of size batch_size")
    known_in = _values(input_lengths)
    if known_in is not None and any(v > steps for v in known_in):
        raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got value {max(known_in)}")
    if targets.dim() == 2 and targets.shape[0] != batch:
        raise RuntimeError(f"Expected targets to have size {batch} at dim 0, but got {targets.shape[0]}")
    if lengths is not None:
        longest = max(lengths, default=0)
        if targets.dim() == 2 and targets.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension 1, "
                               f"but got size {targets.shape[1]} for argument #2 'targets'")
    elif targets.dim() == 2:
        longest = int(targets.shape[1])
    else:  # concatenated targets, lengths unknown: the longest target is bounded only by their sum
        raise DynamicOutputShapeException(func)
    return 2 * longest + 1


def _fake_ctc_loss(fake_mode: Any, func: Any, log_probs: torch.Tensor, targets: torch.Tensor,
                   input_lengths: Any, target_lengths: Any, blank: int = 0,
                   zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten._ctc_loss`` (both overloads): ``(neg_log_likelihood [batch], log_alpha [batch, T,
    2 max(target_lengths) + 1])``."""
    width = ctc_log_alpha_width(func, log_probs, targets, input_lengths, target_lengths)
    steps, batch = log_probs.shape[0], log_probs.shape[1]
    with fake_mode:
        nll = torch.empty((batch,), dtype=log_probs.dtype, device=log_probs.device)
        log_alpha = torch.empty((batch, steps, width), dtype=log_probs.dtype, device=log_probs.device)
    return nll, log_alpha


def _fake_ctc_loss_backward(fake_mode: Any, func: Any, grad: torch.Tensor, log_probs: torch.Tensor,
                            *args: Any, **kwargs: Any) -> torch.Tensor:
    """``aten._ctc_loss_backward`` (both overloads): the gradient of ``log_probs``, contiguous."""
    with fake_mode:
        return torch.empty(log_probs.shape, dtype=log_probs.dtype, device=log_probs.device)


_noted = threading.local()


def last_dynamic_op() -> dict[str, Any] | None:
    """The last op of this thread that asked for a value-dependent shape during a capture:
    ``{"op": name, "seq_nr": the autograd node running it (None: not in a backward node)}``."""
    return getattr(_noted, "op", None)


def clear_dynamic_op() -> None:
    _noted.op = None


def _note_dynamic_op(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Notes ``func`` and the backward node running it (see the module docstring), then lets
    torch's own rule handle it."""
    from torch.fx import traceback as fx_traceback

    seq = fx_traceback.current_meta.get("grad_fn_seq_nr") if fx_traceback.current_meta.get("in_grad_fn") else None
    _noted.op = {"op": str(func), "seq_nr": seq[-1] if seq else None}
    return NotImplemented


def _fake_grouped_mm(fake_mode: Any, func: Any, mat_a: torch.Tensor, mat_b: torch.Tensor,
                     offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None) -> Any:
    """Fake implementation of ``aten._grouped_mm`` in float32, which torch's meta kernel rejects
    (it accepts only bfloat16; the real CPU kernel also takes float32): the output's shape from
    the operands' (2-D x 3-D with ``offs``: [M, N]; 3-D x 3-D: [G, M, N]; 2-D x 2-D: [G, M, N];
    3-D x 2-D: [M, N]), its dtype ``out_dtype`` or the operands'."""
    if not (mat_a.dtype == mat_b.dtype == torch.float32):
        return NotImplemented  # torch's own meta kernel (bfloat16; it rejects the rest)
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a2:
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    with fake_mode:
        return torch.empty(size, dtype=out_dtype or mat_a.dtype, device=mat_a.device)


def _entries() -> list[tuple[Any, Any]]:
    aten = torch.ops.aten
    fwd = {aten._ctc_loss.default, aten._ctc_loss.Tensor}
    bwd = {aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor}
    out = [(lambda func: func in fwd, _fake_ctc_loss), (lambda func: func in bwd, _fake_ctc_loss_backward),
           (lambda func: torch.Tag.dynamic_output_shape in func.tags, _note_dynamic_op)]
    grouped = getattr(aten, "_grouped_mm", None)  # (torch >= 2.8)
    if grouped is not None:
        out.insert(0, (lambda func: func is grouped.default, _fake_grouped_mm))
    return out


_ENTRIES = _entries()
_lock = threading.Lock()
_depth = 0


@contextlib.contextmanager
def capture_kernels() -> Iterator[None]:
    """The kernels of this module, consulted by every ``FakeTensorMode`` before torch's own rules
    while the ``with`` block runs (nested and concurrent captures share one installation)."""
    from torch._subclasses import fake_impls

    global _depth
    with _lock:
        if _depth == 0:
            fake_impls.op_implementations_checks[:0] = _ENTRIES
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for entry in _ENTRIES:
                    fake_impls.op_implementations_checks.remove(entry)


def installed() -> bool:
    """Whether the kernels are installed now (inside a capture)."""
    from torch._subclasses import fake_impls

    return all(e in fake_impls.op_implementations_checks for e in _ENTRIES)


__all__ = ["capture_kernels", "clear_dynamic_op", "ctc_log_alpha_width", "installed", "last_dynamic_op"]
