"""A plan with one swap made by hand on fig2_skip (a hot-spot tensor stored right after it is
produced and loaded right before a late reader, so compute waits for the load), installed as a
graph's frontier: what the Swaps and Export tabs' tests (builders and browser) look at; and a
SwapAdvisor plan of bert_tiny (a short search at a limit that makes it swap), merged into a
frontier: what the Swaps tab's three streams and memory-pool view are tested on."""

from __future__ import annotations

from app.state import AppState
from core.cost import AnalyticCost
from core.ir.graph import Graph, NodeKind
from core.schedule import get_scheduler
from core.search.plan import Plan, PlanFile
from core.search.wl_hash import graph_hash
from core.simulate import simulate
from core.transform.registry import RULES

GID = "sample:fig2_skip"
SA_GID = "sample:bert_tiny"
SA_FRACTION = 0.2  # the limit: this far from the least a SwapAdvisor plan needs to the eager peak


def hand_swap_plans(g: Graph, device: str) -> PlanFile:
    """Point 0: the traced order with one Swap -- the hot-spot tensor with the most steps between
    it and its reader -- its STORE right after the producer and its LOAD right before the reader;
    point 1: the traced order (eager)."""
    cost = AnalyticCost(device)
    order = get_scheduler("traced").run(g).order
    sim = simulate(g, order, cost)
    hot = [s.root for s in sim.hotspots() if s.alloc >= 0 and not s.scratch]
    pos = {v: i for i, v in enumerate(order)}
    app = max(RULES["swap"].match(g, hot), key=lambda a: (pos[a.params[2]] - pos[a.params[0]], a.params))
    h = g.copy()
    added = RULES["swap"].apply(h, app).added()
    (store,) = [v for v in added if h.nodes[v].kind == NodeKind.STORE]
    (load,) = [v for v in added if h.nodes[v].kind == NodeKind.LOAD]
    a, _j, b = app.params
    o = list(order)
    o.insert(o.index(a) + 1, store)
    o.insert(o.index(b), load)
    s2 = simulate(h, o, cost)
    return PlanFile(g.name, graph_hash(g), device, [
        Plan("magis", [app], o, s2.metrics(), label="hand swap"),
        Plan("eager", [], order, sim.metrics(), label="traced order"),
    ])


def install_hand_swap(state: AppState, gid: str = GID):
    g = state.entry(gid).graph
    device = state.plans.frontier(gid).device
    return state.plans.set_frontier(gid, hand_swap_plans(g, device), "test: one swap by hand")


def swapadvisor_plans(g: Graph, device: str, fraction: float = SA_FRACTION) -> PlanFile:
    """One SwapAdvisor point of ``g`` (two generations of a population of 12: a second or two) at a
    limit ``fraction`` of the way from the least a plan needs to the eager peak."""
    from core.schedule.swap_planner import SwapProblem
    from core.search.methods import run_method
    from core.search.peers.base import eager_peak

    cost = AnalyticCost(device)
    p = SwapProblem.from_graph(g, cost)
    lo = max(p.working_set(), p.pool_floor())
    limit = int(lo + fraction * (eager_peak(g, cost) - lo))
    run = run_method("swapadvisor", g, cost, time_budget=30, memory_limit=limit, generations=2, population=12)
    assert run.plans, [f.reason for f in run.failures]
    return PlanFile(g.name, graph_hash(g), device, list(run.plans), meta={"methods": ["swapadvisor"]})


def install_swapadvisor(state: AppState, gid: str = SA_GID) -> tuple[object, int]:
    """Merge a SwapAdvisor point into ``gid``'s frontier: (the frontier, the point's key)."""
    g = state.entry(gid).graph
    device = state.plans.frontier(gid).device
    f = state.plans.merge_frontier(gid, swapadvisor_plans(g, device), "test: a SwapAdvisor point")
    (key,) = [k for k, p in enumerate(f.points) if p.method == "swapadvisor"]
    return f, key
