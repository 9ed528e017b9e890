"""The Swaps tab on a SwapAdvisor plan (issue 30): three lanes (compute, swap-in, swap-out) where a
MAGIS swap plan keeps two, and the memory-pool view -- the size classes of the plan's allocation and
the object occupancy chart (no two stays overlap in one object, every pool tensor appears, the
swap-ins sit at the simulated LOAD times) -- built from ``core.search.peers.swapadvisor.pool_occupancy``,
which runs the planner again with its stays recorded (checked by hand on the planner's small
problem)."""

from __future__ import annotations

import copy

import plotly.graph_objects as go
import pytest

from app import alloc_view, swaps_view
from app.plan_store import build_view
from core.analysis.mempool import Allocation
from core.cost import AnalyticCost
from core.fmt import format_bytes
from core.ir.graph import NodeKind
from core.schedule.swap_planner import SwapProblem, host_stays, plan_swaps
from core.search.peers.swapadvisor import pool_occupancy
from core.search.plan import PlanError, PlanFile, plans_from_bytes, plans_to_bytes
from sample_graphs.store import load_sample_graph
from tests.swap_plans import hand_swap_plans, swapadvisor_plans
from tests.test_swapadvisor import hand_problem

DEVICE = "rtx3090"
EPS = 1e-9  # ms


@pytest.fixture(scope="module")
def sa():
    """(imported graph, the SwapAdvisor plan, its view, the eager view) on bert_tiny."""
    from core.search.methods import run_method

    g = load_sample_graph("bert_tiny")
    pf = swapadvisor_plans(g, DEVICE)
    plan = pf.points[0]
    assert plan.stats["swap_ins"] > 0 and plan.stats["swap_outs"] > 0  # the limit makes it swap
    eager = run_method("eager", g, AnalyticCost(DEVICE)).plans[0]
    return g, plan, build_view(g, plan, 0, DEVICE), build_view(g, eager, 1, DEVICE)


@pytest.fixture(scope="module")
def pool(sa):
    g, plan, _v, _b = sa
    return pool_occupancy(g, plan, AnalyticCost(DEVICE))


@pytest.fixture(scope="module")
def magis():
    g = load_sample_graph("fig2_skip")
    pf = hand_swap_plans(g, DEVICE)
    return build_view(g, pf.points[0], 0, DEVICE), build_view(g, pf.points[1], 1, DEVICE)


def traces(fig: dict, meta: str) -> list[dict]:
    return [t for t in fig["data"] if t.get("meta") == meta]


# ---- the planner's stays, by hand ------------------------------------------------------------------------
def test_planner_stays_on_the_hand_problem():
    """Two one-byte objects (tests/test_swapadvisor.py's hand problem, A..E = 0..4): A and B take objects
    0 and 1; op2 evicts B (Belady) for C; C dies at op3 and D takes its object; op5 swaps A out for B,
    which comes back into object 0; A comes back into object 1 (free since D died) at op6 and is dropped
    there for E at op7; op8 brings A back into object 0, free since B died at op7."""
    p = hand_problem()
    sp = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,)), stays=True)
    got = [(x.obj, x.tensor, x.first, x.last, x.loaded, x.until) for x in sp.stays]
    assert got == [
        (0, 0, 0, 3, False, "out"), (0, 1, 5, 7, True, "dead"), (0, 0, 8, 8, True, "dead"),
        (1, 1, 1, 1, False, "out"), (1, 2, 2, 3, False, "dead"), (1, 3, 4, 5, False, "dead"),
        (1, 0, 6, 6, True, "dropped"), (1, 4, 7, 8, False, "dead"),
    ]
    assert all(x.cls == 0 and x.start < x.end for x in sp.stays)
    for a, b in zip(sp.stays, sp.stays[1:], strict=False):  # one object at a time
        if a.obj == b.obj:
            assert b.start >= a.end - 1e-15
    assert [(t, s < e) for t, _c, s, e in host_stays(sp)] == [(1, True), (0, True), (0, True)]
    # recording changes nothing the planner decides
    plain = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,)))
    assert (plain.time, plain.stores, plain.loads, plain.drops, plain.stays) == (sp.time, sp.stores, sp.loads,
                                                                                sp.drops, [])


# ---- three lanes -------------------------------------------------------------------------------------------
def test_three_lanes_for_a_swapadvisor_plan(sa):
    _g, _plan, v, base = sa
    assert swaps_view.three_streams(v)
    fig = swaps_view.swap_timeline_figure(v, base, DEVICE)
    go.Figure(fig)
    assert fig["layout"]["yaxis"]["ticktext"] == ["compute", "swap-in", "swap-out"]
    assert fig["layout"]["yaxis"]["tickvals"] == [2, 1, 0]
    sim = v.sim
    for kind, meta, lane, stream in ((NodeKind.STORE, "store", "swap-out", "swap_out"),
                                     (NodeKind.LOAD, "load", "swap-in", "swap_in")):
        (tr,) = traces(fig, meta)
        steps = [i for i, nid in enumerate(sim.order) if v.graph.nodes[nid].kind == kind]
        assert len(tr["x"]) == len(steps) > 0
        assert set(tr["y"]) == {swaps_view.LANES3[lane]}
        assert all(sim.stream[i] == stream for i in steps)
        assert tr["base"] == pytest.approx([sim.start[i] * 1e3 for i in steps])
    (busy,) = traces(fig, "compute")
    assert set(busy["y"]) == {swaps_view.LANES3["compute"]}
    waits = traces(fig, "wait")
    if sim.compute_wait > 0:
        assert sum(waits[0]["x"]) == pytest.approx(sim.compute_wait * 1e3, rel=1e-9)
        assert all("waits for" in h for h in waits[0]["hovertext"])
    text = swaps_view.swap_summary(v)
    assert "three streams" in text and "compute waits" in text


def test_two_lanes_for_a_magis_swap_plan(magis):
    v, base = magis
    assert not swaps_view.three_streams(v) and not alloc_view.has_allocation(v)
    fig = swaps_view.swap_timeline_figure(v, base, DEVICE)
    assert fig["layout"]["yaxis"]["ticktext"] == ["compute", "copy"]
    for meta in ("store", "load"):
        (tr,) = traces(fig, meta)
        assert tr["y"] == [swaps_view.LANES["copy"]]
    style, line, rows, _fig, _st = swaps_view.pool_outputs(v, load_sample_graph("fig2_skip"), DEVICE, 1.0)
    assert style == swaps_view.HIDDEN and rows == [] and line == ""


# ---- the pool --------------------------------------------------------------------------------------------
def test_classes_and_counts_match_the_plans_allocation(sa, pool):
    _g, plan, _v, _b = sa
    a = plan.stats["allocation"]
    assert list(pool.allocation.cnt) == a["cnt"] and pool.allocation.object_sizes() == a["object_sizes"]
    rows = alloc_view.class_rows(pool)
    assert [r["class"] for r in rows] == [f"c{k}" for k in range(len(a["cnt"]))]
    assert [r["count"] for r in rows] == a["cnt"]
    assert [r["object"] for r in rows] == [format_bytes(b) for b in a["object_sizes"]]
    assert all(0 < r["used"] <= r["count"] for r in rows if r["tensors"])
    assert sum(r["loads"] for r in rows) == plan.stats["swap_ins"]
    # the chart's object rows: per class its used objects, labelled by class
    _rows, labels, left = alloc_view.occupancy_rows(pool)
    assert left == 0
    for k, r in enumerate(rows):
        assert sum(lab.startswith(f"c{k} obj ") for lab in labels) == r["used"]
    assert pool.device_bytes == plan.metrics["pool_bytes"] <= plan.stats["limit_bytes"]
    line = alloc_view.pool_summary(pool)
    assert format_bytes(pool.pool_bytes) in line and format_bytes(plan.stats["limit_bytes"]) in line
    assert f"{len(a['cnt'])} size class" in line


def test_occupancy_bars_never_overlap_within_one_object(pool):
    fig = alloc_view.occupancy_figure(pool, device=DEVICE)
    go.Figure(fig)
    spans: dict[int, list[tuple[float, float]]] = {}
    for meta in ("stay-made", "stay-loaded", "host"):
        for tr in traces(fig, meta):
            for y, b, x in zip(tr["y"], tr["base"], tr["x"], strict=True):
                assert x >= 0
                spans.setdefault(y, []).append((b, b + x))
    assert spans
    for ivs in spans.values():  # an object row, or a host lane: one tensor at a time
        ivs.sort()
        assert all(e0 <= s1 + EPS for (_s0, e0), (s1, _e1) in zip(ivs, ivs[1:], strict=False))
    assert traces(fig, "host")  # swapped-out times are drawn, hatched
    assert traces(fig, "host")[0]["marker"]["pattern"]["shape"] == "/"


def test_every_tensor_that_lives_in_the_pool_appears(sa, pool):
    g, plan, v, _b = sa
    p = SwapProblem.from_graph(g, AnalyticCost(DEVICE))
    in_pool = {t for t in range(len(p.t_ref)) if not p.t_pinned[t]}
    fig = alloc_view.occupancy_figure(pool, alloc_view.step_index(v), DEVICE)
    drawn = {c[0] for meta in ("stay-made", "stay-loaded") for tr in traces(fig, meta) for c in tr["customdata"]}
    assert drawn == in_pool == set(pool.pool_tensors())
    # every swapped tensor: a stay that ends in a swap-out, its time on the host, a stay brought back
    stored = {swaps_view.copied_tensor(v.graph, n.id) for n in v.graph.nodes.values() if n.kind == NodeKind.STORE}
    out = {pool.tensor_names[x.tensor] for x in pool.stays if x.until == "out"}
    assert out == stored
    host = {c[0] for tr in traces(fig, "host") for c in tr["customdata"]}
    assert {pool.tensor_names[t] for t in host} == stored
    # the hover names the tensor, its bytes and the ops (with their steps) it stays between
    made = traces(fig, "stay-made")[0]
    t = made["customdata"][0][0]
    assert pool.tensor_names[t] in made["hovertext"][0] and format_bytes(pool.tensor_bytes[t]) in made["hovertext"][0]
    assert "(step " in made["hovertext"][0]


def test_stays_are_on_the_swap_timelines_time_axis(sa, pool):
    """Each swap-in stay starts when a LOAD of the simulation starts, each swap-out stay ends when a
    STORE ends, and nothing is past the plan's latency."""
    _g, plan, v, _b = sa
    sim = v.sim
    loads = sorted(sim.start[i] for i, nid in enumerate(sim.order) if v.graph.nodes[nid].kind == NodeKind.LOAD)
    stores = sorted(sim.end[i] for i, nid in enumerate(sim.order) if v.graph.nodes[nid].kind == NodeKind.STORE)
    assert sorted(x.start for x in pool.stays if x.loaded) == pytest.approx(loads, rel=1e-12, abs=1e-15)
    assert sorted(x.end for x in pool.stays if x.until == "out") == pytest.approx(stores, rel=1e-12, abs=1e-15)
    assert pool.latency == pytest.approx(sim.latency, rel=1e-12)
    assert all(0 <= x.start <= x.end <= sim.latency * (1 + 1e-12) for x in pool.stays)


def test_the_pool_of_a_plan_file_and_the_ones_that_cannot_be_drawn(sa, magis):
    g, plan, v, _b = sa
    cost = AnalyticCost(DEVICE)
    pf = PlanFile(g.name, 0, DEVICE, [plan])
    back = plans_from_bytes(plans_to_bytes(pf)).points[0]  # the schedule travels in the plan file
    assert back.stats["schedule"] == plan.stats["schedule"]
    assert [x.tensor for x in pool_occupancy(g, back, cost).stays] == [x.tensor for x in pool_occupancy(
        g, plan, cost).stays]
    with pytest.raises(PlanError, match="no memory-pool allocation"):
        pool_occupancy(load_sample_graph("fig2_skip"), magis[0].plan, cost)
    for edit in ({"cnt": [1] * len(plan.stats["allocation"]["cnt"])}, {"cls": [0, 2]}, {"sizes": "x"}):
        bad = copy.deepcopy(plan)
        bad.stats["allocation"].update(edit)
        with pytest.raises(PlanError):
            pool_occupancy(g, bad, cost)
    bad = copy.deepcopy(plan)
    bad.stats["schedule"] = list(reversed(bad.stats["schedule"]))
    with pytest.raises(PlanError, match="schedule"):
        pool_occupancy(g, bad, cost)
    with pytest.raises(PlanError, match="cost model"):  # another device: the planner decides otherwise
        pool_occupancy(g, plan, AnalyticCost("a100-80gb"))
    # the view says so in one line rather than drawing a wrong pool
    bad = copy.deepcopy(plan)
    bad.stats["schedule"] = list(reversed(bad.stats["schedule"]))
    bv = build_view(g, bad, 5, DEVICE)
    style, line, rows, fig, _st = swaps_view.pool_outputs(bv, g, DEVICE, 1.0)
    assert style == {} and rows == [] and "schedule" in str(line.children)
    style, line, rows, fig, st = swaps_view.pool_outputs(v, g, DEVICE, v.sim.latency)
    assert style == {} and len(rows) == len(plan.stats["allocation"]["cnt"]) and fig["data"]
    assert st["height"] == f"{fig['layout']['height']}px"


@pytest.mark.parametrize("name", ["unet_tiny", "gpt_neo_tiny"])
def test_stays_of_ga_children_fill_each_object_one_tensor_at_a_time(name):
    """Over the GA's children (other schedules, merged classes): no two stays overlap in one object,
    objects are within CNT, every swap-in starts a stay and every swap-out ends one."""
    from core.search.peers.base import eager_peak
    from core.search.swapadvisor import SwapAdvisorGA

    g = load_sample_graph(name)
    cost = AnalyticCost(DEVICE)
    p = SwapProblem.from_graph(g, cost)
    lo = max(p.working_set(), p.pool_floor())
    ga = SwapAdvisorGA(p, int(lo + 0.1 * (eager_peak(g, cost) - lo)), seed=2, population=8)
    pop = [ga.evaluate(c) for c in ga.initial()]
    checked = 0
    for k in [k for _ in range(3) for k in ga.children(*ga.rng.sample(pop, 2))] + pop:
        alloc = ga.alloc(k)
        sp = plan_swaps(p, k.sch, alloc, stays=True)
        if not sp.feasible:
            continue
        by: dict[tuple[int, int], list] = {}
        for x in sp.stays:
            assert 0 <= x.obj < alloc.cnt[x.cls] and x.cls == alloc.class_of(p.t_bytes[x.tensor])
            by.setdefault((x.cls, x.obj), []).append(x)
        for xs in by.values():
            assert all(b.start >= a.end * (1 - 1e-12) for a, b in zip(xs, xs[1:], strict=False))
        assert sum(x.loaded for x in sp.stays) == len(sp.loads)
        assert sum(x.until == "out" for x in sp.stays) == len(sp.stores)
        assert sum(x.until == "dropped" for x in sp.stays) == len(sp.drops)
        assert {x.tensor for x in sp.stays} == {t for t in range(len(p.t_ref)) if not p.t_pinned[t]}
        checked += 1
    assert checked >= 4
