"""Seeds of the M-Optimizer's warm start: the plans of DTR (``peers.dtr``) and of offloading with
checkpointing (``peers.offload_ckpt``), adopted as states of MAGIS's own tree.

On a graph of thousands of ops with many equal layers, MAGIS's Remat steps lower the peak by one
tensor per step, each step a delta evaluation, so a 20-60 s search reaches the peaks that matter
only on the smaller graphs (the model zoo: ``bench/zoo.py``).  DTR decides every recomputation of a
budget in one pass over the schedule, in a second or two on such graphs; offloading what the
cheap-op checkpointing keeps is one placement of its swaps.  So the warm start first runs DTR at
the budgets a bisection picks for each latency slack of ``SEED_SLACK``, then offloading with
checkpointing, and adopts (``MOptimizer.adopt``) the lowest-peak plan within each slack: those
plans are states of MAGIS's tree, in its archive, and its later Swap steps and gap searches go on
from them.  A seed is the other method's plan exactly (its applications are Remat and SwapLate
applications, its schedule the method's), so the frontier is never above the plans the seeds
found, and a plan that comes from one says so (``Plan.stats["seed"]``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir.graph import Graph
from .mstate import MState
from .plan import Plan

SEED_BUDGETS = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # fractions of DTR's unbudgeted peak: 0.3 .. 0.95
SEED_SLACK = (1.10, 1.05, 1.25)  # adopt the lowest-peak plan within each x the imported latency (searched in this order)
SEED_CHECKPOINTING = ("cheap 0.25",)  # offloading with checkpointing: the cheap ops within 25% of their recomputation
SEED_REFINE = 2  # halvings of the budget step between the lowest budget within a slack and the one below it
DTR_SHARE = 0.6  # DTR's share of the seeds' time; offloading with checkpointing gets the rest


@dataclass
class Seeds:
    """What a seeding pass did: each run ("dtr 0.5", "offload_ckpt cheap ops 25%, all kept") -> its
    peak and latency or why it failed, the plans made, the states adopted, and its seconds."""

    runs: dict[str, tuple[int, float] | str] = field(default_factory=dict)
    plans: list[Plan] = field(default_factory=list)
    adopted: list[MState] = field(default_factory=list)
    seconds: float = 0.0
    dtr_free: dict | None = None  # the stats of DTR's unbudgeted run (what its budgets are fractions of)
    dtr_prepared: object = None  # that run's ``DTRSim``, whose tables every budgeted run reuses
    dtr_plans: dict = field(default_factory=dict)  # budget -> its plan, None where DTR cannot meet it
    tried: list[Plan] = field(default_factory=list)  # the plans ``adopt_seeds`` has offered to the search


def dtr_seeds(m, time_budget: float, budgets: tuple[float, ...] = SEED_BUDGETS,
              slack: tuple[float, ...] = SEED_SLACK, out: Seeds | None = None, refine: int = SEED_REFINE,
              first: float = 0.0) -> Seeds:
    """For each of ``slack`` in turn, the lowest of ``budgets`` (fractions of DTR's unbudgeted
    peak, ascending) at which DTR's plan on ``m``'s imported graph stays within that slack x the
    imported latency -- a bisection over ``budgets`` above the unbudgeted run's floor, splitting
    each range a third of the way up, a budget DTR cannot meet (nothing left to evict, or it
    thrashes) counted as too low, each budget run once -- while ``time_budget`` lasts (a run
    stops at its end); then, while it lasts, ``refine`` halvings of the step between each slack's
    lowest budget and the next lower one that was run, where that one gave a plan that is too
    slow (0.5 within and 0.45 not: 0.475, then 0.4625 or 0.4875; just above a budget DTR cannot
    meet it may thrash for tens of seconds).  The plans are ``out.plans`` (``adopt_seeds`` adopts
    them); a call with the ``out`` of an earlier one goes on from its runs (none is run twice).  The first slack's bisection may run for ``first`` seconds where that is more than
    ``time_budget`` (on a long graph a DTR run takes a second or more, and its plan within the first
    slack is the point a short search must have)."""
    from .peers.dtr import DTRFailure, DTRSim, DTRTimeout, budget_plan, refine_budgets

    t0 = time.perf_counter()
    out = out if out is not None else Seeds()
    g: Graph = m.imported
    if "remat" not in m.ev.rules:
        return out
    cost, base = m.cost, m.root.latency
    limit = max(time_budget, first)  # the first slack's bisection: ``first``; the rest: ``time_budget``
    if out.dtr_free is None:  # a second call goes on from the first one's runs
        try:  # (seconds on a graph of 100k ops; its tables are built once for every run: ``prepared``)
            out.dtr_prepared = DTRSim(g, cost, None, deadline=t0 + limit)
            _, out.dtr_free = out.dtr_prepared.run()
        except DTRTimeout as e:
            out.runs["dtr unbudgeted"] = str(e)
            return out
    free, prepared, plans = out.dtr_free, out.dtr_prepared, out.dtr_plans

    def run(b: float) -> Plan | None:
        if b not in plans:
            try:
                p = budget_plan(g, cost, b, free, deadline=t0 + limit, prepared=prepared)
                out.runs[f"dtr {b:g}"] = (p.peak, p.latency)
                plans[b] = p
                out.plans.append(p)
            except DTRTimeout as e:
                out.runs[f"dtr {b:g}"] = str(e)
                return None  # not known: not recorded, so not taken for too low
            except DTRFailure as e:
                out.runs[f"dtr {b:g}"] = str(e)
                plans[b] = None
        return plans[b]

    # budgets under the unbudgeted run's floor fail without a run: the bisection starts above them
    above = next((i for i, b in enumerate(budgets) if int(b * free["dtr_peak"]) >= free["dtr_floor"]), len(budgets))
    for k, x in enumerate(slack):
        if k == 1:
            limit = time_budget
        lo, hi = above, len(budgets) - 1  # the answer lies in budgets[lo..hi], or nowhere
        while lo <= hi and time.perf_counter() - t0 <= limit:
            mid = lo + (hi - lo) // 3  # a third of the way up: where the +10% budget lies on most graphs
            p = run(budgets[mid])
            if p is not None and p.latency <= x * base:
                hi = mid - 1
            else:
                lo = mid + 1
    # then, time left, between each slack's lowest budget and the one below it (where that one ran
    # and was too slow: near a failing one DTR thrashes): the bisection the DTR peer refines with too
    done = {b: (p.peak, p.latency) if p is not None else out.runs[f"dtr {b:g}"] for b, p in plans.items()}

    def result(b: float):
        p = run(b)
        return (p.peak, p.latency) if p is not None else out.runs[f"dtr {b:g}"] if b in plans else None

    refine_budgets(result, done, slack=slack, base=base, halvings=refine, deadline=t0 + time_budget)
    out.seconds += time.perf_counter() - t0
    return out


def offload_seeds(m, time_budget: float, modes: tuple[str, ...] = SEED_CHECKPOINTING,
                  out: Seeds | None = None) -> Seeds:
    """The plans of offloading with checkpointing (``peers.offload_ckpt``) in ``modes`` within
    ``time_budget`` (it checks between plans), into ``out.plans``."""
    from .peers.offload_ckpt import OffloadCkpt

    t0 = time.perf_counter()
    out = out if out is not None else Seeds()
    if {"remat", "swap_late"} - set(m.ev.rules) or time_budget <= 0:
        return out
    run = OffloadCkpt().run(m.imported, m.cost, time_budget=time_budget, checkpointing=modes, refine=False)
    for p in run.plans:
        out.runs[f"offload_ckpt {p.label}"] = (p.peak, p.latency)
    out.plans.extend(run.plans)
    out.seconds += time.perf_counter() - t0
    return out


def adopt_seeds(m, seeds: Seeds, slack: tuple[float, ...] = SEED_SLACK) -> Seeds:
    """Adopt into ``m`` the lowest-peak plan of ``seeds.plans`` within each of ``slack`` x the
    imported latency (a plan once)."""
    t0 = time.perf_counter()
    base = m.root.latency
    chosen: list[Plan] = []
    for x in slack:
        ok = [p for p in seeds.plans if p.latency <= x * base and p.applications]
        best = min(ok, key=lambda p: (p.peak, p.latency), default=None)
        if best is not None and best not in chosen:
            chosen.append(best)
    for p in chosen:
        if any(p is q for q in seeds.tried):  # adopted (or found already seen) by an earlier call
            continue
        seeds.tried.append(p)
        s = m.adopt(p)
        if s is not None:
            seeds.adopted.append(s)
    seeds.seconds += time.perf_counter() - t0
    return seeds


def seed(m, time_budget: float, first: float = 0.0) -> Seeds:
    """The warm start's seeds, anytime: DTR's bisection for the first slack (+10%) with
    ``DTR_SHARE`` of ``time_budget`` or ``first`` seconds where that is more (a run stops at its
    end), its plan adopted at once -- the search has its first point after a few DTR runs -- then
    offloading with checkpointing with up to ``1 - DTR_SHARE`` of it (one placement; the lowest
    point within +10% on T5 and OPT), then DTR's other slacks and refinement with what is left
    (going on from the first runs), each step's lowest-peak plan within a slack adopted."""
    t0 = time.perf_counter()
    out = Seeds()
    with m.stage("DTR seeds within +10%"):
        dtr_seeds(m, 0.0, slack=SEED_SLACK[:1], refine=0, first=max(first, DTR_SHARE * time_budget), out=out)
        adopt_seeds(m, out)
    if m.cancelled():
        return out
    with m.stage("offloading-with-checkpointing seeds"):
        offload_seeds(m, min((1 - DTR_SHARE) * time_budget, time_budget - (time.perf_counter() - t0)), out=out)
        adopt_seeds(m, out)
    if m.cancelled():
        return out
    with m.stage("DTR seeds, every slack"):
        dtr_seeds(m, time_budget - (time.perf_counter() - t0), out=out)
        return adopt_seeds(m, out)


__all__ = ["DTR_SHARE", "SEED_BUDGETS", "SEED_CHECKPOINTING", "SEED_REFINE", "SEED_SLACK", "Seeds", "adopt_seeds",
           "dtr_seeds", "offload_seeds", "seed"]
