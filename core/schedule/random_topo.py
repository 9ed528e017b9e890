"""Random topological sampling: the best of k uniformly-random Kahn orders (a baseline; cf. the HMCOS
paper's Figure 2, which samples 1M schedules of NASNet-A)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..ir.graph import Graph, GraphError
from .footprint import MemoryModel, MemoryScheduler


def random_topological_order(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                             rng: random.Random) -> list[int]:
    """One topological order of the DAG of nodes 0..n-1 (``preds`` / ``succs``: index lists): Kahn's
    algorithm with a uniformly random ready node at each step.  The ready list keeps the order in
    which nodes became ready, so one seed gives one order.  Raises GraphError on a cycle."""
    indeg = [len(p) for p in preds]
    ready = [i for i, d in enumerate(indeg) if d == 0]
    out: list[int] = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        out.append(v)
        for s in succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(out) != len(indeg):
        raise GraphError("graph has a cycle")
    return out


class RandomTopological(MemoryScheduler):
    """Best of ``samples`` seeded random topological orders (stops early at the time budget)."""

    name = "random"

    def __init__(self, time_budget: float | None = None, samples: int = 100, seed: int = 0,
                 free_inputs: bool = False, count_weights: bool = True) -> None:
        super().__init__(time_budget=time_budget, free_inputs=free_inputs, count_weights=count_weights)
        self.samples = samples
        self.seed = seed

    def order(self, g: Graph) -> list[int]:
        deadline = self.deadline(0.7)
        model = MemoryModel.build(g, self.free_inputs, self.count_weights)
        rng = random.Random(self.seed)
        best: tuple[int, list[int]] | None = None
        tried = 0
        for _ in range(max(1, self.samples)):
            order = random_topological_order(model.preds, model.succs, rng)
            peak = model.simulate(order, ids=False)[0]
            tried += 1
            if best is None or peak < best[0]:
                best = (peak, order)
            if deadline.expired():
                break
        assert best is not None
        self.info = {"samples": tried}
        return [model.ops[i] for i in best[1]]
