"""Ops registry entries for what modern models call (``core.ir.ops`` registers ``ENTRIES`` and the tables below):

* fused attention -- the SDPA family (math, CPU flash, CUDA flash / efficient / cuDNN; forward and
  backward): batch and heads split everywhere; the query length splits queries, outputs and the
  log-sum-exp while keys and values stay whole (each query row is independent given the whole key
  sequence) -- and in the backward the key / value gradients are sums over query rows (a reduce
  axis).  Not with ``is_causal``: torch aligns the causal mask to the top-left corner of each call,
  so a block of query rows would see the mask of the first rows.  FLOPs as torch's flop counter
  counts them (forward 2 B H Lq Lk (D + Dv); backward 2 B H Lq Lk (3 D + 2 Dv), 2.5x at D = Dv),
  costed on the matmul peak: attention is compute-bound.
* group norm and its backward: the batch splits; the channels split by whole groups (argument
  rescaling of ``C`` and ``group``; the gradients of weight and bias are sums over the batch).
* advanced indexing with integer indices (``_unsafe_index`` -- nearest and bilinear upsampling as
  captured -- ``index.Tensor`` and ``_unsafe_index_put``, their backward), ``upsample_*`` backwards.
* ``stack``, ``roll``, and ``as_strided`` where it is a view pattern (a contiguous reshape).
* random ops (``bernoulli``, ``native_dropout``, SDPA with ``dropout_p > 0``): elementwise links,
  but fission through them is refused (``ops.node_draws_random``): each part would draw other
  numbers than eager PyTorch's single call.
"""

from __future__ import annotations

import math

from .graph import Node, TensorMeta, TRef
from .op_base import A, DimLink, OpCtx, _out_numel, _pointwise, _times, _zero, norm_dim, reshape_links

# what core.ir.ops registers from this module
ENTRIES: list[tuple[list[str], str, object, object]] = []
RESCALE: dict[str, object] = {}
SIZE_ARG: dict[str, int] = {}  # position of an argument holding output 0's size
ADDED_ONCE: dict[str, int] = {}  # position of a tensor added once to the result (see ops.added_once)


def register(names: str | list[str], category: str, flops, links) -> None:
    ENTRIES.append(([names] if isinstance(names, str) else list(names), category, flops, links))


def register_rescale(op: str, fn) -> None:
    RESCALE[op] = fn


def _kw_index(c: OpCtx, name: str) -> int | None:
    """Index in ``ins`` of the tensor passed as keyword argument ``name``."""
    seen = len(c.node.inputs()) - sum(1 for v in c.node.kwargs.values() if isinstance(v, TRef))
    for k, v in c.node.kwargs.items():
        if isinstance(v, TRef):
            if k == name:
                return seen
            seen += 1
    return None


def _tensor_index(c: OpCtx, name: str, pos: int) -> int | None:
    return c.in_index(pos) if pos < len(c.node.args) else _kw_index(c, name)


# ---- scaled dot-product attention ---------------------------------------------------------------
# op -> (tensor roles by argument name and position, output roles, position of is_causal,
#        position of dropout_p).  Roles: q, k, v [B, H(k), L(q|k), D(v)]; o (like the output
#        [B, H, Lq, Dv]); lse [B, H, Lq]; mask (broadcast to [B, H, Lq, Lk]); attn [B, H, Lq, Lk];
#        dq / dk / dv (like q / k / v, the query length summed in dk and dv); None: not linked.
_SDPA: dict[str, tuple[list[tuple[str, int, str]], list[str | None], int, int]] = {
    A + "_scaled_dot_product_flash_attention_for_cpu.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v"), ("attn_mask", 99, "mask")],
        ["o", "lse"], 4, 3),
    A + "_scaled_dot_product_flash_attention_for_cpu_backward.default": (
        [("grad_out", 0, "o"), ("query", 1, "q"), ("key", 2, "k"), ("value", 3, "v"), ("out", 4, "o"),
         ("logsumexp", 5, "lse"), ("attn_mask", 99, "mask")],
        ["dq", "dk", "dv"], 7, 6),
    A + "_scaled_dot_product_attention_math.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v"), ("attn_mask", 3, "mask")],
        ["o", "attn"], 5, 4),
    A + "scaled_dot_product_attention.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v"), ("attn_mask", 3, "mask")],
        ["o"], 5, 4),
    # CUDA kernels (graphs captured on a GPU): their RNG-state and sequence-offset outputs have no
    # dims, so plan_split refuses to split them; the links and costs still describe them.
    A + "_scaled_dot_product_efficient_attention.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v"), ("attn_bias", 3, "mask")],
        ["o", None, None, None], 6, 5),
    A + "_scaled_dot_product_efficient_attention_backward.default": (
        [("grad_out_", 0, "o"), ("query", 1, "q"), ("key", 2, "k"), ("value", 3, "v"),
         ("attn_bias", 4, "mask"), ("out", 5, "o")],
        ["dq", "dk", "dv", None], 11, 9),
    A + "_scaled_dot_product_flash_attention.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v")],
        ["o", "lse", None, None, None, None, None, None, None], 4, 3),
    A + "_scaled_dot_product_flash_attention_backward.default": (
        [("grad_out", 0, "o"), ("query", 1, "q"), ("key", 2, "k"), ("value", 3, "v"), ("out", 4, "o"),
         ("logsumexp", 5, "lse")],
        ["dq", "dk", "dv"], 11, 10),
    A + "_scaled_dot_product_cudnn_attention.default": (
        [("query", 0, "q"), ("key", 1, "k"), ("value", 2, "v"), ("attn_bias", 3, "mask")],
        ["o", None, None, None, None, None, None, None, None], 6, 5),
    A + "_scaled_dot_product_cudnn_attention_backward.default": (
        [("grad_out", 0, "o"), ("query", 1, "q"), ("key", 2, "k"), ("value", 3, "v"), ("out", 4, "o")],
        ["dq", "dk", "dv"], 14, 13),
}
SDPA_OPS = frozenset(_SDPA)
_BACKWARD_ROLES = {"dq", "dk", "dv"}


def _sdpa_roles(c: OpCtx) -> dict[int, str]:
    roles, _outs, _c, _d = _SDPA[c.node.op]
    found: dict[int, str] = {}
    for name, pos, role in roles:
        i = _tensor_index(c, name, pos)
        if i is not None and i < len(c.ins):
            found[i] = role
    return found


def _sdpa_shapes(c: OpCtx) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    roles = {r: i for i, r in _sdpa_roles(c).items()}
    return c.ins[roles["q"]].shape, c.ins[roles["k"]].shape, c.ins[roles["v"]].shape


def sdpa_causal(node: Node) -> bool:
    pos = _SDPA[node.op][2]
    v = node.args[pos] if pos < len(node.args) else node.kwargs.get("is_causal", False)
    return bool(v)


def sdpa_dropout(node: Node) -> float:
    pos = _SDPA[node.op][3]
    v = node.args[pos] if pos < len(node.args) else node.kwargs.get("dropout_p", 0.0)
    return float(v or 0.0)


def _sdpa_links(c: OpCtx) -> list[DimLink]:
    q, k, _v = _sdpa_shapes(c)
    b, h, lq = q[0], q[1], q[2]
    roles = _sdpa_roles(c)
    out_roles = _SDPA[c.node.op][1]
    outs = [(j, r) for j, r in enumerate(out_roles) if r is not None and j < len(c.outs)]
    links: list[DimLink] = []

    def in_dim(i: int, role: str, axis: str) -> int | None:
        t = c.ins[i].shape
        if role == "mask":  # broadcast from the right against [B, H, Lq, Lk]
            d = {"b": 0, "h": 1, "lq": 2}[axis] - (4 - len(t))
            want = {"b": b, "h": h, "lq": lq}[axis]
            return d if d >= 0 and t[d] == want else None
        if role == "lse":
            return {"b": 0, "h": 1, "lq": 2}[axis]
        if role in ("k", "v") and axis == "lq":
            return None  # keys and values need the whole sequence
        return {"b": 0, "h": 1, "lq": 2}[axis]

    def out_dim(role: str, axis: str) -> int | None:
        if role in ("dk", "dv"):
            if axis == "lq":
                return -1  # a sum over the query rows
        return {"b": 0, "h": 1, "lq": 2}[axis]

    # grouped-query heads (fewer key / value heads, enable_gqa): a block of query heads maps to key
    # heads by its index within the call, so the heads do not split
    axes = [("b", b)] + ([("h", h)] if k[1] == h else []) + ([] if sdpa_causal(c.node) else [("lq", lq)])
    for axis, size in axes:
        if size <= 1:
            continue
        for i, role in roles.items():
            di = in_dim(i, role, axis)
            if di is None:
                continue
            for j, orole in outs:
                do = out_dim(orole, axis)
                if do is not None:
                    links.append(DimLink(i, di, j, do))
    return links


def _sdpa_flops(c: OpCtx) -> float:
    q, k, v = _sdpa_shapes(c)
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    if set(_SDPA[c.node.op][1]) & _BACKWARD_ROLES:
        return 2.0 * b * h * lq * lk * (3 * d + 2 * dv)
    return 2.0 * b * h * lq * lk * (d + dv)


register(list(_SDPA), "matmul", _sdpa_flops, _sdpa_links)


# ---- group norm ---------------------------------------------------------------------------------
def _group_norm_links(c: OpCtx) -> list[DimLink]:
    """native_group_norm(input [N, C, *], weight [C], bias [C], N, C, HxW, group, eps)
    -> (out [N, C, *], mean [N, G], rstd [N, G])."""
    x = c.ins[0].shape
    w = [i for i in (c.in_index(1), c.in_index(2)) if i is not None]
    links: list[DimLink] = []
    if x[0] > 1:
        links += [DimLink(0, 0, j, 0) for j in range(3)]
    if x[1] > 1 and int(c.arg(6)) > 1:  # channels by whole groups: mean / rstd split by group
        links += [DimLink(i, d, j, 1) for i, d in [(0, 1)] + [(i, 0) for i in w] for j in range(3)]
    return links


def _group_norm_bwd_links(c: OpCtx) -> list[DimLink]:
    """native_group_norm_backward(grad_out, input, mean [N, G], rstd [N, G], weight, N, C, HxW,
    group, output_mask) -> (grad_input [N, C, *], grad_weight [C], grad_bias [C])."""
    go = c.ins[0].shape
    rows = [0, 1, 2, 3]  # grad_out, input, mean, rstd
    wi = c.in_index(4)
    links: list[DimLink] = []
    if go[0] > 1:
        links += [DimLink(i, 0, 0, 0) for i in rows]
        links += [DimLink(i, 0, j, -1) for i in rows for j in (1, 2)]  # summed over the batch
    if go[1] > 1 and int(c.arg(8)) > 1:
        chans = [(0, 1), (1, 1), (2, 1), (3, 1)] + ([(wi, 0)] if wi is not None else [])
        links += [DimLink(i, d, 0, 1) for i, d in chans]
        links += [DimLink(i, d, j, 0) for i, d in chans for j in (1, 2)]
    return links


def _group_norm_rescale(pos: int):
    def rescale(node: Node, full_ins: list[TensorMeta], part_outs: list[TensorMeta], in_split, args, kwargs):
        c_full = full_ins[0].shape[1]
        n_part, c_part = part_outs[0].shape[0], part_outs[0].shape[1]
        groups = int(args[pos + 3])
        if (groups * c_part) % c_full:
            return None  # a part would cut a group
        args[pos], args[pos + 1], args[pos + 3] = n_part, c_part, groups * c_part // c_full
        return args, kwargs
    return rescale


register([A + "native_group_norm.default"], "norm", _times(8, lambda c: float(c.ins[0].numel)), _group_norm_links)
register([A + "native_group_norm_backward.default"], "norm", _times(12, lambda c: float(c.ins[0].numel)),
         _group_norm_bwd_links)
register_rescale(A + "native_group_norm.default", _group_norm_rescale(3))
register_rescale(A + "native_group_norm_backward.default", _group_norm_rescale(5))


# ---- advanced indexing (nearest / bilinear upsampling as captured) ------------------------------
def _index_layout(c: OpCtx, pos: int) -> tuple[list[int | None], int, int, tuple[int, ...], bool] | None:
    """For ``self[indices]`` (indices at argument ``pos``): the ins index of each entry of the list
    (None: a full slice), the first indexed dim, the last, the broadcast index shape, and whether
    the index dims stay in place (adjacent indices) or go first."""
    lst = c.node.args[pos]
    base = sum(1 for a in c.node.args[:pos] if isinstance(a, TRef))
    idx: list[int | None] = []
    k = base
    for a in lst:
        if isinstance(a, TRef):
            idx.append(k)
            k += 1
        else:
            idx.append(None)
    at = [d for d, i in enumerate(idx) if i is not None]
    if not at:
        return None
    for i in idx:
        if i is not None and c.ins[i].dtype == "bool":
            return None  # a mask: the output size depends on its values
    shapes = [c.ins[i].shape for i in idx if i is not None]
    r = max(len(s) for s in shapes)
    bshape = tuple(max((s[len(s) - r + e] if len(s) - r + e >= 0 else 1) for s in shapes) for e in range(r))
    adjacent = at == list(range(at[0], at[-1] + 1))
    return idx, at[0], at[-1], bshape, adjacent


def _index_links_for(c: OpCtx, pos: int, src: int, out_rank: int) -> list[tuple[int, int, int]]:
    """(ins index, its dim, output dim) of ``self[indices]`` where ``src`` is self's ins index."""
    lay = _index_layout(c, pos)
    if lay is None:
        return []
    idx, first, last, bshape, adjacent = lay
    x = c.ins[src].shape
    r = len(bshape)
    start = first if adjacent else 0
    pairs = []
    rest = 0
    for d in range(len(x)):
        indexed = d < len(idx) and idx[d] is not None
        if indexed:
            continue
        if adjacent:
            od = d if d < first else d - (last - first + 1) + r
        else:
            od = r + rest
            rest += 1
        if x[d] > 1:
            pairs.append((src, d, od))
    for i in idx:
        if i is None:
            continue
        s = c.ins[i].shape
        for e in range(len(s)):
            be = e + r - len(s)
            if s[e] == bshape[be] and s[e] > 1:
                pairs.append((i, e, start + be))
    return [p for p in pairs if p[2] < out_rank]


def _index_links(c: OpCtx) -> list[DimLink]:
    return [DimLink(i, d, 0, od) for i, d, od in _index_links_for(c, 1, 0, len(c.outs[0].shape))]


def _index_put_links(c: OpCtx) -> list[DimLink]:
    """``index_put(self, indices, values, accumulate)`` and ``_unsafe_index_put``: out = self with
    values written (or added) at the indices; values broadcast (from the right) to the shape of
    ``self[indices]``.  A dim of self that is not indexed splits self and out alike, and values
    where it has that dim (where values broadcasts along it, every part reads it whole).  With
    ``accumulate`` the index dims are a sum over the index rows: each part adds its rows of values
    at its indices (self is added once, ``ADDED_ONCE``); without it a part's rows could overwrite
    another part's, so they do not split."""
    lay = _index_layout(c, 1)
    if lay is None:
        return []
    idx, first, last, bshape, adjacent = lay
    vi = c.in_index(2)
    if vi is None:
        return []
    x, vals = c.ins[0].shape, c.ins[vi].shape
    indexed = [d for d in range(len(x)) if d < len(idx) and idx[d] is not None]
    r = len(bshape)
    res_rank = len(x) - len(indexed) + r  # the rank of self[indices]
    off = res_rank - len(vals)  # values' dims sit at the right of self[indices]'s
    links: list[DimLink] = []
    for src, d, od in _index_links_for(c, 1, 0, 10 ** 6):
        if src != 0:
            continue
        links.append(DimLink(0, d, 0, d))
        vd = od - off
        if vd >= 0 and vals[vd] == x[d]:
            links.append(DimLink(vi, vd, 0, d))
        elif vd >= 0 and vals[vd] != 1:
            return []  # not the shape of self[indices]
    if bool(c.arg(3, False)):
        start = first if adjacent else 0
        for i in idx:
            if i is None:
                continue
            s = c.ins[i].shape
            for e in range(len(s)):
                be = e + r - len(s)
                if s[e] == bshape[be] and s[e] > 1:
                    links.append(DimLink(i, e, 0, -(be + 1)))
        for be in range(r):
            vd = start + be - off
            if bshape[be] > 1 and vd >= 0 and vals[vd] == bshape[be]:
                links.append(DimLink(vi, vd, 0, -(be + 1)))
    return links


register([A + "_unsafe_index.Tensor", A + "index.Tensor"], "index", _out_numel, _index_links)
register([A + "_unsafe_index_put.default", A + "index_put.default"], "index",
         _times(2, lambda c: float(c.ins[-1].numel) if c.ins else 0.0), _index_put_links)
ADDED_ONCE[A + "_unsafe_index_put.default"] = 0
ADDED_ONCE[A + "index_put.default"] = 0


def _batch_channel_links(c: OpCtx) -> list[DimLink]:
    return [DimLink(0, d, 0, d) for d in (0, 1) if c.ins[0].shape[d] > 1]


_UP_BWD = [A + "upsample_nearest2d_backward.default", A + "upsample_bilinear2d_backward.default",
           A + "upsample_nearest2d_backward.vec", A + "upsample_bilinear2d_backward.vec"]
register(_UP_BWD + [A + "upsample_nearest2d.default", A + "upsample_bilinear2d.default"], "pool",
         _times(2, lambda c: float(c.outs[0].numel + c.ins[0].numel)), _batch_channel_links)
for _op in _UP_BWD:
    SIZE_ARG[_op] = 2  # input_size [N, C, H, W]


# ---- stack, roll, as_strided --------------------------------------------------------------------
def _stack_links(c: OpCtx) -> list[DimLink]:
    r = len(c.outs[0].shape)
    d = norm_dim(c.kw("dim", 1, 0), r)
    return [DimLink(i, k, 0, k if k < d else k + 1) for i in range(len(c.ins))
            for k in range(len(c.ins[i].shape)) if c.ins[i].shape[k] > 1]


def _roll_links(c: OpCtx) -> list[DimLink]:
    x = c.ins[0].shape
    dims = c.kw("dims", 2, [])
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims:
        return []  # a roll of the flattened tensor moves elements across every dim
    rolled = {norm_dim(d, len(x)) for d in dims}
    return [DimLink(0, d, 0, d) for d in range(len(x)) if d not in rolled and x[d] > 1]


def _flip_links(c: OpCtx) -> list[DimLink]:
    """``flip(x, dims)`` (the backward of a scan such as ``cumsum``): the axes it leaves alone split."""
    x = c.ins[0].shape
    dims = c.arg(1)
    flipped = {norm_dim(d, len(x)) for d in ([dims] if isinstance(dims, int) else list(dims))}
    return [DimLink(0, d, 0, d) for d in range(len(x)) if d not in flipped and x[d] > 1]


def _contiguous_strides(shape: tuple[int, ...] | list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(list(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return out[::-1]


def _as_strided_links(c: OpCtx) -> list[DimLink]:
    """A view pattern: ``as_strided`` of a fresh (contiguous) tensor with the contiguous strides of
    its size and no offset is a reshape; only the outermost dims link (slicing them keeps a part
    contiguous, and the part's call takes its own storage offset, see the rescaling)."""
    x = c.ins[0]
    size, stride = list(c.arg(1)), list(c.arg(2))
    offset = c.kw("storage_offset", 3, None)
    if x.alias is not None or offset not in (None, 0) or math.prod(size) != x.numel \
            or [s for s, n in zip(stride, size, strict=True) if n > 1] != \
            [s for s, n in zip(_contiguous_strides(size), size, strict=True) if n > 1]:
        return []
    pairs = reshape_links(x.shape, tuple(size))
    return [DimLink(0, a, 0, b) for a, b in pairs[:1]]


def _as_strided_rescale(node: Node, full_ins, part_outs, in_split, args, kwargs):
    args[1] = list(part_outs[0].shape)
    args[2] = _contiguous_strides(part_outs[0].shape)
    if len(args) > 3:
        args[3] = None  # the part's own offset (a slice of the input starts further in)
    kwargs.pop("storage_offset", None)
    return args, kwargs


register([A + "stack.default"], "copy", _zero, _stack_links)
register([A + "roll.default"], "copy", _zero, _roll_links)
register([A + "flip.default"], "copy", _zero, _flip_links)
register([A + "as_strided.default"], "view", _zero, _as_strided_links)
register_rescale(A + "as_strided.default", _as_strided_rescale)


# ---- random ops: elementwise; split only where a part may draw its own numbers ------------------
# (``ops.node_draws_random``: MAGIS's fission refuses them, micro-batching draws per part)
register([A + "bernoulli.p", A + "bernoulli.default", A + "bernoulli.Tensor"], "elementwise",
         _times(2, _out_numel), _pointwise)
register([A + "native_dropout_backward.default"], "elementwise", _out_numel, _pointwise)
register([A + "rand_like.default", A + "randn_like.default"], "creation", _out_numel,
         lambda c: [DimLink(0, d, 0, d) for d in range(len(c.ins[0].shape)) if c.ins[0].shape[d] > 1])
register([A + "rand.default", A + "randn.default"], "creation", _out_numel, lambda c: [])


# ---- repeat, as_strided_scatter, softplus_backward ----------------------------------------------
def _repeat_links(c: OpCtx) -> list[DimLink]:
    """``repeat(x, repeats)``: the output tiles x ``repeats[d]`` times along d (new leading dims
    first); a dim repeated once is x's own and splits, a tiled one does not (a part of the tiling
    is no tiling of a part)."""
    x = c.ins[0].shape
    reps = list(c.arg(1))
    off = len(reps) - len(x)
    return [DimLink(0, d, 0, d + off) for d in range(len(x)) if reps[d + off] == 1 and x[d] > 1]


def _as_strided_scatter_links(c: OpCtx) -> list[DimLink]:
    """``as_strided_scatter(self, src, size, stride, offset)`` in its view pattern (the backward of an
    ``as_strided`` that is a reshape, ``_as_strided_links``): the strided view covers all of a fresh
    self with the contiguous strides of ``size``, so the output is src reshaped to self's shape; the
    outermost dims of self and src link (a part writes its own contiguous block)."""
    x, src = c.ins[0], c.ins[1]
    size, stride = list(c.arg(2)), list(c.arg(3))
    offset = c.kw("storage_offset", 4, None)
    if x.alias is not None or offset not in (None, 0) or tuple(size) != tuple(src.shape) \
            or math.prod(size) != x.numel or [s for s, n in zip(stride, size, strict=True) if n > 1] != \
            [s for s, n in zip(_contiguous_strides(size), size, strict=True) if n > 1]:
        return []
    pairs = reshape_links(tuple(x.shape), tuple(size))[:1]
    return [lk for a, b in pairs for lk in (DimLink(0, a, 0, a), DimLink(1, b, 0, a))]


def _as_strided_scatter_rescale(node: Node, full_ins, part_outs, in_split, args, kwargs):
    """A part's view: src's part shape (its split dim shrunk as much as the output) with its
    contiguous strides."""
    part = list(full_ins[1].shape)
    d = in_split[1] if len(in_split) > 1 else None
    if d is not None and d >= 0:
        part[d] = part[d] * part_outs[0].numel // full_ins[0].numel
    args[2] = part
    args[3] = _contiguous_strides(part)
    if len(args) > 4:
        args[4] = None  # the part's own offset (a slice of self starts further in its storage)
    kwargs.pop("storage_offset", None)
    return args, kwargs


register([A + "repeat.default"], "copy", _zero, _repeat_links)
register([A + "as_strided_scatter.default"], "copy", _zero, _as_strided_scatter_links)
register_rescale(A + "as_strided_scatter.default", _as_strided_scatter_rescale)
register([A + "softplus_backward.default"], "elementwise", _times(4, _out_numel), _pointwise)


# ---- routing (mixture of experts): topk, sort, histc, scatter, floor_divide, grouped matmul -------
def _along_links(c: OpCtx, pos: int) -> list[DimLink]:
    """An op that works along one dim of its input (``topk``, ``sort``; the dim at argument
    ``pos`` or keyword ``dim``, default the last): every other dim is independent and splits all
    its outputs.  The dim it works along does not (a part's top k or order is not a part of the
    whole's); ``ops_routing`` says when micro-batching may still split it."""
    x = c.ins[0].shape
    d = norm_dim(c.kw("dim", pos, -1), len(x)) if x else 0
    return [DimLink(0, k, j, k) for j in range(len(c.outs)) for k in range(len(x)) if k != d and x[k] > 1]


def _histc_links(c: OpCtx) -> list[DimLink]:
    """``histc(x, bins, min, max)``: counts over every element, so each dim of x is a sum (the
    histogram of a concatenation is the sum of the parts' histograms) -- with a fixed range; with
    ``min == max`` the range is x's own minimum and maximum, which a part does not know."""
    lo, hi = c.kw("min", 2, 0), c.kw("max", 3, 0)
    if lo == hi:
        return []
    return [DimLink(0, d, 0, -(d + 1)) for d in range(len(c.ins[0].shape)) if c.ins[0].shape[d] > 1]


def _scatter_links(c: OpCtx) -> list[DimLink]:
    """``scatter(self, dim, index, src | value)`` and ``scatter_add``: along every dim but ``dim``
    element i of index (and src) writes into element i of self, when index spans self there (a
    shorter index writes only self's first rows, which a part could not tell)."""
    x = c.ins[0].shape
    d = norm_dim(c.arg(1), len(x))
    ii, si = c.in_index(2), c.in_index(3)
    if ii is None:
        return []
    links: list[DimLink] = []
    for k in range(len(x)):
        if k == d or x[k] <= 1 or c.ins[ii].shape[k] != x[k] or (si is not None and c.ins[si].shape[k] != x[k]):
            continue
        links += [DimLink(0, k, 0, k), DimLink(ii, k, 0, k)] + ([DimLink(si, k, 0, k)] if si is not None else [])
    return links


def grouped_mm_form(c: OpCtx) -> str:
    """Which grouped matmul: ``"rows"`` -- input [M, K] x weight [E, K, N] -> [M, N], row r through
    the weight of its group (the forward and the input's gradient) -- or ``"inner"`` -- [K, M] x
    [M, N] -> [E, K, N], group e summing its own rows of M (the weight's gradient); ValueError for
    any other (batched or 3-D x 2-D) call."""
    a, b = c.ins[0].shape, c.ins[1].shape
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
        return "rows"
    if len(a) == 2 and len(b) == 2 and a[1] == b[0] and len(c.outs[0].shape) == 3:
        return "inner"
    raise ValueError("a grouped matmul of rows or of an inner dim in groups only")


def _grouped_mm_check(c: OpCtx) -> None:
    if grouped_mm_form(c) != "rows":
        raise ValueError("a grouped matmul of rows (input [M, K], weight [E, K, N]) only")


def _grouped_mm_links(c: OpCtx) -> list[DimLink]:
    """A grouped matmul (``torch._grouped_mm``, transformers' ``grouped_mm_fallback``) of rows,
    ``out[r] = input[r] @ weight[e(r)]`` with row r in group e(r) by its position against the
    cumulative ``offs``: K is a reduce axis and N splits the weight and the output; or of an inner
    dim in groups, ``out[e] = a[:, rows of e] @ b[rows of e]``: K and N split a, b and the output.
    The grouped rows do not split here: a part's rows would be counted against the whole's offsets
    (``ops_routing`` splits them together with the offsets)."""
    if grouped_mm_form(c) == "inner":
        return [DimLink(0, 0, 0, 1), DimLink(1, 1, 0, 2)]
    return [DimLink(0, 1, 0, -1), DimLink(1, 1, 0, -1), DimLink(1, 2, 0, 1)]


def _grouped_rows_links(c: OpCtx) -> list[DimLink]:
    """transformers' ``grouped_mm_fallback``: rows only (:func:`_grouped_mm_links`)."""
    _grouped_mm_check(c)
    return _grouped_mm_links(c)


def _grouped_mm_bwd_links(c: OpCtx) -> list[DimLink]:
    """``grouped_mm_fallback_backward(input, weight, offs, grad_out) -> (grad_input, grad_weight)``:
    grad_input[r] = grad_out[r] @ weight[e(r)].T (N summed, K splits with the weight's K) and
    grad_weight[e] = input[rows of e].T @ grad_out[rows of e] (K and N split with input and grad).
    K splits both outputs together (each has the shape of the input whose K it does not read)."""
    _grouped_mm_check(c)
    return [DimLink(1, 1, 0, 1), DimLink(0, 1, 0, 1), DimLink(3, 1, 0, -1), DimLink(1, 2, 0, -1),
            DimLink(0, 1, 1, 1), DimLink(1, 1, 1, 1), DimLink(3, 1, 1, 2)]


def _grouped_mm_flops(k: float):
    def flops(c: OpCtx) -> float:
        if grouped_mm_form(c) == "inner":
            kk, m = c.ins[0].shape
            return k * 2.0 * m * kk * c.ins[1].shape[1]
        m, kk = c.ins[0].shape
        return k * 2.0 * m * kk * c.ins[1].shape[2]
    return flops


GROUPED_MM = A + "_grouped_mm.default"
GROUPED_MM_FALLBACK = "transformers.grouped_mm_fallback.default"
GROUPED_MM_FALLBACK_BWD = "transformers.grouped_mm_fallback_backward.default"
register([A + "topk.default"], "index", _out_numel, lambda c: _along_links(c, 2))
register([A + "sort.default"], "index", _out_numel, lambda c: _along_links(c, 1))
register([A + "sort.stable"], "index", _out_numel, lambda c: _along_links(c, 99))
register([A + "histc.default"], "reduce", lambda c: float(c.ins[0].numel), _histc_links)
register([A + "scatter.src", A + "scatter.value", A + "scatter_add.default"], "index", _out_numel, _scatter_links)
register([A + "floor_divide.default", A + "floor_divide.Scalar"], "elementwise", _out_numel, _pointwise)
register([GROUPED_MM], "matmul", _grouped_mm_flops(1), _grouped_mm_links)
register([GROUPED_MM_FALLBACK], "matmul", _grouped_mm_flops(1), _grouped_rows_links)
register([GROUPED_MM_FALLBACK_BWD], "matmul", _grouped_mm_flops(2), _grouped_mm_bwd_links)


def _arange_rescale(node: Node, full_ins, part_outs, in_split, args, kwargs):
    """``arange(end)``, ``arange(0, end)``, ``arange(0, end, 1)``: a part's positions run to the
    part's length (only ``ops_routing`` lets an arange into a split: as part-local row positions)."""
    start = 0 if node.op == A + "arange.default" else (args[0] if args else kwargs.get("start", 0))
    step = args[2] if node.op == A + "arange.start_step" and len(args) > 2 else kwargs.get("step", 1)
    if start != 0 or step != 1:
        return None
    pos = 0 if node.op == A + "arange.default" else 1
    if pos < len(args):
        args[pos] = part_outs[0].shape[0]
    else:
        kwargs["end"] = part_outs[0].shape[0]
    return args, kwargs


for _op in (A + "arange.default", A + "arange.start", A + "arange.start_step"):
    register_rescale(_op, _arange_rescale)


def random_args(node: Node) -> bool:
    """An op whose randomness is an argument (attention dropout)."""
    return node.op in _SDPA and sdpa_dropout(node) > 0


# ---- device-neutral export ------------------------------------------------------------------------
# Device-specific kernels -> the runtime function (``codegen.runtime``) the exported script calls
# instead: the same outputs on any device.  The CPU kernel a CPU capture records runs as itself on
# the CPU and as the fused kernel torch would pick on CUDA; the CUDA kernels of a graph retargeted
# to CUDA (``codegen.target``) run as themselves on CUDA and as the CPU kernel on the CPU.
DEVICE_NEUTRAL = {
    A + "_scaled_dot_product_flash_attention_for_cpu.default": "attention_forward",
    A + "_scaled_dot_product_flash_attention_for_cpu_backward.default": "attention_backward",
    A + "_scaled_dot_product_efficient_attention.default": "efficient_attention_forward",
    A + "_scaled_dot_product_efficient_attention_backward.default": "efficient_attention_backward",
    A + "_scaled_dot_product_flash_attention.default": "flash_attention_forward",
    A + "_scaled_dot_product_flash_attention_backward.default": "flash_attention_backward",
}
# Outputs laid out in memory like one of the op's inputs (argument position), not contiguously:
# the attention output follows the query's layout (views the model takes of it rely on that).
LAYOUT_FROM = {A + "_scaled_dot_product_flash_attention_for_cpu.default": {0: 0},
               A + "_scaled_dot_product_efficient_attention.default": {0: 0},
               A + "_scaled_dot_product_flash_attention.default": {0: 0},
               A + "_scaled_dot_product_cudnn_attention.default": {0: 0}}


__all__ = ["DEVICE_NEUTRAL", "LAYOUT_FROM", "SDPA_OPS", "random_args", "sdpa_causal", "sdpa_dropout"]
