"""Runtime support of exported scripts: copied verbatim into every script, so it needs only torch.

Everything below the ``RUNTIME BEGIN`` marker is pasted into the generated file after its header
(``core.codegen.emit.runtime_source``); the module itself is importable so the pieces are tested
directly.  It provides

* :class:`LiveBytesTracker` -- the peak of live tensor-storage bytes of a CPU run.  It implements the
  memory model of ``core.analysis.lifetimes`` (bytes of storages, a view adds nothing, a storage is
  freed when its last alias dies) by observation: every storage an aten call returns is held through
  a weak reference to its ``StorageImpl``, and after each call the live bytes are summed.  Storages
  only come into being inside aten calls, so sampling right after each call (while its inputs and
  outputs are still referenced) sees every maximum; memory an op uses internally and frees before
  returning is not counted -- nor is it by the simulator.
* :class:`Swapper` -- the Store/Load ops of a swap (MAGIS section 5.2: "Swap ... Store then Load",
  copies on a second stream overlapping compute, section 3).
* input construction (random, from a ``.pt`` file), device placement, measurement and ``main``.
"""

from __future__ import annotations

# ==== RUNTIME BEGIN (everything below is copied into exported scripts) ====
import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
TORCH_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

RunFn = Callable[..., dict]
_ACTIVE_TRACKERS: list[LiveBytesTracker] = []


class LiveBytesTracker(TorchDispatchMode):
    """Peak bytes of live tensor storages on ``device`` while the mode is active.

    ``roots`` (the caller's inputs and weights) are registered on entry: the simulator counts them
    as resident for the whole step.  After every aten call the storages of its tensor outputs are
    registered (keyed by ``StorageImpl``, so views and repeated outputs count once) and storages
    whose last reference died since the previous call are dropped.  ``step_bytes[k]`` is the live
    total right after the k-th aten call; ``peak_bytes`` is the maximum (or the resident bytes if
    nothing ran).  Observation only: outputs are returned unchanged.
    """

    def __init__(self, device: str | torch.device = "cpu", roots: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.device_type = torch.device(device).type
        self._roots = [t for t in roots if isinstance(t, torch.Tensor)]
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self._host_depth = 0
        self._kernel_depth = 0  # inside one kernel's stand-in (``kernel_internals``): not sampled
        self.live_bytes = 0
        self.resident_bytes = 0
        self.peak_bytes = 0
        self.peak_call = -1
        self.step_bytes: list[int] = []
        self.calls: list[str] = []

    # -- registration ----------------------------------------------------------------------------
    def _add(self, t: torch.Tensor) -> None:
        if t.device.type != self.device_type or t.layout != torch.strided:
            return
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without a storage
            return
        key = s._cdata
        old = self._live.get(key)
        if old is not None:
            if not old[0].expired():
                return
            self.live_bytes -= old[1]
        nbytes = int(s.nbytes())
        self._live[key] = (StorageWeakRef(s), nbytes)
        self.live_bytes += nbytes

    def _sweep(self) -> None:
        dead = [k for k, (ref, _) in self._live.items() if ref.expired()]
        for k in dead:
            self.live_bytes -= self._live.pop(k)[1]

    def __enter__(self) -> LiveBytesTracker:
        for t in self._roots:
            self._add(t)
        self.resident_bytes = self.peak_bytes = self.live_bytes
        _ACTIVE_TRACKERS.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE_TRACKERS.remove(self)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self._kernel_depth:
            self.observe(out, str(func))
        return out

    def observe(self, out: Any, name: str) -> None:
        """Register the tensor outputs ``out`` of one call ``name`` and sample the live bytes."""
        self._sweep()
        if not self._host_depth:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self._add(t)
        self.step_bytes.append(self.live_bytes)
        self.calls.append(name)
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_call = len(self.step_bytes) - 1


@contextmanager
def host_allocation() -> Iterator[None]:
    """Tensors created inside live in (swap) host memory: the active trackers do not count them
    (the simulator counts only device memory; on a CPU run "host" and "device" are one RAM)."""
    for t in _ACTIVE_TRACKERS:
        t._host_depth += 1
    try:
        yield
    finally:
        for t in _ACTIVE_TRACKERS:
            t._host_depth -= 1


class Swapper:
    """Store (device -> host) and Load (host -> device) of swapped tensors, MAGIS section 5.2.

    CUDA (written for real, but not executed by the project's tests -- the CI machine has no GPU):
    copies run on one side stream so they overlap compute on the current (compute) stream.
      * ``store(x)``: an event recorded on the compute stream after ``x`` was produced is waited for
        by the copy stream, which copies ``x`` into a fresh pinned host buffer (non-blocking).
        ``x.record_stream(copy)`` keeps the caching allocator from handing ``x``'s memory to a
        compute-stream allocation before the copy has read it, so the script may ``del x`` at once.
      * ``load(h)``: allocates the device tensor on the copy stream (from that stream's pool, so no
        pending compute work can touch it), copies ``h`` into it and records an event.  Store and
        Load of one tensor share the copy stream, so the Load cannot overtake its Store.
        ``y.record_stream(compute)`` makes a later free of ``y`` wait for the compute kernels that
        read it.
      * ``wait(y)``: the compute stream waits for ``y``'s Load event; the script calls it right
        before the first op that reads ``y`` (MAGIS: "compute waits only if the copy is late").
    CPU fallback: ``store`` is ``x.to("cpu", copy=True)`` made under :func:`host_allocation` (host
    memory, not counted by the tracker), ``load`` a copy back to the device, ``wait`` a no-op.
    """

    def __init__(self, device: str | torch.device, streams: int = 1) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._pending: dict[int, Any] = {}
        self._stored: dict[int, Any] = {}  # id(host) -> event recorded after its store
        if self.cuda:
            self.compute = torch.cuda.current_stream(self.device)
            self.copy = torch.cuda.Stream(self.device)
            # SwapAdvisor's three streams: swap-outs and swap-ins on two side streams of their own
            self.copy_in = torch.cuda.Stream(self.device) if streams > 1 else self.copy

    def store(self, x: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            with host_allocation():
                return x.to("cpu", copy=True)
        self.wait(x)
        host = torch.empty(x.size(), dtype=x.dtype, pin_memory=True)
        produced = torch.cuda.Event()
        produced.record(self.compute)
        with torch.cuda.stream(self.copy):
            self.copy.wait_event(produced)
            host.copy_(x, non_blocking=True)
            stored = torch.cuda.Event()
            stored.record(self.copy)
        x.record_stream(self.copy)
        self._stored[id(host)] = stored
        return host

    def load(self, host: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            return host.to(self.device, copy=True)
        stored = self._stored.get(id(host))
        with torch.cuda.stream(self.copy_in):
            if stored is not None and self.copy_in is not self.copy:
                self.copy_in.wait_event(stored)  # the host copy is complete
            y = torch.empty(host.size(), dtype=host.dtype, device=self.device)
            y.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.copy_in)
        y.record_stream(self.compute)
        self._pending[id(y)] = done
        return y

    def wait_copy(self, host: torch.Tensor) -> None:
        """Block until the store that made ``host`` has finished, so the device memory of the stored
        tensor is free for the next allocation (SwapAdvisor's edge swap-out -> op); on the CPU the
        copy already ran in line."""
        stored = self._stored.get(id(host))
        if stored is not None:
            stored.synchronize()

    def wait(self, y: torch.Tensor) -> torch.Tensor:
        done = self._pending.pop(id(y), None)
        if done is not None:
            self.compute.wait_event(done)
        return y

    def finish(self) -> None:
        """Make the compute stream wait for every copy still in flight (end of the step)."""
        if self.cuda:
            self.compute.wait_stream(self.copy)
            self.compute.wait_stream(self.copy_in)
            self._pending.clear()
            self._stored.clear()


# ---- device-neutral kernels ------------------------------------------------------------------------
def empty_in_layout(shape: list[int], like: torch.Tensor, dtype: torch.dtype,
                    device: str | torch.device) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` whose dims lie in memory in the order of ``like``'s
    (outermost = largest stride): what a kernel whose output follows its input's layout returns,
    so views the graph takes of it (``transpose`` then ``view``) work on the assembled tensor."""
    if like.dim() != len(shape):
        return torch.empty(shape, dtype=dtype, device=device)
    order = sorted(range(len(shape)), key=lambda d: (-like.stride(d), d))
    t = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
    return t.permute([order.index(d) for d in range(len(shape))])


def empty_ordered(shape: list[int], order: list[int], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` whose dims lie in memory in ``order`` (outermost first)."""
    t = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
    return t.permute([order.index(d) for d in range(len(shape))])


def _attention_scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool, attn_mask: torch.Tensor | None,
                      scale: float | None) -> torch.Tensor:
    ct = _compute_dtype(q)
    s = torch.matmul(q.to(ct), k.to(ct).transpose(-2, -1)) * (scale if scale is not None else q.size(-1) ** -0.5)
    if is_causal:  # top-left aligned, as torch's kernels
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(ct)
    return s


def _compute_dtype(q: torch.Tensor) -> torch.dtype:
    """float32 for half types (the dtype of the kernels' log-sum-exp), else the query's."""
    return torch.promote_types(q.dtype, torch.float32)


def _no_dropout(dropout_p: float, q: torch.Tensor) -> None:
    if dropout_p > 0:
        raise NotImplementedError(f"attention dropout (p={dropout_p}) outside the CPU kernel: the graph "
                                  f"records the CPU kernel's random stream, which {q.device.type} cannot replay")


# ---- which CUDA attention kernel ---------------------------------------------------------------------
FLASH_DTYPES = ("float16", "bfloat16")
EFFICIENT_DTYPES = ("float16", "bfloat16", "float32")
FLASH_MAX_HEAD_DIM = 256


def sdpa_cuda_kernel(dtype: str | torch.dtype, q_shape: Iterable[int], k_shape: Iterable[int],
                     v_shape: Iterable[int], has_mask: bool, is_causal: bool) -> tuple[str, str]:
    """The kernel torch's SDPA dispatcher picks on an sm80+ GPU for one attention call, and why:
    ``("flash" | "efficient" | "math", reason)``.  The rules (``sdp_utils.cpp``, default priority
    flash > efficient > math; cuDNN's priority on some Hopper/Blackwell builds is not modelled):

    * flash: float16/bfloat16; no attention mask; query, key and value head dims equal and at most
      256 (and a multiple of 8 here: torch pads other head dims with copies of q / k / v that this
      model does not count, so such calls are given to the next kernel); ``is_causal`` only with equal
      query and key lengths; grouped-query heads when the query heads are a multiple of the key heads.
    * efficient (memory-efficient attention): float16/bfloat16/float32, with or without a mask; query
      and key head dims equal, both head dims a multiple of 4 (float32) or 8 (half types); the same
      number of query, key and value heads (grouped-query attention runs on flash and math only).
    * math: everything else (here: half-type calls with a mask or an unsupported head dim that
      efficient refuses too, float32 grouped-query calls, odd head dims, empty sequences).
    """
    dt = str(dtype).removeprefix("torch.")
    q, k, v = list(q_shape), list(k_shape), list(v_shape)
    if not (len(q) == len(k) == len(v) == 4):
        return "math", "inputs are not 4-D"
    _b, hq, lq, d = q
    _, hk, lk, dk = k
    hv, dv = v[1], v[3]
    if lq == 0 or lk == 0:
        return "math", "an empty sequence"
    if dt not in FLASH_DTYPES:
        no_flash = f"{dt} (flash takes float16/bfloat16 only)"
    elif has_mask:
        no_flash = "an attention mask"
    elif not d == dk == dv or d > FLASH_MAX_HEAD_DIM:
        no_flash = f"head dims {d}/{dk}/{dv} (flash: equal, at most {FLASH_MAX_HEAD_DIM})"
    elif d % 8:
        no_flash = f"head dim {d} not a multiple of 8"
    elif is_causal and lq != lk:
        no_flash = f"causal with query length {lq} != key length {lk}"
    elif hk != hv or hq % hk:
        no_flash = f"query heads {hq} not a multiple of key heads {hk}"
    else:
        return "flash", f"{dt}, no mask, head dim {d}"
    if dt not in EFFICIENT_DTYPES:
        return "math", f"{dt} (no fused kernel takes it)"
    if hq != hk or hq != hv:
        return "math", f"grouped-query heads {hq}/{hk} and {no_flash}"
    align = 4 if dt == "float32" else 8
    if d != dk or d % align or dv % align:
        return "math", f"head dims {d}/{dv} not a multiple of {align} and {no_flash}"
    return "efficient", no_flash


def lse_padded_length(lq: int) -> int:
    """Length of memory-efficient attention's log-sum-exp along the query axis (a multiple of 32)."""
    return -(-lq // 32) * 32


@contextmanager
def kernel_internals() -> Iterator[None]:
    """The aten calls inside make up one kernel (a CPU stand-in of a CUDA kernel): active trackers
    neither register nor sample them; :func:`kernel_outputs` then records the kernel as one call."""
    trackers = list(_ACTIVE_TRACKERS)
    for t in trackers:
        t._kernel_depth += 1
    try:
        yield
    finally:
        for t in trackers:
            t._kernel_depth -= 1


def kernel_outputs(outs: tuple, name: str) -> tuple:
    """Register ``outs`` with the active trackers as the outputs of one call ``name``."""
    for t in _ACTIVE_TRACKERS:
        t.observe(outs, name)
    return outs


# ---- the CPU kernel of a CPU capture, on any device ----------------------------------------------------
def _efficient_bias(mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """The attention mask as memory-efficient attention takes it (torch's ``preprocess_mask``): additive
    in the query's dtype, its last dim padded for 8-element alignment, expanded to [B, H, Lq, Lk]."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    if mask.stride(-1) != 1 or any(mask.stride(i) % 8 for i in range(mask.dim() - 1)):
        n = mask.size(-1)
        mask = torch.nn.functional.pad(mask, (0, 8 - n % 8))[..., :n]
    return mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))


def _pad_lse(lse: torch.Tensor) -> torch.Tensor:
    """``lse`` [B, H, L] as memory-efficient attention's backward takes it: [B, H, L padded to 32]
    (the padded buffer itself when ``lse`` is a view of its first L entries)."""
    n = lse_padded_length(lse.size(-1))
    if n == lse.size(-1):
        return lse
    s = lse.stride()
    if s[-1] == 1 and s[-2] >= n and lse.untyped_storage().nbytes() >= (lse.storage_offset() + (
            lse.size(0) - 1) * s[0] + (lse.size(1) - 1) * s[1] + n) * lse.element_size():
        return lse.as_strided((lse.size(0), lse.size(1), n), s)
    return torch.nn.functional.pad(lse, (0, n - lse.size(-1)))


def _in_layout_of(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` in the memory layout of ``like`` (a copy only when the layouts differ)."""
    order = sorted(range(t.dim()), key=lambda d: (-like.stride(d), d))
    if sorted(range(t.dim()), key=lambda d: (-t.stride(d), d)) == order:
        return t
    out = empty_in_layout(list(t.shape), like, t.dtype, t.device)
    out.copy_(t)
    return out


def attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                      is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                      scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused attention returning ``(output, logsumexp)`` on any device: the graph records
    ``aten._scaled_dot_product_flash_attention_for_cpu`` (capture runs on the CPU); on the CPU that
    kernel runs (one call, the values eager PyTorch computes); on CUDA the fused kernel torch would
    pick (:func:`sdpa_cuda_kernel`: flash, or memory-efficient attention with its log-sum-exp cut
    to the query length), the output in the layout of ``query``; the math path only where no fused
    kernel applies, and on other devices."""
    if query.device.type == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal,
                                                                attn_mask=attn_mask, scale=scale)
    if query.device.type == "cuda":
        return fused_attention_forward(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return attention_forward_math(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)


def fused_attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                            is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention_forward` through the CUDA kernel :func:`sdpa_cuda_kernel` picks (whatever the
    tensors' device; :func:`attention_forward_math` where it picks math)."""
    _no_dropout(dropout_p, query)
    kernel, _why = sdpa_cuda_kernel(query.dtype, query.shape, key.shape, value.shape, attn_mask is not None,
                                    is_causal)
    if kernel == "flash":
        r = aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, scale=scale)
        return _in_layout_of(r[0], query), r[1]
    if kernel == "efficient":
        out, lse, _seed, _offset = aten._scaled_dot_product_efficient_attention(
            query, key, value, _efficient_bias(attn_mask, query, key), True, 0.0, is_causal, scale=scale)
        return _in_layout_of(out, query), lse[..., :query.size(2)]
    return attention_forward_math(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)


def attention_forward_math(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                           is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                           scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention_forward` where no fused kernel applies (a call :func:`sdpa_cuda_kernel` gives
    to math, or a device other than the CPU and CUDA): plain aten math, the whole score matrix in
    float32 -- memory the graph's fused node does not count."""
    _no_dropout(dropout_p, query)
    s = _attention_scores(query, key, is_causal, attn_mask, scale)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), value.to(s.dtype))
    out = empty_in_layout(list(o.shape), query, query.dtype, query.device)
    out.copy_(o)
    return out, lse


def attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       out: torch.Tensor, logsumexp: torch.Tensor, dropout_p: float = 0.0,
                       is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                       scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`attention_forward` (query, key, value) from its output and
    log-sum-exp, on any device: the CPU kernel's backward on the CPU, the backward of the fused
    kernel :func:`attention_forward` ran on CUDA (memory-efficient attention's takes the
    log-sum-exp padded back to a multiple of 32), the math path elsewhere."""
    if query.device.type == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    if query.device.type == "cuda":
        return fused_attention_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                                        attn_mask=attn_mask, scale=scale)
    return attention_backward_math(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                                   attn_mask=attn_mask, scale=scale)


def fused_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             out: torch.Tensor, logsumexp: torch.Tensor, dropout_p: float = 0.0,
                             is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                             scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of :func:`fused_attention_forward`'s kernel (whatever the tensors' device)."""
    _no_dropout(dropout_p, query)
    kernel, _why = sdpa_cuda_kernel(query.dtype, query.shape, key.shape, value.shape, attn_mask is not None,
                                    is_causal)
    if kernel == "flash":
        rng = torch.zeros(2, dtype=torch.uint64, device=query.device)
        unused = torch.zeros((), dtype=torch.uint64, device=query.device)
        return aten._scaled_dot_product_flash_attention_backward(
            grad_out, query, key, value, out, logsumexp, None, None, query.size(2), key.size(2), 0.0,
            is_causal, rng, unused, scale=scale)
    if kernel == "efficient":
        seed = torch.zeros((), dtype=torch.int64, device=query.device)
        dq, dk, dv, _db = aten._scaled_dot_product_efficient_attention_backward(
            grad_out, query, key, value, _efficient_bias(attn_mask, query, key), out, _pad_lse(logsumexp),
            seed, seed, 0.0, [True, True, True, False], is_causal, scale=scale)
        return dq, dk, dv
    return attention_backward_math(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
                                   attn_mask=attn_mask, scale=scale)


def attention_backward_math(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            out: torch.Tensor, logsumexp: torch.Tensor, dropout_p: float = 0.0,
                            is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`attention_backward` where no fused kernel applies: plain aten math (the score matrix
    and its gradient in float32, uncounted by the graph's fused node)."""
    _no_dropout(dropout_p, query)
    sc = scale if scale is not None else query.size(-1) ** -0.5
    p = torch.exp(_attention_scores(query, key, is_causal, attn_mask, scale) - logsumexp.unsqueeze(-1))
    ct = p.dtype
    go = grad_out.to(ct)
    dv = torch.matmul(p.transpose(-2, -1), go)
    dp = torch.matmul(go, value.to(ct).transpose(-2, -1))
    ds = p * (dp - (go * out.to(ct)).sum(-1, keepdim=True))
    dq = torch.matmul(ds, key.to(ct)) * sc
    dk = torch.matmul(ds.transpose(-2, -1), query.to(ct)) * sc
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


# ---- CUDA attention kernels of a retargeted graph, on any device ---------------------------------------
def _cpu_stand_in_dropout(dropout_p: float) -> None:
    if dropout_p > 0:
        raise NotImplementedError(f"attention dropout (p={dropout_p}) in a CUDA kernel run on the CPU: its "
                                  f"random stream (philox) has no CPU equivalent")


def efficient_attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                attn_bias: torch.Tensor | None, compute_log_sumexp: bool, dropout_p: float = 0.0,
                                is_causal: bool = False, *, scale: float | None = None) -> tuple:
    """``aten._scaled_dot_product_efficient_attention``: itself off the CPU; on the CPU the CPU
    kernel's values with the CUDA kernel's outputs -- the log-sum-exp [B, H, Lq padded to 32] in
    float32 with its first Lq entries filled (empty unless ``compute_log_sumexp``), philox seed and
    offset as int64 zeros."""
    if query.device.type != "cpu":
        return aten._scaled_dot_product_efficient_attention(query, key, value, attn_bias, compute_log_sumexp,
                                                            dropout_p, is_causal, scale=scale)
    _cpu_stand_in_dropout(dropout_p)
    b, h, lq = query.size(0), query.size(1), query.size(2)
    with kernel_internals():
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal,
                                                                    attn_mask=attn_bias, scale=scale)
        padded = torch.zeros(b, h, lse_padded_length(lq) if compute_log_sumexp else 0, dtype=torch.float32)
        if compute_log_sumexp:
            padded[..., :lq].copy_(lse)
        del lse
        seed = torch.zeros((), dtype=torch.int64)
        offset = torch.zeros((), dtype=torch.int64)
    return kernel_outputs((out, padded, seed, offset), "aten._scaled_dot_product_efficient_attention")


def efficient_attention_backward(grad_out_: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, attn_bias: torch.Tensor | None, out: torch.Tensor,
                                 logsumexp: torch.Tensor, philox_seed: torch.Tensor, philox_offset: torch.Tensor,
                                 dropout_p: float, grad_input_mask: list[bool], is_causal: bool = False, *,
                                 scale: float | None = None) -> tuple:
    """``aten._scaled_dot_product_efficient_attention_backward``: itself off the CPU; on the CPU the
    CPU kernel's backward on the first Lq log-sum-exp entries (no gradient of the bias)."""
    if query.device.type != "cpu":
        return aten._scaled_dot_product_efficient_attention_backward(
            grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
            grad_input_mask, is_causal, scale=scale)
    _cpu_stand_in_dropout(dropout_p)
    if attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3]:
        raise NotImplementedError("the gradient of an attention bias has no CPU stand-in")
    with kernel_internals():
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out_, query, key, value, out, logsumexp[..., :query.size(2)], 0.0, is_causal,
            attn_mask=attn_bias, scale=scale)
    return kernel_outputs((dq, dk, dv, None), "aten._scaled_dot_product_efficient_attention_backward")


def flash_attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                            is_causal: bool = False, return_debug_mask: bool = False, *,
                            scale: float | None = None) -> tuple:
    """``aten._scaled_dot_product_flash_attention``: itself off the CPU; on the CPU the CPU kernel
    (the same output and log-sum-exp layouts) with the CUDA kernel's other outputs: no cumulative
    lengths, the sequence lengths, the RNG state (2,) and its unused partner as uint64 zeros, an
    empty debug mask."""
    if query.device.type != "cpu":
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask,
                                                        scale=scale)
    _cpu_stand_in_dropout(dropout_p)
    with kernel_internals():
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal, scale=scale)
        rng = torch.zeros(2, dtype=torch.uint64)
        unused = torch.zeros((), dtype=torch.uint64)
        debug = torch.empty(0, dtype=query.dtype)
    return kernel_outputs((out, lse, None, None, query.size(2), key.size(2), rng, unused, debug),
                          "aten._scaled_dot_product_flash_attention")


def flash_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             out: torch.Tensor, logsumexp: torch.Tensor, cum_seq_q: torch.Tensor | None,
                             cum_seq_k: torch.Tensor | None, max_q: int, max_k: int, dropout_p: float,
                             is_causal: bool, philox_seed: torch.Tensor, philox_offset: torch.Tensor, *,
                             scale: float | None = None) -> tuple:
    """``aten._scaled_dot_product_flash_attention_backward``: itself off the CPU, the CPU kernel's
    backward on the CPU."""
    if query.device.type != "cpu":
        return aten._scaled_dot_product_flash_attention_backward(
            grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
            philox_seed, philox_offset, scale=scale)
    _cpu_stand_in_dropout(dropout_p)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp,
                                                                     0.0, is_causal, scale=scale)


# ---- inputs ------------------------------------------------------------------------------------
def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def make_inputs(spec: dict[str, dict], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors for every graph input of ``spec`` (name -> shape, dtype, kind, range).

    Floats: weights ~ N(0, 1/fan_in) (fan_in = product of all but the first dim), other inputs
    ~ N(0, 1); ``running_var`` buffers are ones and other float buffers zeros (valid batch-norm
    state).  Integers and bools: uniform in the embedded valid range ``[low, high)`` when the
    exporter could infer one (embedding rows, class count of a loss...), else zeros.
    """
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, s in spec.items():
        shape, dt = tuple(s["shape"]), _dtype(s["dtype"])
        if dt.is_floating_point or dt.is_complex:
            if s["kind"] == "buffer":
                t = torch.ones(shape, dtype=dt) if name.endswith("running_var") else torch.zeros(shape, dtype=dt)
            elif s["kind"] == "param":
                fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
                t = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
                t = t.to(dt) if len(shape) > 1 else (1.0 + 0.1 * t).to(dt)
            else:
                t = torch.randn(shape, generator=gen).to(dt)
        elif s.get("range") is not None:
            low, high = s["range"]
            t = torch.randint(int(low), int(high), shape, generator=gen).to(dt)
        else:
            t = torch.zeros(shape, dtype=dt)
        out[name] = t
    return out


def check_inputs(tensors: dict[str, torch.Tensor], spec: dict[str, dict]) -> None:
    """Raise ValueError unless ``tensors`` has every input of ``spec`` with its shape and dtype."""
    missing = [n for n in spec if n not in tensors]
    if missing:
        raise ValueError(f"missing inputs: {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""))
    for n, s in spec.items():
        t = tensors[n]
        if tuple(t.shape) != tuple(s["shape"]) or t.dtype != _dtype(s["dtype"]):
            raise ValueError(f"input {n!r}: expected {tuple(s['shape'])} {s['dtype']}, "
                             f"got {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}")


def load_inputs(path: str, spec: dict[str, dict]) -> dict[str, torch.Tensor]:
    """A ``.pt`` file holding a dict name -> tensor (loaded with ``weights_only=True``)."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a dict of tensors, got {type(data).__name__}")
    tensors = {n: data[n] for n in spec if n in data}
    check_inputs(tensors, spec)
    return tensors


# ---- torch devices -----------------------------------------------------------------------------
class DeviceError(ValueError):
    """A torch device this torch cannot run on (no CUDA, no such GPU) or a malformed device name."""


def torch_devices() -> list[str]:
    """The torch devices this torch can run on: ``cpu``, ``cuda:N`` per visible GPU, ``mps`` when present."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def torch_device(name: str | torch.device) -> torch.device:
    """``name`` as a ``torch.device`` this torch can run on, else :class:`DeviceError` in one line that
    says why and names the devices there are (``cuda`` on a CPU-only torch, ``cuda:3`` on a machine
    with one GPU, ``cuda:x``, ``tpu``)."""
    have = f"available: {', '.join(torch_devices())}"
    text = str(name)
    try:
        dev = name if isinstance(name, torch.device) else torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise DeviceError(f"bad torch device {text!r} (expected cpu, cuda, cuda:N or mps); {have}") from None
    if dev.type == "cpu" and dev.index in (None, 0):
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if not torch.backends.cuda.is_built() else "no GPU is visible"
            raise DeviceError(f"torch device {text!r}: CUDA is not available ({why}); {have}")
        n = torch.cuda.device_count()
        if dev.index is None or dev.index < n:
            return dev
        raise DeviceError(f"torch device {text!r}: no such GPU ({n} visible); {have}")
    if dev.type == "mps" and dev.index in (None, 0) and "mps" in torch_devices():
        return dev
    raise DeviceError(f"torch device {text!r} is not available here; {have}")


def place_inputs(tensors: dict[str, torch.Tensor], device: str | torch.device) -> dict[str, torch.Tensor]:
    """The inputs on ``device`` (a tensor already there is passed through, not copied); a device
    this torch cannot run on raises :class:`DeviceError` (:func:`torch_device`)."""
    dev = torch_device(device)
    return {n: t if t.device == dev else t.to(dev) for n, t in tensors.items()}


# ---- measurement -------------------------------------------------------------------------------
def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def measure_memory(run: RunFn, tensors: dict[str, torch.Tensor], device: str | torch.device,
                   resident: Iterable[torch.Tensor]) -> tuple[dict, dict[str, Any]]:
    """Run once and measure peak memory, counted like the simulator (inputs + weights resident).

    CUDA: ``max_memory_allocated`` (and ``max_memory_reserved``: the caching allocator's segments,
    emptied of cached blocks first) after ``reset_peak_memory_stats``; the inputs already on the
    device are the resident part (``memory_allocated`` before the run).  The caching allocator
    rounds blocks up (512 B) and library workspaces (cuBLAS/cuDNN) count, so expect a few percent
    above the simulator.  CPU: :class:`LiveBytesTracker` (exact storage bytes) with the
    ``resident`` tensors (inputs, weights, constants) registered first.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        _sync(dev)
        torch.cuda.empty_cache()  # the segments the run reserves, from the resident tensors' alone
        torch.cuda.reset_peak_memory_stats(dev)
        resident = torch.cuda.memory_allocated(dev)
        out = run(tensors, dev)
        _sync(dev)
        return out, {"measured_peak_bytes": int(torch.cuda.max_memory_allocated(dev)),
                     "measured_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
                     "measured_resident_bytes": int(resident),
                     "memory_method": "cuda.max_memory_allocated"}
    tracker = LiveBytesTracker(dev, resident)
    with tracker:
        out = run(tensors, dev)
    return out, {"measured_peak_bytes": tracker.peak_bytes, "measured_resident_bytes": tracker.resident_bytes,
                 "memory_method": "live tensor storages (dispatch-mode tracker)",
                 "tracked_calls": len(tracker.step_bytes), "_tracker": tracker}


def measure_time(run: RunFn, tensors: dict[str, torch.Tensor], device: str | torch.device,
                 repeat: int = 3, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeat`` runs after ``warmup`` runs (synchronised on CUDA)."""
    dev = torch.device(device)
    times = []
    for i in range(warmup + repeat):
        _sync(dev)
        t0 = time.perf_counter()
        run(tensors, dev)
        _sync(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def main(run: RunFn, measure: Callable[..., tuple[dict, dict]], meta: dict[str, Any], spec: dict[str, dict],
         argv: list[str] | None = None) -> int:
    """Command line of an exported script: run it on random or given inputs, print JSON with the
    measured peak memory and time next to the simulator's prediction."""
    p = argparse.ArgumentParser(description=f"MAGIS Studio plan for {meta['graph']} "
                                            f"(schedule {meta['schedule']}, {meta['ops']} ops)")
    p.add_argument("--device", default=TORCH_DEVICE,
                   help=f"torch device: {', '.join(torch_devices())} on this machine (default {TORCH_DEVICE})")
    p.add_argument("--inputs", default=None, help=".pt file with a dict name -> tensor (else random)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--repeat", type=int, default=3, help="timed runs")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs before the timed ones")
    p.add_argument("--save-outputs", default=None, help="write the outputs to this .pt file")
    a = p.parse_args(argv)
    try:
        device = torch_device(a.device)  # one line naming the devices there are, before any work
        tensors = load_inputs(a.inputs, spec) if a.inputs else make_inputs(spec, a.seed)
        tensors = place_inputs(tensors, device)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    outputs, mem = measure(tensors, device)
    mem.pop("_tracker", None)
    times = measure_time(run, tensors, device, a.repeat, a.warmup) if a.repeat > 0 else []
    sim_peak = meta["simulated_peak_bytes"]
    res: dict[str, Any] = {
        "graph": meta["graph"], "schedule": meta["schedule"], "ops": meta["ops"],
        "device": str(device),
        **mem,
        "simulated_peak_bytes": sim_peak,
        "simulated_resident_bytes": meta["simulated_resident_bytes"],
        "peak_ratio": round(mem["measured_peak_bytes"] / sim_peak, 6) if sim_peak else None,
        "measured_seconds": statistics.median(times) if times else None,
        "measured_seconds_min": min(times) if times else None,
        "simulated_latency_seconds": meta["simulated_latency_seconds"],
        "simulated_device": meta["simulated_device"],
        "outputs_finite": all(bool(torch.isfinite(t).all()) for t in outputs.values()
                              if isinstance(t, torch.Tensor) and t.is_floating_point()),
    }
    loss = outputs.get("loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        res["loss"] = float(loss)
    if a.save_outputs:
        torch.save({k: v.detach().cpu() for k, v in outputs.items()}, a.save_outputs)
        res["outputs_file"] = a.save_outputs
    print(json.dumps(res, indent=1))
    return 0
