"""The Swaps tab on a SwapAdvisor plan in headless Chromium (playwright): bert_tiny's precomputed
frontier with a SwapAdvisor point merged in before the page loads (``tests/swap_plans.py``); the
point is selected, and the Swaps tab draws three lanes (compute, swap-in, swap-out) and the plan's
memory pool (its size classes and the object occupancy chart).  Screenshot in ``test-artifacts/``."""

from __future__ import annotations

import pytest

from tests.browser_helpers import shot
from tests.swap_plans import SA_GID, install_swapadvisor

pytestmark = [pytest.mark.browser]

APP_SAMPLE = "bert_tiny"  # the module's server and pages (conftest.py)
POINT: dict[str, int] = {}


def app_setup(app) -> None:
    _f, key = install_swapadvisor(app.magis_state)
    POINT["key"] = key


def select_point(pg, app, key: int) -> None:
    """Select point ``key`` of the frontier: write the ``plan`` store in the browser, as the slider
    and a click on the Pareto figure do."""
    f = app.magis_state.plans.frontier(SA_GID)
    pg.wait_for_function("() => !!window.dash_clientside && !!window.dash_clientside.set_props")
    pg.evaluate("(sel) => window.dash_clientside.set_props('plan', {data: sel})",
                {"gid": SA_GID, "version": f.version, "key": key})
    pg.wait_for_function("(k) => (document.querySelector('#plan-caption') || {}).innerText?.startsWith("
                         "'point ' + k + ':')", arg=key)


FIGURE = """(sel) => {
    const gd = document.querySelector(sel + ' .js-plotly-plot');
    if (!gd || !gd._fullData) return null;
    return {ticks: gd._fullLayout.yaxis.ticktext || [], traces: gd._fullData.map(t => ({meta: t.meta,
            n: (t.x || []).length, y: Array.from(t.y || [])}))};
}"""


def test_swaps_tab_of_a_swapadvisor_point_draws_three_lanes_and_the_pool(page, server):
    _url, app = server
    key = POINT["key"]
    select_point(page, app, key)
    page.locator("#tabs .tab", has_text="Swaps").first.click()
    page.wait_for_function("() => (document.querySelector('#swaps-line') || {}).innerText?.includes('three streams')")
    page.wait_for_selector("#swaps-timeline .barlayer .trace")
    top = page.evaluate(FIGURE, "#swaps-timeline")
    assert top["ticks"] == ["compute", "swap-in", "swap-out"]
    by = {t["meta"]: t for t in top["traces"]}
    assert set(by["load"]["y"]) == {1} and set(by["store"]["y"]) == {0} and set(by["compute"]["y"]) == {2}
    # the memory pool: shown, its summary against the limit, one table row per class, the occupancy chart
    page.wait_for_selector("#swaps-pool-section", state="visible")
    page.wait_for_function("() => (document.querySelector('#swaps-pool-text') || {}).innerText?.includes('limit')")
    page.wait_for_selector("#swaps-pool .barlayer .trace")
    v = app.magis_state.plans.view(SA_GID, key, wait=30)
    cnt = v.plan.stats["allocation"]["cnt"]
    assert page.locator("#swaps-pool-classes tbody tr").count() == len(cnt) + 1  # the header row too
    pool = page.evaluate(FIGURE, "#swaps-pool")
    metas = {t["meta"] for t in pool["traces"]}
    assert {"stay-made", "stay-loaded", "host"} <= metas
    assert any(t.startswith("c0 obj 0") for t in pool["ticks"])
    assert page.locator("#swaps-pool .barlayer .point path").count() > len(cnt)
    page.locator("#swaps-pool").scroll_into_view_if_needed()
    box = page.evaluate("""() => {  // the widest bar of the chart: hover it
        const r = [...document.querySelectorAll('#swaps-pool .barlayer .point path')].map(p => p.getBoundingClientRect())
            .sort((a, b) => b.width - a.width)[0];
        return {x: r.left + r.width / 2, y: r.top + r.height / 2};
    }""")
    page.mouse.move(box["x"], box["y"])
    page.wait_for_function("() => [...document.querySelectorAll('#swaps-pool .hoverlayer .hovertext')]"
                           ".some(e => e.textContent.includes('from:') || e.textContent.includes('on the host'))")
    page.locator("#swaps-timeline").scroll_into_view_if_needed()
    shot(page, "app_swapadvisor")
    assert page.locator("#messages .msg-error").count() == 0
    assert page.js_errors == []
