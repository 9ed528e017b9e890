"""Seeds of the M-Optimizer's warm start from DTR's eviction (``peers.dtr``).

On a graph of thousands of ops with many equal layers, MAGIS's Remat steps lower the peak by one
tensor per step, each step a delta evaluation, so a 20-60 s search reaches the peaks that matter
only on the smaller graphs (the model zoo: ``bench/zoo.py``).  DTR decides every recomputation of a
budget in one pass over the schedule, in about a second on such graphs.  So the warm start first
runs DTR at the budgets a bisection picks for each latency slack of ``SEED_SLACK`` and adopts
(``MOptimizer.adopt``) the lowest-peak plan within each slack: those plans are states of MAGIS's
own tree, in its archive, and its later Swap steps and gap searches go on from them.  A seed is
DTR's plan exactly (its applications are Remat applications, its schedule DTR's execution order),
so the search's frontier is never above the plans DTR found at the budgets it ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir.graph import Graph
from .mstate import MState

SEED_BUDGETS = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # fractions of DTR's unbudgeted peak: 0.3 .. 0.95
SEED_SLACK = (1.10, 1.05, 1.25)  # adopt the lowest-peak plan within each x the imported latency (searched in this order)


@dataclass
class Seeds:
    """What a seeding pass did: the budgets DTR ran (fraction -> peak, latency or the failure), the
    states adopted, and its seconds."""

    runs: dict[float, tuple[int, float] | str] = field(default_factory=dict)
    adopted: list[MState] = field(default_factory=list)
    seconds: float = 0.0


def dtr_seeds(m, time_budget: float, budgets: tuple[float, ...] = SEED_BUDGETS,
              slack: tuple[float, ...] = SEED_SLACK) -> Seeds:
    """For each of ``slack`` in turn, the lowest of ``budgets`` (fractions of DTR's unbudgeted
    peak, ascending) at which DTR's plan on ``m``'s imported graph stays within that slack x the
    imported latency -- a bisection over ``budgets``, a budget DTR cannot meet (nothing left to
    evict, or it thrashes) counted as too low, each budget run once -- while ``time_budget``
    lasts; then the lowest-peak plan within each slack is adopted into ``m`` (a plan once)."""
    from .peers.common import make_plan, realise
    from .peers.dtr import DTRFailure, DTRSim

    t0 = time.perf_counter()
    out = Seeds()
    g: Graph = m.imported
    if "remat" not in m.ev.rules:
        return out
    cost, base = m.cost, m.root.latency
    _, free = DTRSim(g, cost, None).run()
    top = free["dtr_peak"]
    plans: dict[float, object] = {}

    def run(b: float):
        if b not in plans:
            try:
                d, _ = DTRSim(g, cost, int(b * top)).run()
                p = make_plan("dtr", f"budget {b:g}", realise(g, d), cost)
                out.runs[b] = (p.peak, p.latency)
                plans[b] = p
            except DTRFailure as e:
                out.runs[b] = str(e)
                plans[b] = None
        return plans[b]

    for x in slack:
        lo, hi = 0, len(budgets) - 1  # the answer lies in budgets[lo..hi], or nowhere
        while lo <= hi and time.perf_counter() - t0 <= time_budget:
            mid = (lo + hi) // 2
            p = run(budgets[mid])
            if p is not None and p.latency <= x * base:
                hi = mid - 1
            else:
                lo = mid + 1
    chosen = []
    for x in slack:
        ok = [p for p in plans.values() if p is not None and p.latency <= x * base and p.applications]
        best = min(ok, key=lambda p: (p.peak, p.latency), default=None)
        if best is not None and best not in chosen:
            chosen.append(best)
    for p in chosen:
        s = m.adopt(p)
        if s is not None:
            out.adopted.append(s)
    out.seconds = time.perf_counter() - t0
    return out


__all__ = ["SEED_BUDGETS", "SEED_SLACK", "Seeds", "dtr_seeds"]
