"""HMCOS's hierarchical computation graph (Wang et al., DAC'22, section 3.1): groups of sequences.

Sequences (3.1.1) are the units of a ``units.UnitProblem`` built with ``sequences=True``
(``units.join_sequences``); this module groups them.

Groups (3.1.2).  Our graphs carry no NAS cell labels, so cells are derived structurally:

1. cell outputs are join units b (two or more predecessors); the cell of b is the region HMCOS's
   release builds -- walking back from b through units post-dominated by b that do not strictly
   dominate b -- kept when it has ``min_group``..``max_group`` units.  Regions are taken largest
   first, and smaller regions inside an accepted one are absorbed, so the granularity is the
   largest DP-tractable single-exit region (in a NAS net: the cell ending at its concat; in
   RandWire: a whole stage ending at its output average).
2-4. (``level="complete"``) for each cell output b, the sets C of units dominated by b that contain
   b and are closed under predecessors within them are searched (bounded) for the one whose
   outgoing values are smallest (ties: larger C); when |C| > 2, C - {b} is taken out of its groups
   into a new *intrusion* group, so that b's consumers that shrink it are scheduled together.

Every group must be convex (no path leaves and re-enters it) and the quotient graph acyclic, so a
group can run atomically; a group violating this is shrunk or dissolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis.dominators import DomTree, dag_idom
from .footprint import bits
from .units import UnitProblem


# ------------------------------------------------------------------------------------------------
# Groups
# ------------------------------------------------------------------------------------------------
@dataclass
class Hierarchy:
    """Sequences (the units of ``P``) and disjoint, convex groups of them."""

    P: UnitProblem
    groups: list[list[int]] = field(default_factory=list)  # unit indices, topologically sorted
    kinds: list[str] = field(default_factory=list)  # "cell" | "intrusion"
    outputs: list[int] = field(default_factory=list)  # the cell output unit, -1 for intrusions
    group_of: list[int] = field(default_factory=list)  # unit -> group index or -1


def unit_graph(P: UnitProblem) -> tuple[list[list[int]], list[list[int]]]:
    preds = [bits(P.upred[u]) for u in range(P.n_units)]
    succs = [list(s) for s in P.usucc]
    return preds, succs


def build_hierarchy(P: UnitProblem, level: str = "complete", min_group: int = 3, max_group: int = 64,
                    intrusion_scope: int = 10) -> Hierarchy:
    """Groups over the sequences of ``P``: ``level`` is "sequence" (none), "cell" or "complete"."""
    nu = P.n_units
    H = Hierarchy(P, group_of=[-1] * nu)
    if level in ("none", "sequence") or nu == 0:
        return H
    preds, succs = unit_graph(P)
    # units are topologically numbered (join order follows the op index order)
    assert all(p < u for u in range(nu) for p in preds[u])
    model = P.model
    sink_units = set()
    for u in range(nu):
        if not succs[u]:
            sink_units.add(u)
        for i in P.unit_ops(P.units[u]):
            if any(model.kept[s] for s in model.produces[i]):
                sink_units.add(u)
    dom = DomTree(dag_idom(preds))
    # post-dominators: the reversed graph, renumbered r = nu - 1 - u so that it is topological; a
    # unit that is a sink or produces a graph output hangs off the virtual exit directly
    rpreds = [[] if (nu - 1 - r) in sink_units else [nu - 1 - s for s in succs[nu - 1 - r]]
              for r in range(nu)]
    pdom = DomTree(dag_idom(rpreds))

    def postdominates(b: int, u: int) -> bool:
        return pdom.dominates(nu - 1 - b, nu - 1 - u)

    # 1. cells
    cands: list[tuple[int, int, list[int]]] = []
    for b in range(nu):
        if len(preds[b]) < 2:
            continue
        region = _region(b, preds, lambda u, b=b: postdominates(b, u) and not (u != b and dom.dominates(u, b)),
                         set(), max_group + 1)
        if min_group <= len(region) <= max_group:
            cands.append((-len(region), b, region))
    cands.sort()
    taken: set[int] = set()
    for _, b, _ in cands:
        if b in taken:
            continue
        region = _region(b, preds, lambda u, b=b: postdominates(b, u) and not (u != b and dom.dominates(u, b)),
                         taken, max_group + 1)
        region = _convexify(region, preds, succs, b)
        if b in region and min_group <= len(region) <= max_group:
            _add_group(H, region, "cell", b)
            taken.update(region)
    # 2-4. intrusion groups
    if level == "complete":
        for g in range(len(H.groups)):
            if H.kinds[g] != "cell" or not H.groups[g]:
                continue
            b = H.outputs[g]
            chosen = _min_output_set(P, b, dom, succs, preds, intrusion_scope)
            if len(chosen) <= 2:
                continue
            intr = sorted(set(chosen) - {b})
            intr = _convexify(intr, preds, succs, None)
            if len(intr) < 2:
                continue
            for u in intr:
                og = H.group_of[u]
                if og >= 0:
                    H.groups[og].remove(u)
                    H.group_of[u] = -1
            _add_group(H, intr, "intrusion", -1)
    _repair(H, preds, succs, min_size=2)
    return H


def _region(b: int, preds: list[list[int]], pred_ok, taken: set[int], limit: int) -> list[int]:
    """Units reachable backwards from ``b`` through units satisfying ``pred_ok`` (not in ``taken``)."""
    seen = {b}
    stack = [b]
    while stack and len(seen) <= limit:
        v = stack.pop()
        for p in preds[v]:
            if p not in seen and p not in taken and pred_ok(p):
                seen.add(p)
                stack.append(p)
    return sorted(seen)


def _convexify(region: list[int], preds: list[list[int]], succs: list[list[int]], keep: int | None) -> list[int]:
    """Shrink ``region`` until no path leaves it and comes back: drop members below an outside
    node that lies between two members."""
    R = set(region)
    while True:
        if not R:
            return []
        lo = min(R)
        hi = max(R)
        # descendants of R (within [lo, hi]) and ancestors of R
        desc: set[int] = set()
        for u in range(lo, hi + 1):
            if u in R or any(p in desc or p in R for p in preds[u]):
                if u not in R:
                    desc.add(u)
        anc: set[int] = set()
        for u in range(hi, lo - 1, -1):
            if u not in R and any(s in anc or s in R for s in succs[u]):
                anc.add(u)
        X = desc & anc
        if not X:
            return sorted(R)
        bad: set[int] = set()
        for u in range(lo, hi + 1):
            if u in X or any(p in bad for p in preds[u]):
                bad.add(u)
        R -= bad
        if keep is not None and keep not in R:
            return []


def _add_group(H: Hierarchy, units: list[int], kind: str, out: int) -> None:
    gid = len(H.groups)
    H.groups.append(sorted(units))
    H.kinds.append(kind)
    H.outputs.append(out)
    for u in units:
        H.group_of[u] = gid


def _min_output_set(P: UnitProblem, b: int, dom: DomTree, succs: list[list[int]], preds: list[list[int]],
                    scope: int) -> list[int]:
    """HMCOS 3.1.2 steps 2-3: among sets C of units dominated by ``b``, containing b and closed under
    predecessors inside the candidate set, the one with the smallest outgoing value size (ties:
    larger).  The search looks at the ``scope`` nearest dominated units (breadth first from b)."""
    model = P.model
    dominated: list[int] = []
    seen = {b}
    queue = [b]
    while queue and len(dominated) < scope:
        v = queue.pop(0)
        for s in succs[v]:
            if s not in seen and dom.dominates(b, s):
                seen.add(s)
                dominated.append(s)
                queue.append(s)
                if len(dominated) >= scope:
                    break
    cand = [b] + sorted(dominated)
    local = {u: k for k, u in enumerate(cand)}
    unit_of = P.unit_of
    # per candidate unit: (bytes, local mask of reader units, read/kept outside the candidates)
    outs: list[list[tuple[int, int, bool]]] = []
    for u in cand:
        lst = []
        for i in P.unit_ops(P.units[u]):
            for s in model.produces[i]:
                m, outside = 0, model.kept[s]
                for r in model.members[s]:
                    ru = unit_of.get(r)
                    if ru == u:
                        continue
                    if ru is not None and ru in local:
                        m |= 1 << local[ru]
                    elif r not in P.lazy:
                        outside = True
                lst.append((model.size[s], m, outside))
        outs.append(lst)
    lpreds = [sum(1 << local[p] for p in preds[u] if p in local) for u in cand]

    def out_size(C: int) -> int:
        tot = 0
        k = 0
        c = C
        while c:
            if c & 1:
                for sz, m, outside in outs[k]:
                    if outside or m & ~C:
                        tot += sz
            c >>= 1
            k += 1
        return tot

    best = (out_size(1), -1, 1)
    frontier = [1]
    visited = {1}
    n = len(cand)
    while frontier and len(visited) < 1024:
        nxt = []
        for C in frontier:
            for k in range(1, n):
                bit = 1 << k
                if C & bit or lpreds[k] & ~C:
                    continue
                C2 = C | bit
                if C2 in visited:
                    continue
                visited.add(C2)
                nxt.append(C2)
                key = (out_size(C2), -C2.bit_count(), C2)
                if key < best:
                    best = key
        frontier = nxt
    return [cand[k] for k in range(n) if best[2] >> k & 1]


def _repair(H: Hierarchy, preds: list[list[int]], succs: list[list[int]], min_size: int) -> None:
    """Drop empty / tiny groups, re-check convexity, and dissolve groups until the quotient graph is
    acyclic (so that every group can run atomically)."""
    for g, units in enumerate(H.groups):
        conv = _convexify(units, preds, succs, None) if units else []
        if len(conv) < min_size:
            conv = []
        for u in units:
            if u not in conv:
                H.group_of[u] = -1
        H.groups[g] = conv
    while True:
        cyc = _quotient_cycle(H, preds)
        if cyc is None:
            break
        g = max(cyc)
        for u in H.groups[g]:
            H.group_of[u] = -1
        H.groups[g] = []
    keep = [g for g in range(len(H.groups)) if H.groups[g]]
    remap = {g: k for k, g in enumerate(keep)}
    H.groups = [H.groups[g] for g in keep]
    H.kinds = [H.kinds[g] for g in keep]
    H.outputs = [H.outputs[g] for g in keep]
    H.group_of = [remap[g] if g >= 0 else -1 for g in H.group_of]


def _quotient_cycle(H: Hierarchy, preds: list[list[int]]) -> list[int] | None:
    """Groups on a cycle of the quotient graph (None if it is acyclic)."""
    nu = len(H.group_of)
    node = [("g", H.group_of[u]) if H.group_of[u] >= 0 else ("u", u) for u in range(nu)]
    adj: dict[tuple, set[tuple]] = {}
    for u in range(nu):
        for p in preds[u]:
            a, b = node[p], node[u]
            if a != b:
                adj.setdefault(a, set()).add(b)
    color: dict[tuple, int] = {}
    for start in sorted(set(node)):
        if start in color:
            continue
        stack = [(start, iter(sorted(adj.get(start, ()))))]
        color[start] = 1
        path = [start]
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[v] = 2
                stack.pop()
                path.pop()
                continue
            c = color.get(nxt, 0)
            if c == 1:
                cyc = path[path.index(nxt):]
                return [x[1] for x in cyc if x[0] == "g"]
            if c == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(adj.get(nxt, ())))))
    return None


__all__ = ["Hierarchy", "build_hierarchy"]
