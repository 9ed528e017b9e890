"""Greedy passes over the memory hot-spots: one rule family at a time, the best application per
step, until no application lowers the peak (or a step / time limit is reached).  They are the
simplest use of the rules and the baselines the M-Optimizer's search must beat.

* :func:`greedy_remat` -- Remat on the hot-spot tensors, each child evaluated as a delta by
  ``search.delta.DeltaEvaluator`` (the changed window rescheduled, MAGIS Algorithm 2).
* :func:`greedy_fission` -- F-Tree nodes in order of score (Eq. 4), each enabled at the n of
  {2, 4, 8} that lowers the simulated peak most, when it does; sub-graphs stay disjoint.
* :func:`greedy_swap` -- Swap on the hot-spot tensors, the copies placed on the copy stream
  (``schedule.placement``) and timed by the simulator.  Every candidate is first estimated on the
  memory curve (the stored tensor is gone from just after its last other reader to just before its
  loaded copy is needed), and the few best estimates are simulated in full.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..analysis.dgraph import DGraph, SplitError, plan_split
from ..analysis.ftree import FTree, build_ftree
from ..cost.model import AnalyticCost, CostModel
from ..ir.graph import Graph, TRef
from ..schedule.baselines import TracedOrder
from ..schedule.placement import load_slot, place_and_simulate
from ..simulate import SimResult, simulate
from ..transform.fission import Fission, recorded_split
from ..transform.registry import REMAT_FAMILY, rules_of
from ..transform.rule import Application, RuleNotApplicable
from ..transform.swap import Swap, swappable
from .delta import DeltaEvaluator
from .plan import Plan


def _plan(method: str, order: list[int], sim: SimResult, apps: list[Application], evaluated: int, simulated: int,
          t0: float, stopped: str, alternatives: list[tuple[int, Application]] = ()) -> Plan:
    """A pass's result as a plan (its graph: ``plan.graph(imported)``).  ``stats``: children
    evaluated (estimated, for swaps), full simulations, seconds, why it stopped, and the other
    applications that lowered the peak at a step (``alternatives``)."""
    return Plan(method, list(apps), list(order), sim.metrics(), "",
                {"evaluated": evaluated, "simulated": simulated, "seconds": round(time.perf_counter() - t0, 3),
                 "stopped": stopped, "alternatives": [[k, a.rule, *a.params] for k, a in alternatives]})


def alternatives(plan: Plan) -> list[tuple[int, Application]]:
    """(the number of the plan's applications before it, application): the applications that also
    lowered the peak at a step -- e.g. the same F-Tree node at another n, a different trade of
    memory for time."""
    return [(k, Application(rule, tuple(params))) for k, rule, *params in plan.stats.get("alternatives", [])]


def _better(peak: int, latency: float, best: tuple[int, float]) -> bool:
    return (peak, latency) < best


def greedy_remat(g: Graph, order: list[int], cost: CostModel | None = None, max_steps: int = 50,
                 time_budget: float = 60.0, progress: Callable[[str], None] | None = None) -> Plan:
    """Rematerialize the hot-spot application that lowers the peak most, step by step."""
    t0 = time.perf_counter()
    ev = DeltaEvaluator(g.copy(), order, cost, rules=rules_of(REMAT_FAMILY))
    evaluated = 0
    stopped = f"{max_steps} steps"
    for step in range(max_steps):
        if time.perf_counter() - t0 > time_budget:
            stopped = f"time budget {time_budget:g} s"
            break
        best, best_key = None, (ev.state.peak, ev.state.latency)
        for app in ev.applications():
            c = ev.evaluate(app)
            evaluated += 1
            if c.peak < ev.state.peak and _better(c.peak, c.latency, best_key):
                best, best_key = c, (c.peak, c.latency)
        if best is None:
            stopped = "no application lowers the peak"
            break
        ev.commit(ev.child_state(best))
        if progress:
            progress(f"remat step {step + 1}: {best.app} peak {best.peak} latency {best.latency:.6f}")
    h, o = ev.materialize()
    sim = simulate(h, o, ev.cost, validate=False)
    return _plan("greedy_remat", o, sim, ev.state.applications(), evaluated, 1, t0, stopped)


def _swap_estimates(g: Graph, sim: SimResult, cost: CostModel, hot: list[TRef]) -> list[tuple[int, Application]]:
    """(estimated peak, application) for every Swap of a hot-spot tensor for its last reader."""
    order = sim.order
    pos = {v: i for i, v in enumerate(order)}
    curve = sim.memory.step_bytes
    n = len(order)
    start = sim.start
    frees = {s.root: s for s in sim.memory.storages if s.device == "device" and not s.scratch}
    outputs = g.output_refs()
    rule = Swap()
    out: list[tuple[int, Application]] = []
    for ref in hot:
        s = frees.get(ref)
        if s is None or s.alloc < 0 or not swappable(g, ref) or ref in outputs:
            continue
        readers = sorted(g.readers(ref), key=pos.__getitem__)
        if not readers:
            continue
        b = readers[-1]
        app = Application(rule.name, (ref.node, ref.index, b))
        if app not in rule.match(g, [ref]):  # the last reader is a copy, or re-interprets the storage
            continue
        pb = pos[b]
        prev = pos[readers[-2]] if len(readers) > 1 else pos[ref.node]
        t_store = cost.transfer_time(s.nbytes)
        stored = int(np.searchsorted(start, start[pos[ref.node]] + t_store, side="left"))
        gone = max(prev, stored) + 1  # first step without the tensor
        back = load_slot(pb, cost.transfer_time(s.nbytes), gone, start=start)  # the tensor is back from there
        if back <= gone:
            continue
        new = curve.copy()
        new[gone:back] -= s.nbytes
        out.append((int(new.max()) if n else 0, app))
    out.sort(key=lambda x: x[0])
    return out


def greedy_swap(g: Graph, order: list[int], cost: CostModel | None = None, max_steps: int = 50,
                time_budget: float = 60.0, confirm: int = 4,
                progress: Callable[[str], None] | None = None) -> Plan:
    """Swap the hot-spot tensor whose swap lowers the simulated peak most, step by step (ties: the
    lower latency); ``confirm`` best estimates are simulated in full per step."""
    t0 = time.perf_counter()
    cost = cost or AnalyticCost()
    h = g.copy()
    order, sim = place_and_simulate(h, list(order), cost)
    apps: list[Application] = []
    evaluated = simulated = 0
    stopped = f"{max_steps} steps"
    rule = Swap()
    for step in range(max_steps):
        if time.perf_counter() - t0 > time_budget:
            stopped = f"time budget {time_budget:g} s"
            break
        hot = [s.root for s in sim.hotspots() if s.alloc >= 0 and not s.scratch]
        est = _swap_estimates(h, sim, cost, hot)
        evaluated += len(est)
        best = None
        for e_peak, app in est[:confirm]:
            if e_peak >= sim.peak:
                break
            log = rule.apply(h, app)
            # the new copies are appended to the order before placement puts them in place
            o, s2 = place_and_simulate(h, order + log.added(), cost)
            simulated += 1
            rule.inverse(h, log)
            if s2.peak < sim.peak and (best is None or (s2.peak, s2.latency) < (best[2].peak, best[2].latency)):
                best = (app, o, s2)
        if best is None:
            stopped = "no application lowers the peak"
            break
        app, order, sim = best
        rule.apply(h, app)  # node ids are the same as when it was evaluated
        apps.append(app)
        if progress:
            progress(f"swap step {step + 1}: {app} peak {sim.peak} latency {sim.latency:.6f}")
    return _plan("greedy_swap", order, sim, apps, evaluated, simulated, t0, stopped)


def greedy_fission(g: Graph, order: list[int] | None = None, cost: CostModel | None = None,
                   time_budget: float = 60.0, ns: tuple[int, ...] = (2, 4, 8),
                   progress: Callable[[str], None] | None = None, ftree: FTree | None = None) -> Plan:
    """Enable F-Tree nodes of ``g`` (built on ``order``'s hot-spots, or ``ftree`` when the caller
    has built it) best score first; each one at the n of ``ns`` with the lowest simulated peak
    (traced order), kept only if it lowers the peak."""
    t0 = time.perf_counter()
    cost = cost or AnalyticCost()
    h = g.copy()  # the same node ids: ``ftree`` of ``g`` names h's nodes
    ft = ftree if ftree is not None else build_ftree(h, order)
    rule = Fission()

    def run(graph: Graph) -> tuple[list[int], SimResult]:
        o = TracedOrder().order(graph)
        return o, simulate(graph, o, cost, validate=False)

    cur_order, sim = run(h)
    apps: list[Application] = []
    alternatives: list[tuple[int, Application]] = []
    used: set[int] = set()
    evaluated = simulated = 0
    stopped = "every F-Tree node tried"
    for f in sorted(ft.nodes, key=lambda f: -f.score):
        if time.perf_counter() - t0 > time_budget:
            stopped = f"time budget {time_budget:g} s"
            break
        nodes = set(f.split.nodes)
        if nodes & used:
            continue
        try:  # planned once on the current graph (earlier fissions may have changed it)
            split = plan_split(h, DGraph(h), nodes, f.split.comp)
        except SplitError:
            continue
        best = None
        lowered: list[Application] = []
        for n in ns:
            if split.length % n:
                continue
            if time.perf_counter() - t0 > time_budget:  # an evaluation takes seconds on a long graph
                break
            app = rule.application(n, f.split.comp, nodes)
            try:
                log = recorded_split(h, split, n)  # what rule.apply(h, app) does, without planning it again
            except RuleNotApplicable:
                continue
            o, s2 = run(h)
            evaluated += 1
            simulated += 1
            h.undo(log)
            if s2.peak < sim.peak:
                lowered.append(app)
                if best is None or (s2.peak, s2.latency) < (best[2].peak, best[2].latency):
                    best = (app, o, s2)
        if best is None:
            continue
        app, cur_order, sim = best
        alternatives += [(len(apps), a) for a in lowered if a != app]
        recorded_split(h, split, app.params[0])  # the same node ids as when it was evaluated
        apps.append(app)
        used |= nodes
        if progress:
            progress(f"fission F-Tree node {f.id} n={app.params[0]}: peak {sim.peak} latency {sim.latency:.6f}")
    return _plan("greedy_fission", cur_order, sim, apps, evaluated, simulated, t0, stopped, alternatives)


__all__ = ["alternatives", "greedy_fission", "greedy_remat", "greedy_swap"]
