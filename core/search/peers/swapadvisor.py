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
exporter.  A SwapAdvisor plan also carries its pool (``stats["allocation"]``) and the planner's
schedule (``stats["schedule"]``, op ids of the imported graph), from which :func:`pool_occupancy`
rebuilds which tensor is in which object of the pool over the step.  Memory limits are ``memory_limit`` (bytes, or a fraction of the eager peak) or
``fractions`` of the eager peak (default 1/2, 1/4, 1/8); a limit below the largest op's working
set is a failure naming that bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ...analysis.mempool import Allocation, valid_cls
from ...cost.model import CostModel
from ...fmt import format_bytes
from ...ir.graph import Graph
from ...schedule.swap_planner import (
    InfeasibleLimit,
    Stay,
    SwapPlan,
    SwapProblem,
    host_stays,
    plan_swaps,
    realise,
)
from ...simulate import simulate
from ..plan import Plan, PlanError, replay
from ..swapadvisor import SwapAdvisorGA, is_topological
from .base import Method, eager_peak
from .common import Failure, traced_order

FRACTIONS = (2, 4, 8)  # memory limits: 1/d of the eager peak
MAX_OBJECTS = 1 << 20  # a plan file's pool with more objects than this is refused


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
        "planner_latency": sp.time, "schedule": [int(p.ops[o]) for o in sp.schedule], **sp.summary()})


# ---- the pool of a plan over its step --------------------------------------------------------------------
@dataclass
class PoolOccupancy:
    """A SwapAdvisor plan's memory pool over its step: the size classes and objects
    (``allocation``), each pool tensor's stays in an object (``stays``, the planner's) and its times
    on the host between them (``host``: tensor, class, start, end in seconds), next to the tensors
    that are never evicted (``pinned_bytes``) and the inputs and weights (``resident_bytes``)."""

    allocation: Allocation
    stays: list[Stay]
    host: list[tuple[int, int, float, float]]
    tensor_names: list[str]  # per tensor of the problem (its producer's name, [index] when not 0)
    tensor_bytes: list[int]
    op_ids: list[int]  # per schedule position: the op's node id (the imported graph's and the plan's)
    op_names: list[str]
    pinned_bytes: int
    resident_bytes: int
    limit: int  # the memory limit the plan was made for (0: not recorded)
    latency: float  # the planner's three-stream time (the plan's simulated latency)

    @property
    def pool_bytes(self) -> int:
        """The objects' bytes (``Allocation.pool_bytes``)."""
        return self.allocation.pool_bytes

    @property
    def device_bytes(self) -> int:
        """What the device holds for the plan: the pool, the never-evicted tensors and the residents
        (the plan's ``pool_bytes`` metric)."""
        return self.pool_bytes + self.pinned_bytes + self.resident_bytes

    def pool_tensors(self) -> list[int]:
        """The tensors that live in the pool (all but the pinned ones), by index."""
        return sorted({x.tensor for x in self.stays})


def _allocation_of(plan: Plan) -> Allocation:
    """The plan's pool from ``stats["allocation"]`` (PlanError if it has none or a malformed one)."""
    a = plan.stats.get("allocation")
    if not isinstance(a, dict):
        raise PlanError(f"the {plan.method} plan carries no memory-pool allocation")
    try:
        alloc = Allocation(tuple(int(x) for x in a["sizes"]), tuple(int(x) for x in a["cls"]),
                           tuple(int(x) for x in a["cnt"]))
    except (KeyError, TypeError, ValueError):
        raise PlanError("the plan's allocation needs sizes, cls and cnt (lists of integers)") from None
    if len(alloc.sizes) != len(alloc.cls) or (alloc.cls and not valid_cls(alloc.cls)) or \
            len(alloc.cnt) != (max(alloc.cls) + 1 if alloc.cls else 0) or any(c < 0 for c in alloc.cnt) or \
            sum(alloc.cnt) > MAX_OBJECTS:
        raise PlanError("the plan's allocation is not a pool (CLS steps by 0 or +1 from 0, one CNT per class)")
    return alloc


def _schedule_of(p: SwapProblem, plan: Plan) -> list[int]:
    """The planner's schedule (op indices of ``p``): ``stats["schedule"]``, else the imported ops in
    the plan's order (PlanError if that is not a topological order of every op)."""
    index = {v: i for i, v in enumerate(p.ops)}
    ids = plan.stats.get("schedule")
    if not isinstance(ids, list):
        ids = [v for v in plan.order if v in index]
    sched = [index.get(v, -1) if isinstance(v, int) else -1 for v in ids]
    if sorted(sched) != list(range(p.n)) or not is_topological(p.preds, sched):
        raise PlanError("the plan's schedule does not run the imported graph's ops (its pool cannot be rebuilt)")
    return sched


def pool_occupancy(g: Graph, plan: Plan, cost: CostModel) -> PoolOccupancy:
    """Which tensor of the imported graph ``g`` is in which object of a SwapAdvisor ``plan``'s pool over
    its step: the planner (``schedule.swap_planner.plan_swaps``) run again on the plan's schedule and
    allocation with ``cost`` (the plan's device), its stays recorded.  PlanError (one line) if the plan
    carries no allocation, or the planner does not give the plan back (another cost model, another
    graph)."""
    alloc = _allocation_of(plan)
    base = plan.stats.get("base_steps")
    if base:  # MAGIS with the planner (``search.magis_pool``): the pool holds the tensors of the base's graph
        g = replay(g, plan.applications[:base])
        order = [v for v in plan.stats.get("schedule", []) if v in g.nodes]
        p = SwapProblem.from_graph(g, cost, order if len(order) == len(g.ops()) else None)
    else:
        p = SwapProblem.from_graph(g, cost)
    if alloc.sizes != p.pool_sizes():
        raise PlanError("the plan's pool is not of this graph's tensor sizes")
    sp = plan_swaps(p, _schedule_of(p, plan), alloc, stays=True)
    st = plan.stats
    want = (st.get("planner_latency"), st.get("swap_outs"), st.get("swap_ins"))
    if not sp.feasible or (want[0] is not None and not math.isclose(sp.time, want[0], rel_tol=1e-9)) or \
            (want[1:] != (None, None) and want[1:] != (len(sp.stores), len(sp.loads))):
        raise PlanError("the planner does not give this plan back with the device profile's cost model "
                        "(it was made with another one): its pool cannot be drawn")
    names = []
    for r in p.t_ref:
        node = g.nodes[r.node]
        names.append(node.name if r.index == 0 else f"{node.name}[{r.index}]")
    return PoolOccupancy(alloc, sp.stays, host_stays(sp), names, list(p.t_bytes),
                         [int(p.ops[o]) for o in sp.schedule], [g.nodes[p.ops[o]].name for o in sp.schedule],
                         p.pinned_bytes(), p.resident, int(st.get("limit_bytes", 0) or 0), sp.time)


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


__all__ = ["FRACTIONS", "ODSwap", "Ideal", "PoolOccupancy", "SwapAdvisor", "limits_of", "plan_of",
           "pool_occupancy"]
