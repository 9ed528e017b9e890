"""Brute force: every topological order of a tiny graph, the exact optimum to test the others against.

Independent of the DP machinery: it replays the storage model of ``MemoryModel.simulate`` op by op
while enumerating orders depth-first (branch and bound on the best peak found so far only skips
orders that cannot be better, so the optimum is exact).
"""

from __future__ import annotations

from ..ir.graph import Graph
from .footprint import MemoryModel, MemoryScheduler

MAX_OPS = 12


def brute_force_optimum(model: MemoryModel) -> tuple[int, list[int]]:
    """(optimal peak, one optimal order of op indices), the first optimum in lexicographic order."""
    n = model.n
    if n > MAX_OPS:
        raise ValueError(f"brute force is limited to {MAX_OPS} ops (graph has {n})")
    remaining = [len(m) + (1 if p >= 0 else 0) for m, p in zip(model.members, model.producer, strict=True)]
    indeg = [len(p) for p in model.preds]
    best: list = [float("inf"), []]
    order: list[int] = []
    size, kept = model.size, model.kept

    def rec(live: int, peak: int) -> None:
        if peak >= best[0]:
            return
        if len(order) == n:
            best[0], best[1] = peak, list(order)
            return
        for v in range(n):
            if indeg[v] != 0:
                continue
            indeg[v] = -1
            for s in model.succs[v]:
                indeg[s] -= 1
            step = live + model.alloc[v]
            freed = 0
            for s in model.produces[v] + model.touches[v]:
                remaining[s] -= 1
                if remaining[s] == 0 and not kept[s]:
                    freed += size[s]
            order.append(v)
            rec(step - freed, max(peak, step))
            order.pop()
            for s in model.produces[v] + model.touches[v]:
                remaining[s] += 1
            for s in model.succs[v]:
                indeg[s] += 1
            indeg[v] = 0

    init = model.initial_live()
    rec(init, init if n == 0 else -1)
    return int(best[0]), best[1]


def all_topological_orders(model: MemoryModel) -> list[list[int]]:
    """Every topological order (op indices) -- for tests on tiny graphs."""
    n = model.n
    indeg = [len(p) for p in model.preds]
    out: list[list[int]] = []
    cur: list[int] = []

    def rec() -> None:
        if len(cur) == n:
            out.append(list(cur))
            return
        for v in range(n):
            if indeg[v] != 0:
                continue
            indeg[v] = -1
            for s in model.succs[v]:
                indeg[s] -= 1
            cur.append(v)
            rec()
            cur.pop()
            for s in model.succs[v]:
                indeg[s] += 1
            indeg[v] = 0

    rec()
    return out


class BruteForce(MemoryScheduler):
    """Exhaustive search over topological orders (graphs of at most 12 ops)."""

    name = "brute"

    def __init__(self, time_budget: float | None = None, free_inputs: bool = False,
                 count_weights: bool = True) -> None:
        super().__init__(time_budget=time_budget, free_inputs=free_inputs, count_weights=count_weights)

    def order(self, g: Graph) -> list[int]:
        model = MemoryModel.build(g, self.free_inputs, self.count_weights)
        peak, order = brute_force_optimum(model)
        self.info = {"optimal_peak": peak}
        return [model.ops[i] for i in order]
