"""F-Trans of windows of the working schedule around its peak step (MAGIS section 6's hot-spot
guided fission, on the state's own graph).

The F-Tree's nodes are sub-graphs of the imported graph.  A state reached by other rules -- DTR's
recomputed copies put just before their backward readers, swaps -- has regions the F-Tree never
saw: the recomputed forward of a transformer's feed-forward together with its backward is one
region along the batch, and splitting it is what lowers a peak made of that feed-forward's
activations (each part recomputes and differentiates its slice).  :func:`peak_windows` builds such
regions from the schedule: the ops of the peak's largest dim component within a window of positions
around the peak step, trimmed to a valid S --

* ops that ``plan_split`` refuses by themselves (no dim links, random, not exactly one dim in the
  component) stay out;
* convexity: one pass in schedule order drops every op that a path from S through an op outside S
  reaches (what is left is convex: a path that leaves S never comes back);
* the weakly connected piece with the most ops is kept;

and each valid S is offered as an ordered F-Trans (the parts run S in the state's schedule, so a
recomputed copy still runs just before its reader) for each n of ``FISSION_NS`` that divides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..analysis.dgraph import DGraph, SplitError, plan_split
from ..ir import ops
from ..ir.graph import Graph, NodeKind
from ..transform.fission import Fission
from ..transform.rule import Application

# windows (positions before, after the peak step): small ones split the op at the peak and its
# neighbours, large ones a whole recomputed block with its backward
WINDOWS: tuple[tuple[int, int], ...] = ((20, 10), (60, 30), (120, 60), (250, 120), (500, 250))
FISSION_NS: tuple[int, ...] = (2, 4, 8)


def _component_of(dg: DGraph, v: int) -> tuple | None:
    """The component of ``v``'s D-nodes that spans the most ops (the batch, in a training step)."""
    comps = dg.components()
    mine = [(len(c), k) for k, c in comps.items() if v in c]
    return max(mine)[1] if mine else None


def _convex(g: Graph, s: set[int], order: Sequence[int], lo: int, hi: int) -> set[int]:
    """``s`` less every op a path from ``s`` through an op outside it reaches (``order[lo:hi+1]``
    holds ``s`` in a topological order, so such paths stay inside it)."""
    tainted: set[int] = set()  # outside s (or dropped from it), reached from s
    out = set()
    for v in order[lo:hi + 1]:
        preds = g.preds(v) if v in g.nodes else ()
        if v in s:
            if any(p in tainted for p in preds):
                tainted.add(v)
            else:
                out.add(v)
        elif any(p in out or p in tainted for p in preds):
            tainted.add(v)
    return out


def _largest_piece(g: Graph, s: set[int]) -> set[int]:
    """The weakly connected piece of G[s] with the most ops."""
    left, best = set(s), set()
    while left:
        v = left.pop()
        piece, stack = {v}, [v]
        while stack:
            u = stack.pop()
            for w in (*g.preds(u), *g.users(u)):
                if w in left:
                    left.discard(w)
                    piece.add(w)
                    stack.append(w)
        if len(piece) > len(best):
            best = piece
    return best


def peak_windows(g: Graph, order: Sequence[int], step: int,
                 windows: Iterable[tuple[int, int]] = WINDOWS, ns: Iterable[int] = FISSION_NS,
                 min_ops: int = 4) -> list[Application]:
    """Ordered F-Trans applications of windows of ``order`` around position ``step`` (see the
    module's text), smallest window first; windows whose trimmed S is not a valid split, or repeats
    a smaller window's, are left out."""
    pos = {v: i for i, v in enumerate(order)}
    center = next((order[i] for d in range(0, 64) for i in (step - d, step + d)
                   if 0 <= i < len(order) and g.nodes[order[i]].kind == NodeKind.OP), None)
    if center is None:
        return []
    out: list[Application] = []
    seen: set[frozenset[int]] = set()
    for before, after in windows:
        lo, hi = max(0, step - before), min(len(order) - 1, step + after)
        w = [v for v in order[lo:hi + 1]
             if g.nodes[v].kind in (NodeKind.OP, NodeKind.FISSION) and not ops.node_draws_random(g.nodes[v])]
        dg = DGraph(g, w)
        comp = _component_of(dg, center)
        if comp is None:
            continue
        s = {v for v in w if v not in dg.unknown
             and all(len([k for k in dg.keys(v, comp) if k[1] == j]) == 1 for j in range(len(g.nodes[v].outputs)))}
        s = _largest_piece(g, _convex(g, s, order, lo, hi))
        if len(s) < min_ops or frozenset(s) in seen:
            continue
        seen.add(frozenset(s))
        sdg = DGraph(g, s)  # what the F-Trans itself builds (S's links alone)
        comps = sdg.components()
        if not comps:
            continue
        key = max(comps, key=lambda k: (len(comps[k]), k))
        try:
            listed = sorted(s, key=pos.__getitem__)
            split = plan_split(g, sdg, s, key, order=listed)
        except SplitError:
            continue
        out.extend(Fission.ordered_application(n, key, listed) for n in ns if split.length % n == 0)
    return out
