"""Ops registry: the one home of operator semantics.

For every aten op kind the registry knows
  * ``flops(ctx)`` -- floating point operations (for the roofline cost model),
  * ``bytes_moved(ctx)`` -- bytes read + written (0 for views),
  * ``dim_links(ctx)`` -- the dimension links of the D-Graph (MAGIS section 4.1): for each tensor
    input, which input dim corresponds to which output dim, or to a *reduce axis* (negative
    ``out_dim``: -1 is the first reduce axis) -- ``None`` when unknown, which blocks fission,
  * ``output_aliases(op)`` -- which outputs are views of which input (from the op's schema),
  * ``emit(op)`` -- the Python callable the code generator writes for it.

An op that is not listed still imports, simulates and exports (generic aten emission, byte-based
cost); it only lacks dim links, and ``magis info`` reports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from . import ops_ctc, ops_modern, ops_routing
from .graph import Node, TensorMeta, TRef
from .op_base import (  # noqa: F401  (the registry's vocabulary, used as ops.DimLink & co.)
    _ARGNAMES,
    A,
    DimLink,
    FlopFn,
    LinkFn,
    OpCtx,
    _in_numel,
    _out_numel,
    _pointwise,
    _times,
    _zero,
    broadcast_links,
    norm_dim,
    reshape_links,
)


@dataclass(frozen=True)
class OpDef:
    name: str
    category: str
    flops: FlopFn
    dim_links: LinkFn | None


_REGISTRY: dict[str, OpDef] = {}


def register(names: str | list[str], category: str, flops: FlopFn, links: LinkFn | None) -> None:
    for n in [names] if isinstance(names, str) else names:
        _REGISTRY[n] = OpDef(n, category, flops, links)


def _view(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, a, 0, b) for a, b in reshape_links(c.ins[0].shape, c.outs[0].shape)]


def _identity(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, d, j, d) for j in range(len(c.outs)) for d in range(len(c.ins[0].shape))
            if len(c.outs[j].shape) == len(c.ins[0].shape) and c.ins[0].shape[d] > 1]


def _permute(c: OpCtx) -> list[DimLink]:
    dims = [norm_dim(d, len(c.ins[0].shape)) for d in c.arg(1)]
    return [DimLink(0, src, 0, dst) for dst, src in enumerate(dims)]


def _transpose(c: OpCtx) -> list[DimLink]:
    r = len(c.ins[0].shape)
    if c.node.op == "aten.t.default":
        d0, d1 = 0, 1 if r == 2 else 0
    else:
        d0, d1 = norm_dim(c.arg(1), r), norm_dim(c.arg(2), r)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return [DimLink(0, src, 0, dst) for dst, src in enumerate(perm)]


def _expand(c: OpCtx) -> list[DimLink]:
    return broadcast_links(c, 0, [0])


def _unsqueeze(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.arg(1), r)
    return [DimLink(0, i, 0, i if i < d else i + 1) for i in range(len(c.ins[0].shape))]


def _slice(c: OpCtx) -> list[DimLink]:
    r = len(c.ins[0].shape)
    d = norm_dim(c.kw("dim", 1, 0), r)
    return [DimLink(0, i, 0, i) for i in range(r) if i != d or c.ins[0].shape[i] == c.outs[0].shape[i]]


def _select(c: OpCtx) -> list[DimLink]:
    r = len(c.ins[0].shape)
    d = norm_dim(c.arg(1), r)
    return [DimLink(0, i, 0, i if i < d else i - 1) for i in range(r) if i != d]


def _split(c: OpCtx) -> list[DimLink]:
    r = len(c.ins[0].shape)
    d = norm_dim(c.kw("dim", 2, 0), r)
    return [DimLink(0, i, j, i) for j in range(len(c.outs)) for i in range(r) if i != d]


def _unbind(c: OpCtx) -> list[DimLink]:
    """unbind removes its dim: input dim i is output dim i (before it) or i - 1 (after it)."""
    r = len(c.ins[0].shape)
    d = norm_dim(c.kw("dim", 1, 0), r)
    return [DimLink(0, i, j, i if i < d else i - 1) for j in range(len(c.outs)) for i in range(r) if i != d]


def _cat(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.kw("dim", 1, 0), r)
    return [DimLink(i, k, 0, k) for i in range(len(c.ins)) for k in range(r)
            if k != d and len(c.ins[i].shape) == r]


def _mm(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, 0, 0, 0), DimLink(0, 1, 0, -1), DimLink(1, 0, 0, -1), DimLink(1, 1, 0, 1)]


def _addmm(c: OpCtx) -> list[DimLink]:
    return broadcast_links(c, 0, [0]) + [DimLink(i + 1, d, o, od) for i, d, o, od in
                                          [(0, 0, 0, 0), (0, 1, 0, -1), (1, 0, 0, -1), (1, 1, 0, 1)]]


def _bmm(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, 0, 0, 0), DimLink(1, 0, 0, 0), DimLink(0, 1, 0, 1), DimLink(0, 2, 0, -1),
            DimLink(1, 1, 0, -1), DimLink(1, 2, 0, 2)]


def _mm_flops(c: OpCtx) -> float:
    a, b = c.ins[-2].shape, c.ins[-1].shape
    return 2.0 * a[0] * a[1] * b[1]


def _bmm_flops(c: OpCtx) -> float:
    a, b = c.ins[-2].shape, c.ins[-1].shape
    return 2.0 * a[0] * a[1] * a[2] * b[2]


def _conv_flops(c: OpCtx) -> float:
    x, w = c.ins[0].shape, c.ins[1].shape
    out = c.outs[0].shape
    transposed = bool(c.arg(6, False))
    groups = int(c.arg(8, 1) or 1)
    kernel = math.prod(w[2:])
    if transposed:  # weight [Cin, Cout/g, k...]; cost = input positions x Cout/g x k
        return 2.0 * x[0] * math.prod(x[2:]) * w[0] * w[1] * kernel
    return 2.0 * out[0] * math.prod(out[2:]) * out[1] * (x[1] // groups) * kernel


def _conv_links(c: OpCtx) -> list[DimLink]:
    links = [DimLink(0, 0, 0, 0)]
    transposed = bool(c.arg(6, False))
    groups = int(c.arg(8, 1) or 1)
    if groups == 1:
        if transposed:
            links += [DimLink(0, 1, 0, -1), DimLink(1, 0, 0, -1), DimLink(1, 1, 0, 1)]
        else:
            links += [DimLink(0, 1, 0, -1), DimLink(1, 1, 0, -1), DimLink(1, 0, 0, 1)]
        if len(c.ins) > 2:
            links.append(DimLink(2, 0, 0, 1))
    return links


def _conv_bwd_flops(c: OpCtx) -> float:
    # grad_out, input, weight; output_mask picks which of (grad_in, grad_w, grad_b) are computed
    go, x, w = c.ins[0].shape, c.ins[1].shape, c.ins[2].shape
    transposed = bool(c.arg(7, False))
    groups = int(c.arg(9, 1) or 1)
    mask = c.arg(10, [True, True, True]) or [True, True, True]
    kernel = math.prod(w[2:])
    if transposed:
        one = 2.0 * x[0] * math.prod(x[2:]) * w[0] * w[1] * kernel
    else:
        one = 2.0 * go[0] * math.prod(go[2:]) * go[1] * (x[1] // groups) * kernel
    return one * (int(bool(mask[0])) + int(bool(mask[1]))) + (math.prod(go) if mask[2] else 0)


def _conv_bwd_links(c: OpCtx) -> list[DimLink]:
    # out0 = grad_input [N, ...], out1 = grad_weight (batch summed), out2 = grad_bias (batch summed)
    links = [DimLink(0, 0, 0, 0), DimLink(1, 0, 0, 0)]
    if len(c.outs) > 1:
        links += [DimLink(0, 0, 1, -1), DimLink(1, 0, 1, -1)]
    if len(c.outs) > 2:  # grad_bias reads only grad_out, but sums over the batch input shares with it
        links += [DimLink(0, 0, 2, -1), DimLink(1, 0, 2, -1)]
    return links


def _reduce_links(c: OpCtx, summable: bool) -> list[DimLink]:
    x = c.ins[0].shape
    dims = c.arg(1)
    if dims is None or dims == []:
        dims = list(range(len(x)))
    dims = sorted({norm_dim(d, len(x)) for d in ([dims] if isinstance(dims, int) else dims)})
    keep = bool(c.arg(2, False))
    links, k, red = [], 0, 0
    for d in range(len(x)):
        if d in dims:
            red += 1
            if summable and x[d] > 1:
                links.append(DimLink(0, d, 0, -red))
            if keep:
                k += 1
        else:
            if x[d] > 1:
                links.append(DimLink(0, d, 0, k))
            k += 1
    return links


def _sum_all_links(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, d, 0, -(d + 1)) for d in range(len(c.ins[0].shape)) if c.ins[0].shape[d] > 1]


def _softmax_links(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.arg(1) if c.node.op.startswith(("aten._softmax.", "aten._log_softmax.",
                                                    "aten._safe_softmax.")) else c.arg(2), r)
    return [lk for lk in broadcast_links(c, 0) if lk.out_dim != d]


def _scan_links(c: OpCtx) -> list[DimLink]:
    """A scan along one axis (``cumsum(x, dim)``): every other axis splits."""
    d = norm_dim(c.arg(1), len(c.outs[0].shape))
    return [lk for lk in broadcast_links(c, 0) if lk.out_dim != d]


def _pad_links(c: OpCtx) -> list[DimLink]:
    """``constant_pad_nd(x, pad, value)``: the axes the pad leaves alone split (``pad`` pairs start
    at the last axis)."""
    x, pad = c.ins[0].shape, list(c.arg(1))
    padded = {len(x) - 1 - i for i in range(len(pad) // 2) if pad[2 * i] or pad[2 * i + 1]}
    return [DimLink(0, d, 0, d) for d in range(len(x)) if d not in padded and x[d] > 1]


def _slice_scatter_links(c: OpCtx) -> list[DimLink]:
    """``slice_scatter(self, src, dim, ...)``: self and src split along every axis but ``dim``."""
    d = norm_dim(c.arg(2) if len(c.node.args) > 2 else c.node.kwargs.get("dim", 0), len(c.outs[0].shape))
    return [lk for lk in broadcast_links(c, 0, [0, 1]) if lk.out_dim != d and lk.in_dim != d]


def _select_scatter_links(c: OpCtx) -> list[DimLink]:
    """``select_scatter(self, src, dim, index)``: src lacks ``dim``; every other axis splits."""
    o = c.outs[0].shape
    d = norm_dim(c.arg(2), len(o))
    links = [DimLink(0, k, 0, k) for k in range(len(o)) if k != d and o[k] > 1]
    return links + [DimLink(1, k, 0, k + (k >= d)) for k in range(len(o) - 1) if o[k + (k >= d)] > 1]


def _layer_norm_links(c: OpCtx) -> list[DimLink]:
    x = c.ins[0].shape
    lead = len(x) - len(c.arg(1))
    return [DimLink(0, d, j, d) for j in range(len(c.outs)) for d in range(lead) if x[d] > 1]


def _layer_norm_bwd_links(c: OpCtx) -> list[DimLink]:
    # grad_out, input, normalized_shape, mean, rstd, ...: mean and rstd are per leading index too
    go = c.ins[0].shape
    lead = len(go) - len(c.arg(2))
    row = [0, 1] + [k for k in (c.in_index(3), c.in_index(4)) if k is not None]
    links = [DimLink(i, d, 0, d) for i in row for d in range(lead) if go[d] > 1]
    for j in range(1, len(c.outs)):  # grad weight / bias: the leading dims are summed
        links += [DimLink(i, d, j, -(d + 1)) for i in row for d in range(lead) if go[d] > 1]
    return links


def _channel_links(c: OpCtx) -> list[DimLink]:
    """Batch norm (training): statistics reduce over batch and space, so only channels link."""
    ch = c.ins[0].shape[1] if len(c.ins[0].shape) > 1 else 0
    links = []
    for i, t in enumerate(c.ins):
        for d, s in enumerate(t.shape):
            if s == ch and (d == 1 if len(t.shape) > 1 else d == 0):
                for j, o in enumerate(c.outs):
                    od = 1 if len(o.shape) > 1 else 0
                    if len(o.shape) > od and o.shape[od] == ch:
                        links.append(DimLink(i, d, j, od))
    return links


def _pool_links(c: OpCtx) -> list[DimLink]:
    links = []
    for i, t in enumerate(c.ins):
        for j, o in enumerate(c.outs):
            for d in (0, 1):
                if d < len(t.shape) and d < len(o.shape) and t.shape[d] == o.shape[d] and t.shape[d] > 1:
                    links.append(DimLink(i, d, j, d))
    return links


def _embedding_links(c: OpCtx) -> list[DimLink]:
    idx = c.ins[1].shape
    links = [DimLink(1, d, 0, d) for d in range(len(idx)) if idx[d] > 1]
    links.append(DimLink(0, 1, 0, len(idx)))
    return links


def _embedding_bwd_links(c: OpCtx) -> list[DimLink]:
    g, idx = c.ins[0].shape, c.ins[1].shape
    links = []
    for d in range(len(idx)):
        if idx[d] > 1:
            links += [DimLink(0, d, 0, -(d + 1)), DimLink(1, d, 0, -(d + 1))]
    links.append(DimLink(0, len(g) - 1, 0, 1))
    return links


def _nll_links(c: OpCtx) -> list[DimLink]:
    reduction = c.arg(3, 1)
    x = c.ins[0].shape
    if reduction == 0:
        return [DimLink(0, 0, 0, 0), DimLink(1, 0, 0, 0)]
    if len(x) == 2 and len(c.ins) >= 2:  # sum or mean (split: summed, then divided, see MEAN_LOSSES)
        return [DimLink(i, 0, j, -1) for i in (0, 1) for j in range(len(c.outs))]
    return []


def _nll_bwd_links(c: OpCtx) -> list[DimLink]:
    # grad_out, self[N,C], target[N] ... -> grad_self[N,C]
    ix = c.in_index(1)
    it = c.in_index(2)
    links = []
    if ix is not None:
        links += [DimLink(ix, d, 0, d) for d in range(len(c.ins[ix].shape)) if c.ins[ix].shape[d] > 1]
    if it is not None and c.ins[it].shape and c.ins[it].shape[0] > 1:
        links.append(DimLink(it, 0, 0, 0))
    return links


def _like_links(c: OpCtx) -> list[DimLink]:
    """``zeros_like(x)``, ``new_zeros(x, size)`` & co.: the output's dims are x's where it has x's
    shape (a ``new_*`` of another size links nothing: its size is an argument)."""
    return _identity(c) if all(o.shape == c.ins[0].shape for o in c.outs) else []


def _copy_links(c: OpCtx) -> list[DimLink]:
    """``copy(self, src)``: src broadcast into a tensor laid out like self (self's values unread):
    self's dims and src's (where it is not broadcast) split the output alike."""
    return _identity(c) + broadcast_links(c, 0, [1])


# ---- the table ---------------------------------------------------------------------------------
register([A + "mm.default"], "matmul", _mm_flops, _mm)
register([A + "addmm.default"], "matmul", lambda c: _mm_flops(c) + c.outs[0].numel, _addmm)
register([A + "bmm.default"], "matmul", _bmm_flops, _bmm)
register([A + "baddbmm.default"], "matmul", lambda c: _bmm_flops(c) + c.outs[0].numel,
         lambda c: broadcast_links(c, 0, [0]) + [DimLink(lk.input + 1, lk.in_dim, 0, lk.out_dim)
                                                 for lk in _bmm(c)])
register([A + "convolution.default"], "conv", _conv_flops, _conv_links)
register([A + "convolution_backward.default"], "conv", _conv_bwd_flops, _conv_bwd_links)

for _v in ["view.default", "_unsafe_view.default", "reshape.default", "squeeze.dim", "squeeze.dims",
           "squeeze.default", "view_as.default", "flatten.using_ints"]:
    register(A + _v, "view", _zero, _view)
register([A + "permute.default"], "view", _zero, _permute)
register([A + "t.default", A + "transpose.int"], "view", _zero, _transpose)
register([A + "expand.default"], "view", _zero, _expand)
register([A + "unsqueeze.default"], "view", _zero, _unsqueeze)
register([A + "slice.Tensor"], "view", _zero, _slice)
register([A + "select.int"], "view", _zero, _select)
register([A + "split.Tensor", A + "split_with_sizes.default", A + "chunk.default"], "view", _zero, _split)
register([A + "unbind.int"], "view", _zero, _unbind)
register([A + "alias.default", A + "detach.default", A + "lift_fresh_copy.default"], "view", _zero,
         _identity)
register([A + "clone.default", A + "contiguous.default", A + "_to_copy.default"], "copy", _zero, _identity)
register([A + "copy.default"], "copy", _zero, _copy_links)
register([A + "cat.default"], "copy", _zero, _cat)
register([A + "ones_like.default", A + "zeros_like.default", A + "full_like.default",
          A + "empty_like.default", A + "new_zeros.default", A + "new_ones.default",
          A + "new_empty.default"], "creation", _zero, _like_links)
register([A + "full.default", A + "zeros.default", A + "ones.default", A + "empty.memory_format",
          A + "scalar_tensor.default", A + "arange.start", A + "arange.default", A + "arange.start_step",
          A + "empty_strided.default"], "creation", _zero, lambda c: [])

register([A + "sum.dim_IntList"], "reduce", _in_numel, lambda c: _reduce_links(c, True))
register([A + "sum.default"], "reduce", _in_numel, _sum_all_links)
register([A + "mean.dim", A + "amax.default", A + "amin.default", A + "var.correction",
          A + "max.dim", A + "min.dim", A + "argmax.default", A + "any.dim", A + "all.dim"],
         "reduce", _in_numel, lambda c: _reduce_links(c, False))
register([A + "mean.default"], "reduce", _in_numel, lambda c: [])

register([A + "cumsum.default", A + "cumprod.default"], "reduce", _out_numel, _scan_links)
register([A + "constant_pad_nd.default"], "copy", _zero, _pad_links)
register([A + "fill.Tensor"], "copy", _zero, _identity)
register([A + "slice_scatter.default"], "copy", _zero, _slice_scatter_links)
register([A + "select_scatter.default"], "copy", _zero, _select_scatter_links)
register([A + "_softmax.default", A + "_log_softmax.default", A + "_safe_softmax.default"], "softmax", _times(5, _out_numel),
         _softmax_links)
register([A + "_softmax_backward_data.default", A + "_log_softmax_backward_data.default"], "softmax",
         _times(4, _out_numel), _softmax_links)
register([A + "native_layer_norm.default"], "norm", _times(8, _in_numel), _layer_norm_links)
register([A + "native_layer_norm_backward.default"], "norm", _times(12, _in_numel),
         _layer_norm_bwd_links)
register([A + "_native_batch_norm_legit_functional.default", A + "native_batch_norm.default",
          A + "_native_batch_norm_legit.default", A + "_native_batch_norm_legit_no_training.default"],
         "norm", _times(8, _in_numel), _channel_links)
register([A + "native_batch_norm_backward.default"], "norm", _times(12, _in_numel), _channel_links)
register([A + "max_pool2d_with_indices.default", A + "avg_pool2d.default",
          A + "_adaptive_avg_pool2d.default", A + "max_pool2d_with_indices_backward.default",
          A + "avg_pool2d_backward.default", A + "_adaptive_avg_pool2d_backward.default",
          A + "upsample_nearest2d.vec", A + "upsample_bilinear2d.vec"],
         "pool", _times(2, _out_numel), _pool_links)
register([A + "embedding.default"], "embedding", _zero, _embedding_links)
register([A + "embedding_dense_backward.default"], "embedding", _in_numel, _embedding_bwd_links)
register([A + "nll_loss_forward.default"], "loss", _in_numel, _nll_links)
register([A + "nll_loss_backward.default"], "loss", _out_numel, _nll_bwd_links)
register([A + "native_dropout.default"], "elementwise", _times(2, _out_numel), _pointwise)
register([A + "where.self", A + "masked_fill.Scalar", A + "masked_fill.Tensor", A + "clamp.default",
          A + "clamp_min.default", A + "clamp_max.default", A + "threshold_backward.default",
          A + "gelu_backward.default", A + "tanh_backward.default", A + "sigmoid_backward.default",
          A + "silu_backward.default", A + "hardtanh_backward.default", A + "fill.Scalar",
          A + "pow.Tensor_Scalar", A + "pow.Tensor_Tensor", A + "rsub.Scalar", A + "lerp.Scalar",
          A + "logical_not.default", A + "bitwise_not.default", A + "reciprocal.default",
          A + "minimum.default", A + "maximum.default"],
         "elementwise", _out_numel, _pointwise)

def _mse_links(c: OpCtx) -> list[DimLink]:
    reduction = c.arg(2, 1)
    if reduction == 0:
        return _pointwise(c)
    return [DimLink(i, d, 0, -(d + 1)) for i in (0, 1) for d in range(len(c.ins[i].shape))  # sum or mean
            if c.ins[i].shape[d] > 1]


def _nll2d_bwd_links(c: OpCtx) -> list[DimLink]:
    ix, it = c.in_index(1), c.in_index(2)
    links = []
    if ix is not None:
        links += [DimLink(ix, d, 0, d) for d in range(len(c.ins[ix].shape)) if c.ins[ix].shape[d] > 1]
    if it is not None:  # target [N, H, W] -> grad [N, C, H, W]
        links += [DimLink(it, d, 0, d if d == 0 else d + 1) for d in range(len(c.ins[it].shape))
                  if c.ins[it].shape[d] > 1]
    return links


def _nll2d_links(c: OpCtx) -> list[DimLink]:
    if c.arg(3, 1) == 0:  # reduction none: [N, C, H, W] -> [N, H, W]
        return [DimLink(0, 0, 0, 0), DimLink(1, 0, 0, 0)] + [
            DimLink(i, d + (1 if i == 0 else 0), 0, d) for i in (0, 1) for d in (1, 2)]
    if len(c.ins) < 2:
        return []
    axes = [(0, 0), (2, 1), (3, 2)]  # (self dim, target dim) -> reduce axes 1, 2, 3
    return [DimLink(i, (a if i == 0 else b), j, -(k + 1)) for k, (a, b) in enumerate(axes)
            for i in (0, 1) for j in range(len(c.outs))]


def _gather_links(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.arg(1), r)
    ii = c.in_index(2)
    links = []
    for k in range(r):
        if k == d or c.outs[0].shape[k] <= 1:
            continue
        if ii is not None:
            links.append(DimLink(ii, k, 0, k))
        if c.ins[0].shape[k] == c.outs[0].shape[k]:
            links.append(DimLink(0, k, 0, k))
    return links


def _slice_bwd_links(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.arg(2), r)
    return [DimLink(0, k, 0, k) for k in range(r) if k != d and c.outs[0].shape[k] > 1]


def _select_bwd_links(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.arg(2), r)
    return [DimLink(0, k, 0, k if k < d else k + 1) for k in range(r - 1) if c.ins[0].shape[k] > 1]


register([A + "mse_loss.default"], "loss", _times(3, _in_numel), _mse_links)
register([A + "mse_loss_backward.default"], "loss", _times(3, _out_numel),
         lambda c: broadcast_links(c, 0, [i for i in range(len(c.ins)) if c.ins[i].shape]))
register([A + "nll_loss2d_forward.default"], "loss", _in_numel, _nll2d_links)
register([A + "nll_loss2d_backward.default"], "loss", _out_numel, _nll2d_bwd_links)
register([A + "gather.default"], "index", _out_numel, _gather_links)
register([A + "slice_backward.default"], "copy", _zero, _slice_bwd_links)
register([A + "select_backward.default"], "copy", _zero, _select_bwd_links)
register([A + "_assert_tensor_metadata.default"], "check", _zero, lambda c: [])


_POINTWISE_FLOPS: dict[str, float] = {"gelu": 8, "tanh": 4, "exp": 4, "log": 4, "sigmoid": 4, "silu": 5,
                                      "erf": 6, "sin": 4, "cos": 4, "rsqrt": 2, "sqrt": 2}


POINTWISE_TABLE = Path(__file__).with_name("pointwise_ops.txt")


@cache
def pointwise_ops() -> frozenset[str]:
    """aten overloads torch tags as pointwise (a committed table, so the registry needs no torch)."""
    lines = POINTWISE_TABLE.read_text().splitlines()
    return frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


def get(op: str) -> OpDef | None:
    """The registry entry for ``op`` (pointwise ops are recognised from torch's tags)."""
    d = _REGISTRY.get(op)
    if d is None and op in pointwise_ops():
        base = op.split(".")[1]
        k = _POINTWISE_FLOPS.get(base, 1.0)
        d = OpDef(op, "elementwise", _times(k, _out_numel), _pointwise)
        _REGISTRY[op] = d
    return d


def known(op: str) -> bool:
    return get(op) is not None


def ctx(node: Node, tensor_of: Callable[[TRef], TensorMeta]) -> OpCtx:
    return OpCtx(node, [tensor_of(r) for r in node.inputs()], node.outputs)


def flops(c: OpCtx) -> float:
    d = get(c.node.op)
    if d is None:
        return float(sum(t.numel for t in c.outs))
    try:
        return float(d.flops(c))
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return float(sum(t.numel for t in c.outs))


def bytes_moved(c: OpCtx) -> float:
    """Bytes read plus written; views move nothing."""
    d = get(c.node.op)
    if d is not None and d.category in ("view", "creation") and d.name not in (
            "aten.full.default", "aten.zeros.default", "aten.ones.default"):
        written = sum(t.nbytes for t in c.outs)
        return float(written)
    return float(sum(t.logical_bytes for t in c.ins) + sum(t.logical_bytes for t in c.outs))


def dim_links(c: OpCtx) -> list[DimLink] | None:
    """The D-Graph edges contributed by this op, or None if the op's dims are unknown."""
    d = get(c.node.op)
    if d is None or d.dim_links is None:
        return None
    try:
        links = d.dim_links(c)
    except (IndexError, TypeError, ValueError, KeyError):
        return None
    return [lk for lk in links if lk.input < len(c.ins) and lk.in_dim < len(c.ins[lk.input].shape)
            and lk.output < len(c.outs) and lk.out_dim < len(c.outs[lk.output].shape)]


def routed_links(c: OpCtx, positional: frozenset[int] = frozenset()) -> list[DimLink] | None:
    """The D-Graph edges of this op for micro-batching: ``dim_links`` where the op does not route
    rows, else the row-routing links of ``ops_routing`` (``positional``: the indices in ``c.ins`` of
    inputs that may hold row positions, ``analysis.routing.positional``)."""
    exact = dim_links(c)
    fn = ops_routing.ROUTED.get(c.node.op)
    if exact is None or fn is None:
        return exact
    try:
        links = fn(c, positional, exact)
    except (IndexError, TypeError, ValueError, KeyError):
        return exact
    return [lk for lk in links if lk.input < len(c.ins) and lk.in_dim < len(c.ins[lk.input].shape)
            and lk.output < len(c.outs) and lk.out_dim < len(c.outs[lk.output].shape)]


# Ops whose outputs share their input's storage in eager PyTorch although the schema carries no
# alias annotation (measured: aten._unsafe_view returns a view of its input).
_EXTRA_ALIASES: dict[str, list[int | None]] = {"aten._unsafe_view.default": [0]}


@cache
def output_aliases(op: str, n_outputs: int) -> tuple[int | None, ...]:
    """For each output, the positional argument index whose storage it shares (None: fresh)."""
    if op in _EXTRA_ALIASES:
        return tuple((_EXTRA_ALIASES[op] + [None] * n_outputs)[:n_outputs])
    parts = op.split(".")
    try:
        import torch

        schema = getattr(getattr(torch.ops.aten, parts[1]), parts[2])._schema
    except (AttributeError, RuntimeError, IndexError, ImportError):
        return (None,) * n_outputs
    sets = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None:
            for s in (*a.alias_info.before_set, *a.alias_info.after_set):
                sets.setdefault(s, i)
    res: list[int | None] = []
    rets = schema.returns
    for j in range(n_outputs):
        r = rets[min(j, len(rets) - 1)] if rets else None
        src = None
        if r is not None and r.alias_info is not None:
            for s in r.alias_info.before_set:
                if s in sets:
                    src = sets[s]
            if src is None and len(rets) == 1 and str(r.type).startswith("List"):
                src = sets.get("*")  # Tensor(a -> *)[]: every element views the argument
        res.append(src)
    return tuple(res)


def set_output_aliases(op: str, args: list[Any], outs: list[TensorMeta]) -> None:
    """Mark each output of ``op`` that shares an argument's storage (``output_aliases``) as a view
    of that argument (of the first tensor of a list argument), in place."""
    for j, src in enumerate(output_aliases(op, len(outs))):
        if src is not None and src < len(args):
            a = args[src]
            if isinstance(a, TRef):
                outs[j].alias = a
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], TRef):
                outs[j].alias = a[0]


# Reductions whose eager kernels compute the unreduced result into the output and then resize it to
# a scalar: resize never shrinks a storage, so the 0-dim result keeps the full broadcast size
# (measured: mse_loss on a 4x8 float32 pair returns a scalar holding a 128-byte storage).
# op -> position of its ``reduction`` argument (0 = none, 1 = mean (default), 2 = sum).
_FULL_STORAGE_REDUCTIONS: dict[str, int] = {"aten.mse_loss.default": 2, "aten.smooth_l1_loss.default": 2}


# Ops whose output 0 is laid out as an input (at this position) is, in a storage as large as that
# input's: the functional ``copy(self, src)`` of a slice allocates its base's whole storage (the slice's
# strides and offset in it), as eager PyTorch measures it.
_STORAGE_LIKE_INPUT = {A + "copy.default": 0}


def output_storage_bytes(op: str, args: list[Any], kwargs: dict[str, Any], ins: list[TensorMeta],
                         outs: list[TensorMeta], in_storages: list[int] | None = None) -> list[int | None]:
    """Storage bytes of each output when they differ from its shape's bytes (else None);
    ``in_storages``: the bytes of each of ``ins``'s storages (a view's is its base's)."""
    res: list[int | None] = [None] * len(outs)
    like = _STORAGE_LIKE_INPUT.get(op)
    if like is not None and in_storages is not None and like < len(in_storages) and outs:
        if in_storages[like] > outs[0].logical_bytes:
            res[0] = in_storages[like]
    pos = _FULL_STORAGE_REDUCTIONS.get(op)
    if pos is not None and len(ins) >= 2 and outs:
        reduction = args[pos] if pos < len(args) else kwargs.get("reduction", 1)
        if reduction != 0:
            shape = _broadcast(ins[0].shape, ins[1].shape)
            res[0] = int(math.prod(shape) * outs[0].itemsize)
    return res


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def emit(op: str) -> str:
    """The Python expression the code generator calls for ``op`` (``aten`` = ``torch.ops.aten``):
    the op itself, or for a device-specific kernel the device-neutral runtime function that stands
    for it (``ops_modern.DEVICE_NEUTRAL``)."""
    return ops_modern.DEVICE_NEUTRAL.get(op, op)


def device_neutral(op: str) -> bool:
    """Whether ``op`` is exported as a call of a device-neutral runtime function."""
    return op in ops_modern.DEVICE_NEUTRAL


def layout_from(op: str, output: int) -> int | None:
    """The argument position of the input whose memory layout output ``output`` of ``op`` follows."""
    return ops_modern.LAYOUT_FROM.get(op, {}).get(output)


# ---- argument rescaling (MAGIS F-Trans: one part of a split op) ------------------------------------
# Ops whose non-tensor arguments hold the size of output 0 (at this argument position): one part
# gets the part's shape.
_SIZE_ARG = {A + "view.default": 1, A + "_unsafe_view.default": 1, A + "reshape.default": 1,
             A + "new_zeros.default": 1, A + "new_ones.default": 1, A + "new_empty.default": 1,
             A + "slice_backward.default": 1, A + "select_backward.default": 1}


RescaleFn = Callable[[Node, list[TensorMeta], list[TensorMeta], list[int | None], list[Any], dict[str, Any]],
                     tuple[list[Any], dict[str, Any]] | None]
_RESCALE: dict[str, RescaleFn] = {}


def register_rescale(op: str, fn: RescaleFn) -> None:
    """How ``op``'s non-tensor arguments change for one part (see :func:`rescale_args`)."""
    _RESCALE[op] = fn


def rescale_args(node: Node, full_ins: list[TensorMeta], part_outs: list[TensorMeta],
                 in_split: list[int | None]) -> tuple[list[Any], dict[str, Any]] | None:
    """The arguments of ``node`` when it computes one part of a fission: its tensor inputs are
    ``full_ins`` sliced along ``in_split`` (None: whole) and its outputs have ``part_outs``' shapes.
    Only non-tensor arguments change (sizes, slice bounds); None when the registry does not know how
    this op's arguments depend on the split (such an op blocks fission through it)."""
    op = node.op
    d = get(op)
    if d is None or d.dim_links is None:
        return None
    args, kwargs = list(node.args), dict(node.kwargs)
    if op in _RESCALE:
        return _RESCALE[op](node, full_ins, part_outs, in_split, args, kwargs)
    if op in _SIZE_ARG:
        pos = _SIZE_ARG[op]
        if pos < len(args):
            args[pos] = list(part_outs[0].shape)
        return args, kwargs
    if op == A + "expand.default":
        sizes = list(args[1])
        off = len(sizes) - len(part_outs[0].shape)
        for k, s in enumerate(part_outs[0].shape):
            if sizes[k + off] != -1:
                sizes[k + off] = s
        args[1] = sizes
        return args, kwargs
    if op == A + "slice.Tensor":
        r = len(full_ins[0].shape)
        dim = norm_dim(args[1] if len(args) > 1 else kwargs.get("dim", 0), r)
        if in_split and in_split[0] == dim:  # a full-range slice along the split dim
            start = args[2] if len(args) > 2 else kwargs.get("start")
            end = args[3] if len(args) > 3 else kwargs.get("end")
            step = args[4] if len(args) > 4 else kwargs.get("step", 1)
            if (start not in (None, 0)) or step not in (None, 1) or (end is not None and end < full_ins[0].shape[dim]):
                return None
            if len(args) > 3:
                args[3] = part_outs[0].shape[dim]
            elif "end" in kwargs:
                kwargs["end"] = part_outs[0].shape[dim]
        return args, kwargs
    if op == A + "convolution_backward.default" and len(part_outs) > 2 and len(args) > 3 \
            and isinstance(args[3], (list, tuple)):
        args[3] = list(part_outs[2].shape)  # bias_sizes
        return args, kwargs
    if d.category == "creation" and not full_ins:
        return None  # sizes of a tensor made from nothing
    # every other registered op takes dims, flags and scalars only; where a dim argument names an
    # axis (split, cat, select, gather, reductions, softmax ...) its links leave that axis out, so
    # the split dim is never it
    return args, kwargs


# positional argument that is added once to the op's result (a bias): when the op's output is
# split along a reduce axis and the parts are summed, it must not be shared by the parts
_ADDED_ONCE = {A + "addmm.default": 0, A + "baddbmm.default": 0, A + "convolution.default": 2,
               A + "addbmm.default": 0, A + "addmv.default": 0}


def added_once(node: Node) -> TRef | None:
    """The tensor ``node`` adds once to its result (a bias), if any."""
    pos = _ADDED_ONCE.get(node.op)
    if pos is None or pos >= len(node.args):
        return None
    a = node.args[pos]
    return a if isinstance(a, TRef) else None


# Losses with ``reduction`` (argument position) = mean: split along a reduce axis, each part computes
# the sum (reduction 2) and the combined sum is divided after the parts (``transform.fission``) --
# by the count of counted targets (nll: the summed total weight) or by the number of elements (mse).
MEAN_LOSSES = {A + "nll_loss_forward.default": 3, A + "nll_loss2d_forward.default": 3, A + "mse_loss.default": 2}
# Their backward ops with reduction = mean: each part must divide by the full count, not its own
# (nll: the total weight argument, position 6; mse: the number of elements, via grad_output).
MEAN_LOSS_GRADS = {A + "nll_loss_backward.default": 4, A + "nll_loss2d_backward.default": 4,
                   A + "mse_loss_backward.default": 3}


def reduction_of(node: Node) -> int | None:
    """The ``reduction`` argument of a loss op (0 none, 1 mean, 2 sum), None for other ops."""
    pos = MEAN_LOSSES.get(node.op, MEAN_LOSS_GRADS.get(node.op))
    if pos is None:
        return None
    if pos < len(node.args):
        return node.args[pos]
    return node.kwargs.get("reduction", 1)


_RANDOM = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "exponential")


def draws_random(op: str) -> bool:
    """Whether ``op`` draws random numbers (running it again, or in parts, changes its values)."""
    name = op.split(".")[1] if op.count(".") >= 1 else op
    return any(k in name for k in _RANDOM)


# Kernels that read their tensor inputs as contiguous memory (they reject -- or, measured for
# native_group_norm_backward on the CPU, silently misread -- a strided view): a fission part may
# not slice their inputs along an inner dim (``analysis.dgraph.plan_split``).
CONTIGUOUS_INPUTS = frozenset({A + "native_group_norm.default", A + "native_group_norm_backward.default"})


# ops whose output's values depend only on their input's shape (an F-Trans rebuilds them input-free)
VALUE_FREE = (A + "ones_like.default", A + "zeros_like.default", A + "empty_like.default", A + "full_like.default",
              A + "new_ones.default", A + "new_zeros.default", A + "new_empty.default", A + "new_full.default")


# What a plan records where random ops of a fission draw per part (micro-batching's gradient
# accumulation: ``transform.microbatch``): its outputs are not eager's single draw.
RANDOM_PER_PART = "random ops draw per micro-batch"


def node_draws_random(node: Node) -> bool:
    """Whether running ``node`` again, or in parts, changes its values: a random op, or an op whose
    randomness is an argument (attention with ``dropout_p > 0``).  Fission and recomputation
    refuse such nodes (eager PyTorch draws once, in one call; parts would draw other numbers)."""
    return draws_random(node.op) or ops_modern.random_args(node)


for _names, _cat, _flops, _links in ops_modern.ENTRIES:
    register(_names, _cat, _flops, _links)
_RESCALE.update(ops_modern.RESCALE)
_SIZE_ARG.update(ops_modern.SIZE_ARG)
_ADDED_ONCE.update(ops_modern.ADDED_ONCE)

# ---- CTC loss (its own table: core/ir/ops_ctc.py) ---------------------------------------------------
for _names, _cat, _flops, _links in ops_ctc.ENTRIES:
    register(_names, _cat, _flops, _links)
