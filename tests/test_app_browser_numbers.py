"""Numbers that agree, in the browser: rule steps open on step 1 and step forward from there, the
steps table pages to the selected step, the last step's peak is the plan card's; the slider has a
stop per point; a valid "fit in" after an invalid one clears the error banner; the Pareto figure's
log axes; a curve click's breakdown gives way to the next selection."""

from __future__ import annotations

import re

import pytest

from tests.browser_helpers import TIMEOUT, opened, wait_message, wait_ready

pytestmark = [pytest.mark.browser]
APP_SAMPLE = SAMPLE = "gpt_neo_tiny"  # its default point: 32 rule applications, three pages of steps


def _ready(pg) -> None:
    wait_ready(pg)
    pg.wait_for_selector("#plan-cards .card", timeout=TIMEOUT)


@pytest.fixture
def page(browser, server):
    with opened(browser, server[0], ready=_ready) as pg:
        yield pg
        assert not pg.js_errors, pg.js_errors


def text(pg, sel: str) -> str:
    return pg.inner_text(sel).strip()


def title_is(pg, t: str) -> None:
    pg.wait_for_function("(t) => (document.querySelector('#step-title')?.innerText || '').trim() === t", arg=t)


def shown_steps(pg) -> list[int]:
    return [int(x) for x in pg.eval_on_selector_all(
        "#step-table tbody tr td[data-dash-column=step]", "tds => tds.map(td => td.innerText.trim())")]


def test_steps_open_on_step_1_page_to_the_selection_and_agree_with_the_card(page, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    n = len(f.points[f.default()].applications)
    assert n > 24, "the default point has more than two pages of steps"
    card_peak = text(page, "#plan-peak")
    page.click("text=Rule steps")
    title_is(page, f"step 1 of {n}")
    page.wait_for_function("() => document.querySelectorAll('#step-table tbody tr td[data-dash-column=step]')"
                           ".length > 1")
    assert shown_steps(page)[0] == 1
    page.click("#step-fwd")  # forward from the opening view moves
    title_is(page, f"step 2 of {n}")
    page.click("#step-last")
    title_is(page, f"step {n} of {n}")
    page.wait_for_function("(n) => [...document.querySelectorAll('#step-table tbody td[data-dash-column=step]')]"
                           ".some(td => td.innerText.trim() === String(n))", arg=n)
    assert n in shown_steps(page) and 1 not in shown_steps(page)  # the table turned to the last page
    # the last step ends where the plan card is
    peak_row = page.locator("#step-details tr:has(th:text-is('peak')) td").first.inner_text()
    assert f"→ {card_peak} (" in peak_row, (peak_row, card_peak)
    # a click on a row of that page selects that row's step (not the first page's)
    row = page.locator("#step-table tbody td[data-dash-column=step]", has_text=re.compile(rf"^{n - 1}$")).first
    row.click()
    title_is(page, f"step {n - 1} of {n}")
    page.click("#step-first")
    title_is(page, f"step 0 of {n}")
    page.wait_for_function("() => [...document.querySelectorAll('#step-table tbody td[data-dash-column=step]')]"
                           ".some(td => td.innerText.trim() === '1')")


def test_slider_stops_every_point_and_a_valid_fit_clears_the_error(page, server):
    _url, app = server
    f = app.magis_state.plans.frontier(f"sample:{SAMPLE}")
    handle = page.locator("#plan-slider [role=slider]").first
    assert int(handle.get_attribute("aria-valuemax")) == len(f.points) - 1
    assert re.search(rf"stop \d+ of {len(f.points)}: \d\.\d\dx · [+-]", text(page, "#plan-caption"))
    page.click("text=Pareto frontier")
    page.fill("#fit-limit", "1KiB")
    page.press("#fit-limit", "Enter")
    wait_message(page, "error", "no plan on the frontier has a peak under 1.00 KiB")
    page.fill("#fit-limit", "0.9")
    page.press("#fit-limit", "Enter")
    page.wait_for_function("() => !document.querySelector('#messages .msg-error')")
    # log axes on the Pareto figure
    page.wait_for_selector("#pareto .scatterlayer .trace")
    page.click("#pareto-scale label:has-text('log')")
    page.wait_for_function("() => { const gd = document.querySelector('#pareto .js-plotly-plot');"
                           " return gd && gd.layout.xaxis.type === 'log' && gd.layout.yaxis.type === 'log'; }")
