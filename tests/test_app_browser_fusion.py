"""The Fusion tab in headless Chromium (playwright), on the forward sample mobilenet_v2: a small fuse
(LBDF, 256 KiB, local search of 200 plans, oracle explainer) fills the cards, colours the fused groups'
ops on the op graph, steps through two split steps (the invalid group, the proposed and the cut
edges) and outlines a group picked in the table.  Screenshots go to test-artifacts/
(``8_fusion_view.png`` is the one in assets/workflow/)."""

from __future__ import annotations

import pytest

from app.fusion_view import store_of
from core.fmt import format_bytes
from tests.browser_helpers import ARTIFACTS, _cy, card, cy_eval, pick_dropdown, wait_cy_stable

pytestmark = [pytest.mark.browser]
APP_SAMPLE = "mobilenet_v2"  # the module's server (conftest.py)
GID = f"sample:{APP_SAMPLE}"
FUSE_TIMEOUT = 90_000  # ms: a few seconds on an idle machine
SINGLE = "rgb(229,231,235)"  # an op in a group of its own (SINGLE_COLOR)


def status_starts(pg, sel: str, text: str) -> None:
    pg.wait_for_function("([s, t]) => (document.querySelector(s)?.innerText || '').startsWith(t)", arg=[sel, text])


def lit(pg, step: dict) -> None:
    """Wait until the graph shows split step ``step``: its group, its proposed and its cut edges."""
    js = (f"cy.nodes('.fu-hl').length === {len(step['ops'])} && cy.edges('.fu-cut').length === {len(step['cut'])}"
          f" && cy.edges('.fu-exp').length === {len(step['explained'])}")
    pg.wait_for_function(_cy(js), arg=["fusion-graph", None])


def test_fuse_colour_the_groups_and_step_through_the_splits(page, server):
    _url, app = server
    page.locator("#tabs .tab", has_text="Fusion").first.click()
    wait_cy_stable(page, "fusion-graph", min_nodes=99)
    assert page.locator("#fusion-note").inner_text().strip() == ""  # a forward graph: no refusal
    pick_dropdown(page, "fusion-explainer", "^oracle")
    pick_dropdown(page, "fusion-plans", "^200 plans$")
    page.click("#fusion-run")
    page.wait_for_selector("#fusion-dram", timeout=FUSE_TIMEOUT)
    run = store_of(app.magis_state).result(GID)
    plan = run.plan
    assert (plan.explainer, plan.plans, plan.beta, plan.search, plan.scheme) == ("oracle", 200, 256 * 1024,
                                                                                 "local", "lbdf")
    assert card(page, "fusion-dram") == format_bytes(plan.dram)
    assert card(page, "fusion-reduction") == f"-{plan.reduction:.1%}" and plan.reduction > 0.3
    status_starts(page, "#fusion-status", "finished · 200 of 200 plans")

    # every op of a fused group coloured, neighbouring groups apart
    fused = sum(len(gr) for gr in plan.groups if len(gr) > 1)
    page.wait_for_function(_cy(f"cy.nodes('.fu-fused').length === {fused}"), arg=["fusion-graph", None])
    colours = cy_eval(page, "fusion-graph", "cy.nodes('.fu-fused').map(n => n.style('background-color'))")
    assert len(set(colours)) > 1 and SINGLE not in colours

    # two split steps, each drawn on the graph and told in words
    steps = plan.split_steps
    assert len(steps) >= 2
    assert page.locator("#fusion-steps-table td[data-dash-column='how']").count() == min(len(steps), 10)
    for k in (0, 1):
        page.click("#fusion-step-next")
        status_starts(page, "#fusion-step-status", f"step {k + 1} of {len(steps)}")
        status_starts(page, "#fusion-step-title", f"split step {k + 1} of {len(steps)}")
        lit(page, steps[k])
        assert cy_eval(page, "fusion-graph", "cy.nodes('.fu-ok, .fu-bad').length") == len(steps[k]["ops"])
    page.wait_for_timeout(400)  # the zoom to the step's group
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".tab-body:has(#fusion-graph)").screenshot(path=str(ARTIFACTS / "8_fusion_view.png"))

    # a group picked in the table: its ops outlined
    i = next(i for i, gr in enumerate(plan.groups[:12]) if len(gr) > 1)
    page.locator("#fusion-groups-table td[data-dash-column='first']").nth(i).click()
    page.wait_for_function(_cy(f"cy.nodes('.fu-hl').length === {len(plan.groups[i])} && "
                               "cy.edges('.fu-cut').length === 0"), arg=["fusion-graph", None])
    status_starts(page, "#fusion-group-line", f"group {i}: ")

    # another tab and back: the graph is mounted again, with its colours and the group picked
    page.locator("#tabs .tab", has_text="Memory analysis").first.click()
    page.wait_for_selector("#fusion-graph", state="detached")
    page.locator("#tabs .tab", has_text="Fusion").first.click()
    page.wait_for_function(_cy(f"cy.nodes('.fu-fused').length === {fused} && "
                               f"cy.nodes('.fu-hl').length === {len(plan.groups[i])}"), arg=["fusion-graph", None])
    assert page.locator("#messages .msg-error").count() == 0
    assert page.js_errors == []


def test_a_buffer_too_small_under_strict_is_one_line(page):
    page.locator("#tabs .tab", has_text="Fusion").first.click()
    wait_cy_stable(page, "fusion-graph", min_nodes=99)
    pick_dropdown(page, "fusion-buffer", "^128 KiB$")
    page.click("#fusion-strict input")
    page.click("#fusion-run")
    page.wait_for_selector("#messages .msg-error", timeout=FUSE_TIMEOUT)
    msg = page.locator("#messages .msg-text").inner_text()
    assert msg.startswith("fusion of mobilenet_v2: a 128.0 KiB buffer is too small for") and "\n" not in msg
    assert "Traceback" not in page.content()
    assert page.js_errors == []


def test_a_training_graph_says_so_in_one_line(page):
    page.locator("#tabs .tab", has_text="Fusion").first.click()
    wait_cy_stable(page, "fusion-graph", min_nodes=99)
    pick_dropdown(page, "model", "^bert_tiny")
    status_starts(page, "#fusion-note", "bert_tiny is a training graph; layer fusion plans inference graphs")
    note = page.locator("#fusion-note").inner_text()
    assert "magis import MODEL --forward" in note and "mobilenet_v2" in note and "\n" not in note.strip()
    assert page.locator("#fusion-run").is_disabled()
    assert cy_eval(page, "fusion-graph", "cy.nodes().length") == 0
    assert page.js_errors == []
