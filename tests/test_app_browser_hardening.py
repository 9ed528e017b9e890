"""The app in headless Chromium against hostile and careless use: a hostile upload then a sample
leaves no stale panel, files of any extension get a message, a second session is served while the
first waits on a schedule that has not finished, a running search stops at the button, and the graph
opens legible (screenshots in ``test-artifacts/``)."""

from __future__ import annotations

import json
import math

import pytest

from core.fmt import format_bytes
from core.ir import io
from tests.browser_helpers import (
    TIMEOUT,
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


def upload(pg, name: str, data: bytes) -> None:
    pg.locator("#upload input[type=file]").set_input_files(
        files=[{"name": name, "mimeType": "application/octet-stream", "buffer": data}])


def good_graph_bytes() -> bytes:
    from sample_graphs.store import load_sample_graph

    return json.dumps(io.graph_to_dict(load_sample_graph("fig2_skip"))).encode()


def test_hostile_upload_then_sample_leaves_no_stale_panel(page, server):
    _url, app = server
    op = tap(page, "graph", "n.hasClass('op') || n.hasClass('placeholder')") if cy_eval(
        page, "graph", "cy.nodes('.op, .placeholder').length") else None
    if op is None:  # everything collapsed: open a group, then pick an op
        tap(page, "graph", "n.hasClass('group') && n.data('members') > 3")
        wait_cy_stable(page, "graph")
        op = tap(page, "graph", "n.hasClass('op')")
    page.wait_for_selector(f"#details [data-nid='{op['nid']}']")
    hostile = json.dumps({"schema": "magis-graph", "version": 1, "name": "\x1b[31mevil", "nodes": [
        {"id": 0, "op": "x.y.z", "outputs": [{"shape": [10**12, 10**12], "dtype": "float32"}]}]}).encode()
    upload(page, "evil.json", hostile)
    msg = wait_message(page, "error", "evil.json")
    assert "larger than" in msg and "Traceback" not in msg and "OverflowError" not in msg
    assert summary_model(page) == "bert_tiny"  # a rejected file never replaces the model
    old_tok = graph_token(page)
    pick_dropdown(page, "model", r"^vit_tiny$")
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.trim() === 'vit_tiny'")
    wait_cy_stable(page, "graph")
    page.wait_for_function("() => !document.querySelector('#details [data-nid]')")  # no bert op left
    assert graph_token(page) != old_tok
    g = app.magis_state.entry("sample:vit_tiny").graph
    names = {n.name for n in g}
    page.wait_for_function("(n) => document.querySelectorAll('#hotspots td[data-dash-column=tensor]').length > 0")
    cells = page.locator("#hotspots td[data-dash-column='tensor']").all_inner_texts()
    assert cells and all(c.strip().split("[")[0] in names for c in cells)  # the table is vit's
    tree = app.magis_state.entry("sample:vit_tiny").tree
    labels = {tree.label(p) for p in tree.groups}
    chips = [c.replace("×", "").strip() for c in page.locator("#chips .chip").all_inner_texts()]
    assert all(c in labels for c in chips), chips  # the chips are vit's modules
    shot(page, "hardening_hostile_then_sample")
    assert not page.js_errors, page.js_errors


def test_any_extension_gets_a_message(page):
    upload(page, "model.txt", good_graph_bytes())  # a valid graph under a name the picker would hide
    assert "Loaded model.txt" in wait_message(page, "ok", "model.txt")
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.includes('model.txt')")
    upload(page, "notes.bin", b"\x00\x01 not a graph")
    msg = wait_message(page, "error", "notes.bin")
    assert "Could not load 'notes.bin'" in msg
    shot(page, "hardening_wrong_extension")


def test_second_session_stays_responsive_during_a_slow_schedule(browser, server):
    """Session 1 uploads a graph and asks for a schedule that runs until the test releases it; session
    2 opens the page and a sample meanwhile and must see it all while session 1's schedule is still
    running (a server that made session 2 wait for it would never answer: the waits would fail);
    released, session 1's curve appears.  ``bench/app_timing.py`` times the app's interactions."""
    url, _app = server
    ctx1 = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx2 = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        with held_scheduler("slow_demo") as gate:
            p1 = ctx1.new_page()
            p1.set_default_timeout(TIMEOUT)
            p1.goto(url)
            wait_ready(p1)
            upload(p1, "big.json", good_graph_bytes())
            wait_message(p1, "ok", "big.json")
            pick_dropdown(p1, "schedule", r"^slow_demo$")
            p1.wait_for_function("() => (document.querySelector('#messages')?.innerText || '')"
                                 ".includes('still being computed') || "
                                 "(document.querySelector('#mem-status')?.innerText || '').includes('slow_demo')")
            assert gate.started.wait(TIMEOUT / 1000)  # session 1's schedule is running
            p2 = ctx2.new_page()
            p2.set_default_timeout(TIMEOUT)
            p2.goto(url)
            wait_ready(p2)
            pick_dropdown(p2, "model", r"^resnet50_tiny$")
            p2.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                                 "?.innerText.trim() === 'resnet50_tiny'")
            p2.wait_for_selector("#memory .scatterlayer .trace")
            # all of session 2 was served while session 1's schedule was held
            gate.release.set()
            p1.wait_for_function("() => (document.querySelector('#memory .legend')?.textContent || '')"
                                 ".includes('slow_demo total (peak')")
    finally:
        ctx1.close()
        ctx2.close()


def test_graph_opens_legible_with_arrows_and_smooth_zoom(page):
    wait_cy_stable(page, "graph")
    info = cy_eval(page, "graph", """(() => {
        const z = cy.zoom();
        const sizes = cy.nodes().map(n => parseFloat(n.style('font-size')) * z);
        const e = cy.edges()[0];
        return {zoom: z, min: Math.min(...sizes), arrow: e ? (e.style('target-arrow-shape') + '|' +
                e.style('source-arrow-shape')) : 'none', nodes: cy.nodes().length};
    })()""")
    shot(page, "hardening_initial_zoom")
    assert info["min"] >= 7.0, info  # rendered label height in CSS pixels
    assert "triangle" in info["arrow"], info
    # one wheel notch changes the zoom by a step, not to the maximum
    box = page.locator("#graph").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    z0 = cy_eval(page, "graph", "cy.zoom()")
    page.mouse.wheel(0, -100)
    page.wait_for_timeout(300)
    z1 = cy_eval(page, "graph", "cy.zoom()")
    assert z0 < z1 < 2 * z0, (z0, z1)
    shot(page, "hardening_after_wheel")


def test_stop_ends_a_running_search_and_keeps_its_best_order(page, server):
    """A schedule search on the resnet50 sample, with no time limit (alone it runs to the end of its
    DP, ~700k states), is stopped with the button that appears while it runs: the search ends at the
    stop (its DP reports being cut, which without a time limit only the stop does), the button goes
    and its best order so far is drawn."""
    _url, app = server
    state = app.magis_state
    saved = (state.time_budget, state.min_budget)
    state.time_budget = state.min_budget = math.inf
    try:
        pick_dropdown(page, "model", r"^resnet50\s+\(full size")
        page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                               "?.innerText.trim() === 'resnet50'")
        pick_dropdown(page, "schedule", r"^serenity$")
        page.wait_for_selector("#stop-schedule", state="visible")
        assert "computing" in page.locator("#mem-status").inner_text()
        page.locator("#stop-schedule").click()
        wait_message(page, "info", "keeps the best")
        page.wait_for_selector("#stop-schedule", state="hidden")
        page.wait_for_function("() => !(document.querySelector('#mem-status')?.innerText || '').includes('computing')")
        shot(page, "hardening_stopped_search")
        key = state.analysis("sample:resnet50", "serenity", wait=0)
        assert key is not None and key.schedule.info.get("stopped") == "by the user"
        assert key.schedule.info["timed_out"], key.schedule.info  # cut short: by the stop, there is no limit
        page.wait_for_function("(v) => document.querySelector('#schedule-peak')?.innerText.trim() === v",
                               arg=format_bytes(key.schedule.peak))  # its best order is the one drawn
    finally:
        state.time_budget, state.min_budget = saved
