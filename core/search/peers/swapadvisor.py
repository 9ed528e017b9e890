"""SwapAdvisor (Huang, Jin, Li: "SwapAdvisor: Pushing Deep Learning Beyond the GPU Memory Limit via
Smart Swapping", ASPLOS 2020) and its two baselines as methods.

* ``swapadvisor``: per memory limit, the genetic search (``search.swapadvisor``) over schedule and
  memory-pool allocation, each chromosome's swap plan from the planner (``schedule.swap_planner``),
  timed on three streams (compute, swap-in, swap-out).  Its best plan is realised with our own rule
  (``SwapLate``: one STORE per swapped tensor, one LOAD per swap-in) and simulated again from
  scratch; the point's ``pool_bytes`` is the pool plus the residents (what the device must hold).
* ``odswap``: on-demand swapping with least-recently-used eviction on the traced order (the paper's
  ODSwap): a swap-out when an allocation does not fit, a swap-in right before the op that reads it.
* ``ideal``: unbounded memory, no swapping: the traced order's time (throughputs are fractions of it).

Plans carry ``stats["swap_streams"]`` and ``stats["waits"]`` (compute waits for a swap-out whose
memory a later allocation takes): ``search.plan.sim_options`` gives them to ``simulate`` and the
exporter.  Memory limits are ``memory_limit`` (bytes, or a fraction of the eager peak) or
``fractions`` of the eager peak (default 1/2, 1/4, 1/8); a limit below the largest op's working
set is a failure naming that bound.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...cost.model import CostModel
from ...fmt import format_bytes
from ...ir.graph import Graph
from ...schedule.swap_planner import InfeasibleLimit, SwapPlan, SwapProblem, plan_swaps, realise
from ...simulate import simulate
from ..plan import Plan
from ..swapadvisor import SwapAdvisorGA
from .base import Method, eager_peak
from .common import Failure, traced_order

FRACTIONS = (2, 4, 8)  # memory limits: 1/d of the eager peak


def limits_of(g: Graph, cost: CostModel, memory_limit: float | None, fractions: Sequence[float]
              ) -> list[tuple[str, int]]:
    """(label, bytes) of each memory limit asked for."""
    peak = eager_peak(g, cost)
    if memory_limit is not None:
        b = int(memory_limit * peak) if memory_limit <= 1 else int(memory_limit)
        return [(f"limit {format_bytes(b)}", b)]
    return [(f"limit 1/{d:g} of eager", int(peak / d)) for d in fractions]


def plan_of(method: str, p: SwapProblem, sp: SwapPlan, cost: CostModel, label: str, limit: int,
            stats: dict) -> Plan:
    """The planner's plan realised as a ``Plan`` (applications, schedule, three-stream simulation)."""
    apps, h, order, waits = realise(p, sp)
    sim = simulate(h, order, cost, swap_streams=True, waits=waits)
    m = sim.metrics()
    m["pool_bytes"] = float(sp.pool_bytes + p.resident)  # the pool, the pinned tensors and the residents
    ideal = sum(p.time)
    return Plan(method, apps, order, m, label, {
        **stats, "limit_bytes": limit, "swap_streams": True, "waits": [[a, b] for a, b in waits],
        "ideal_latency": ideal, "throughput_vs_ideal": ideal / sim.latency if sim.latency else 1.0,
        "planner_latency": sp.time, **sp.summary()})


class SwapAdvisor(Method):
    name = "swapadvisor"
    label = "SwapAdvisor"
    colour = "#15803d"
    symbol = "star-diamond"
    family = "peer"
    paper = "Huang et al. 2020, SwapAdvisor (ASPLOS)"

    def _run(self, g, cost, *, time_budget, progress, memory_limit=None, fractions=FRACTIONS, seed=0,
             generations=None, population=None, **_):
        p = SwapProblem.from_graph(g, cost)
        limits = limits_of(g, cost, memory_limit, fractions)
        plans: list[Plan] = []
        failures: list[Failure] = []
        t0 = time.perf_counter()
        for k, (label, limit) in enumerate(limits):
            try:
                p.check_limit(limit)
            except InfeasibleLimit as e:
                failures.append(Failure(label, str(e)))
                continue
            left = time_budget - (time.perf_counter() - t0)
            share = max(0.0, left / (len(limits) - k))
            ga = SwapAdvisorGA(p, limit, seed=seed, **({"population": population} if population else {}))
            res = ga.run(time_budget=share, generations=generations, progress=progress)
            if res is None:
                failures.append(Failure(label, f"no pool of size classes within {format_bytes(limit)} lets every "
                                               f"op run (the tensors that cannot be swapped take too much)"))
                continue
            stats = {"generations": res.generations, "evaluations": res.evaluations,
                     "search_seconds": round(res.seconds, 3), "allocation": res.allocation.to_dict(),
                     "records": res.records}
            plans.append(plan_of(self.name, p, res.plan, cost, label, limit, stats))
            progress(f"swapadvisor {label}: {plans[-1].latency * 1e3:.3f} ms, peak {format_bytes(plans[-1].peak)}")
        return plans, failures


class ODSwap(Method):
    name = "odswap"
    label = "on-demand swapping (LRU)"
    colour = "#a16207"
    symbol = "hourglass"
    family = "baseline"
    paper = "On-demand swapping with LRU eviction (SwapAdvisor's ODSwap baseline)"

    def _run(self, g, cost, *, time_budget, progress, memory_limit=None, fractions=FRACTIONS, **_):
        p = SwapProblem.from_graph(g, cost)
        plans: list[Plan] = []
        failures: list[Failure] = []
        for label, limit in limits_of(g, cost, memory_limit, fractions):
            try:
                p.check_limit(limit)
            except InfeasibleLimit as e:
                failures.append(Failure(label, str(e)))
                continue
            sp = plan_swaps(p, list(range(p.n)), None, capacity=limit - p.resident)
            if not sp.feasible:
                failures.append(Failure(label, f"on-demand swapping cannot run within {format_bytes(limit)}: {sp.why}"))
                continue
            plans.append(plan_of(self.name, p, sp, cost, label, limit, {}))
        return plans, failures


class Ideal(Method):
    name = "ideal"
    label = "ideal (unbounded memory)"
    colour = "#38bdf8"
    symbol = "cross"
    family = "baseline"
    paper = "SwapAdvisor's ideal: infinite device memory, no swapping"

    def _run(self, g, cost, *, time_budget, progress, **_):
        order = traced_order(g)
        sim = simulate(g, order, cost)
        return [Plan(self.name, [], order, sim.metrics(), "unbounded memory", {})], []


__all__ = ["FRACTIONS", "ODSwap", "Ideal", "SwapAdvisor", "limits_of", "plan_of"]
