"""The web app in headless Chromium (playwright): load, pick a sample, click ops in the graph and the
dominator tree, hover and click the memory curve, switch schedules, and survive bad uploads.

The app is served from a thread (werkzeug ``make_server`` on 127.0.0.1, a free port; the fixtures are
in ``conftest.py``); screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from tests.browser_helpers import (
    TIMEOUT,
    _cy,
    card,
    cy_eval,
    graph_token,
    held_scheduler,
    pick_dropdown,
    shot,
    summary_model,
    tap,
    wait_cy_stable,
    wait_message,
    wait_ready,
)

pytestmark = [pytest.mark.browser]


# ---- the sample whose schedules differ in peak (asked of core, asserted, not assumed) ----------------
SWITCH_SAMPLE, SWITCH_SCHEDULE = "btlm_tiny", "rpo"  # traced 375,588 B, RPO 386,852 B


def differing_schedule(app) -> tuple[str, str, int, int]:
    """(sample, schedule, traced peak, that schedule's peak) for a sample whose RPO order peaks
    higher than its traced one (btlm_tiny: its graph file is committed and both orders are
    deterministic)."""
    state = app.magis_state
    gid = f"sample:{SWITCH_SAMPLE}"
    base = state.schedule(gid, "traced").peak
    other = state.schedule(gid, SWITCH_SCHEDULE).peak
    assert other != base, f"{SWITCH_SAMPLE}: traced and {SWITCH_SCHEDULE} orders have the same peak"
    return SWITCH_SAMPLE, SWITCH_SCHEDULE, base, other


# ---- tests ----------------------------------------------------------------------------------------
def test_loads_with_summary_graph_and_memory(page, server):
    _url, app = server
    g = app.magis_state.entry("sample:bert_tiny").graph
    assert summary_model(page) == "bert_tiny"
    assert f"{len(g.ops()):,} ops" in page.locator("#summary").inner_text()
    n_graph = cy_eval(page, "graph", "cy.nodes().length")
    assert 3 <= n_graph <= 200, "big views must start collapsed"
    assert cy_eval(page, "graph", "cy.nodes('.group').length") > 0
    wait_cy_stable(page, "domtree")
    assert page.locator("#memory .scatterlayer .trace").count() >= 2
    assert page.locator("#hotspots tbody tr").count() > 1
    from app import bundle

    assert bundle.BUNDLE.exists(), "make install fetches it (python -m app.bundle)"
    # the chart was drawn by the smaller basic bundle, same version
    assert page.evaluate("() => window.Plotly.version") == bundle.wanted_version()
    loaded = page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
    assert any("plotly-basic.min.js" in u for u in loaded)
    assert not any(u.split("?")[0].endswith("/plotly.min.js") for u in loaded)  # the full one
    shot(page, "app_loaded")
    assert not page.js_errors, page.js_errors


def test_expand_group_and_click_op_shows_details(page, server):
    _url, app = server
    g = app.magis_state.entry("sample:bert_tiny").graph
    before = cy_eval(page, "graph", "cy.nodes().length")
    group = tap(page, "graph", "n.hasClass('group') && n.data('members') > 3 && n.data('members') < 60")
    page.wait_for_function(_cy(f"cy.nodes().length > {before} && "
                               f"cy.nodes().filter(n => n.data('group') === arg).length === 0"),
                           arg=["graph", group["group"]])
    wait_cy_stable(page, "graph")
    assert page.locator("#chips .chip").count() >= 1
    op = tap(page, "graph", "n.hasClass('op')")
    page.wait_for_selector(f"#details [data-nid='{op['nid']}']")
    node = g[op["nid"]]
    text = page.locator("#details").inner_text()
    assert node.name in text and node.op in text
    assert (node.module or "(top level)") in text
    assert "×".join(map(str, node.outputs[0].shape)) in text and node.outputs[0].dtype in text
    assert re.search(r"steps \d+ → \d+|resident", text), text  # lifetime under the schedule
    assert cy_eval(page, "graph", "cy.nodes('.sel').map(n => n.data('nid'))") == [op["nid"]]
    if _reachable(app, op["nid"]):  # the dominator tree follows the selection
        page.wait_for_function(_cy("cy.nodes('.sel').length === 1 && cy.nodes('.sel')[0].data('nid') === arg"),
                               arg=["domtree", op["nid"]])
    else:
        page.wait_for_function("() => document.querySelector('#dom-info').innerText.includes('not reachable')")
    shot(page, "app_node_details")


def _reachable(app, nid: int) -> bool:
    dt = app.magis_state.entry("sample:bert_tiny").dom()
    return dt is not None and nid in dt.reachable


def test_dominator_tree_click_selects_in_graph(page, server):
    _url, app = server
    wait_cy_stable(page, "domtree")
    g = app.magis_state.entry("sample:bert_tiny").graph
    d = tap(page, "domtree", "n.hasClass('op') && !n.hasClass('entry')")
    nid = d["nid"]
    page.wait_for_selector(f"#details [data-nid='{nid}']")
    # the graph reveals (expands to) the node and marks it selected
    page.wait_for_function(_cy("cy.nodes('.sel').length === 1 && cy.nodes('.sel')[0].data('nid') === arg"),
                           arg=["graph", nid])
    assert g[nid].name in page.locator("#details").inner_text()
    shot(page, "app_domtree_sync")


def _plot_point(pg, step: int, value: float) -> tuple[float, float]:
    return pg.evaluate("""([step, value]) => {
        const gd = document.querySelector('#memory .js-plotly-plot');
        const L = gd._fullLayout, r = gd.getBoundingClientRect();
        return [r.left + L._size.l + L.xaxis.d2p(step), r.top + L._size.t + L.yaxis.d2p(value)];
    }""", [step, value])


def test_memory_hover_and_click_highlight_live_tensors(page, server):
    _url, app = server
    a = app.magis_state.analysis("sample:bert_tiny", "traced", "rtx3090")
    step = a.profile.peak_steps[0]
    page.locator("#memory").scroll_into_view_if_needed()
    x, y = _plot_point(page, step, a.profile.peak * 0.5)
    page.mouse.move(x, y)
    page.wait_for_selector("#memory .hoverlayer .hovertext")
    hover = page.locator("#memory .hoverlayer").text_content()
    assert "largest live tensors" in hover
    top = a.live_index().top([step])[0]
    assert top and top[0].nbytes > 0
    page.mouse.click(x, y)
    page.wait_for_selector("#live-title")
    assert re.search(r"live at step \d+ · traced", page.locator("#live-title").inner_text())
    page.wait_for_function(_cy("cy.nodes('.live').length > 0"), arg=["graph", None])
    # outlined: exactly the elements drawing the producers of the largest live tensors -- an op
    # drawn as itself, else the collapsed group holding it (marked in the browser, no round trip)
    from app.figures import MAX_POINTS

    entry = app.magis_state.entry("sample:bert_tiny")
    clicked = int(re.search(r"live at step (\d+)", page.locator("#live-title").inner_text()).group(1))
    hov = a.hover(entry.graph, MAX_POINTS)
    picked = set(hov.top_nodes[hov.steps.index(clicked)])
    drawn = cy_eval(page, "graph", "cy.nodes().map(n => [n.id(), n.data('nid') ?? null, n.data('group') ?? null,"
                    " n.hasClass('live')])")
    tree = entry.tree
    want = set()
    for nid in picked:
        own = [i for i, n, _g, _l in drawn if n == nid]
        want |= set(own) or {i for i, _n, grp, _l in drawn
                             if grp is not None and tree.path_of[nid][:len(grp.split("/"))] == tuple(grp.split("/"))}
    assert want and {i for i, _n, _g, live in drawn if live} == want
    page.locator("#graph").scroll_into_view_if_needed()
    shot(page, "app_memory_click")


def test_pick_sample_and_switch_schedule_changes_peak(page, server):
    _url, app = server
    from core.fmt import format_bytes

    name, sched, base, other = differing_schedule(app)
    tok = graph_token(page)
    pick_dropdown(page, "model", rf"^{re.escape(name)}\b")
    page.wait_for_function("(n) => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.trim() === n", arg=name)
    page.wait_for_function(_cy("cy.nodes().length > 0 && cy.nodes()[0].id().split('-')[0] !== arg"),
                           arg=["graph", tok])
    wait_cy_stable(page, "graph")
    assert card(page, "schedule-peak") == format_bytes(base)
    assert card(page, "baseline-peak") == format_bytes(base)
    pick_dropdown(page, "schedule", rf"^{re.escape(sched)}$")
    page.wait_for_function("(v) => document.querySelector('#schedule-peak')?.innerText.trim() === v",
                           arg=format_bytes(other))
    assert card(page, "baseline-peak") == format_bytes(base)
    page.wait_for_function("(t) => (document.querySelector('#memory .legend')?.textContent || '').includes(t)",
                           arg=f"{sched} total (peak {format_bytes(other)})")
    page.locator("#memory").scroll_into_view_if_needed()
    shot(page, "app_schedule_switch")


BAD_FILES = [
    ("not_json.json", b"this is not json {", "not valid JSON"),
    ("wrong_schema.json", json.dumps({"schema": "something-else", "version": 1, "nodes": []}).encode(),
     "not a MAGIS graph"),
]


def _cyclic_graph_bytes() -> bytes:
    from core.ir import io
    from core.ir.builder import GraphBuilder

    b = GraphBuilder("cyclic")
    x = b.input("x", 4)
    a = b.op("A", [x], 8)
    c = b.op("B", [a], 8, output=True)
    d = io.graph_to_dict(b.graph)
    for nd in d["nodes"]:
        if nd["name"] == "A":  # A now also reads B's output: a cycle
            nd["args"] = nd["args"] + [{"$t": [c.node, 0]}]
    return gzip.compress(json.dumps(d).encode())


def test_bad_uploads_show_errors_and_app_keeps_working(page, server, tmp_path):
    files = BAD_FILES + [("cycle.json.gz", _cyclic_graph_bytes(), "cycle")]
    upload = page.locator("#upload input[type=file]")
    for name, data, expect in files:
        upload.set_input_files(files=[{"name": name, "mimeType": "application/octet-stream", "buffer": data}])
        msg = wait_message(page, "error", expect)
        assert name in msg and "Traceback" not in msg
        shot(page, f"app_bad_upload_{name.split('.')[0]}")
    assert summary_model(page) == "bert_tiny"  # still showing the model it had
    # ... and still works: expand a group, then load a good file
    before = cy_eval(page, "graph", "cy.nodes().length")
    tap(page, "graph", "n.hasClass('group') && n.data('members') > 3")
    page.wait_for_function(_cy(f"cy.nodes().length > {before}"), arg=["graph", None])
    from core.ir import io
    from sample_graphs.store import load_sample_graph

    good = tmp_path / "my_model.json.gz"
    io.save(load_sample_graph("fig2_skip"), good)
    upload.set_input_files(str(good))
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.includes('my_model.json.gz')")
    assert "Loaded my_model.json.gz" in page.locator("#messages").inner_text()
    wait_cy_stable(page, "graph")
    shot(page, "app_good_upload")
    assert not page.js_errors, page.js_errors


def test_hotspot_row_selects_node(page, server):
    _url, app = server
    page.locator("#hotspots").scroll_into_view_if_needed()
    cell = page.locator("#hotspots td[data-dash-column='tensor']").first
    name = cell.inner_text().strip()
    cell.click()
    g = app.magis_state.entry("sample:bert_tiny").graph
    nid = next(n.id for n in g if n.name == name.split("[")[0])
    page.wait_for_selector(f"#details [data-nid='{nid}']")
    page.wait_for_function(_cy("cy.nodes('.sel').length === 1 && cy.nodes('.sel')[0].data('nid') === arg"),
                           arg=["graph", nid])


def test_slow_schedule_does_not_freeze_the_ui(page, server):
    """A scheduler that has not finished runs in the background: the curve says it is computing, the
    graph stays usable meanwhile, and the overlay appears when it is done.  The scheduler runs until
    the test releases it, so "meanwhile" holds by construction: a callback that waited for it would
    never answer, and the page waits below would fail."""
    with held_scheduler("slow_demo") as gate:
        page.reload()
        wait_ready(page)
        page.locator("#compare").get_by_text("slow_demo", exact=True).click()
        page.wait_for_function("() => document.querySelector('#mem-status')?.innerText.includes('computing slow_demo')")
        assert gate.started.wait(TIMEOUT / 1000)  # it runs, in the background
        before = cy_eval(page, "graph", "cy.nodes().length")
        tap(page, "graph", "n.hasClass('group') && n.data('members') > 3")
        page.wait_for_function(_cy(f"cy.nodes().length > {before}"), arg=["graph", None])
        assert "computing slow_demo" in page.locator("#mem-status").inner_text()  # still running
        gate.release.set()
        page.wait_for_function("() => (document.querySelector('#memory .legend')?.textContent || '')"
                               ".includes('slow_demo (peak')")
        assert page.locator("#mem-status").inner_text().strip() == ""
        shot(page, "app_slow_schedule")
