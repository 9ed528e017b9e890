"""The app's builders and callbacks as plain functions (no browser): downsampling keeps the exact peak,
hover/live tensors agree with ``MemoryProfile.live_at``, collapsed views stay small and consistent,
figures validate, uploads are parsed as JSON only, and callbacks turn bad input into messages."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import bundle, cyto, figures
from app.callbacks import analysis_of, domtree_of, first_render, graph_of, memory_of, view_initial
from app.modtree import ModuleTree
from app.state import AppError, AppState, decode_upload, sample_file_exists
from core.analysis.lifetimes import memory_profile
from core.fmt import format_bytes
from core.ir import io
from core.ir.builder import GraphBuilder
from core.ir.graph import GraphError
from core.schedule import get_scheduler


# ---- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def state():
    s = AppState(time_budget=2.0)
    yield s
    s.shutdown()


def _need(name: str) -> str:
    assert sample_file_exists(name), f"sample graph file for {name} is committed (make graphs writes it)"
    return f"sample:{name}"


@pytest.fixture(scope="module")
def bert(state):
    gid = _need("bert_tiny")
    return gid, state.entry(gid).graph


def hand_graph():
    """Two "modules", a view, a multi-output op and a weight: small enough to check by hand."""
    b = GraphBuilder("hand")
    x = b.input("x", 100)
    w = b.weight("w", 40)
    a = b.op("a", [x, w], 300, module="enc.l0")
    v = b.op("v", [a], 0, view_of=a, module="enc.l0")
    c = b.op("c", [v], [50, 60], module="enc.l1")
    d = b.op("d", [c, x], 20, output=True, module="head")
    return b.graph, (x, w, a, v, c, d)


# ---- downsampling -------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=5000), st.integers(10, 400))
def test_downsample_keeps_exact_peak_and_order(values, max_points):
    y = np.array(values, dtype=np.int64)
    idx = figures.downsample_indices(y, max_points)
    assert list(idx) == sorted(set(idx.tolist()))
    assert idx[0] == 0 and idx[-1] == len(y) - 1
    assert y[idx].max() == y.max()
    if len(y) <= max_points:
        assert len(idx) == len(y)
    else:
        assert len(idx) <= max_points + 2
        # every bucket keeps its maximum: the drawn envelope never hides a local high
        buckets = max(1, max_points // 3)
        edges = np.linspace(0, len(y), buckets + 1).astype(int)
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            inside = idx[(idx >= lo) & (idx < hi)]
            assert y[inside].max() == y[lo:hi].max()


# ---- live tensors & hot-spots -------------------------------------------------------------------
def test_live_index_matches_live_at(bert):
    _gid, g = bert
    order = get_scheduler("traced").run(g).order
    mem = memory_profile(g, order)
    li = figures.LiveIndex.of(mem)
    steps = list(range(0, len(order), 7)) + mem.peak_steps
    for step, top, top_all in zip(steps, li.top(steps, 5), li.top(steps, 5, resident=True), strict=True):
        live = mem.live_at(step)
        assert [s.root for s in top_all] == [s.root for s in live[:5]]
        assert [s.root for s in top] == [s.root for s in live if s.alloc >= 0][:5]


def test_hotspots_are_the_storages_alive_at_peak_steps(bert):
    """MAGIS section 2.1: H = union of the live sets of every step where M_i is the peak."""
    _gid, g = bert
    for name in ("traced", "rpo"):
        mem = memory_profile(g, get_scheduler(name).run(g).order)
        naive = {s.root for i in mem.peak_steps for s in mem.live_at(i)}
        hot = mem.hotspots()
        assert {s.root for s in hot} == naive
        assert [s.nbytes for s in hot] == sorted((s.nbytes for s in hot), reverse=True)


def test_hover_text_lists_largest_live_tensors():
    g, (x, w, a, v, c, d) = hand_graph()
    mem = memory_profile(g, [a.node, v.node, c.node, d.node])
    h = figures.hover_data(g, mem, [0, 1, 2, 3])
    assert "largest live tensors" in h.text[2]
    assert h.top_nodes[2][0] == a.node  # a's 300 bytes (seen through its view) outlive the view op
    assert "inputs & weights held all step: 140 B" in h.text[0]
    assert h.text[3].startswith("<b>step 3</b>: synthetic")


# ---- figures ------------------------------------------------------------------------------------
def test_memory_figure_validates_and_marks_peak(bert):
    _gid, g = bert
    curves = []
    for name in ("traced", "rpo"):
        from core.simulate import simulate

        sim = simulate(g, get_scheduler(name).run(g).order)
        curves.append(figures.Curve(name, sim.memory, sim.start, sim.latency))
    fig = figures.memory_figure(g, curves, "step", max_points=120)
    go.Figure(fig)  # raises on an invalid figure
    kinds = [t for t in fig["data"] if t.get("stackgroup")]
    assert {t["name"] for t in kinds} <= set(figures.KIND_LABELS.values()) and len(kinds) >= 3
    total = next(t for t in fig["data"] if t["name"].startswith("traced total"))
    assert max(total["y"]) == curves[0].profile.peak  # the exact peak is drawn
    assert len(total["x"]) <= 122 and all(len(cd) == 3 and cd[1] == "traced" for cd in total["customdata"])
    overlay = next(t for t in fig["data"] if t["name"].startswith("rpo"))
    assert max(overlay["y"]) == curves[1].profile.peak
    # stacked kinds add up to the total at every drawn step
    stacked = np.sum([t["y"] for t in kinds], axis=0)
    assert stacked.tolist() == total["y"]
    assert any("peak" in a["text"] for a in fig["layout"]["annotations"])
    tfig = figures.memory_figure(g, curves, "time", max_points=120)
    go.Figure(tfig)
    assert tfig["layout"]["xaxis"]["title"]["text"].startswith("simulated time")
    t_total = next(t for t in tfig["data"] if t["name"].startswith("traced total"))
    assert t_total["x"][-1] == pytest.approx(curves[0].start[-1] * 1e3)
    # the page may render with plotly.js's basic distribution (app.bundle): scatter only
    assert {t["type"] for f in (fig, tfig) for t in f["data"]} <= bundle.TRACE_TYPES


def test_memory_figure_empty_and_pending():
    fig = figures.memory_figure(None, [], pending=["hmcos"])
    go.Figure(fig)
    assert "computing hmcos" in fig["layout"]["annotations"][0]["text"]


def test_hotspot_rows(bert):
    _gid, g = bert
    mem = memory_profile(g, get_scheduler("traced").run(g).order)
    hot = mem.hotspots()
    rows = figures.hotspot_rows(g, hot)
    assert len(rows) == sum(1 for s in hot if s.alloc >= 0)
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
    assert all(0 <= r["alloc"] <= r["free"] and r["lifetime"] == r["free"] - r["alloc"] + 1 for r in rows)
    every = figures.hotspot_rows(g, hot, include_resident=True)
    assert len(every) == len(hot) and any(r["alloc"] == -1 for r in every)
    assert len({r["id"] for r in every}) == len(every)  # DataTable row ids are unique
    assert {c for c, _ in figures.HOTSPOT_COLUMNS} <= set(rows[0])


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(80 * 2**30) == "80.0 GiB"


# ---- collapse by module -------------------------------------------------------------------------
def test_module_tree_views_are_consistent():
    g, (x, w, a, v, c, d) = hand_graph()
    t = ModuleTree(g)
    assert not t.split  # no backward pass: no phase level
    top = t.visible(set())
    assert top[a.node] == ("g", ("enc",)) and top[d.node] == ("g", ("head",)) and top[x.node] == ("n", x.node)
    ex = t.expand(set(), ("enc",))
    vis = t.visible(ex)
    assert vis[a.node] == ("g", ("enc", "l0")) and vis[c.node] == ("g", ("enc", "l1"))
    shown = t.reveal(set(), c.node)
    assert t.visible(shown)[c.node] == ("n", c.node)
    assert t.collapse(shown, ("enc",)) == set()
    assert t.members(("enc",)) == [a.node, v.node, c.node]


def test_initial_views_of_training_graphs_fit_budget(state, bert):
    gid, g = bert
    t = state.entry(gid).tree
    assert t.split  # forward and backward phases
    ex = t.initial_expanded(24)
    assert 3 <= t.count_visible(ex) <= 24
    els = cyto.graph_elements(g, t, ex, "t", {n: 1 for n in g.nodes})
    nodes = {e["data"]["id"] for e in els if "source" not in e["data"]}
    edges = [e["data"] for e in els if "source" in e["data"]]
    assert all(e["source"] in nodes and e["target"] in nodes and e["source"] != e["target"] for e in edges)
    assert any("rev" in e.get("classes", "") for e in els if "source" in e["data"])  # backward climbs back
    # a node's group accounts for all of the group's members
    members = sum(e["data"].get("members", 1) for e in els if "source" not in e["data"])
    assert members == len(g)


@pytest.mark.parametrize("name", ["gpt_neo_1_3b", "btlm_3b"])
def test_big_graph_view_is_small(state, name):
    gid = _need(name)
    e = state.entry(gid)
    view = view_initial(state, gid)
    els, _layout = graph_of(state, view, None, None, "out", None)
    assert len([x for x in els if "source" not in x["data"]]) <= 40  # never thousands of elements
    # expanding one group adds one level only
    grp = max((x["data"] for x in els if "group" in x["data"]), key=lambda d: d["members"])
    ex = e.tree.expand(cyto_paths(view), cyto.str_path(grp["group"]))
    more = cyto.graph_elements(e.graph, e.tree, ex, e.tok, e.out_bytes)
    assert len([x for x in more if "source" not in x["data"]]) < 150
    # no group ever spills more than CHUNK loose nodes when expanded
    from app.modtree import CHUNK

    assert all(len(grp.nodes) <= CHUNK for grp in e.tree.groups.values())
    for path, grp in e.tree.groups.items():
        if path and len(grp.nodes) + len(grp.children) > 0:
            assert e.tree.label(path)  # every group has a name to show


def cyto_paths(view):
    return {cyto.str_path(p) for p in view["expanded"]}


def test_graph_elements_mark_hot_live_selected():
    g, (x, w, a, v, c, d) = hand_graph()
    t = ModuleTree(g)
    ex = t.reveal(t.reveal(set(), a.node), c.node)
    els = cyto.graph_elements(g, t, ex, "tk", g and {n.id: n.out_bytes for n in g},
                              hot=[a.node], selected=c.node, live=[d.node])
    by_nid = {e["data"].get("nid"): e for e in els if "nid" in e["data"]}
    assert "hot" in by_nid[a.node]["classes"] and "sel" in by_nid[c.node]["classes"]
    assert by_nid[a.node]["data"]["id"] == f"tk-n{a.node}"
    head = next(e for e in els if e["data"].get("group") == "head")  # d is inside a collapsed group
    assert "live" in head["classes"]
    assert by_nid[a.node]["data"]["color"] != cyto.ZERO_COLOR and by_nid[v.node]["data"]["color"] == cyto.ZERO_COLOR


def test_dominator_tree_views(state, bert):
    gid, g = bert
    entry = state.entry(gid)
    dt = entry.dom()
    full = cyto.dom_elements(g, dt, entry.dom_children(), entry.dom_sizes(), "t", entry.out_bytes,
                             full_max=10**6)
    nodes = [e for e in full if "source" not in e["data"]]
    assert len(nodes) == len(dt.reachable)
    assert sum(1 for e in full if "source" in e["data"]) == len(dt.reachable) - 1
    some = sorted(dt.reachable)[len(dt.reachable) // 2]
    near = cyto.dom_elements(g, dt, entry.dom_children(), entry.dom_sizes(), "t", entry.out_bytes,
                             selected=some, full_max=10)
    ids = {e["data"].get("nid") for e in near if "source" not in e["data"]}
    assert some in ids and dt.idom[some] in ids and len(near) < 80
    sel = next(e for e in near if e["data"].get("nid") == some)
    assert "sel" in sel["classes"]


# ---- uploads ------------------------------------------------------------------------------------
def _data_url(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode()


def test_uploads_are_json_only(state, tmp_path):
    g, _ = hand_graph()
    good = tmp_path / "g.json.gz"
    io.save(g, good)
    gid = state.add_upload(_data_url(good.read_bytes()), "g.json.gz")
    assert gid.startswith("upload:") and state.entry(gid).graph.name == "hand"
    assert any(o["value"] == gid for o in state.model_options())
    bad = {
        "not json": b"\x00garbage",
        "pickle": pickle.dumps({"schema": "magis-graph"}),
        "wrong schema": json.dumps({"schema": "x", "version": 1, "nodes": []}).encode(),
        "bad gzip": b"\x1f\x8b\x08garbage",
        "no shapes": gzip.compress(json.dumps({"schema": "magis-graph", "version": 1, "nodes": [
            {"id": 0, "op": "placeholder", "kind": "placeholder", "outputs": [{"dtype": "float32"}]}]}).encode()),
    }
    for what, data in bad.items():
        with pytest.raises(GraphError):
            state.add_upload(_data_url(data), what)
    with pytest.raises(GraphError):
        decode_upload("no comma here")
    with pytest.raises(GraphError):
        decode_upload("data:application/json,plain")


def test_upload_callback_reports_errors_through_the_server():
    from app.main import create_app

    app = create_app(warm=False)
    client = app.server.test_client()
    body = {"output": "..model.options...model.value...upload.contents..",
            "outputs": [{"id": "model", "property": "options"}, {"id": "model", "property": "value"},
                        {"id": "upload", "property": "contents"}],
            "inputs": [{"id": "upload", "property": "contents", "value": _data_url(b"{not json")}],
            "state": [{"id": "upload", "property": "filename", "value": "bad.json"}],
            "changedPropIds": ["upload.contents"]}
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200
    out = r.get_json()
    msg = json.dumps(out["sideUpdate"]["messages"])
    assert "Could not load 'bad.json': not valid JSON" in msg and "Traceback" not in msg
    assert out["response"]["upload"]["contents"] is None
    assert client.get("/_dash-layout").status_code == 200  # still serving


# ---- callbacks' outputs as functions --------------------------------------------------------------
def test_first_render_has_every_output(state, bert):
    gid, g = bert
    init = first_render(state, gid)
    for key in ("view", "hot", "summary", "hotspots", "memory", "graph", "domtree", "chips", "dom-info"):
        assert init[key] is not None, key
    go.Figure(init["memory"])
    text = json.dumps([c.to_plotly_json() for c in init["summary"]], default=str)
    assert "bert_tiny" in text and f"{len(g.ops()):,} ops" in text


def test_schedule_switch_changes_peak_card(state):
    gid = _need("btlm_tiny")
    g = state.entry(gid).graph
    peaks = {n: get_scheduler(n).run(g).peak for n in ("traced", "rpo")}
    assert peaks["traced"] != peaks["rpo"], peaks  # btlm_tiny separates them: 375,588 B and 386,852 B
    for name in ("traced", "rpo"):
        cards, rows, hot, _note = analysis_of(state, gid, "rtx3090", name, [])
        peak_card = next(c for c in cards if c.children[0].children.startswith("peak"))
        assert peak_card.children[1].children == format_bytes(peaks[name])
        assert hot["schedule"] == name
    fig, key, pending, failed = memory_of(state, gid, "rtx3090", "rpo", ["traced"], "step")
    assert not pending and not failed and key[-2:] == ["rpo", "traced"]
    # the overlaid curve's hover text is built in the background, ready for when it is selected
    fresh = AppState()
    try:
        overlay = fresh.analysis(gid, "traced", "rtx3090")
        assert not overlay._hover
        memory_of(fresh, gid, "rtx3090", "rpo", ["traced"], "step")
        fresh._bg.submit(lambda: None).result(timeout=60)  # one worker: the prefetch ran before this
        hov = overlay._hover[figures.MAX_POINTS]
        fig2, *_ = memory_of(fresh, gid, "rtx3090", "traced", ["rpo"], "step")
        total = next(t for t in fig2["data"] if t["name"].startswith("traced total"))
        assert total["text"] is hov.text  # reused, not rebuilt
    finally:
        fresh.shutdown()


def test_domtree_info_for_unreachable_node(state, bert):
    gid, g = bert
    view = view_initial(state, gid)
    weight = next(n.id for n in g.placeholders() if n.target.startswith("param:"))
    _els, _layout, info = domtree_of(state, view, {"gid": gid, "nid": weight}, None, None)
    assert "not reachable" in info


def test_unknown_schedule_and_model(state):
    with pytest.raises(AppError):
        state.schedule("sample:bert_tiny", "no-such-schedule")
    with pytest.raises(AppError):
        state.entry("sample:no_such_model")
    with pytest.raises(AppError):
        state.entry("upload:0123456789ab")  # never uploaded (or evicted)


def test_create_app_errors_are_one_line(tmp_path):
    from app.main import create_app, serve

    with pytest.raises(AppError, match="unknown sample"):
        create_app(initial_sample="nope", warm=False)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(GraphError, match="not valid JSON"):
        create_app(graph_file=str(bad), warm=False)
    import inspect

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"


def test_core_never_imports_dash():
    code = ("import sys, core.simulate, core.summary, core.analysis.dominators, core.schedule, "
            "core.ir.io; assert not any(m.split('.')[0] in ('dash', 'plotly', 'dash_cytoscape') "
            "for m in sys.modules), sorted(m for m in sys.modules if 'dash' in m or 'plotly' in m)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_slow_and_failing_schedulers_never_block(state, bert):
    """A scheduler still running is reported as pending (the page polls for it); one that fails
    becomes a message; neither blocks the figure of the others."""
    from core.schedule import SCHEDULERS, Scheduler

    gid, g = bert
    release = threading.Event()  # the slow scheduler runs until the test lets it finish

    class Slow(Scheduler):
        name = "slow_test"

        def __init__(self, time_budget: float = 1.0) -> None:
            self.budget = time_budget

        def order(self, g):
            assert release.wait(timeout=120), "the test never released the slow scheduler"
            return get_scheduler("traced").order(g)

    class Broken(Scheduler):
        name = "broken_test"

        def order(self, g):
            raise RuntimeError("no order for you")

    with SCHEDULERS.temporarily("slow_test", Slow), SCHEDULERS.temporarily("broken_test", Broken):
        fig, key, pending, failed = memory_of(state, gid, "rtx3090", "traced", ["slow_test", "broken_test"], "step")
        assert pending == ["slow_test"] and key[-1] == "traced"  # did not wait for the slow one
        assert failed and "broken_test" in failed[0] and "no order for you" in failed[0]
        assert any("still computing: slow_test" in a["text"] for a in fig["layout"]["annotations"])
        release.set()
        state.schedule_future(gid, "slow_test").result(timeout=120)  # finished: the next page poll draws it
        fig, key, pending, failed = memory_of(state, gid, "rtx3090", "traced", ["slow_test"], "step")
        assert not pending and key[-2:] == ["traced", "slow_test"]


def test_device_changes_latency_not_peak(state, bert):
    gid, _g = bert
    fast = analysis_of(state, gid, "h100-sxm", "traced", [])
    slow = analysis_of(state, gid, "cpu", "traced", [])

    def card(cards, title):
        return next(c for c in cards if c.children[0].children.startswith(title)).children[1].children

    assert card(fast[0], "peak") == card(slow[0], "peak")
    assert card(fast[0], "est. latency") != card(slow[0], "est. latency")


def test_layout_key_changes_with_the_node_set_only(state, bert):
    """The browser lays the graph out again only when the layout dict changes: a new key exactly when
    nodes come or go, the same key for a colour or class change."""
    gid, g = bert
    e = state.entry(gid)
    view = view_initial(state, gid)
    els, lay = graph_of(state, view, None, None, "out", None)
    assert {k: v for k, v in lay.items() if k != "key"} == cyto.LAYOUT
    hot = {"gid": gid, "schedule": "traced", "device": "rtx3090", "nodes": sorted(g.nodes)[:5]}
    els2, lay2 = graph_of(state, view, {"gid": gid, "nodes": sorted(g.nodes)[-3:]}, hot, "peak", None)
    assert [x["classes"] for x in els] != [x["classes"] for x in els2] and lay2 == lay
    grp = next(x["data"]["group"] for x in els if "group" in x["data"])
    wider = {"gid": gid, "expanded": sorted(view["expanded"] + [grp])}
    els3, lay3 = graph_of(state, wider, None, None, "out", None)
    assert len(els3) > len(els) and lay3["key"] != lay["key"]
    # and back: the key is a function of the node set, not of history
    assert graph_of(state, view, None, None, "out", None)[1] == lay
    assert e.tok  # ids carry the graph token, so another graph never shares a key
    other = view_initial(state, _need("gpt_neo_tiny"))
    assert graph_of(state, other, None, None, "out", None)[1]["key"] != lay["key"]


def test_path_table_finds_the_drawn_element_of_every_node(state, bert):
    """What the browser does to outline a live tensor (MARK_LIVE): a node not drawn as itself is drawn
    by the one visible group whose path is a prefix of the node's path."""
    gid, g = bert
    e = state.entry(gid)
    table = cyto.path_table(e.tree)
    path_of = {nid: table["paths"][i] for nid, i in zip(table["ids"], table["idx"], strict=True)}
    assert set(path_of) == set(g.nodes)
    view = view_initial(state, gid)
    els, _ = graph_of(state, view, None, None, "out", None)
    drawn_ops = {x["data"]["nid"] for x in els if "nid" in x["data"]}
    groups = [x["data"]["group"] for x in els if "group" in x["data"]]
    vis = e.tree.visible(cyto_paths(view))
    for nid in g.nodes:
        if nid in drawn_ops:
            assert vis[nid] == ("n", nid)
            continue
        p = path_of[nid]
        hits = [q for q in groups if p == q or p.startswith(q + "/")]
        assert len(hits) == 1 and cyto.str_path(hits[0]) == vis[nid][1]


def test_bundle_version_header(tmp_path):
    f = tmp_path / "plotly-basic.min.js"
    assert bundle.bundle_version(f) is None  # missing
    f.write_text("/**\n* plotly.js v4.1.1\n*/")  # the full bundle is not the basic one
    assert bundle.bundle_version(f) is None
    f.write_text("/**\n* plotly.js (basic - minified) v9.8.7\n* Copyright\n*/\n(function(){})")
    assert bundle.bundle_version(f) == "9.8.7" and not bundle.usable(f)


def test_page_serves_the_basic_bundle_only_at_the_wanted_version(monkeypatch):
    from app.main import create_app

    assert bundle.BUNDLE.exists(), f"{bundle.BUNDLE} not fetched (make install runs python -m app.bundle; needs npm)"
    assert bundle.usable(), "the fetched bundle must match the installed plotly's plotly.js"
    html = create_app(warm=False).server.test_client().get("/").get_data(as_text=True)
    assert "vendor/plotly-basic.min.js" in html
    monkeypatch.setattr(bundle, "wanted_version", lambda: "0.0.0")  # as after a plotly upgrade
    html = create_app(warm=False).server.test_client().get("/").get_data(as_text=True)
    assert "plotly-basic" not in html


# ---- hardening: units, fit notice, uploads ----------------------------------------------------------
@pytest.mark.parametrize("top", [900, 5_000, 3 * 2**20 + 17, 80 * 2**30, 10 * 2**40])
def test_memory_axis_ticks_are_binary(top):
    vals, text = figures.binary_ticks(top)
    assert vals[0] == 0 and vals[-1] >= top and vals == sorted(set(vals)) and 3 <= len(vals) <= 12
    assert text == [format_bytes(v) for v in vals]
    assert not any(u in t for t in text for u in (" kB", " MB", " GB"))


def test_memory_figure_speaks_binary_units_and_says_when_it_does_not_fit(bert):
    _gid, g = bert
    from core.simulate import simulate

    curves = [figures.Curve(n, s.memory, s.start, s.latency)
              for n in ("traced", "rpo") for s in [simulate(g, get_scheduler(n).run(g).order)]]
    peak = curves[0].profile.peak
    fig = figures.memory_figure(g, curves, "step", capacity=peak // 2)
    ax = fig["layout"]["yaxis"]
    assert "tickformat" not in ax and ax["ticktext"] == [format_bytes(v) for v in ax["tickvals"]]
    overlay = next(t for t in fig["data"] if t["name"].startswith("rpo"))
    assert overlay["text"] == [format_bytes(v) for v in overlay["y"]] and "%{text}" in overlay["hovertemplate"]
    notes = " ".join(a["text"] for a in fig["layout"]["annotations"])
    assert f"{format_bytes(peak - peak // 2)} over" in notes
    fits = figures.memory_figure(g, curves, "step", capacity=peak * 4)
    assert "does not fit" not in " ".join(a["text"] for a in fits["layout"]["annotations"])


def test_hotspot_table_has_full_names_and_binary_sizes(bert):
    _gid, g = bert
    mem = memory_profile(g, get_scheduler("traced").run(g).order)
    rows = figures.hotspot_rows(g, mem.hotspots())
    for r in rows:
        assert r["size"] == format_bytes(r["bytes"])
        assert r["tensor"] == figures.tensor_name(g, next(s for s in mem.hotspots()
                                                           if f"{s.root.node}:{s.root.index}" == r["id"]))
    from app.layout import hotspot_panel

    table = hotspot_panel({})
    text = json.dumps(table.to_plotly_json(), default=str)
    assert "ellipsis" not in text and "decimal_si_prefix" not in text and '"s"' not in text


def test_does_not_fit_card(state, bert):
    from app import panels
    from core.cost import DEVICES

    gid, g = bert
    a = state.analysis(gid, "traced", "rtx3090")
    assert panels.fit_card(a.sim.peak, "rtx3090") == []  # a tiny model fits
    cap = DEVICES["rtx3090"].memory_bytes
    card = panels.fit_card(cap + 3 * 2**30, "rtx3090")
    assert "does not fit on rtx3090 (3.00 GiB over)" in json.dumps(card[0].to_plotly_json(), default=str)


def test_uploads_any_extension_and_only_the_latest_are_kept(tmp_path):
    s = AppState(time_budget=0.5)
    try:
        gids = []
        for i, name in enumerate(["a.txt", "b.bin", "c"]):
            g, _ = hand_graph()
            g.name = f"hand{i}"
            p = tmp_path / f"{i}.json"
            io.save(g, p)
            gids.append(s.add_upload(_data_url(p.read_bytes()), name))  # the content decides, not the name
        assert [s.entry(x).graph.name for x in gids[1:]] == ["hand1", "hand2"]
        with pytest.raises(AppError, match="no longer in memory"):
            s.entry(gids[0])  # released: only the latest uploads stay in memory
        too_big = "data:application/json;base64," + "A" * (4 * (s_max := io.DEFAULT_LIMITS.max_bytes) // 3 + 8)
        with pytest.raises(GraphError, match=f"larger than {s_max // 2**20} MiB"):
            decode_upload(too_big)
    finally:
        s.shutdown()


def test_hostile_upload_is_one_line_message(state):
    for data in (b"[" * 100_000 + b"]" * 100_000, gzip.compress(b" " * (40 << 20)),
                 json.dumps({"schema": "magis-graph", "version": 1, "nodes": [
                     {"id": 0, "op": "x", "outputs": [{"shape": [10**12, 10**12], "dtype": "float32"}]}]}).encode()):
        with pytest.raises(GraphError) as e:
            state.add_upload(_data_url(data), "evil.json")
        assert "\n" not in str(e.value)


def test_search_budget_scales_with_the_graph_and_a_running_search_can_be_stopped():
    import math

    from app.state import AppState
    from sample_graphs.store import load_sample_graph

    state = AppState(time_budget=40.0, min_budget=1.0, budget_per_node=2e-3)
    small, big = load_sample_graph("fig2_skip"), load_sample_graph("resnet50")
    assert state.budget_for(small) == 1.0  # a small file cannot buy a long search
    bert = load_sample_graph("bert_base")
    assert state.budget_for(bert) == pytest.approx(2e-3 * len(bert)) and 4 < state.budget_for(bert) < 5
    # no time limit: alone, the search on resnet50 runs its DP to the end (~700k states), which it
    # reports as not cut short ("timed_out" False); only the stop can cut it
    state.time_budget = state.min_budget = math.inf
    gid = state.add_graph(big, "resnet50", kind="upload")
    fut = state.schedule_future(gid, "serenity")
    for _ in range(6000):  # until a worker takes it up (the search is under way): polls, a bounded count
        if fut.running():
            break
        time.sleep(0.01)
    else:
        raise AssertionError("no worker took up the search")
    assert state.cancel(gid) == 1  # it was still running
    s = state.schedule(gid, "serenity")
    assert s is not None and s.info.get("stopped") == "by the user"
    assert s.info["timed_out"] and not s.info["exact"], s.info  # ended by the stop, before its DP did
    assert s.peak == state.schedule(gid, "serenity").peak  # the best order found is kept
    assert s.peak <= min(state.schedule(gid, m).peak for m in ("traced", "rpo"))  # ... no worse than theirs
    assert state.cancel(gid) == 0
    state.shutdown()
