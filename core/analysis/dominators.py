"""Dominators on a DAG, and the dominator tree of a graph from its activation input (MAGIS
section 4.3; weights and labels are extra entries and are ignored when picking the entry, as the
paper does).

One algorithm serves both: :func:`dag_idom` on topologically numbered nodes, with
:class:`DomTree` answering dominance queries in O(1).  The schedulers' hierarchy (HMCOS groups)
uses them on unit graphs; :func:`dominator_tree` runs them on a :class:`Graph` -- the sub-graph
reachable from the entry, or the reversed graph for post-dominators.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, TensorKind


def dag_idom(preds: list[list[int]]) -> list[int]:
    """Immediate dominators of nodes 0..n-1 (topologically numbered) from a virtual root -1 that
    precedes every node without predecessors (Cooper-Harvey-Kennedy intersect; on a DAG one pass in
    topological order suffices)."""
    idom = [-1] * len(preds)
    for v, ps in enumerate(preds):
        if not ps:
            continue
        a = ps[0]
        for b in ps[1:]:
            x, y = a, b
            while x != y:
                if x == -1 or y == -1:
                    x = -1
                    break
                if x > y:
                    x = idom[x]
                else:
                    y = idom[y]
            a = x
        idom[v] = a
    return idom


class DomTree:
    """Dominance queries by Euler-tour intervals over an idom array (-1 = virtual root)."""

    def __init__(self, idom: list[int]) -> None:
        n = len(idom)
        ch: list[list[int]] = [[] for _ in range(n + 1)]
        for v, d in enumerate(idom):
            ch[d + 1 if d >= 0 else 0].append(v + 1)
        self.tin = [0] * (n + 1)
        self.tout = [0] * (n + 1)
        t = 0
        stack = [(0, 0)]
        while stack:
            v, k = stack.pop()
            if k == 0:
                self.tin[v] = t
                t += 1
            if k < len(ch[v]):
                stack.append((v, k + 1))
                stack.append((ch[v][k], 0))
            else:
                self.tout[v] = t
        self.children = ch

    def dominates(self, a: int, b: int) -> bool:
        """a dominates b (reflexive)."""
        return self.tin[a + 1] <= self.tin[b + 1] and self.tout[b + 1] <= self.tout[a + 1]

    def subtree(self, a: int) -> list[int]:
        """The nodes ``a`` strictly dominates, sorted."""
        out: list[int] = []
        stack = list(self.children[a + 1])
        while stack:
            v = stack.pop()
            out.append(v - 1)
            stack.extend(self.children[v])
        return sorted(out)


@dataclass
class DominatorTree:
    """The dominator tree of a graph's nodes reachable from ``entry`` (node ids)."""

    entry: int
    idom: dict[int, int | None]  # node -> immediate dominator (None for the entry / unreachable)
    reachable: set[int]

    def children(self) -> dict[int, list[int]]:
        """Node -> the nodes it immediately dominates (sorted); leaves are left out."""
        ch: dict[int, list[int]] = {}
        for v, d in self.idom.items():
            if d is not None:
                ch.setdefault(d, []).append(v)
        return {k: sorted(v) for k, v in ch.items()}

    def descendants(self, v: int) -> set[int]:
        """The nodes ``v`` strictly dominates."""
        ch = self.children()
        out, stack = set(), [v]
        while stack:
            u = stack.pop()
            for c in ch.get(u, []):
                if c not in out:
                    out.add(c)
                    stack.append(c)
        return out


def activation_entry(g: Graph) -> int:
    """The graph input that carries activations: the largest floating-point INPUT placeholder
    (falling back to the largest input of any dtype)."""
    inputs = [n for n in g.placeholders() if n.out.kind == TensorKind.INPUT]
    if not inputs:
        raise ValueError("graph has no activation input")
    floats = [n for n in inputs if n.out.dtype.startswith(("float", "bfloat"))]
    pool = floats or inputs
    return max(pool, key=lambda n: (n.out.logical_bytes, -n.id)).id


def dominator_tree(g: Graph, entry: int | None = None, post: bool = False) -> DominatorTree:
    """Dominator tree of the nodes reachable from ``entry`` (post=True: post-dominators from the
    sink on the reversed graph; entry then defaults to the loss/first output's producer)."""
    if entry is None:
        if post:
            keys = sorted(g.outputs)
            entry = g.outputs["loss"].node if "loss" in g.outputs else g.outputs[keys[0]].node
        else:
            entry = activation_entry(g)
    succs, preds = (g.preds, g.users) if post else (g.users, g.preds)
    reachable = {entry}
    stack = [entry]
    while stack:
        for s in succs(stack.pop()):
            if s not in reachable:
                reachable.add(s)
                stack.append(s)
    order = [v for v in g.topo_order() if v in reachable]
    if post:
        order.reverse()
    number = {v: i for i, v in enumerate(order)}
    # every reachable node but the entry has a reachable predecessor, so the virtual root of
    # ``dag_idom`` immediately dominates the entry only
    idx = dag_idom([[number[p] for p in preds(v) if p in number] for v in order])
    idom: dict[int, int | None] = dict.fromkeys(g.nodes)
    for v, d in zip(order, idx, strict=True):
        idom[v] = None if d < 0 else order[d]
    return DominatorTree(entry, idom, reachable)


__all__ = ["DomTree", "DominatorTree", "activation_entry", "dag_idom", "dominator_tree"]
