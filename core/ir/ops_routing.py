"""Row routing: dim links of the ops that move the rows of a split dim by their values -- the
dispatch of a mixture of experts -- for the D-Graph of micro-batching (MAGIS section 4.1's links,
``analysis.routing`` checks a split that uses them).

A transformers MoE layer (``integrations.moe.grouped_mm_experts_forward``) routes its T x k
(token, expert) pairs as ``ids, perm = sort(expert_ids)``; ``x[perm // k]``; a grouped matmul whose
row blocks are ``cumsum(histc(ids))``; ``out[inv_perm]`` with ``inv_perm[perm] = arange(T k)``; and
the backward scatters the gradients back the same way.  Each token's result depends on that token
alone, so gradient accumulation over parts of the batch computes the same step (each part sorts,
groups and restores its own tokens) -- but op by op it does not: a part's sort is no part of the
whole's sort, and the part's ``perm`` holds positions inside the part.  The registry's links
(``ops_modern``) are exact op by op and leave those dims out; the links here join them to the
batch, for ``analysis.routing`` to check the split as a whole:

* ``sort`` along the split dim: its outputs' rows are the input's rows, in another order;
* ``index`` (a gather) whose index along a split dim of self holds row positions: the output's
  rows are the index's rows;
* ``index_put`` whose index along the split dim holds row positions: self, the index's rows and
  values' rows are the output's rows (instead of a sum over the index rows: ``ops_modern``);
* ``cumsum`` of a 1-D partial sum (a part's ``histc``): cumsum is linear, so it passes the partial
  sum on;
* a grouped matmul: its rows (input, gradient) are the output's rows -- or, grouping an inner dim
  (the weight's gradient), a sum over them -- its offsets the part's own (a partial sum read by
  the part).

``positional`` inputs (which integer tensors may hold row positions: ``analysis.routing``) decide
where the gather and scatter links apply.  ``ROUTED`` maps an op to a function of its context and the
indices (in ``ctx.ins``) of its positional inputs that returns its links, replacing the registry's.
"""

from __future__ import annotations

from collections.abc import Callable

from .op_base import A, DimLink, OpCtx, norm_dim
from .ops_modern import (
    GROUPED_MM,
    GROUPED_MM_FALLBACK,
    GROUPED_MM_FALLBACK_BWD,
    _index_layout,
    grouped_mm_form,
)

RoutedFn = Callable[[OpCtx, frozenset[int], list[DimLink]], list[DimLink]]
ROUTED: dict[str, RoutedFn] = {}

SORTS = (A + "sort.default", A + "sort.stable")
GATHERS = (A + "index.Tensor", A + "_unsafe_index.Tensor")
SCATTERS = (A + "index_put.default", A + "_unsafe_index_put.default")
ARANGES = (A + "arange.default", A + "arange.start", A + "arange.start_step")
GROUPED_MMS = (GROUPED_MM, GROUPED_MM_FALLBACK)


def sort_dim(c: OpCtx) -> int:
    """The dim a ``sort`` sorts along."""
    return norm_dim(c.kw("dim", 1 if c.node.op == A + "sort.default" else 99, -1), len(c.ins[0].shape))


def sort_descending(node) -> bool:
    if node.op == A + "sort.default":
        return bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("descending", False))
    return bool(node.kwargs.get("descending", False))


def _sort(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    d = sort_dim(c)
    if c.ins[0].shape[d] <= 1:
        return exact
    return exact + [DimLink(0, d, j, d) for j in range(len(c.outs))]


def _gather(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    lay = _index_layout(c, 1)
    if lay is None:
        return exact
    idx, first, _last, bshape, adjacent = lay
    if sum(1 for b in bshape if b > 1) != 1:
        return exact  # rows of one index dim only (a grid of positions would join two dims)
    start = first if adjacent else 0
    links = list(exact)
    for e, i in enumerate(idx):
        if i is not None and i in pos and c.ins[0].shape[e] > 1:
            links += [DimLink(0, e, 0, start + be) for be in range(len(bshape)) if bshape[be] > 1]
    return links


def _scatter(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    lay = _index_layout(c, 1)
    vi = c.in_index(2)
    if lay is None or vi is None:
        return exact
    idx, first, _last, bshape, adjacent = lay
    at = [e for e, i in enumerate(idx) if i is not None]
    if len(at) != 1 or idx[at[0]] not in pos or sum(1 for b in bshape if b > 1) != 1:
        return exact
    e, i = at[0], idx[at[0]]
    x, vals, s = c.ins[0].shape, c.ins[vi].shape, c.ins[i].shape
    if x[e] <= 1:
        return exact
    start = first if adjacent else 0
    off = len(x) - 1 + len(bshape) - len(vals)  # values' dims at the right of self[indices]'s
    links = [lk for lk in exact if lk.out_dim >= 0] + [DimLink(0, e, 0, e)]
    links += [DimLink(i, k, 0, e) for k in range(len(s)) if s[k] > 1 and s[k] == bshape[k + len(bshape) - len(s)]]
    links += [DimLink(vi, start + be - off, 0, e) for be in range(len(bshape))
              if bshape[be] > 1 and 0 <= start + be - off < len(vals) and vals[start + be - off] == bshape[be]]
    return links


def _cumsum(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    if len(c.ins[0].shape) == 1 and norm_dim(c.arg(1), 1) == 0:
        return exact + [DimLink(0, -1, 0, -1)]
    return exact


def _grouped(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    if len(c.ins) < 3:
        return exact
    if grouped_mm_form(c) == "inner":  # [K, M] x [M, N] -> [E, K, N]: the rows of M summed per group
        return exact + [DimLink(0, 1, 0, -1), DimLink(1, 0, 0, -1), DimLink(2, -1, 0, -1)]
    return exact + [DimLink(0, 0, 0, 0), DimLink(2, -1, 0, 0)]


def _grouped_bwd(c: OpCtx, pos: frozenset[int], exact: list[DimLink]) -> list[DimLink]:
    if c.ins[0].shape[0] <= 1:
        return exact
    return exact + [DimLink(0, 0, 0, 0), DimLink(3, 0, 0, 0), DimLink(0, 0, 1, -1), DimLink(3, 0, 1, -1),
                    DimLink(2, -1, 0, 0), DimLink(2, -1, 1, -1)]


for _op in SORTS:
    ROUTED[_op] = _sort
for _op in GATHERS:
    ROUTED[_op] = _gather
for _op in SCATTERS:
    ROUTED[_op] = _scatter
ROUTED[A + "cumsum.default"] = _cumsum
for _op in GROUPED_MMS:
    ROUTED[_op] = _grouped
ROUTED[GROUPED_MM_FALLBACK_BWD] = _grouped_bwd


__all__ = ["ARANGES", "GATHERS", "GROUPED_MMS", "ROUTED", "SCATTERS", "SORTS", "sort_descending", "sort_dim"]
