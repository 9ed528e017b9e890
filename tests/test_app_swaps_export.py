"""The Swaps and Export tabs' builders on a plan with one swap made by hand (fig2_skip: a hot-spot
tensor stored right after it is produced and loaded right before a late reader, so compute waits
for the load): the timeline's copy bars sit at the simulator's times, the merged compute intervals
cover exactly the compute steps' busy time, the waits add up to ``sim.compute_wait``, and the
exported plan file and script round-trip."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from app import export_view, swaps_view
from app.figures import fmt_seconds
from app.state import AppState, sample_file_exists
from core.fmt import format_bytes
from core.ir.graph import NodeKind
from core.search.plan import plans_from_bytes, replay
from tests.swap_plans import GID, install_hand_swap


@pytest.fixture(scope="module")
def state():
    assert sample_file_exists("fig2_skip")  # committed with the samples
    s = AppState(time_budget=1.0)
    yield s
    s.shutdown()


@pytest.fixture(scope="module")
def frontier(state):
    return install_hand_swap(state)


@pytest.fixture(scope="module")
def views(state, frontier):
    v = state.plans.view(GID, 0, wait=60)
    base = state.plans.view(GID, frontier.baseline(), wait=60)
    assert v is not None and base is not None
    return v, base


def traces(fig: dict, meta: str) -> list[dict]:
    return [t for t in fig["data"] if t.get("meta") == meta]


# ---- the Swaps tab ---------------------------------------------------------------------------------
def test_timeline_has_one_store_and_one_load_bar_at_the_simulated_times(views):
    v, base = views
    fig = swaps_view.swap_timeline_figure(v, base)
    go.Figure(fig)  # a valid plotly figure
    sim = v.sim
    for kind, meta in ((NodeKind.STORE, "store"), (NodeKind.LOAD, "load")):
        (tr,) = traces(fig, meta)
        (i,) = [i for i, nid in enumerate(sim.order) if v.graph.nodes[nid].kind == kind]
        assert len(tr["base"]) == len(tr["x"]) == 1
        assert tr["y"] == [swaps_view.LANES["copy"]]
        assert tr["base"][0] == pytest.approx(sim.start[i] * 1e3)
        assert tr["base"][0] + tr["x"][0] == pytest.approx(sim.end[i] * 1e3)
        node = v.graph.nodes[sim.order[i]]
        assert node.name in tr["hovertext"][0] and swaps_view.copied_tensor(v.graph, node.id) in tr["hovertext"][0]
    assert [t["meta"] for t in fig["data"]].count("memory-plan") == 1
    assert [t["meta"] for t in fig["data"]].count("memory-eager") == 1
    # the memory row: the plan's peak over time is the simulator's peak
    (mem,) = traces(fig, "memory-plan")
    assert max(mem["y"]) == sim.peak
    assert all(t["yaxis"] == ("y2" if t["meta"].startswith("memory") else "y") for t in fig["data"])


def test_compute_intervals_cover_the_busy_time_and_the_waits_add_up_to_the_compute_wait(views):
    v, base = views
    sim = v.sim
    fig = swaps_view.swap_timeline_figure(v, base)
    (busy,) = traces(fig, "compute")
    (wait,) = traces(fig, "wait")
    steps = [i for i, k in enumerate(sim.stream) if k == "compute"]
    busy_ms = sum(sim.end[i] - sim.start[i] for i in steps) * 1e3
    ivs = sorted(zip(busy["base"], [b + d for b, d in zip(busy["base"], busy["x"], strict=True)], strict=True))
    assert sum(e - s for s, e in ivs) == pytest.approx(busy_ms, rel=1e-12)
    assert all(e0 < s1 for (_, e0), (s1, _) in zip(ivs, ivs[1:], strict=False))  # disjoint, with a gap between
    for i in steps:  # every compute step inside one interval
        assert any(s - 1e-12 <= sim.start[i] * 1e3 and sim.end[i] * 1e3 <= e + 1e-12 for s, e in ivs)
    assert len(ivs) == len(wait["x"]) + 1 < len(steps)  # merged: one more interval than waits
    assert sim.compute_wait > 0
    assert sum(wait["x"]) == pytest.approx(sim.compute_wait * 1e3, rel=1e-9)
    (load,) = [nid for nid in sim.order if v.graph.nodes[nid].kind == NodeKind.LOAD]
    assert "LOAD" in wait["hovertext"][0] and v.graph.nodes[load].name in wait["hovertext"][0]
    busy_list, waits = swaps_view.compute_lanes(v)
    assert sum(w.end - w.start for w in waits) == pytest.approx(sim.compute_wait, rel=1e-9)
    assert waits[0].blocker == sim.order.index(load)


def test_summary_counts_the_copies_the_bytes_and_the_wait(views):
    v, _ = views
    text = swaps_view.swap_summary(v)
    (st,) = [n for n in v.graph.nodes.values() if n.kind == NodeKind.STORE]
    nbytes = format_bytes(st.outputs[0].nbytes)
    assert text.startswith(f"1 tensor swapped (1 store, 1 load): {nbytes} device → host · {nbytes} host → device")
    share = v.sim.compute_wait / v.sim.latency * 100
    assert f"compute waits {fmt_seconds(v.sim.compute_wait)} for loads ({share:.2f}% of the " \
           f"{fmt_seconds(v.sim.latency)} latency)" in text


def test_a_plan_without_swaps_says_so_and_still_draws_compute_and_memory(views, frontier):
    _, base = views
    assert swaps_view.swap_summary(base) == "this plan moves no tensors to host memory"
    fig = swaps_view.swap_timeline_figure(base, base)
    go.Figure(fig)
    metas = [t["meta"] for t in fig["data"]]
    assert metas == ["compute", "memory-plan"]  # one busy interval, no waits, no copies
    (busy,) = traces(fig, "compute")
    assert len(busy["x"]) == 1 and busy["x"][0] == pytest.approx(base.sim.latency * 1e3)
    text = swaps_view.no_swaps_text(frontier)
    assert text.startswith("this plan moves no tensors to host memory; pick a point with swaps")
    assert "point 0 of this frontier" in text


# ---- the Export tab --------------------------------------------------------------------------------
def test_the_plan_file_loads_and_replays_to_the_same_graph(state, views, frontier):
    v, base = views
    data = export_view.plan_file_bytes(frontier, 0)
    pf = plans_from_bytes(data)
    pf.check_graph(state.entry(GID).graph)
    assert [p.method for p in pf.points] == ["magis", "eager"]
    p = pf.point(0)
    assert p.order == v.plan.order and p.applications == v.plan.applications
    assert replay(state.entry(GID).graph, p.applications).same_as(v.graph)
    assert pf.point(1).order == base.plan.order
    assert json.loads(data)["meta"]["frontier_point"] == 0
    # the eager point alone when it is the one selected
    assert [p.method for p in plans_from_bytes(export_view.plan_file_bytes(frontier, 1)).points] == ["eager"]
    assert export_view.plan_file_name(frontier, 0) == "fig2_skip_magis_point0.plan.json"


def test_the_script_compiles_and_names_the_point(views, frontier):
    v, _ = views
    name, src, _secs = export_view.script_of(frontier, v)
    assert name == "fig2_skip_magis_point0.py"
    compile(src, name, "exec")
    assert "plan magis hand swap" in src


def test_commands_and_who_can_verify(frontier):
    text = export_view.commands(GID, frontier, 0)
    assert "magis export fig2_skip --plan fig2_skip_magis_point0.plan.json -o fig2_skip_magis_point0.py" in text
    assert "magis verify fig2_skip --plan fig2_skip_magis_point0.plan.json" in text
    assert export_view.verify_block(GID) is None
    assert "bert_tiny" in export_view.verify_block("sample:bert_base")
    assert "uploaded" in export_view.verify_block("upload:3f2a9c0d")


def test_verify_outcome_reads_the_report():
    res = {"ok": True, "allclose": True, "compared": 7, "rtol": 1e-4, "atol": 1e-5, "max_abs_error": 2e-7,
           "worst_abs_tensor": "grad:w", "max_rel_error": 1e-7, "worst_rel_tensor": "loss", "loss": 0.5,
           "loss_abs_error": 0.0, "measured_peak_bytes": 5216, "simulated_peak_bytes": 5216, "peak_ratio": 1.0,
           "missing_reference": []}
    ok, lines = export_view.verify_outcome(res)
    assert ok and "compared 7 tensors (the loss and every gradient)" in lines[0] and "2e-07" in lines[0]
    assert any("measured 5.09 KiB vs simulated 5.09 KiB (ratio 1.0000)" in t for t in lines)
    _, lines = export_view.verify_outcome(res | {"simulated_device": "a100-80gb"})
    assert any("measured 5.09 KiB vs simulated 5.09 KiB on a100-80gb (ratio 1.0000)" in t for t in lines)
    ok, lines = export_view.verify_outcome(res | {"ok": False, "measured_peak_bytes": 6000, "peak_ratio": 1.15})
    assert not ok and "not within 2%" in lines[-1]


def test_verify_progress_shows_running_errors_as_one_line_and_the_outcome():
    from dash import no_update

    from app.plan_store import Job

    of = {"gid": GID, "version": 1, "key": 0, "label": "point 0 (MAGIS hand swap)"}
    assert export_view.verify_progress(of, None) == ("", None, True, None)
    job = Job("verify", GID)
    status, result, done, err = export_view.verify_progress(of, job)
    assert status.startswith("verifying point 0 (MAGIS hand swap) ...") and result is no_update
    assert not done and err is None
    job.error, job.done = "magis: error: the plan was made for graph 'x', not for 'fig2_skip' (the graphs differ)", True
    status, result, done, err = export_view.verify_progress(of, job)
    assert done and result is None
    assert err == "verification of point 0 (MAGIS hand swap) failed: the plan was made for graph 'x', not for " \
                  "'fig2_skip' (the graphs differ)"
    assert "Traceback" not in err and "\n" not in err
    job.error, job.result = None, {"ok": False, "allclose": False, "compared": 3, "rtol": 1e-4, "atol": 1e-5,
                                   "max_abs_error": 0.5, "worst_abs_tensor": "grad:w", "max_rel_error": 0.1,
                                   "worst_rel_tensor": "grad:w"}
    status, result, done, err = export_view.verify_progress(of, job)
    assert done and err is None and status.startswith("verified in")
    assert result.id == "export-verify-outcome"
    verdict = result.children[0].children[0]
    assert verdict.children == "failed" and "fail" in verdict.className


def test_every_view_counts_swaps_alike(state):
    """One definition of a swap (``PointView.swaps``: a swapped tensor is a STORE with its LOADs) in the
    plan bar's card and caption, the Swaps tab and the Export tab -- here one tensor loaded back for
    two readers: 1 tensor, 1 store, 2 loads (3 copies, 2 swap applications)."""
    from app.optimizer_view import plan_cards
    from app.plan_store import Frontier, build_view
    from core.cost import AnalyticCost
    from core.schedule import get_scheduler
    from core.search.plan import Plan, PlanFile
    from core.search.wl_hash import graph_hash
    from core.simulate import simulate
    from core.transform.registry import RULES

    g = state.entry(GID).graph
    eager = state.plans.frontier(GID).points[-1]
    sim = simulate(g, eager.order, AnalyticCost("rtx3090"))
    hot = [s.root for s in sim.hotspots() if s.alloc >= 0 and not s.scratch]
    apps = RULES["swap"].match(g, hot)
    by_tensor: dict = {}
    for a in apps:
        by_tensor.setdefault(a.params[:2], []).append(a)
    two = next(v[:2] for v in by_tensor.values() if len(v) >= 2)
    h = g.copy()
    for a in two:
        RULES["swap"].apply(h, a)
    order = get_scheduler("traced").run(h).order
    p = Plan("magis", two, order, simulate(h, order, AnalyticCost("rtx3090")).metrics(), label="two loads")
    pf = PlanFile(g.name, graph_hash(g), "rtx3090", [p, eager])
    f = Frontier(GID, pf, "test")
    v = build_view(g, p, 0, "rtx3090")
    text = "1 tensor swapped (1 store, 2 loads)"
    assert v.swaps().text() == text and v.copies() == 3
    cards = str(plan_cards(f, 0, v, "rtx3090"))
    assert "1 tensor swapped" in cards and "2 swapped" not in cards
    assert swaps_view.swap_summary(v).startswith(text + ":")
    line = export_view.plan_line(GID, f, 0, v)
    assert text in line and "swaps)" not in line and "2 rule applications" in line
    assert "1 rule application ·" in export_view.plan_line(GID, Frontier(GID, PlanFile(
        g.name, graph_hash(g), "rtx3090", [Plan("magis", two[:1], [], p.metrics), eager]), "test"), 0)
