"""F-Trans of windows around the peak step (``search.peak_fission``) on states with recomputed
copies: the convexity trim by hand; on DTR's plans of tiny workloads, every window offered is a
valid split that spans recomputed copies, its child's delta numbers are the simulator's, and its
exported script matches eager PyTorch (float64, rtol 1e-4) with the copies' originals handed over
(``Graph.promote_copy``); ``MOptimizer.peak_fission_steps`` lowers the peak of such a plan."""

from __future__ import annotations

import pytest
import torch

from core.cost.model import AnalyticCost
from core.ir.builder import GraphBuilder
from core.search.moptimizer import MOptimizer
from core.search.peak_fission import _convex, _largest_piece, peak_windows
from core.search.peers.dtr import DTR
from core.search.plan import replay
from core.simulate import simulate
from tests.workload_cases import Case

COST = AnalyticCost("rtx3090")


def test_the_convexity_trim_drops_what_a_path_through_an_outside_op_reaches():
    """x -> a -> b -> d, a -> o -> d, d -> e; o is outside S = {a, b, d, e}: the path a -> o -> d
    leaves S and comes back, so d goes, and e with it (reached through d).  The rest is convex."""
    b = GraphBuilder("diamond")
    x = b.input("x", 16)
    a = b.op("a", [x], 16)
    bb = b.op("b", [a], 16)
    o = b.op("o", [a], 16)
    d = b.op("d", [bb, o], 16)
    b.op("e", [d], 16, output=True)
    g = b.graph
    ids = {n.name: n.id for n in g}
    order = [ids[k] for k in ("x", "a", "b", "o", "d", "e")]
    s = {ids[k] for k in ("a", "b", "d", "e")}
    assert _convex(g, s, order, 0, len(order) - 1) == {ids["a"], ids["b"]}
    s_all = s | {ids["o"]}
    assert _convex(g, s_all, order, 0, len(order) - 1) == s_all
    assert _largest_piece(g, {ids["a"], ids["b"], ids["e"]}) == {ids["a"], ids["b"]}


@pytest.fixture(scope="module", params=["unet_tiny", "bert_tiny"])
def adopted(request):
    case = Case(request.param, torch.float64)
    m = MOptimizer(case.g, COST)
    plans = [p for p in DTR().plans(case.g, COST, time_budget=30, refine=False) if p.applications]  # the grid's plans
    s = m.adopt(min(plans, key=lambda p: p.peak))
    assert s is not None
    return case, m, s


def test_every_window_is_a_split_across_recomputed_copies_that_matches_eager(adopted):
    case, m, s = adopted
    ev = m.ev
    ev.goto(s)
    g = ev.g
    apps = peak_windows(g, ev.order, ev.where().peaks[0])
    assert apps and all(a.rule == "fission" for a in apps)
    spans = 0
    for app in apps:
        nodes = set(app.params[4:])
        spans += any(g.nodes[v].recompute_of is not None or g.copies(v) for v in nodes)
    assert spans, "no window holds a recomputed copy or an original with one"
    for app in apps[:: max(1, len(apps) // 4)]:  # a spread of sizes and n
        ev.goto(s)
        c = ev.evaluate(app)
        child = ev.child_state(c)
        q = m.plan(child)
        h = replay(case.g, q.applications)
        sim = simulate(h, q.order, COST)
        assert child.peak == sim.peak and child.latency == pytest.approx(sim.latency, rel=1e-9)
        assert h.lint_problems() == []
        case.verify_order(h, q.order, f"{app}")
    ev.goto(s)


@pytest.fixture(scope="module")
def unet():
    return Case("unet_tiny", torch.float64)


def test_peak_fission_steps_lower_the_peak_and_stay_exact(unet):
    """DTR's plan of unet_tiny at 0.7 of its peak: the up-sampling block recomputed just before its
    backward peaks there; one window's F-Trans lowers that peak (0.695x -> 0.665x)."""
    case = unet
    m = MOptimizer(case.g, COST)
    p = next(p for p in DTR().plans(case.g, COST, time_budget=30) if p.label == "budget 0.7")
    s = m.adopt(p)
    end = m.peak_fission_steps(s, 20.0)
    assert end.peak < s.peak
    q = m.plan(end)
    h = replay(case.g, q.applications)
    assert simulate(h, q.order, COST).peak == end.peak
    case.verify_order(h, q.order, "peak fission steps")


def test_low_end_goes_on_from_the_lowest_seed_below_it(unet):
    """``low_end`` starts at the lowest-peak adopted plan and ends at or below it, on a chain of
    states from it whose plan replays to the same peak."""
    from core.search.moptimizer import low_end

    case = unet
    m = MOptimizer(case.g, COST)
    for p in DTR().plans(case.g, COST, time_budget=30):
        if p.applications:
            m.adopt(p)
    low = min(m.adopted, key=lambda s: (s.peak, s.latency))
    end = low_end(m, 10.0)
    assert end.peak <= low.peak and low in end.path()
    q = m.plan(end)
    assert simulate(replay(case.g, q.applications), q.order, COST).peak == end.peak


@pytest.mark.parametrize("limit, called", [(0.05, 1), (0.99, 0)])
def test_optimize_goes_below_the_warm_start_only_for_a_limit_it_does_not_meet(monkeypatch, limit, called):
    from core.search import moptimizer
    from sample_graphs.store import load_sample_graph

    calls = []
    real = moptimizer.low_end
    monkeypatch.setattr(moptimizer, "low_end", lambda m, t, limit=None: calls.append(t) or real(m, t, limit))
    pf = moptimizer.optimize(load_sample_graph("bert_tiny"), memory_limit=limit, time_budget=3)
    assert len(calls) == called
    assert pf.points[0].peak <= pf.points[-1].peak
