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
