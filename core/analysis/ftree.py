"""M-Analyzer: F-Tree construction, MAGIS Algorithm 1 (section 4.3).

For each connected component D of the D-Graph: G' = the ops with a D-node in D and the activation
input when it has one there, T = the dominator tree of G' from the activation input (its root; a
virtual root above the sources of a component without it; edges from nodes the activation input
does not reach -- the labels, read by the loss -- are extra entries the paper says to ignore), and
per node v

    heat(v)  = sum |w| over hot-spot tensors w produced in T.des(v)                        (Eq. 3)
    score(v) = (1 - 1/n) heat(v) - sum |u| over tensors u that T.des(v) reads from outside
               it and that are not hot-spots (n = 2)                                        (Eq. 4)

(T.des(v) includes v).  With the input a node of T, S = T.des(input) minus the input is every op of
G' that the input reaches: along the batch of a graph without batch norm, the F-Trans over the whole
training step (MAGIS Fig. 16).  Scores are normalised by the largest; for each of the L levels
[i/L, (i+1)/L) the nodes of that level none of whose T-descendants is in the same level are picked,
and S = T.des(v) minus v becomes a candidate F-Trans (S, D, 1) if it is valid
(``dgraph.plan_split``).  A training graph joins each region's forward and backward through the
loss, so a dominated region is rarely convex as a whole: its convex part (``convex_part``: what lies
upstream of every path that leaves it) is the candidate.  Nested candidates form the tree: a
candidate's parent is the smallest candidate whose S strictly contains its S.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir.graph import Graph, NodeKind, TRef
from .dgraph import DGraph, Key, Split, SplitError, plan_split, value_free
from .dominators import activation_entry, dag_idom
from .lifetimes import memory_profile

LEVELS = 4
FISSION_N = 2  # the n of Eq. 4


@dataclass
class FNode:
    """One F-Tree node: a candidate F-Trans (S, D, n); n = 1 while it is disabled."""

    id: int
    split: Split
    dominator: int  # v_dom: S is what it strictly dominates in G'
    heat: int
    score: float
    level: int
    n: int = 1
    parent: int | None = None
    children: list[int] = field(default_factory=list)


@dataclass
class FTree:
    nodes: list[FNode]
    dgraph: DGraph
    rejected: int = 0  # picked sub-graphs that were not valid F-Trans

    def roots(self) -> list[FNode]:
        return [f for f in self.nodes if f.parent is None]


def hot_bytes(g: Graph, order: list[int]) -> dict[TRef, int]:
    """The memory hot-spot storages (MAGIS H) of ``g`` under ``order`` -> bytes: every storage
    alive at a peak step, weights and inputs included (they are alive at every step, so an F-Trans
    reading them adds nothing: Eq. 4 charges only inputs outside H)."""
    prof = memory_profile(g, order, validate=False)
    return {s.root: s.nbytes for s in prof.hotspots() if not s.scratch}


def _scores(g: Graph, members: list[int], hot: dict[TRef, int], n: int,
            reach: set[int] | None = None) -> tuple[list[int], list[int], list[float], list[list[int]]]:
    """idom, heat and score of each member (indices into ``members``, topologically sorted).
    Dominance is from the activation input: a predecessor outside ``reach`` (what the activation
    input reaches: e.g. the labels' views, read by the loss) is an extra entry and is ignored."""
    idx = {v: i for i, v in enumerate(members)}
    preds = [[] if value_free(g, v) else [idx[p] for p in g.preds(v) if p in idx and (reach is None or p in reach)]
             for v in members]  # a value-free op (ones_like, new_ones ...) reads only a shape: an entry
    idom = dag_idom(preds)
    children: list[list[int]] = [[] for _ in members]
    for i, d in enumerate(idom):
        if d >= 0:
            children[d].append(i)
    root_of = g.storage_root
    own_heat = [sum(b for j in range(len(g.nodes[v].outputs)) if (b := hot.get(TRef(v, j), 0)))
                for v in members]
    # the storages each member reads, and their producers' member index (-1: outside G')
    reads: list[dict[TRef, int]] = []
    for v in members:
        rd: dict[TRef, int] = {}
        for r in g.nodes[v].inputs():
            root = root_of(r)
            rd[root] = idx.get(root.node, -1)
        reads.append(rd)
    # post-order: subtree member sets for heat and the outside reads (small-to-large merging)
    order: list[int] = []
    stack = [i for i, d in enumerate(idom) if d < 0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(children[i])
    heat = [0] * len(members)
    score = [0.0] * len(members)
    sub_nodes: list[set[int] | None] = [None] * len(members)
    sub_reads: list[dict[TRef, int] | None] = [None] * len(members)
    for i in reversed(order):
        nodes = {i}
        rd = dict(reads[i])
        h = own_heat[i]
        for c in children[i]:
            h += heat[c]
            cn, cr = sub_nodes[c], sub_reads[c]
            if len(cn) > len(nodes):
                nodes, cn = cn, nodes
            nodes |= cn
            if len(cr) > len(rd):
                rd, cr = cr, rd
            rd.update(cr)
            sub_nodes[c] = sub_reads[c] = None
        heat[i] = h
        if h > 0:
            outside = sum(_nbytes(g, root) for root, p in rd.items() if (p < 0 or p not in nodes) and root not in hot)
            score[i] = (1 - 1 / n) * h - outside
        else:
            score[i] = float("-inf")
        sub_nodes[i], sub_reads[i] = nodes, rd
    return idom, heat, score, children


def convex_part(g: Graph, s: set[int], hot: dict[TRef, int],
                rank: Mapping[int, int] | None = None) -> frozenset[int]:
    """``s`` made convex and weakly connected: the ops of ``s`` downstream of a path that leaves
    ``s`` are dropped (in a training graph: the backward half of a region whose forward and backward
    are joined through the loss), then the weakly connected piece with the most hot bytes is kept.
    With ``rank`` (a topological index of every node) the walk stops past S's last node."""
    last = max(rank[v] for v in s) if rank is not None and s else None
    frontier = [u for v in s for u in g.users(v) if u not in s and not value_free(g, u)
                and (last is None or rank[u] <= last)]
    seen = set(frontier)
    while frontier:
        v = frontier.pop()
        for u in g.users(v):  # past the first step a value-free op does not cut a path (F-Tree candidates
            # stay within what every split of them can rebuild; plan_split itself is more lenient)
            if u not in seen and (last is None or rank[u] <= last):
                seen.add(u)
                frontier.append(u)
    kept = {v for v in s if v not in seen}
    best: frozenset[int] = frozenset()
    best_key = (-1, -1)
    left = set(kept)
    while left:
        start = left.pop()
        piece, stack = {start}, [start]
        while stack:
            v = stack.pop()
            for u in list(g.users(v)) + list(g.preds(v)):
                if u in left:
                    left.discard(u)
                    piece.add(u)
                    stack.append(u)
        heat = sum(b for v in piece for j in range(len(g.nodes[v].outputs)) if (b := hot.get(TRef(v, j), 0)))
        if (heat, len(piece)) > best_key:
            best, best_key = frozenset(piece), (heat, len(piece))
    return best


def _reachable(g: Graph, start: int | None = None) -> set[int] | None:
    """The nodes the activation input (``start``, when the caller has it) reaches (None for a graph
    without one)."""
    start = _entry(g) if start is None else start
    if start is None:
        return None
    seen, stack = {start}, [start]
    while stack:
        for u in g.users(stack.pop()):
            if u not in seen and not value_free(g, u):
                seen.add(u)
                stack.append(u)
    return seen


def _entry(g: Graph) -> int | None:
    """The activation input, T's root: a node of G' in the components that hold its dims."""
    try:
        return activation_entry(g)
    except ValueError:
        return None


def _nbytes(g: Graph, root: TRef) -> int:
    return g.nodes[root.node].outputs[root.index].nbytes


def build_ftree(g: Graph, order: list[int] | None = None, levels: int = LEVELS, n: int = FISSION_N,
                dg: DGraph | None = None) -> FTree:
    """Algorithm 1 on ``g`` with the hot-spots of ``order`` (default: the traced order)."""
    if order is None:
        order = [v for v in g.topo_order() if g.nodes[v].kind != NodeKind.PLACEHOLDER]
    dg = dg or DGraph(g)
    hot = hot_bytes(g, order)
    topo = {v: i for i, v in enumerate(g.topo_order())}
    entry = _entry(g)
    reach = _reachable(g, entry)
    picked: dict[tuple[frozenset[int], Key], FNode] = {}
    rejected = 0
    for comp, ops_in in sorted(dg.components().items()):
        members = sorted((v for v in ops_in if v not in dg.unknown
                          and (g.nodes[v].kind == NodeKind.OP or v == entry)), key=topo.__getitem__)
        if len(members) < 2:
            continue
        idom, heat, score, children = _scores(g, members, hot, n, reach)
        s_max = max(score)
        if s_max <= 0:
            continue
        for lvl in range(1, levels + 1):
            lo, hi = lvl / levels, (lvl + 1) / levels
            level = {i for i, s in enumerate(score) if lo <= s / s_max < hi}
            for i in sorted(level):
                stack, clash = list(children[i]), False
                desc: list[int] = []
                while stack:
                    c = stack.pop()
                    if c in level:
                        clash = True
                        break
                    desc.append(c)
                    stack.extend(children[c])
                if clash or not desc:
                    continue
                s = convex_part(g, {members[c] for c in desc}, hot, topo)
                if not s or (s, comp) in picked:
                    continue
                try:
                    split = plan_split(g, dg, s, comp, topo)
                except SplitError:
                    rejected += 1
                    continue
                picked[(s, comp)] = FNode(0, split, members[i], heat[i], score[i], lvl)
    nodes = sorted(picked.values(), key=lambda f: (-len(f.split.nodes), -f.score, f.split.nodes[0]))
    for k, f in enumerate(nodes):
        f.id = k
    sets = [set(f.split.nodes) for f in nodes]
    for k, f in enumerate(nodes):  # parent: the smallest strict superset (listed earlier: larger)
        best = None
        for j in range(k):
            if sets[k] < sets[j] and (best is None or len(sets[j]) < len(sets[best])):
                best = j
        if best is not None:
            f.parent = best
            nodes[best].children.append(k)
    return FTree(nodes, dg, rejected)


__all__ = ["FNode", "FTree", "build_ftree", "hot_bytes", "LEVELS"]
