"""The Swaps and Export tabs in headless Chromium (playwright), on fig2_skip with a plan that swaps
one tensor (made by hand, ``tests/swap_plans.py``, installed as the frontier
before the page loads): the point is selected in the ``plan`` store, the Swaps tab draws
its STORE and LOAD bars, and the Export tab downloads the script and the plan file and verifies the
plan against eager PyTorch.  Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser_helpers import shot
from tests.swap_plans import GID, install_hand_swap

pytestmark = [pytest.mark.browser]
VERIFY_TIMEOUT = 120_000  # ms: the eager run and the script on the CPU (a few seconds on an idle machine)


APP_SAMPLE = "fig2_skip"  # the module's server and pages (conftest.py)
PAGE_CONTEXT = {"accept_downloads": True}


def app_setup(app) -> None:
    install_hand_swap(app.magis_state)


def open_tab(pg, label: str) -> None:
    pg.locator("#tabs .tab", has_text=label).first.click()


def select_point(pg, app, key: int) -> None:
    """Select point ``key`` of the frontier: write the ``plan`` store in the browser, as the slider
    and a click on the Pareto figure do (the hand-made point is dominated by eager, so it is not on
    the slider)."""
    f = app.magis_state.plans.frontier(GID)
    pg.wait_for_function("() => !!window.dash_clientside && !!window.dash_clientside.set_props")
    pg.evaluate("(sel) => window.dash_clientside.set_props('plan', {data: sel})",
                {"gid": GID, "version": f.version, "key": key})
    pg.wait_for_function("(k) => (document.querySelector('#plan-caption') || {}).innerText?.startsWith("
                         "'point ' + k + ':')", arg=key)


FULL_DATA = """() => {
    const gd = document.querySelector('#swaps-timeline .js-plotly-plot');
    if (!gd || !gd._fullData) return null;
    return gd._fullData.map(t => ({meta: t.meta, n: (t.x || []).length, base: t.base || null, x: t.x || null}));
}"""


def test_the_swaps_tab_draws_the_copies_of_the_selected_plan(page, server):
    _url, app = server
    select_point(page, app, 0)
    open_tab(page, "Swaps")
    page.wait_for_function("() => (document.querySelector('#swaps-line') || {}).innerText?.includes('1 store')")
    page.wait_for_selector("#swaps-timeline .barlayer .trace")
    data = page.evaluate(FULL_DATA)
    by = {t["meta"]: t for t in data}
    assert by["store"]["n"] == 1 and by["load"]["n"] == 1 and by["wait"]["n"] == 1
    assert {"compute", "memory-plan", "memory-eager"} <= set(by)
    v = app.magis_state.plans.view(GID, 0, wait=30)
    i = next(i for i, k in enumerate(v.sim.stream) if k == "copy")
    assert by["store"]["base"][0] == pytest.approx(v.sim.start[i] * 1e3)
    # the bars are drawn: 2 copy bars and the wait among the bar paths
    assert page.locator("#swaps-timeline .barlayer .point path").count() >= 4
    line = page.locator("#swaps-line").inner_text()
    assert "1 load" in line and "compute waits" in line
    page.locator("#swaps-timeline").scroll_into_view_if_needed()
    shot(page, "app_swaps")
    assert page.js_errors == []


def test_the_export_tab_downloads_and_verifies_the_plan(page, server):
    from core.search.plan import plans_from_bytes, replay

    _url, app = server
    select_point(page, app, 0)
    open_tab(page, "Export")
    page.wait_for_function("() => (document.querySelector('#export-plan-line') || {}).innerText?.startsWith("
                           "'point 0:')")
    assert "magis verify fig2_skip --plan fig2_skip_magis_point0.plan.json" in \
        page.locator("#export-commands").inner_text()
    with page.expect_download() as info:
        page.click("#export-script-btn")
    dl = info.value
    assert dl.suggested_filename == "fig2_skip_magis_point0.py"
    text = Path(dl.path()).read_text()
    compile(text, dl.suggested_filename, "exec")
    page.wait_for_function("() => document.querySelector('#export-info').innerText.includes('generated in')")
    with page.expect_download() as info:
        page.click("#export-planfile-btn")
    dl = info.value
    assert dl.suggested_filename == "fig2_skip_magis_point0.plan.json"
    pf = plans_from_bytes(Path(dl.path()).read_bytes())
    g = app.magis_state.entry(GID).graph
    pf.check_graph(g)
    v = app.magis_state.plans.view(GID, 0, wait=30)
    assert pf.point(0).order == v.plan.order and replay(g, pf.point(0).applications).same_as(v.graph)
    assert page.locator("#export-verify-btn").is_enabled()
    page.click("#export-verify-btn")
    page.wait_for_selector("#export-verify-outcome", timeout=VERIFY_TIMEOUT)
    outcome = page.locator("#export-verify-outcome").inner_text()
    assert outcome.startswith("passed"), outcome
    assert "max abs error" in outcome and "measured" in outcome and "simulated" in outcome
    assert page.locator("#messages .msg-error").count() == 0
    shot(page, "app_export")
    assert page.js_errors == []
