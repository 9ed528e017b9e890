"""Topological orders over any graph with ``nodes``, ``preds`` and ``users``: Kahn's algorithm, and
the depth-first pull of each node's missing predecessors (the traced order, the WL hash's relabelling,
the peers' schedules)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from .types import GraphError


def kahn_order(g: Any, nodes: Iterable[int] | None = None) -> list[int]:
    """Topological order by Kahn's algorithm, ties broken by node id; raises GraphError on a cycle."""
    ids = list(g.nodes) if nodes is None else list(nodes)
    idset = set(ids)
    indeg = {i: 0 for i in ids}
    for i in ids:
        indeg[i] = sum(1 for p in g.preds(i) if p in idset)
    heap = [i for i in ids if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        out.append(i)
        for u in g.users(i):
            if u in idset:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(heap, u)
    if len(out) != len(ids):
        stuck = sorted(i for i in ids if indeg[i] > 0)[:5]
        names = ", ".join(repr(g.nodes[i].name) for i in stuck)
        raise GraphError(f"graph has a cycle (through {names})")
    return out


def pull_order(g: Any, roots: Iterable[int] | None = None,
               preds: Callable[[int], Iterable[int]] | None = None, what: str = "graph has a cycle") -> list[int]:
    """The roots in turn, each preceded by its predecessors not emitted yet (depth first, in the
    order ``preds`` lists them): a topological order of the roots and what they need.

    By default the roots are the nodes in insertion order and a node's predecessors are all of them,
    in insertion order.  On a graph whose insertion order is topological this is that order; a node
    a transformation appended (a recomputed copy, a swap's copies) lands right before its first
    reader -- "just in time", as the traced program would have run it.

    ``preds(v)`` restricts what is pulled (the WL hash relabels the affected nodes only; the peers
    never schedule placeholders) and fixes the order in which it is visited.  Raises GraphError
    ``"<what> (through <node>)"`` on a cycle among the nodes pulled."""
    nodes = g.nodes
    if roots is None:
        roots = nodes
    if preds is None:
        rank = {nid: i for i, nid in enumerate(nodes)}

        def preds(v: int) -> list[int]:
            return sorted(g.preds(v), key=rank.__getitem__)

    done: set[int] = set()
    out: list[int] = []
    for root in roots:
        if root in done:
            continue
        stack = [(root, iter(preds(root)))]
        active = {root}
        while stack:
            nid, it = stack[-1]
            for p in it:
                if p in done:
                    continue
                if p in active:
                    raise GraphError(f"{what} (through {nodes[p].name!r})")
                active.add(p)
                stack.append((p, iter(preds(p))))
                break
            else:
                stack.pop()
                active.discard(nid)
                done.add(nid)
                out.append(nid)
    return out
