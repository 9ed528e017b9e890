"""The app's plans (app/plan_store.py) and the optimizer views' builders, on small graphs with plans made
here: the slider walks the non-dominated points, a point's view is the plan replayed and simulated,
the marks name the imported ops each transformation touched, rule steps end where the plan ends,
and a plan file of another graph is one clear error."""

from __future__ import annotations

import time

import pytest

from app.optimizer_view import fit_point, pareto_figure, slider_of
from app.plan_store import PlanStore, build_steps, build_view, origins, plan_marks
from app.state import AppError, AppState
from app.steps_view import step_details, step_figure, step_rows
from core.cost import AnalyticCost
from core.metrics import metrics
from core.search.moptimizer import MOptimizer
from core.search.plan import Plan, PlanError, PlanFile
from core.search.wl_hash import graph_hash
from core.transform.rule import Application
from sample_graphs.store import load_sample_graph


def plan(method: str, peak: int, latency: float, label: str = "") -> Plan:
    return Plan(method, [], [], metrics(peak, latency), label)


def frontier_of(points: list[Plan]):
    from app.plan_store import Frontier

    return Frontier("sample:x", PlanFile("x", 0, "rtx3090", points), "test")


def test_slider_walks_the_non_dominated_points_peak_ascending():
    pts = [plan("magis", 50, 1.20), plan("magis", 60, 1.05), plan("dtr", 60, 1.30),  # dominated by [1]
           plan("dtr", 80, 1.02), plan("sqrt_n", 90, 1.10),  # dominated by [3]
           plan("eager", 100, 1.00)]
    f = frontier_of(pts)
    assert f.baseline() == 5
    assert f.slider() == [0, 1, 3, 5]
    # the default: the least peak within 10% of eager's latency
    assert f.default() == 1
    assert f.default(overhead=0.25) == 0
    s = slider_of(f)  # a stop for every point, peak ascending (then latency)
    assert s["ratios"] == [0.5, 0.6, 0.6, 0.8, 0.9, 1.0] and s["keys"] == [0, 1, 2, 3, 4, 5]
    assert s["min"] == 0 and s["max"] == 5
    assert s["default"] == 1 and s["default_key"] == 1
    # labels name peak and overhead; the ends always drawn, between them spaced out
    assert s["labels"][0] == "0.50x · +20%" and s["labels"][-1] == "1.00x · +0%"
    many = frontier_of([plan("magis", 10 * k, 2.0 - 0.1 * k) for k in range(1, 25)] + [plan("eager", 300, 1.00)])
    labels = [m["label"] for m in slider_of(many)["marks"].values()]
    assert labels[0] != " " and labels[-1] == "1.00x · +0%" and 3 <= sum(x != " " for x in labels) <= 9


def test_fit_in_picks_the_fastest_point_under_a_memory_limit():
    """"fit in" takes what ``magis optimize --memory-limit`` takes: a fraction of the baseline's peak or
    a size with a unit; a bare number above 1 is a message, never 1.5 bytes."""
    f = frontier_of([plan("magis", 50, 1.20), plan("magis", 60, 1.05), plan("dtr", 80, 1.02),
                     plan("eager", 100, 1.00)])
    assert [fit_point(f, t) for t in ("0.6", "0.79", " 1 ", "80B", "1KiB")] == [1, 1, 3, 2, 3]
    with pytest.raises(AppError, match=r"fit in '1\.5' is not a memory limit: a fraction of the peak must be at "
                                       r"most 1; for a size give units, e\.g\. 1\.5GiB"):
        fit_point(f, "1.5")
    with pytest.raises(AppError, match="no plan on the frontier has a peak under"):
        fit_point(f, "0.4")


def test_pareto_figure_has_a_trace_per_method_with_point_keys():
    pts = [plan("magis", 50, 1.2), plan("dtr", 80, 1.02), plan("dtr", 90, 1.5), plan("eager", 100, 1.0)]
    fig = pareto_figure(frontier_of(pts), selected=1)
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["DTR"]["customdata"] == [1, 2]
    assert by_name["MAGIS"]["customdata"] == [0]
    assert by_name["frontier (non-dominated)"]["x"] == [50, 80, 100]
    sel = [t for t in fig["data"] if t["name"] == "selected"][0]
    assert sel["x"] == [80] and sel["y"] == [pytest.approx(1.02e3)]


@pytest.mark.parametrize("peaks", [(214_180, 250_772, 271_508),  # bert_tiny: 0.79x .. 1.00x
                                   (2_100_000_000, 2_900_000_000),  # a narrow range of GiB
                                   (3_268, 4_480, 4_736), (700 * 2**20, 2**30 + 5)])
def test_pareto_peak_axis_ticks_in_binary_units_over_the_shown_range(peaks):
    """The x axis reads like the cards (``format_bytes``: KiB, MiB, GiB), however narrow the range of
    peaks -- never plotly's decimal kB / MB / GB."""
    pts = [plan("magis", p, 1.0 + i / 10) for i, p in enumerate(peaks[:-1])] + [plan("eager", peaks[-1], 1.0)]
    ax = pareto_figure(frontier_of(pts), selected=None)["layout"]["xaxis"]
    lo, hi = ax["range"]
    vals, text = ax["tickvals"], ax["ticktext"]
    assert vals is not None and len(vals) >= 3 and all(lo <= v <= hi for v in vals)
    assert len(set(text)) == len(text) and "tickformat" not in ax
    unit = text[0].split()[1]
    assert unit in ("B", "KiB", "MiB", "GiB") and all(t.endswith(" " + unit) for t in text)
    scale = 1024 ** ("B", "KiB", "MiB", "GiB").index(unit)
    assert [float(t.split()[0]) * scale for t in text] == pytest.approx(vals)  # each label is its value


@pytest.fixture
def fig6():
    g = load_sample_graph("fig6_ftree")
    m = MOptimizer(g, AnalyticCost("rtx3090"))
    return g, m


def test_point_view_replays_and_marks_a_fission_and_a_remat(fig6):
    g, m = fig6
    apps = [a for a in m.ev.rules["ftree"].match(m.ev.g, []) if a.rule == "fission"]
    m.seed(apps[:1])
    hot = [k for k in m.ev.hotspots() if k.index >= 0]
    remat = [a for a in m.ev.rules["remat"].match(m.ev.g, hot)]
    assert remat, "a remat applies to a hot-spot of the fission state"
    s2 = m.seed(apps[:1] + remat[:1])
    p = m.plan(s2)
    v = build_view(g, p, 0, "rtx3090")
    assert v.sim.peak == p.peak and v.sim.latency == pytest.approx(p.latency)
    region = set(apps[0].params) & {n.id for n in g.ops()}
    fission = {nid for nid, k in v.marks.items() if k == "fission"}
    # the ops taken into the fission node are exactly the imported ops missing from the plan's graph
    assert fission == {n.id for n in g.ops() if n.id not in v.graph.nodes}
    assert fission and fission <= region  # ... and all of them were in the fission's region
    copies = [n for n in v.graph.nodes.values() if n.recompute_of is not None]
    assert len(copies) == 1
    assert v.marks.get(v.origin[copies[0].id]) in ("remat", "fission")
    assert v.counts["fission"] == len(fission)


def test_origins_follow_recompute_chains_and_copies(fig6):
    g, _ = fig6
    from core.transform.registry import RULES

    g2 = g.copy()
    hot = [s.root for s in __import__("core.simulate", fromlist=["simulate"]).simulate(
        g2, [n.id for n in g2.ops()], validate=False).memory.hotspots() if s.alloc >= 0]
    app = next(a for a in RULES["remat"].match(g2, hot))
    RULES["remat"].apply(g2, app)
    copy = next(n for n in g2.nodes.values() if n.recompute_of is not None)
    org = origins(g, g2)
    assert org[copy.id] == app.params[0]
    assert plan_marks(g, g2, org) == {app.params[0]: "remat"}


def test_views_remade_on_a_load_are_marked_swapped_not_recomputed():
    """SwapLate makes a swapped tensor's early view again on its LOAD; the original view stays where
    a reader before the peak reads it, so the copy has ``recompute_of`` -- but a view computes
    nothing: the plan marks ``a`` swapped and recomputes nothing.  A real recomputation of an op
    that reads a LOAD is still a recomputation."""
    from core.ir.builder import GraphBuilder
    from core.ir.graph import TRef
    from core.transform.registry import RULES
    from core.transform.remat import recomputed_copy

    b = GraphBuilder("late_view")
    x = b.input("x", 100)
    a = b.op("a", [x], 1000)
    v = b.op("v", [a], 0, view_of=a)
    c = b.op("c", [v], 20)  # reads the view before the peak: the original view stays
    big = b.op("big", [c], 2000)
    d = b.op("d", [big], 10)
    e = b.op("e", [d, a], 10)
    b.op("f", [e, v], 10, output=True)
    g = b.graph
    ids = {n.name: n.id for n in g}
    g2 = g.copy()
    RULES["swap_late"].apply(g2, Application("swap_late", (ids["a"], 0, 2, ids["e"], ids["f"], ids["v"])))
    (v2,) = [n for n in g2.nodes.values() if n.recompute_of == ids["v"]]
    assert ids["v"] in g2.nodes and g2.nodes[v2.id].outputs[0].alias is not None
    assert plan_marks(g, g2, origins(g, g2)) == {ids["a"]: "swap"}
    # an op (not a view) copied to read the loaded tensor is recomputed
    (load,) = [n for n in g2.nodes.values() if n.op == "load"]
    h = g2.copy()
    dup = recomputed_copy(h, ids["e"])
    h.replace_input(ids["f"], TRef(ids["e"], 0), TRef(dup.id, 0))
    assert load.id in h.preds(dup.id)
    assert plan_marks(g, h, origins(g, h)) == {ids["a"]: "swap", ids["e"]: "remat"}


def test_rule_steps_end_where_the_plan_ends(fig6):
    g, m = fig6
    apps = [a for a in m.ev.rules["ftree"].match(m.ev.g, []) if a.rule == "fission"][:1]
    s = m.seed(apps)
    p = m.plan(s)
    steps = build_steps(g, p, "rtx3090", m.order)
    assert [st.app for st in steps] == p.applications
    assert steps[0].peak[0] == m.root.peak
    assert steps[-1].peak[1] == s.peak and steps[-1].latency[1] == pytest.approx(s.latency)
    st = steps[0]
    assert st.removed and st.added  # the region's ops leave, the fission node (and its clones) come
    assert 0 <= st.lo <= st.hi and st.window > 0
    rows = step_rows(steps)
    assert rows[0]["rule"] == "fission" and rows[0]["step"] == 1
    fig = step_figure(st)
    assert fig["layout"]["shapes"][0]["x0"] == st.lo - 0.5
    assert "re-ordered into" in str(step_details(st, len(steps)))


def test_store_frontier_views_and_errors():
    st = AppState()
    try:
        gid = "sample:fig6_ftree"
        ps: PlanStore = st.plans
        g = st.entry(gid).graph
        f = ps.frontier(gid)
        assert f.points[f.baseline()].method == "eager"
        v = ps.view(gid, f.baseline(), wait=30)
        assert v.sim.peak == f.points[f.baseline()].peak
        # a plan file of another graph: one line naming both
        other = load_sample_graph("fig2_skip")
        pf = PlanFile(other.name, graph_hash(other), "rtx3090", [Plan("eager", [], [], metrics(1, 1.0))])
        with pytest.raises(PlanError, match="made for graph"):
            ps.set_frontier(gid, pf, "test")
        # a plan whose step does not apply: the view says which step
        bad = PlanFile(g.name, graph_hash(g), "rtx3090", [Plan("magis", [Application("remat", (10**6, 1))], [], metrics(1, 1.0)),
                                                         f.points[f.baseline()]])
        f2 = ps.set_frontier(gid, bad, "test")
        assert f2.version == f.version + 1
        with pytest.raises((PlanError, AppError), match="step 1"):
            ps.view(gid, 0, wait=30)
    finally:
        st.shutdown()


def test_optimize_job_from_the_app_finishes_or_cancels_keeping_the_best():
    st = AppState()
    try:
        gid = "sample:fig6_ftree"
        job = st.plans.start_optimize(gid, 3.0, "rtx3090")
        assert st.plans.start_optimize(gid, 3.0, "rtx3090") is job  # one run per graph at a time
        t0 = time.time()
        while not job.done and time.time() - t0 < 60:
            time.sleep(0.2)
        assert job.done and job.error is None, job.error
        f = st.plans.frontier(gid)
        assert f.source.startswith("optimized here") and f.version >= 1
        assert any(p.method == "magis" for p in f.points) and f.points[-1].method == "eager"
        assert job.progress.get("points", 0) >= 1
        # cancelled at once: still a frontier (the warm start's states at least), marked as cancelled
        job2 = st.plans.start_optimize(gid, 30.0, "rtx3090")
        job2.cancel.set()
        t0 = time.time()
        while not job2.done and time.time() - t0 < 60:
            time.sleep(0.2)
        assert job2.done and job2.error is None
        assert "cancelled" in st.plans.frontier(gid).source
    finally:
        st.shutdown()


def test_a_dominated_point_has_its_own_stop_and_the_caption_names_the_point_that_dominates_it():
    pts = [plan("magis", 50, 1.20), plan("magis", 60, 1.05), plan("dtr", 62, 1.30),  # dominated by [1]
           plan("dtr", 80, 1.02), plan("sqrt_n", 75, 1.10),  # dominated by [3]... nearer 80 than 60
           plan("eager", 100, 1.00)]
    f = frontier_of(pts)
    from app.optimizer_view import plan_caption, slider_stop

    assert f.slider() == [0, 1, 3, 5]
    assert [slider_stop(f, k) for k in range(6)] == [0, 1, 2, 4, 3, 5]
    assert "dominated" not in plan_caption(f, 1)
    cap = plan_caption(f, 2)
    assert cap.startswith("point 2: DTR") and "stop 3 of 6: 0.62x · +30%" in cap
    assert "dominated: point 1 (0.60x · +5%) is no larger and no slower" in cap
    assert "0 rule applications" in cap


def test_rule_steps_name_their_nodes_and_say_what_a_flat_step_enables(fig6):
    """A step's application shows node names (``Rule.roles`` says which parameters are nodes), never
    raw ids; a step that barely moves the peak shows the bytes, and says which later steps build on it."""
    from app.steps_view import app_text, peak_change

    g, m = fig6
    fission = [a for a in m.ev.rules["ftree"].match(m.ev.g, []) if a.rule == "fission"][0]
    m.seed([fission])
    mutate = next(a for a in m.ev.rules["ftree"].match(m.ev.g, []) if a.rule == "mutate")
    s = m.seed([fission, mutate])
    steps = build_steps(g, m.plan(s), "rtx3090", m.order)
    rows = step_rows(steps)
    n, cn, cj, cd, *region = fission.params
    first = rows[0]["application"]
    assert first.startswith(f"fission({n}, {g.nodes[cn].name}, {cj}, {cd}, {g.nodes[region[0]].name}")
    top = mutate.params[0]  # the fission node the first step added, by its name
    assert steps[1].names[top].startswith("fission_") and top not in g.nodes
    assert rows[1]["application"].startswith(f"mutate({steps[1].names[top]}, {g.nodes[cn].name}, ")
    assert steps[0].enables == [1] and steps[1].enables == []
    assert "step 2: applied to nodes this step added" in str(step_details(steps[0], 2))
    # the count of remat_chain's readers is a number, the nodes are names
    names = {5: "mm_5", 7: "gelu_1", 1: "node_one"}
    assert app_text(Application("remat_chain", (1, 5, 7)), names) == "remat_chain(1, mm_5, gelu_1)"
    assert app_text(Application("swap", (5, 0, 7)), names) == "swap(mm_5, 0, gelu_1)"
    assert app_text(Application("remat", (5, 99)), names) == "remat(mm_5, #99)"  # no name: the id, marked
    assert peak_change(10**8, 10**8 - 512) == "-512 B"  # -0.0005%: the bytes, never "-0.00%"
    assert peak_change(10**6, 10**6 - 512) == "-0.05%, -512 B"
    assert peak_change(1000, 1000) == "unchanged"
    assert peak_change(1000, 900) == "-10.00%, -100 B"


def test_counts_of_one_are_singular():
    from app.optimizer_view import _hover, plan_caption, plan_cards
    from core.fmt import plural

    assert [plural(n, "step") for n in (0, 1, 2, 1234)] == ["0 steps", "1 step", "2 steps", "1,234 steps"]
    assert plural(1, "copy", "copies") == "1 copy" and plural(3, "copy", "copies") == "3 copies"
    one = Plan("magis", [Application("remat", (1, 2))], [], metrics(50, 1.2), "one")
    f = frontier_of([one, plan("eager", 100, 1.0)])
    assert "1 step" in str(plan_cards(f, 0, None, "rtx3090")) and "1 steps" not in str(plan_cards(f, 0, None, "rtx3090"))
    assert plan_caption(f, 0).endswith("· 1 rule application")
    assert "1 rule application" in _hover(one, f.points[1]) and "1 rule applications" not in _hover(one, f.points[1])


def test_job_line_says_which_limit_the_time_left_and_the_states_so_far():
    from app.optimizer_view import job_line

    assert job_line({"seconds": 0.2, "budget": 30}) == \
        "optimizing ... 0 s of 30 s (30 s left) · warm start (greedy fission, then remat steps)"
    run = {"seconds": 12.4, "budget": 30, "iteration": 7, "limit": 2, "limits": 4, "limit_bytes": 3 * 2**20,
           "limit_ratio": 0.6, "evaluated": 1234, "distinct": 987, "frontier_peak": 2**20}
    assert job_line(run) == ("optimizing ... 12 s of 30 s (18 s left) · limit 2 of 4: 0.60x (3.00 MiB), "
                             "iteration 7 · 1,234 states evaluated (987 distinct, warm start included) · "
                             "best peak so far 1.00 MiB")
    assert "limit 5 (a gap in the frontier): 0.60x" in job_line(run | {"limit": 5})
    assert job_line(run | {"done": True, "seconds": 30.1, "limit": 6, "points": 1}) == (
        "finished in 30 s of 30 s · 6 limits searched · 1,234 states evaluated (987 distinct, warm start "
        "included) · 1 frontier point")


def test_optimize_job_counts_every_search_of_the_sweep():
    """The progress of the app's run adds up the states of every search of the sweep (each search's
    Record counts from 0), and knows which of the sweep's limits it is at."""
    st = AppState()
    try:
        gid = "sample:fig6_ftree"
        seen: list[dict] = []
        job = st.plans.start_optimize(gid, 3.0, "rtx3090")
        t0 = time.time()
        while not job.done and time.time() - t0 < 60:
            seen.append(dict(job.progress))
            time.sleep(0.05)
        assert job.done and job.error is None, job.error
        recs = st.plans.frontier(gid).plans.records
        ends = [r for i, r in enumerate(recs) if i + 1 == len(recs) or recs[i + 1]["iteration"] <= r["iteration"]]
        assert len(ends) >= 2, "the sweep ran several searches"
        assert job.progress["evaluated"] == sum(r["generated"] for r in ends)
        assert job.progress["limits"] == 4 and job.progress["limit"] >= len(ends)
        assert job.progress["distinct"] > 0
        assert {p.get("limit") for p in seen if "limit" in p} >= {1}
        assert all(p["budget"] == 3.0 for p in seen)
    finally:
        st.shutdown()
