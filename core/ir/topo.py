"""Topological order by Kahn's algorithm over any graph with ``nodes``, ``preds`` and ``users``."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
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


def pull_order(g: Any) -> list[int]:
    """The insertion order with each node's missing predecessors pulled in just before it.

    Nodes are visited in insertion order; a node whose predecessors are not all emitted yet first
    emits them (depth first, each in insertion order).  On a graph whose insertion order is
    topological this is that order; a node a transformation appended (a recomputed copy, a swap's
    copies) lands right before its first reader -- "just in time", as the traced program would have
    run it.  Raises GraphError on a cycle."""
    nodes = g.nodes
    rank = {nid: i for i, nid in enumerate(nodes)}
    done: set[int] = set()
    out: list[int] = []
    for root in nodes:
        if root in done:
            continue
        stack = [(root, iter(sorted(g.preds(root), key=rank.__getitem__)))]
        active = {root}
        while stack:
            nid, preds = stack[-1]
            for p in preds:
                if p in done:
                    continue
                if p in active:
                    raise GraphError(f"graph has a cycle (through {nodes[p].name!r})")
                active.add(p)
                stack.append((p, iter(sorted(g.preds(p), key=rank.__getitem__))))
                break
            else:
                stack.pop()
                active.discard(nid)
                done.add(nid)
                out.append(nid)
    return out
