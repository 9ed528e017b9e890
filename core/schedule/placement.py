"""Where the copies of a swap go in a schedule (MAGIS section 5.2 and section 3's two streams).

Given any order of a graph with STORE/LOAD nodes, the compute ops keep their order and each copy
is re-issued:

* a STORE right after the op that produces the stored tensor (as early as possible: the sooner the
  copy is done, the sooner the device storage can be freed);
* a LOAD as late as possible while its transfer stays hidden: issued before its first reader B at
  the latest point where the compute ops in between take at least the copy's time (no earlier than
  its STORE).  The copy stream is shared, so a LOAD can still be late when copies queue up; the
  placement is then checked on the simulator, and every LOAD whose reader waited is moved earlier
  by the wait (a few rounds).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from ..cost.model import AnalyticCost, CostModel
from ..ir.graph import Graph, NodeKind
from ..simulate import COPY_KINDS, SimResult, simulate

ROUNDS = 4  # simulator checks of the LOAD placement


def has_copies(g: Graph) -> bool:
    return any(n.kind in COPY_KINDS for n in g.nodes.values())


def place_copies(g: Graph, order: Sequence[int], cost: CostModel | None = None,
                 rounds: int = ROUNDS) -> list[int]:
    """``order`` with its STORE/LOAD nodes re-issued as the module docstring says."""
    return place_and_simulate(g, order, cost, rounds)[0]


def place_and_simulate(g: Graph, order: Sequence[int], cost: CostModel | None = None,
                       rounds: int = ROUNDS) -> tuple[list[int], SimResult]:
    """:func:`place_copies` and the simulation of its result (the placement's last check)."""
    order = list(order)
    cost = cost or AnalyticCost()
    copies = [v for v in order if g[v].kind in COPY_KINDS]
    if not copies:
        return order, simulate(g, order, cost, validate=False)
    compute = [v for v in order if g[v].kind not in COPY_KINDS]
    cpos = {v: i for i, v in enumerate(compute)}
    start = np.concatenate([[0.0], np.cumsum([cost.node_time(g, g[v]) for v in compute])])
    end = len(compute)  # anchor k: issued right before compute[k] (k == end: after the last op)

    anchor: dict[int, int] = {}
    stores = [v for v in copies if g[v].kind == NodeKind.STORE]
    loads = [v for v in copies if g[v].kind == NodeKind.LOAD]
    for s in stores:
        p = g[s].inputs()[0].node
        anchor[s] = cpos[p] + 1 if p in cpos else 0
    reader: dict[int, int] = {}
    for v in loads:
        rs = [cpos[u] for u in g.users(v) if u in cpos]
        reader[v] = min(rs) if rs else end
    need = {v: cost.node_time(g, g[v]) for v in loads}

    def place_loads() -> None:
        for v in loads:
            src = g[v].inputs()[0].node
            lo = anchor.get(src, 0)
            b = reader[v]
            # latest k <= b with start[b] - start[k] >= need
            k = bisect.bisect_right(start, start[b] - need[v]) - 1
            anchor[v] = min(b, max(lo, k))

    def merged() -> list[int]:
        slots: list[list[int]] = [[] for _ in range(end + 1)]
        for v in stores:
            slots[anchor[v]].append(v)
        for v in sorted(loads, key=lambda v: (anchor[v], reader[v], v)):
            slots[anchor[v]].append(v)
        out: list[int] = []
        for k in range(end + 1):
            out.extend(slots[k])
            if k < end:
                out.append(compute[k])
        return out

    place_loads()
    new = merged()
    sim = simulate(g, new, cost, validate=False)
    for _ in range(rounds):
        step = {v: i for i, v in enumerate(new)}
        reached = np.zeros(len(new))  # when the compute stream was free to start each step
        t = 0.0
        for i, kind in enumerate(sim.stream):
            reached[i] = t
            if kind == "compute":
                t = float(sim.end[i])
        moved = False
        for v in loads:
            if reader[v] == end:
                continue
            late = float(sim.end[step[v]] - reached[step[compute[reader[v]]]])
            if late > 1e-12 and anchor[v] > anchor.get(g[v].inputs()[0].node, 0):
                need[v] += late
                moved = True
        if not moved:
            break
        place_loads()
        new = merged()
        sim = simulate(g, new, cost, validate=False)
    return new, sim


__all__ = ["has_copies", "place_and_simulate", "place_copies"]
