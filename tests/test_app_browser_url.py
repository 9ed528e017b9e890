"""The view in the address, in the browser: moving the plan slider and picking a tab writes them
to the URL; that URL opened in a fresh page shows the same stop and tab.  And the measured curve:
"run the exported script on the CPU" draws the run's trace over the plan's simulated curve."""

from __future__ import annotations

import re

import pytest

from tests.browser_helpers import TIMEOUT, opened, wait_ready

pytestmark = [pytest.mark.browser]
APP_SAMPLE = "fig6_ftree"  # the module's server (conftest.py)


def _ready(pg) -> None:
    wait_ready(pg)
    pg.wait_for_selector("#plan-cards .card", timeout=TIMEOUT)


page_ready = _ready


def slider_value(pg) -> int:
    return int(pg.locator("#plan-slider [role=slider]").first.get_attribute("aria-valuenow"))


def caption(pg) -> str:
    return pg.inner_text("#plan-caption").strip()


def test_point_and_tab_survive_a_reload_of_the_url(page, browser, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{APP_SAMPLE}")
    assert len(f.stops()) > 2
    start = slider_value(page)
    target = 0 if start != 0 else 1
    handle = page.locator("#plan-slider [role=slider]").first
    handle.focus()
    for _ in range(abs(start - target)):
        page.keyboard.press("ArrowLeft" if target < start else "ArrowRight")
    page.wait_for_function("(v) => document.querySelector('#plan-slider [role=slider]')"
                           ".getAttribute('aria-valuenow') === String(v)", arg=target)
    page.click("text=Rule steps")
    page.wait_for_function("(s) => window.location.search.includes('stop=' + s) && "
                           "window.location.search.includes('tab=steps')", arg=target)
    link = page.url
    assert f"sample={APP_SAMPLE}" in link
    want_caption = caption(page)
    assert re.search(rf"\bstop {target + 1} of", want_caption), want_caption
    # the steps tab opens, so the memory analysis (``wait_ready``) is hidden: wait for the plan bar
    with opened(browser, link, ready=lambda pg: pg.wait_for_selector("#plan-cards .card")) as fresh:
        fresh.wait_for_function("(v) => document.querySelector('#plan-slider [role=slider]')"
                                ".getAttribute('aria-valuenow') === String(v)", arg=target)
        fresh.wait_for_function("(c) => document.querySelector('#plan-caption').innerText.trim() === c",
                                arg=want_caption)
        tab = fresh.locator(".tab--selected, [role=tab][aria-selected=true]").first.inner_text()
        assert "Rule steps" in tab
        assert fresh.url == link  # the restored view writes the same address back
        assert not fresh.js_errors, fresh.js_errors
    assert not page.js_errors, page.js_errors


def test_a_bad_url_opens_the_default_view(browser, server):
    url, _app = server
    with opened(browser, url + "?sample=nope&stop=banana&tab=%3Cscript%3E", ready=_ready) as pg:
        assert pg.locator(".tab--selected, [role=tab][aria-selected=true]").first.inner_text().strip() \
            .startswith("Memory analysis")
        assert not pg.js_errors, pg.js_errors


def test_the_measured_trace_appears_over_the_simulated_curve(page):
    page.locator("#measure-run").scroll_into_view_if_needed()
    page.click("#measure-run")
    page.wait_for_function("() => document.querySelectorAll('#measured-memory .scatterlayer .trace').length === 2",
                           timeout=TIMEOUT)
    status = page.inner_text("#measure-status")
    assert "peak ratio 1.000" in status, status
    names = page.eval_on_selector_all("#measured-memory .legendtext", "els => els.map(e => e.textContent)")
    assert any(n.startswith("measured") for n in names) and any(n.startswith("simulated") for n in names), names


def test_a_link_to_another_model_opens_it_at_its_stop(browser, server):
    url, app = server
    f = app.magis_state.plans.frontier("sample:fig2_skip")
    stop = 1 if f.stops().index(f.default()) != 1 else 2
    assert len(f.stops()) > stop
    with opened(browser, url + f"?sample=fig2_skip&stop={stop}&tab=pareto",
                ready=lambda pg: pg.wait_for_selector("#plan-cards .card")) as pg:
        pg.wait_for_function("() => (document.querySelector('#summary .card.model .card-value')?.innerText || '')"
                             ".includes('fig2_skip')")
        pg.wait_for_function("(v) => document.querySelector('#plan-slider [role=slider]')"
                             ".getAttribute('aria-valuenow') === String(v)", arg=stop)
        pg.wait_for_function("(s) => /\\bstop (\\d+) of/.exec(document.querySelector('#plan-caption').innerText)"
                             "?.[1] === String(s + 1)", arg=stop)
        assert pg.locator("[role=tab][aria-selected=true], .tab--selected").first.inner_text().strip() \
            .startswith("Pareto")
        pg.wait_for_function("(s) => window.location.search === '?sample=fig2_skip&stop=' + s + '&tab=pareto'",
                             arg=stop)
        assert not pg.js_errors, pg.js_errors
