"""Seeds of the M-Optimizer's warm start from DTR's eviction (``peers.dtr``).

On a graph of thousands of ops with many equal layers, MAGIS's Remat steps lower the peak by one
tensor per step, each step a delta evaluation, so a 20-60 s search reaches the peaks that matter
only on the smaller graphs (the model zoo: ``bench/zoo.py``).  DTR decides every recomputation of a
budget in one pass over the schedule, in a fraction of a second on such graphs.  So the warm start
first runs DTR at a descending series of budgets and adopts (``MOptimizer.adopt``) the lowest-peak
plan within each latency slack of ``SEED_SLACK``: those plans are states of MAGIS's own tree, in
its archive, and its later Swap steps and gap searches go on from them.  A seed is DTR's plan
exactly (its applications are Remat applications, its schedule DTR's execution order), so the
search's frontier is never above the one DTR alone finds with the budgets it ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir.graph import Graph
from .mstate import MState

SEED_BUDGETS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)  # fractions of DTR's unbudgeted peak, run in this order
SEED_SLACK = (1.05, 1.10, 1.25)  # adopt the lowest-peak plan within each x the imported graph's latency


@dataclass
class Seeds:
    """What a seeding pass did: the budgets DTR ran (fraction -> peak, latency or the failure), the
    states adopted, and its seconds."""

    runs: dict[float, tuple[int, float] | str] = field(default_factory=dict)
    adopted: list[MState] = field(default_factory=list)
    seconds: float = 0.0


def dtr_seeds(m, time_budget: float, budgets: tuple[float, ...] = SEED_BUDGETS,
              slack: tuple[float, ...] = SEED_SLACK) -> Seeds:
    """Run DTR on ``m``'s imported graph at ``budgets`` (descending; each a fraction of DTR's
    unbudgeted peak) while ``time_budget`` lasts and a run's latency stays within the largest
    slack, then adopt into ``m`` the lowest-peak plan within each of ``slack`` x the imported
    latency (a plan adopted once).  A budget DTR cannot meet (nothing left to evict, or it
    thrashes) ends the series: a lower one fails too."""
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
    plans = []
    for b in budgets:
        if time.perf_counter() - t0 > time_budget:
            break
        try:
            d, _ = DTRSim(g, cost, int(b * top)).run()
        except DTRFailure as e:
            out.runs[b] = str(e)
            break
        p = make_plan("dtr", f"budget {b:g}", realise(g, d), cost)
        out.runs[b] = (p.peak, p.latency)
        plans.append(p)
        if p.latency > max(slack) * base:
            break
    chosen = []
    for x in slack:
        ok = [p for p in plans if p.latency <= x * base and p.applications]
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
