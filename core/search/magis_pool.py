"""MAGIS with SwapAdvisor's planner: a memory limit far below what graph transformation alone reaches.

MAGIS's own Swap rules move one tensor per application, so its search reaches down to about a third
of a paper workload's peak and no further.  SwapAdvisor (``search.swapadvisor``) swaps whole pools
but cannot make an op's working set smaller: below the largest op's inputs and outputs no swap plan
exists.  Here the two meet.  The M-Optimizer's Pareto sweep runs first (``POOL_SHARE`` of the
budget is left for what follows); each of its frontier states (and the imported graph) whose peak
is above the limit can be a *base*: its graph (fission, remat and MAGIS's own swaps applied) in its
schedule is a ``SwapProblem``, and the planner swaps its tensors through a memory pool.

Per memory limit, up to ``BASES`` of them, evenly spaced by peak, get the planner once with a
one-class-per-size pool (counts in proportion to bytes) and once on demand (LRU over a byte pool);
the ``GA_BASES`` with the best times then get SwapAdvisor's GA (schedule and pool), its first
schedule MAGIS's.  The answer is the fastest plan within the limit: a frontier state that already
meets it, or a base with its swaps.  The plan is the base's applications followed by one
``SwapLate`` per swapped tensor, simulated from scratch on SwapAdvisor's three streams
(``plan.sim_options``), so it replays, exports and verifies like any other plan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..cost.model import CostModel
from ..fmt import format_bytes
from ..ir.graph import Graph
from ..schedule.swap_planner import SwapPlan, SwapProblem, plan_swaps
from .moptimizer import optimize
from .peers.base import Method
from .peers.common import Failure
from .peers.swapadvisor import FRACTIONS, limits_of, plan_of
from .plan import Plan, replay
from .swapadvisor import SwapAdvisorGA, allocation_of
from .warm_start import spaced_first

POOL_SHARE = 0.5  # of the budget: the planner and the GA on MAGIS's bases (the rest: the Pareto sweep)
BASES = 16  # frontier states tried with the planner per limit (evenly spaced by peak)
GA_BASES = 2  # of them, the fastest get the GA


@dataclass
class Base:
    """A frontier state as a swap problem: its plan, its graph and the problem in its schedule."""

    plan: Plan
    graph: Graph
    problem: SwapProblem


def spaced(items: Sequence, k: int) -> list:
    """At most ``k`` of ``items``, evenly spaced, the first and the last among them."""
    return [items[i] for i in spaced_first(len(items), k)[:k]]


def base_of(g: Graph, plan: Plan, cost: CostModel) -> Base:
    """``plan``'s graph, replayed on ``g``, as a swap problem in the plan's schedule."""
    h = replay(g, plan.applications)
    return Base(plan, h, SwapProblem.from_graph(h, cost, plan.order))


def bases_of(g: Graph, frontier: Sequence[Plan], cost: CostModel) -> list[Base]:
    """Every frontier state as a swap problem, by peak (highest first)."""
    return [base_of(g, p, cost) for p in sorted(frontier, key=lambda p: -p.peak)]


def with_base(base: Base, swapped: Plan, method: str) -> Plan:
    """``swapped`` (a plan of the base's graph) as a plan of the imported graph.  The planner's ideal is
    the base's compute (recomputation included), kept as ``base_compute``, not as the plan's ideal."""
    stats = {k: v for k, v in swapped.stats.items() if k not in ("ideal_latency", "throughput_vs_ideal")}
    return Plan(method, [*base.plan.applications, *swapped.applications], swapped.order, swapped.metrics,
                swapped.label, {**stats, "base_compute": swapped.stats.get("ideal_latency"),
                                "base_steps": len(base.plan.applications),
                                "base_label": base.plan.label, "base_peak": base.plan.peak,
                                "base_latency": base.plan.latency})


def pool_plans(g: Graph, frontier: Sequence[Plan], cost: CostModel, limits: Sequence[tuple[str, int]],
               time_budget: float, progress, method: str = "magis_pool", seed: int = 0
               ) -> tuple[list[Plan], list[Failure]]:
    """Per limit, the fastest plan within it (see the module's docstring)."""
    t0 = time.perf_counter()
    made: dict[int, Base] = {}  # frontier index -> its base, made when first tried (a replay each)

    def base(i: int) -> Base:
        if i not in made:
            made[i] = base_of(g, frontier[i], cost)
        return made[i]

    plans: list[Plan] = []
    failures: list[Failure] = []
    for k, (label, limit) in enumerate(limits):
        share = max(0.0, (time_budget - (time.perf_counter() - t0)) / (len(limits) - k))
        t1 = time.perf_counter()
        within = [p for p in frontier if p.peak <= limit]
        best: Plan | None = min(within, key=lambda p: p.latency) if within else None
        tried: list[tuple[float, int, Base, SwapPlan, dict]] = []  # (time, frontier index, base, plan, stats)
        over = spaced(sorted((i for i, p in enumerate(frontier) if p.peak > limit), key=lambda i: frontier[i].peak),
                      BASES)  # by peak, the lowest first
        fits = 0
        floor = None
        for i in [over[j] for j in spaced_first(len(over), 3)]:  # the lowest, middle and highest first
            if time.perf_counter() - t1 > share / 2 and tried:
                break
            b = base(i)
            ws = b.problem.working_set()
            floor = ws if floor is None else min(floor, ws)
            if ws > limit:
                continue
            fits += 1
            a = allocation_of(b.problem, limit)
            runs = [] if a is None else [(plan_swaps(b.problem, range(b.problem.n), a),
                                          {"planner": "pool", "allocation": a.to_dict()})]
            runs.append((plan_swaps(b.problem, range(b.problem.n), None, capacity=limit - b.problem.resident),
                         {"planner": "on demand"}))
            tried += [(sp.time, i, b, sp, stats) for sp, stats in runs if sp.feasible]
        tried.sort(key=lambda x: (x[0], x[1]))
        cands: list[tuple[Base, SwapPlan, dict]] = [(b, sp, stats) for _, _, b, sp, stats in tried[:1]]
        ga_bases = list({x[1]: x[2] for x in tried}.values())[:GA_BASES]  # the fastest distinct bases
        for j, b in enumerate(ga_bases):
            left = share - (time.perf_counter() - t1)
            if left <= 0:
                break
            res = SwapAdvisorGA(b.problem, limit, seed=seed).run(time_budget=left / (len(ga_bases) - j))
            if res is not None and res.plan.feasible:
                cands.append((b, res.plan, {"planner": "pool", "generations": res.generations,
                                            "evaluations": res.evaluations, "allocation": res.allocation.to_dict()}))
        for b, sp, stats in cands:
            p = with_base(b, plan_of(method, b.problem, sp, cost, label, limit, stats), method)
            if p.peak <= limit and (best is None or p.latency < best.latency):
                best = p
        if best is None:
            why = (f"no frontier state of MAGIS can run within {format_bytes(limit)}, swapped or not: the least "
                   f"working set among those tried is {format_bytes(floor)}" if floor is not None and floor > limit else
                   f"the planner found no swap plan within {format_bytes(limit)} for the {fits} frontier states "
                   f"whose working set fits")
            failures.append(Failure(label, why))
            continue
        if best.method != method:  # a frontier state that meets the limit as it is
            best = Plan(method, best.applications, best.order, best.metrics, label, {**best.stats, "base_steps": None})
        progress(f"{method} {label}: {best.latency * 1e3:.3f} ms, peak {format_bytes(best.peak)}")
        plans.append(best)
    return plans, failures


class MagisPool(Method):
    """MAGIS's frontier states swapped within a memory limit by SwapAdvisor's planner and GA."""

    name = "magis_pool"
    label = "MAGIS + SwapAdvisor's planner"
    colour = "#4c1d95"
    symbol = "circle-x"
    family = "magis"
    paper = "Chen et al. 2024, MAGIS (ASPLOS), with Huang et al. 2020, SwapAdvisor (ASPLOS)'s planner"

    def _run(self, g, cost, *, time_budget, progress, memory_limit=None, fractions=FRACTIONS, seed=0, **_):
        t0 = time.perf_counter()
        pf = optimize(g, pareto=True, time_budget=time_budget * (1 - POOL_SHARE), device=cost.device.name,
                      cost=cost)
        left = max(0.0, time_budget - (time.perf_counter() - t0))
        plans, failures = pool_plans(g, pf.points, cost, limits_of(g, cost, memory_limit, fractions), left,
                                     progress, self.name, seed)
        return plans, failures, {"meta": pf.meta}


__all__ = ["BASES", "GA_BASES", "POOL_SHARE", "Base", "MagisPool", "base_of", "bases_of", "pool_plans", "with_base"]
