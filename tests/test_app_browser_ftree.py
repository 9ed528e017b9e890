"""The F-Tree view in headless Chromium (playwright): switch the side panel to the F-Tree, click a
node with the mouse, and see its details and its sub-graph S outlined in the computation graph.

The app (``fig6_ftree``: a small F-Tree, and a precomputed frontier with a point that enables one of
its nodes) is served from a thread; the screenshot goes to ``test-artifacts/app_ftree.png``.
"""

from __future__ import annotations

import threading

import pytest

from tests.browser_helpers import (
    ARTIFACTS,
    TIMEOUT,
    _cy,
    cy_eval,
    tap,
    wait_cy_stable,
)

APP_SAMPLE = "fig6_ftree"  # the module's server (conftest.py)
GID = f"sample:{APP_SAMPLE}"
FTREE = ("fission", "lift", "mutate", "disable")

pytestmark = [pytest.mark.browser]


def page_ready(pg) -> None:  # the module's pages (conftest.py) are ready once this holds
    pg.wait_for_selector("#summary .card", timeout=TIMEOUT)
    wait_cy_stable(pg, "graph")


# ---- the test -------------------------------------------------------------------------------------
def test_ftree_view_click_highlights_s_in_the_graph(page, server):
    _url, app = server
    state = app.magis_state
    from app.ftree_view import cache_of

    ft = cache_of(state).get(GID, wait=30).ftree
    assert not page.locator("#ftree-box").is_visible() and page.locator("#domtree-box").is_visible()

    page.locator("#side-view").get_by_text("F-Tree").click()
    page.wait_for_selector("#ftree-box", state="visible")
    assert not page.locator("#domtree-box").is_visible()
    wait_cy_stable(page, "ftree", len(ft.nodes))
    assert cy_eval(page, "ftree", "cy.nodes().filter(n => n.data('fid') !== undefined).length") == len(ft.nodes)
    several = len(ft.roots()) > 1  # then they hang under a synthetic root
    assert cy_eval(page, "ftree", "cy.edges().length") == len(ft.nodes) - (0 if several else 1)
    assert cy_eval(page, "ftree", "cy.nodes('.ft-root').length") == (1 if several else 0)
    # a frontier point that enables one node (n = 2) and no other F-Tree change, selected as the
    # slider and the Pareto figure select it
    f = state.plans.frontier(GID)
    key = next(k for k, p in enumerate(f.points) if p.method == "magis"
               and [(a.rule, a.params[0]) for a in p.applications if a.rule in FTREE] == [("fission", 2)])
    page.wait_for_function("() => !!window.dash_clientside && !!window.dash_clientside.set_props")
    page.evaluate("(sel) => window.dash_clientside.set_props('plan', {data: sel})",
                  {"gid": GID, "version": f.version, "key": key})
    page.wait_for_function(_cy("cy.nodes('.ft-enabled').length === 1"), arg=["ftree", None])
    assert "n = 2" in cy_eval(page, "ftree", "cy.nodes('.ft-enabled')[0].data('label')")
    assert "candidate F-Trans" in page.locator("#ftree-status").inner_text()
    legend = page.locator(".ftree-legend").inner_text()
    assert "enabled (n > 1) in the selected plan" in legend and "candidate (n = 1)" in legend

    # click the smallest nested candidate of a few ops
    pick = min((f for f in ft.nodes if f.parent is not None and len(f.split.nodes) >= 3),
               key=lambda f: len(f.split.nodes))
    d = tap(page, "ftree", f"n.data('fid') === {pick.id}")
    assert d["fid"] == pick.id
    page.wait_for_selector(f"#ftree-info [data-fid='{pick.id}']")
    info = page.locator("#ftree-info").inner_text()
    g = state.entry(GID).graph
    assert f"F-Tree node #{pick.id}" in info and "split dimension" in info and g[pick.dominator].name in info
    assert f"{len(pick.split.nodes)} ops" in info
    page.wait_for_function(_cy("cy.nodes('.ft-sel').length > 0"), arg=["graph", None])
    n_sel = cy_eval(page, "graph", "cy.nodes('.ft-sel').length")
    assert n_sel >= 1
    assert cy_eval(page, "ftree", "cy.nodes('.ft-cur').map(n => n.data('fid'))") == [pick.id]
    # every op of S is outlined, as itself or as the collapsed group that holds it
    s_ids = sorted(pick.split.nodes)
    covered = cy_eval(page, "graph", """(() => {
        const sel = cy.nodes('.ft-sel');
        const ops = new Set(sel.filter(n => n.data('nid') !== undefined).map(n => n.data('nid')));
        const groups = sel.filter(n => n.data('group') !== undefined).map(n => n.data('group'));
        return [Array.from(ops), groups];
    })()""")
    tree = state.entry(GID).tree
    from app.cyto import path_str

    for v in s_ids:
        p = path_str(tree.path_of[v])
        assert v in covered[0] or any(p == gp or p.startswith(gp + "/") for gp in covered[1]), g[v].name
    cy_eval(page, "ftree", "(cy.fit(undefined, 10), true)")  # tap() centred the clicked node
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".row-graph").screenshot(path=str(ARTIFACTS / "app_ftree.png"))
    page.screenshot(path=str(ARTIFACTS / "app_ftree_page.png"), full_page=True)

    # back to the dominator tree: S is no longer outlined and the tree is drawn at its size
    page.locator("#side-view").get_by_text("dominator tree").click()
    page.wait_for_selector("#domtree-box", state="visible")
    page.wait_for_function(_cy("cy.nodes('.ft-sel').length === 0"), arg=["graph", None])
    assert cy_eval(page, "domtree", "cy.width() > 100 && cy.height() > 100")
    assert not page.js_errors, page.js_errors


def test_a_slow_ftree_says_it_is_being_built_then_appears(page, server, monkeypatch):
    """Algorithm 1 takes seconds on the paper-size graphs: the view says so and polls."""
    import re

    import app.ftree_view as fv

    slow = fv.build_ftree
    armed, release = threading.Event(), threading.Event()

    def build(*a, **kw):  # once armed, a build ends when the test says so: longer than BUILD_WAIT
        if armed.is_set():
            release.wait(timeout=TIMEOUT / 1000)
        return slow(*a, **kw)

    monkeypatch.setattr(fv, "build_ftree", build)
    page.locator("#side-view").get_by_text("F-Tree").click()
    wait_cy_stable(page, "ftree")
    armed.set()
    page.locator("#model").click()
    page.get_by_role("option", name=re.compile(r"^bert_tiny")).first.click()
    page.wait_for_function("() => document.querySelector('#ftree-status').innerText.includes('building the F-Tree')")
    page.wait_for_function(_cy("cy.nodes().length === 0"), arg=["ftree", None])  # not the previous model's tree
    release.set()
    page.wait_for_function("() => document.querySelector('#ftree-status').innerText.includes('candidate F-Trans')")
    ft = fv.cache_of(server[1].magis_state).get("sample:bert_tiny", wait=0).ftree
    assert len(ft.nodes) > fv.FT_FULL_MAX  # drawn in part: a click on a node draws its children
    wait_cy_stable(page, "ftree")
    assert page.locator("#ftree-info").inner_text().startswith("Click a node of the F-Tree")
    fids = "cy.nodes().filter(n => n.data('fid') !== undefined).map(n => n.data('fid'))"
    before = set(cy_eval(page, "ftree", fids))
    assert len(before) < len(ft.nodes) and "showing" in page.locator("#ftree-status").inner_text()
    d = tap(page, "ftree", "n.data('fid') !== undefined && n.data('below') > 0")
    assert "▾" in d["label"]
    kids = set(ft.nodes[d["fid"]].children)
    page.wait_for_function(_cy(f"({fids}).length === arg"), arg=["ftree", len(before | kids)])
    assert set(cy_eval(page, "ftree", fids)) == before | kids
    page.wait_for_selector(f"#ftree-info [data-fid='{d['fid']}']")  # and it is picked
    assert not page.js_errors, page.js_errors
