"""Row routing in a split (the check behind ``ir.ops_routing``'s links): an F-Trans along the batch
may hold ops that reorder the split dim's rows by their values -- a mixture of experts sorts its
tokens by expert, runs a grouped matmul over the sorted rows and restores their order -- when the
sub-graph as a whole still computes each row from its own rows alone.

MAGIS's constraint (section 4.2) is op by op: each op of S, run on a part of its inputs, computes
that part of its output.  Routing ops do not: a part sorts its own rows, and the positions it
gathers by are positions inside the part.  The split is still exact when each tensor's rows are
followed by *identity*, not by position: in each part every row of every tensor holds what the
row of the same identity holds in the whole step.  :func:`check` proves that op by op, with

* the *order* of each tensor's rows along the split dim: ``"id"`` (the batch's own order: a part
  is a slice of the whole), ``("sort", v)`` (sorted by sort ``v``; each part its own rows sorted)
  or ``ANY`` (rows that do not depend on their identity: a ``zeros_like``, a broadcast);
* which integer tensors hold *row positions* (:class:`Pos`): a sort's permutation, an ``arange``
  of the split dim, ``perm // k``, an inverse permutation.  The part's are positions within the
  part, so they may only index the split dim they count (a gather, an ``index_put``), never be
  computed with otherwise or leave the sub-graph.

The rules: an op that works row by row needs all its row inputs in one order, and keeps it (a row
permuted by a sort is not merged with or split into others: size-preserving links only); a sum
over the rows is the same in any order.  ``sort`` along the split dim of rows in the batch's order
gives rows in its order and positions of the input's rows; a gather ``self[idx]`` along self's
split dim needs ``idx`` to hold positions in self's order and gives ``idx``'s rows; ``out[idx] =
values`` needs ``idx`` positions (distinct ones, unless the values are added) and gives rows in
the order the positions count; ``floor_divide(positions, k)`` counts rows k times coarser (the
token of a (token, expert) pair: the split length must divide by k, which joins the split's
lengths).  A part reads a partial sum in one place only: the grouped matmul's offsets, from
``cumsum(histc(keys))`` of the keys its rows are sorted by (ascending integer keys, one bin per
expert): a part's offsets count the part's rows, as its sorted rows need.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SplitError
from ..ir import ops
from ..ir.graph import Graph, NodeKind, TRef
from ..ir.ops_routing import (
    ARANGES,
    GATHERS,
    GROUPED_MM,
    GROUPED_MMS,
    SCATTERS,
    SORTS,
    sort_descending,
    sort_dim,
)

ANY = "any"  # rows whose values do not depend on their identity
KEEP_VALUES = frozenset(ops.A + o for o in (
    "view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default", "squeeze.dim", "squeeze.dims",
    "squeeze.default", "clone.default", "contiguous.default", "alias.default", "detach.default",
    "lift_fresh_copy.default", "_to_copy.default"))  # ops whose outputs hold their input's values
SUBSETS = (ops.A + "slice.Tensor", ops.A + "select.int")  # views that keep some of the values
FLOOR_DIVIDE = (ops.A + "floor_divide.default", ops.A + "floor_divide.Scalar")
CUMSUM = ops.A + "cumsum.default"
HISTC = ops.A + "histc.default"
GROUPED_BWD = "transformers.grouped_mm_fallback_backward.default"
ASSERT = ops.A + "_assert_tensor_metadata.default"


@dataclass(frozen=True)
class Pos:
    """An integer tensor whose values are positions of the rows of a split dim of ``length``, counted
    in row order ``order`` ("self": the order of the tensor's own rows, an ``arange``);
    ``distinct``: no position twice."""

    order: object
    length: int
    distinct: bool


def _int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def positional(g: Graph) -> set[TRef]:
    """The tensors of ``g`` that may hold row positions (the candidates :func:`check` proves or
    refuses): sort permutations, aranges, and what keeps or coarsens their values (views, integer
    copies, ``floor_divide`` by an integer, a gather of them, an inverse permutation)."""
    found: set[TRef] = set()
    for v in g.topo_order():
        n = g.nodes[v]
        if n.kind != NodeKind.OP:
            continue
        ins = n.inputs()
        if n.op in SORTS and len(n.outputs) > 1:
            found.add(TRef(v, 1))
        elif n.op in ARANGES:
            found.add(TRef(v, 0))
        elif n.op in (*KEEP_VALUES, *SUBSETS) and ins and ins[0] in found and _int(n.outputs[0].dtype):
            found.add(TRef(v, 0))  # (a subset of positions: ``check`` refuses it, by name)
        elif n.op in FLOOR_DIVIDE and ins and ins[0] in found and len(n.args) > 1 and isinstance(n.args[1], int):
            found.add(TRef(v, 0))
        elif n.op in GATHERS and ins and ins[0] in found:
            found.add(TRef(v, 0))
        elif n.op in SCATTERS and len(n.args) > 2 and n.args[2] in found \
                and any(r in found for r in n.args[1] if isinstance(r, TRef)):
            found.add(TRef(v, 0))
    return found


def links(g: Graph, n, found: set[TRef]) -> list[ops.DimLink] | None:
    """Op ``n``'s D-Graph edges for micro-batching (``ops.routed_links``), its positional inputs from
    ``found`` (:func:`positional`)."""
    c = ops.ctx(n, g.tensor)
    pos = frozenset(i for i, r in enumerate(n.inputs()) if r in found)
    return ops.routed_links(c, pos)


def check(g: Graph, order: list[int], s: set[int], out_dims: Mapping[TRef, int],
          in_dims: Mapping[TRef, int | None], dlinks: Mapping[int, list[ops.DimLink]],
          partial_reads: list[tuple[int, int]]) -> int:
    """Check the row routing of split S (``order``: S in the part's order; ``out_dims``, ``in_dims``:
    ``plan_split``'s; ``dlinks``: each op's links; ``partial_reads``: (reader, input index) of S's
    reads of a partial sum inside S).  Returns the lengths the split must also divide (``k`` of a
    ``positions // k``, 0 for none); SplitError naming the op that breaks a rule."""
    ordr: dict[TRef, object] = {}
    pos: dict[TRef, Pos] = {}
    keys: dict[TRef, int] = {}  # tensor -> the sort whose sorted values it holds
    counts: dict[TRef, tuple] = {}  # histc / cumsum of sorted keys: (kind, sort, bins, min, max)
    allowed: set[tuple[int, int]] = set()
    extra = 0

    def dim_of(r: TRef) -> int | None:
        return out_dims.get(r) if r.node in s else in_dims.get(r)

    def order_of(r: TRef) -> object:
        return ordr.get(r, "id") if r.node in s else "id"

    for v in order:
        n = g.nodes[v]
        ins = list(n.inputs())
        outs = [TRef(v, j) for j in range(len(n.outputs))]
        rows = [(i, r, d) for i, r in enumerate(ins) if (d := dim_of(r)) is not None and d >= 0]
        if n.kind == NodeKind.OP and n.op in ops.VALUE_FREE:
            for o in outs:
                ordr[o] = ANY
            continue
        special = _special(g, n, v, ins, outs, dim_of, order_of, ordr, pos, keys, counts, allowed, out_dims)
        if special is not None:
            extra = math.gcd(extra, special)
            continue
        # an op that works row by row (or sums over the rows)
        tags = {order_of(r) for _, r, _ in rows} - {ANY}
        if len(tags) > 1:
            raise SplitError(f"{n.name!r} combines rows in different orders (one of them sorted inside the part)")
        t = tags.pop() if tags else ANY
        if t != "id" and t != ANY:
            if n.kind != NodeKind.OP:
                raise SplitError(f"{n.name!r} reads rows sorted inside the part")
            c = ops.ctx(n, g.tensor)
            for i, _r, d in rows:
                for j, o in enumerate(outs):
                    od = out_dims.get(o, -1)
                    if od >= 0 and not any(lk.input == i and lk.in_dim == d and lk.output == j and lk.out_dim == od
                                           and c.ins[i].shape[d] == c.outs[j].shape[od] for lk in dlinks.get(v, ())):
                        raise SplitError(f"{n.name!r} ({n.op}) merges or splits rows sorted inside the part")
        held = [r for r in ins if r in pos]
        if held:
            if n.op in KEEP_VALUES and ins[0] in pos and len(ins) == 1 and _int(n.outputs[0].dtype):
                pos[outs[0]] = pos[ins[0]]
            else:
                raise SplitError(f"{n.name!r} ({n.op}) computes with row positions that are a part's own "
                                 f"({g.nodes[held[0].node].name!r})")
        if n.op in KEEP_VALUES and ins and ins[0] in keys:
            keys[outs[0]] = keys[ins[0]]
        for o in outs:
            ordr[o] = t if out_dims.get(o, -1) >= 0 else ANY  # a partial sum has no rows
    bad = sorted((rv, i) for rv, i in partial_reads if (rv, i) not in allowed)
    if bad:
        rv, i = bad[0]
        r = g.nodes[rv].inputs()[i]
        raise SplitError(f"{g.nodes[rv].name!r} reads a partial sum of {g.nodes[r.node].name!r} inside the sub-graph")
    graph_outs = g.output_refs()
    for v in order:
        for j in range(len(g.nodes[v].outputs)):
            r = TRef(v, j)
            if ordr.get(r, "id") in ("id", ANY) and r not in pos:
                continue
            readers = [u for u in g.readers(r) if u not in s]
            if r in graph_outs or any(not _blind(g, u) for u in readers):
                what = "part-local row positions" if r in pos else "rows sorted inside the part"
                raise SplitError(f"{g.nodes[v].name!r} holds {what} and is read outside the sub-graph")
    return extra


def _blind(g: Graph, u: int) -> bool:
    """A reader that checks dtype, device and layout only (not the values, not the size)."""
    n = g.nodes[u]
    return n.op == ASSERT and all(a is None for a in n.args[1:3]) \
        and n.kwargs.get("size") is None and n.kwargs.get("stride") is None


def _special(g, n, v, ins, outs, dim_of, order_of, ordr, pos, keys, counts, allowed, out_dims) -> int | None:
    """The rule of a routing op where it routes (returns the length it adds, 0 for none), else None
    (the row-by-row rule applies)."""
    if n.kind != NodeKind.OP:
        return None
    op = n.op
    if op in SORTS and len(outs) > 1:
        c = ops.ctx(n, g.tensor)
        d = sort_dim(c)
        if dim_of(ins[0]) != d:
            return None
        if order_of(ins[0]) != "id" or ins[0] in pos:
            raise SplitError(f"{n.name!r} sorts rows that are already routed")
        root = _original(g, v)  # a recomputed copy of a sort gives its original's order
        for o in outs:
            ordr[o] = ("sort", root)
        pos[outs[1]] = Pos("id", c.ins[0].shape[d], True)
        keys[outs[0]] = root
        return 0
    if op in FLOOR_DIVIDE and ins and ins[0] in pos:
        p = pos[ins[0]]
        k = n.args[1] if len(n.args) > 1 else None
        if p.order != "id" or not isinstance(k, int) or k <= 0 or p.length % k:
            raise SplitError(f"{n.name!r} divides row positions by {k!r}: not a coarser row of the split dim")
        pos[outs[0]] = Pos("id", p.length // k, False)
        ordr[outs[0]] = order_of(ins[0])
        return p.length // k
    if op in ARANGES:
        ordr[outs[0]] = ANY
        pos[outs[0]] = Pos("self", g.nodes[v].outputs[0].shape[0], True)
        return 0
    if op in GATHERS:
        return _gather(g, n, v, ins, outs, dim_of, order_of, ordr, pos)
    if op in SCATTERS:
        return _scatter(g, n, v, ins, outs, dim_of, order_of, ordr, pos)
    if op == HISTC and ins and ins[0] in keys:
        lo, hi = n.kwargs.get("min", n.args[2] if len(n.args) > 2 else 0), n.kwargs.get("max", n.args[3] if len(n.args) > 3 else 0)
        bins = n.kwargs.get("bins", n.args[1] if len(n.args) > 1 else 100)
        counts[outs[0]] = ("counts", keys[ins[0]], bins, lo, hi)
        return None  # otherwise a sum over the rows
    if op == CUMSUM and ins and (dim_of(ins[0]) or 0) < 0:
        cnt = counts.get(ins[0])
        if cnt is None or cnt[0] != "counts":
            raise SplitError(f"{n.name!r} reads a partial sum of {g.nodes[ins[0].node].name!r} inside the sub-graph")
        counts[outs[0]] = ("offs", *cnt[1:])
        allowed.add((v, 0))
        ordr[outs[0]] = ANY
        return 0
    inner = op == GROUPED_MM and len(ins) > 2 and len(g.tensor(ins[1]).shape) == 2  # [K, M] x [M, N] -> [E, K, N]
    if (op in GROUPED_MMS or op == GROUPED_BWD) and ins and dim_of(ins[0]) == (1 if inner else 0):
        rows = [0, 1] if inner else [0] if op in GROUPED_MMS else [0, 3]
        if inner and dim_of(ins[1]) != 0:
            raise SplitError(f"{n.name!r}: a grouped matmul of an inner dim split in one operand only")
        t = {order_of(ins[i]) for i in rows}
        offs = counts.get(ins[2]) if len(ins) > 2 else None
        groups = len(g.tensor(ins[2]).shape) and g.tensor(ins[2]).shape[0]
        if len(t) != 1 or not isinstance(next(iter(t)), tuple) or offs is None or offs[0] != "offs" \
                or next(iter(t)) != ("sort", offs[1]):
            raise SplitError(f"{n.name!r}: a grouped matmul whose rows are not sorted by the keys its "
                             f"offsets count inside the part")
        sv = offs[1]
        src = g.nodes[sv]
        bins, lo, hi = offs[2:]
        if sort_descending(src) or not _int(g.tensor(src.inputs()[0]).dtype) or bins != groups or lo != 0 \
                or hi != bins - 1:
            raise SplitError(f"{n.name!r}: its offsets are not one bin per expert of keys sorted ascending")
        allowed.add((v, 2))
        ordr[outs[0]] = ANY if inner else ("sort", sv)  # (the inner form's output is a partial sum)
        return 0
    return None


def _original(g: Graph, v: int) -> int:
    """The op a recomputed copy stands for (``remat``: the same values, ``ir.lint.recomputes_same``)."""
    while g.nodes[v].recompute_of is not None and g.nodes[v].recompute_of in g.nodes:
        v = g.nodes[v].recompute_of
    return v


def _index_list(n):
    return n.args[1] if len(n.args) > 1 else n.kwargs.get("indices", [])


def _gather(g, n, v, ins, outs, dim_of, order_of, ordr, pos) -> int | None:
    src = n.args[0]
    e = dim_of(src)
    lst = list(_index_list(n))
    if e is None or e < 0 or e >= len(lst) or not isinstance(lst[e], TRef):
        if any(isinstance(r, TRef) and r in pos for r in lst):
            raise SplitError(f"{n.name!r} indexes a dim that is not split by a part's own row positions")
        return None
    idx = lst[e]
    p = pos.get(idx)
    if p is None or p.length != g.tensor(src).shape[e]:
        raise SplitError(f"{n.name!r} gathers along the split dim by an index that is not a part's own row positions")
    if any(isinstance(r, TRef) and r != idx and (r in pos or dim_of(r) is not None) for r in lst):
        raise SplitError(f"{n.name!r} gathers along the split dim with other split indices beside it")
    o_src, o_idx = order_of(src), order_of(idx)
    if p.order == "self":
        if o_idx not in (ANY, o_src) and o_src != ANY:
            raise SplitError(f"{n.name!r}: an arange's positions index rows in another order")
        ordr[outs[0]] = o_src
    else:
        if o_src not in (ANY, p.order):
            raise SplitError(f"{n.name!r} gathers rows by positions counted in another order")
        ordr[outs[0]] = o_idx
    if src in pos:
        pos[outs[0]] = pos[src]
    return 0


def _scatter(g, n, v, ins, outs, dim_of, order_of, ordr, pos) -> int | None:
    self_, lst, vals = n.args[0], list(_index_list(n)), n.args[2]
    e = dim_of(outs[0])
    if e is None or e < 0 or e >= len(lst) or not isinstance(lst[e], TRef):
        if any(isinstance(r, TRef) and r in pos for r in lst):
            raise SplitError(f"{n.name!r} scatters along a dim that is not split by a part's own row positions")
        return None
    idx = lst[e]
    p = pos.get(idx)
    if p is None or p.order == "self" or p.length != n.outputs[0].shape[e]:
        raise SplitError(f"{n.name!r} writes along the split dim at an index that is not a part's own row positions")
    accumulate = bool(n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False))
    if not accumulate and not p.distinct:
        raise SplitError(f"{n.name!r} writes rows at positions that may repeat")
    if dim_of(self_) != e or order_of(self_) not in (ANY, p.order) or (self_ in pos and order_of(self_) != ANY):
        raise SplitError(f"{n.name!r} writes routed rows into a tensor of other rows")
    if any(isinstance(r, TRef) and r != idx and (r in pos or dim_of(r) is not None) for r in lst):
        raise SplitError(f"{n.name!r} scatters along the split dim with other split indices beside it")
    o_idx = order_of(idx)
    if isinstance(vals, TRef) and dim_of(vals) is not None and dim_of(vals) >= 0 \
            and order_of(vals) not in (ANY, o_idx):
        raise SplitError(f"{n.name!r}: its values' rows are not its index's rows")
    ordr[outs[0]] = p.order
    if isinstance(vals, TRef) and vals in pos:
        q = pos[vals]
        pos[outs[0]] = Pos(o_idx, q.length, q.distinct) if q.order == "self" else q
        if q.order == "self" and o_idx == ANY:
            raise SplitError(f"{n.name!r}: positions of rows of no order")
    return 0


__all__ = ["ANY", "Pos", "check", "links", "positional"]
