"""The optimizer in the browser: the plan bar's memory slider updates every plan view and marks the
computation graph, a click on the Pareto figure selects a peer's plan, rule steps go back and forth,
an optimization run shows progress and keeps its frontier when cancelled, and bad input (a limit no
plan reaches, another graph's plan file) is a message.  Screenshots go to test-artifacts/."""

from __future__ import annotations

import base64
import re
import time

import pytest

from tests.browser_helpers import TIMEOUT, _cy, dismiss_message, opened, shot, wait_message, wait_ready

pytestmark = [pytest.mark.browser]
APP_SAMPLE = SAMPLE = "fig6_ftree"  # the module's server (conftest.py)


def _ready(pg) -> None:
    wait_ready(pg)
    pg.wait_for_selector("#plan-cards .card", timeout=TIMEOUT)


@pytest.fixture
def page(browser, server):  # as conftest.py's, and no JavaScript errors by the end
    with opened(browser, server[0], ready=_ready) as pg:
        yield pg
        assert not pg.js_errors, pg.js_errors


def text(pg, sel: str) -> str:
    return pg.inner_text(sel).strip()


def marked(pg) -> dict:
    return pg.evaluate(_cy("({fission: cy.nodes('.mk-fission').length, remat: cy.nodes('.mk-remat').length, "
                           "swap: cy.nodes('.mk-swap').length})"), ["graph", None])


def test_slider_updates_every_plan_view_and_marks_the_graph(page, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    keys = f.slider()
    assert len(keys) >= 3, "the precomputed frontier of fig6_ftree has several points"
    first = f.points[f.default()]
    assert first.applications, "the default point transforms the graph"
    page.wait_for_function("() => document.querySelector('#plan-caption').innerText.includes('point')")
    page.wait_for_function(_cy("cy.nodes('.mk-fission, .mk-remat, .mk-swap').length > 0"), arg=["graph", None])
    m0 = marked(page)
    shot(page, "app_plan_slider")
    # to PyTorch eager's stop (a stop per point, peak ascending): no transformation, nothing marked
    from app.optimizer_view import slider_stop

    handle = page.locator("#plan-slider [role=slider]").first
    handle.focus()
    page.keyboard.press("End")
    for _ in range(len(f.points) - 1 - slider_stop(f, f.baseline())):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function("(k) => document.querySelector('#plan-caption').innerText.startsWith('point ' + k + ':')",
                           arg=f.baseline())
    assert text(page, "#plan-method") == "PyTorch eager"
    assert "+0.0% vs eager" in text(page, "#plan-cards")
    page.wait_for_function(_cy("cy.nodes('.mk-fission, .mk-remat, .mk-swap').length === 0"), arg=["graph", None])
    # to the left end: the least memory on the frontier
    page.keyboard.press("Home")
    low = f.points[f.stops()[0]]
    page.wait_for_function("(k) => document.querySelector('#plan-caption').innerText.startsWith('point ' + k + ':')",
                           arg=f.stops()[0])
    assert f"{low.peak / f.points[f.baseline()].peak:.3f}x eager" in text(page, "#plan-peak").replace("\n", " ") \
        or f"{low.peak / f.points[f.baseline()].peak:.3f}x" in text(page, "#plan-cards")
    assert sum(marked(page).values()) > 0 and m0


def test_pareto_click_selects_a_peer_and_shows_its_memory_and_hotspots(page, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    page.click("text=Pareto frontier")
    page.wait_for_selector("#pareto .scatterlayer .trace")
    page.wait_for_selector("#plan-memory .scatterlayer .trace")
    names = page.evaluate("() => document.getElementById('pareto').querySelector('.js-plotly-plot')"
                          ".data.map(t => t.name)")
    assert {"MAGIS", "PyTorch eager", "DTR"} <= set(names), names
    dtr = next(k for k, p in enumerate(f.points) if p.method == "dtr")
    # a click on the DTR marker (plotly's own click event, as the mouse gives it)
    page.evaluate("""(key) => {
        const gd = document.getElementById('pareto').querySelector('.js-plotly-plot');
        const i = gd.data.findIndex(t => t.name === 'DTR');
        const j = gd.data[i].customdata.indexOf(key);
        const pt = {curveNumber: i, pointNumber: j, customdata: key, x: gd.data[i].x[j], y: gd.data[i].y[j]};
        gd.emit('plotly_click', {points: [pt]});
    }""", dtr)
    page.wait_for_function("() => document.querySelector('#plan-method').innerText.trim() === 'DTR'")
    page.wait_for_function("() => document.querySelectorAll('#plan-hotspots tbody tr').length > 1")
    assert "DTR" in text(page, "#plan-caption")
    shot(page, "app_pareto")


def click_point(pg, key: int, trace: str) -> None:
    """A click on point ``key`` of the Pareto figure's trace ``trace`` (plotly's own click event)."""
    pg.evaluate("""([key, name]) => {
        const gd = document.getElementById('pareto').querySelector('.js-plotly-plot');
        const i = gd.data.findIndex(t => t.name === name);
        const j = gd.data[i].customdata.indexOf(key);
        const pt = {curveNumber: i, pointNumber: j, customdata: key, x: gd.data[i].x[j], y: gd.data[i].y[j]};
        gd.emit('plotly_click', {points: [pt]});
    }""", [key, trace])


def slider_value(pg) -> int:
    return int(pg.locator("#plan-slider [role=slider]").first.get_attribute("aria-valuenow"))


def test_a_click_on_a_dominated_point_moves_the_slider_to_its_stop(page, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    keys = f.slider()
    from app.optimizer_view import slider_stop

    dtr = next(k for k, p in enumerate(f.points) if p.method == "dtr" and k not in keys)  # dominated
    stop = slider_stop(f, dtr)
    assert stop != slider_stop(f, f.default()) and stop + 1 < len(f.points), "the test needs the slider to move"
    page.click("text=Pareto frontier")
    page.wait_for_selector("#pareto .scatterlayer .trace")
    click_point(page, dtr, "DTR")
    page.wait_for_function("(k) => document.querySelector('#plan-caption').innerText.startsWith('point ' + k + ':')",
                           arg=dtr)
    page.wait_for_function("(v) => document.querySelector('#plan-slider [role=slider]')"
                           ".getAttribute('aria-valuenow') === String(v)", arg=stop)
    page.wait_for_timeout(800)  # the slider's move leaves the clicked selection alone
    assert text(page, "#plan-method") == "DTR" and slider_value(page) == stop
    assert "dominated: point" in text(page, "#plan-caption")
    # from there the slider walks every point: one stop right is the next point by peak
    stops = f.stops()
    page.locator("#plan-slider [role=slider]").first.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("(k) => document.querySelector('#plan-caption').innerText.startsWith('point ' + k + ':')",
                           arg=stops[stop + 1])


def test_rule_steps_forward_back_and_play(page, server):
    page.click("text=Rule steps")
    page.wait_for_selector("#step-title")
    page.wait_for_function("() => document.querySelectorAll('#step-table tbody tr').length > 1")
    n = int(re.search(r"of (\d+)", text(page, "#step-title")).group(1))
    assert n >= 2
    assert text(page, "#step-title") == f"step 1 of {n}"  # the first application
    page.click("#step-last")
    page.wait_for_function("(t) => document.querySelector('#step-title').innerText.trim() === t",
                           arg=f"step {n} of {n}")
    page.click("#step-back")
    page.wait_for_function("(t) => document.querySelector('#step-title').innerText.trim() === t",
                           arg=f"step {n - 1} of {n}")
    details = text(page, "#step-details")
    assert ("re-ordered into" in details or "the schedule is unchanged" in details) and "→" in details
    page.wait_for_selector("#step-memory .scatterlayer .trace")
    shot(page, "app_steps")
    page.click("#step-first")
    page.wait_for_function("() => document.querySelector('#step-title').innerText.trim().startsWith('step 0')")
    page.click("#step-play")
    page.wait_for_function("() => document.querySelector('#step-title').innerText.trim().startsWith('step 2')",
                           timeout=TIMEOUT)
    page.click("#step-play")  # pause
    page.wait_for_function("() => document.querySelector('#step-play').innerText.trim() === 'play'")
    here = text(page, "#step-title")
    page.wait_for_timeout(1500)  # longer than a play tick: paused, it stays
    assert text(page, "#step-title") == here


def test_optimize_shows_progress_and_cancel_keeps_the_best(page, server, monkeypatch):
    _url, app = server
    # fig6_ftree's search empties its queue in a second or two: slow each expansion down so that the
    # cancel below lands while it runs (the server runs in this process)
    from core.search.moptimizer import MOptimizer

    slow = MOptimizer._applications

    def applications(self):
        time.sleep(0.3)
        return slow(self)

    monkeypatch.setattr(MOptimizer, "_applications", applications)
    before = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    stops = {(before.points[k].peak, before.points[k].latency) for k in before.slider()}
    page.click("text=Pareto frontier")
    page.click("#opt-run")
    page.wait_for_function("() => document.querySelector('#opt-status').innerText.includes('optimizing')")
    page.wait_for_function("() => /iteration \\d+/.test(document.querySelector('#opt-status').innerText)")
    page.wait_for_function("() => /limit 1 of 4: .*iteration \\d+ · \\d+ states? evaluated/"
                           ".test(document.querySelector('#opt-status').innerText)")
    assert re.search(r"\d+ s of 30 s \(\d+ s left\)", text(page, "#opt-status"))
    shot(page, "app_optimize_running")
    page.click("#opt-cancel")
    page.wait_for_function("() => document.querySelector('#opt-status').innerText.startsWith('finished')")
    assert re.search(r"limits? searched · [\d,]+ states? evaluated \([\d,]+ distinct", text(page, "#opt-status"))
    page.wait_for_function("() => document.querySelector('#frontier-source').innerText.includes('optimized here')")
    assert "cancelled" in text(page, "#frontier-source")
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    assert any(p.method == "magis" for p in f.points) and any(p.method == "dtr" for p in f.points)
    # merged, not replaced: every stop of the precomputed frontier is still there or dominated by a new one
    assert "merged with the" in text(page, "#frontier-source")
    after = [(f.points[k].peak, f.points[k].latency) for k in f.slider()]
    assert all(any(p <= q[0] and t <= q[1] for p, t in after) for q in stops)
    page.wait_for_selector("#plan-cards .card")
    shot(page, "app_optimize_done")


def test_bad_limit_and_foreign_plan_file_are_messages(page, server, tmp_path):
    page.click("text=Pareto frontier")
    page.fill("#fit-limit", "1KiB")
    page.press("#fit-limit", "Enter")
    wait_message(page, "error", "no plan on the frontier has a peak under 1.00 KiB")
    dismiss_message(page)
    # a plan file made for another graph
    from core.metrics import metrics
    from core.search.plan import Plan, PlanFile, plans_to_bytes
    from core.search.wl_hash import graph_hash
    from sample_graphs.store import load_sample_graph

    other = load_sample_graph("fig2_skip")
    path = tmp_path / "other.plan.json"
    path.write_bytes(plans_to_bytes(PlanFile(other.name, graph_hash(other), "rtx3090",
                                             [Plan("eager", [], [], metrics(1, 1.0))])))
    page.set_input_files("#plan-upload input[type=file]", str(path))
    wait_message(page, "error", "made for graph")
    # not JSON at all
    dismiss_message(page)
    bad = tmp_path / "junk.json"
    bad.write_bytes(base64.b64encode(b"\x00\x01 not a plan"))
    page.set_input_files("#plan-upload input[type=file]", str(bad))
    wait_message(page, "error", "Could not open 'junk.json'")
    shot(page, "app_plan_errors")
    # the page still works: the slider still selects plans
    assert text(page, "#plan-cards")
