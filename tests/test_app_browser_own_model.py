"""A user's own model in the browser: an uploaded graph gets every peer and baseline (or the reason
one gives no point) on its Pareto figure, the device picked reaches the plan cards, and a model switch
followed by a visit to another tab leaves the graph's groups drawn as groups.  Screenshots go to
test-artifacts/ (``7_own_model_peers.png`` is the one in assets/workflow/)."""

from __future__ import annotations

import json

import pytest

from tests.browser_helpers import TIMEOUT, _cy, opened, pick_dropdown, shot, wait_cy_stable, wait_ready

pytestmark = [pytest.mark.browser]
APP_SAMPLE = "fig6_ftree"  # the module's server (conftest.py)


@pytest.fixture
def page(browser, server):  # as conftest.py's, and no JavaScript errors by the end
    with opened(browser, server[0]) as pg:
        yield pg
        assert not pg.js_errors, pg.js_errors


def text(pg, sel: str) -> str:
    return pg.inner_text(sel).strip()


GROUPS_JS = "cy.nodes('.group').map(n => [n.style('shape'), n.height()])"
GROUPS = _cy(GROUPS_JS)


def test_a_model_switch_and_a_tab_round_trip_keep_the_groups_drawn_as_groups(page):
    pick_dropdown(page, "model", "vit_tiny")
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('vit_tiny')")
    wait_cy_stable(page, "graph")
    # the groups once styled (a plain op is a 16 px ellipse; a group's box is 40 px high)
    page.wait_for_function(_cy(f"(g => g.length > 0 && g.every(([s, h]) => s !== 'ellipse' && h === 40))({GROUPS_JS})"),
                           arg=["graph", None], timeout=TIMEOUT)
    before = sorted(page.evaluate(GROUPS, ["graph", None]))
    ops_before = page.evaluate(_cy("cy.nodes('.op').length"), ["domtree", None])
    assert ops_before > 0
    page.click("text=Pareto frontier")
    page.wait_for_selector("#pareto .scatterlayer .trace", state="attached")  # the figure is drawn
    page.click("text=Memory analysis")
    wait_ready(page)
    # same groups, same shapes (from the rendered style), and the same dominator tree, once redrawn
    same = _cy(f"JSON.stringify({GROUPS_JS}.map(x => JSON.stringify(x)).sort()) === arg")
    want = json.dumps(sorted(json.dumps(x, separators=(",", ":")) for x in before), separators=(",", ":"))
    try:
        page.wait_for_function(same, arg=["graph", want], timeout=TIMEOUT)
    except Exception:  # the assertion below says what differs
        pass
    assert sorted(page.evaluate(GROUPS, ["graph", None])) == before
    page.wait_for_function(_cy("cy.nodes('.op').length === arg"), arg=["domtree", ops_before], timeout=TIMEOUT)
    shot(page, "app_tab_round_trip")


def test_an_uploaded_graph_gets_every_peer_or_its_reason(page, server, tmp_path):
    from core.ir import io
    from sample_graphs.store import load_sample_graph

    good = tmp_path / "my_model.json.gz"
    io.save(load_sample_graph("bert_tiny"), good)
    page.locator("#upload input[type=file]").set_input_files(str(good))
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.includes('my_model.json.gz')")
    wait_cy_stable(page, "graph")
    assert "press optimize (MAGIS) or run the peers, on the Pareto tab" in text(page, "#plan-caption")
    page.click("text=Pareto frontier")
    page.wait_for_function("() => (document.querySelector('#pareto-missing')?.innerText || '')"
                           ".includes('not run on this graph yet')")
    pick_dropdown(page, "opt-budget", "^10 s$")
    page.click("#peers-run")
    page.wait_for_function("() => (document.querySelector('#peers-status')?.innerText || '').includes('running the peers')")
    page.wait_for_function("() => (document.querySelector('#peers-status')?.innerText || '').startsWith('peers finished')",
                           timeout=240_000)
    page.wait_for_function("() => (document.querySelector('#frontier-source')?.innerText || '').includes('peers run here')")
    _url, app = server
    gid = next(k for k in app.magis_state._labels if k.startswith("upload:"))
    f = app.magis_state.plans.frontier(gid)
    from core.search.methods import PEER_FAMILIES, label_of, methods_of

    have = {p.method for p in f.points}
    assert "torch_mincut" in have and "sqrt_n" in have  # torch's min-cut from the graph file alone
    page.wait_for_function("(n) => document.querySelectorAll('#pareto .legend .traces').length >= n",
                           arg=len(have) + 1)
    legend = page.evaluate("() => document.querySelector('#pareto .legend').textContent")
    missing = text(page, "#pareto-missing")
    for name in methods_of(*PEER_FAMILIES):  # each method: its points on the figure, or why not under it
        assert (name in have and label_of(name) in legend) or (name not in have and label_of(name) in missing), name
    assert "not run on this graph yet" not in missing
    shot(page, "7_own_model_peers")


def test_the_device_picked_reaches_the_plan_cards(page):
    assert "on rtx3090" in text(page, "#plan-cards")
    pick_dropdown(page, "device", "a100-80gb")
    page.wait_for_function("() => document.querySelector('#plan-cards').innerText.includes('fits on a100-80gb')")
    assert "rtx3090 profile (the frontier's: optimize to re-plan for a100-80gb)" in text(page, "#plan-cards")


def test_optimize_on_an_uploaded_causal_lm_gives_points(page, server, tmp_path):
    """The README's own example: ``examples/hf_causal_lm.py``'s Llama (its loss shifts the labels
    inside the step) imported, uploaded and optimized from the page: MAGIS's points reach the
    frontier, no failure message."""
    from pathlib import Path

    from app.specs import capture_spec
    from core.ir import io

    root = Path(__file__).resolve().parent.parent
    f = tmp_path / "llama.json.gz"
    io.save(capture_spec(f"{root}/examples/hf_causal_lm.py:build"), f)
    page.locator("#upload input[type=file]").set_input_files(str(f))
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.includes('llama.json.gz')")
    wait_cy_stable(page, "graph")
    page.click("text=Pareto frontier")
    pick_dropdown(page, "opt-budget", "^10 s$")
    page.click("#opt-run")
    page.wait_for_function("() => document.querySelector('#opt-status').innerText.startsWith('finished')",
                           timeout=120_000)
    assert "failed" not in text(page, "#opt-status")
    page.wait_for_function("() => document.querySelector('#frontier-source').innerText.includes('optimized here')")
    _url, app = server
    gid = next(k for k in app.magis_state._labels if k.startswith("upload:") and "llama" in app.magis_state.label(k))
    points = [p for p in app.magis_state.plans.frontier(gid).points if p.method == "magis"]
    assert points and min(p.peak for p in points) < max(p.peak for p in app.magis_state.plans.frontier(gid).points)
    shot(page, "app_optimize_causal_lm")
