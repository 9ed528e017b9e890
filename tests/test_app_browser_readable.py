"""The app readable at the size a person opens it (1600 x 1000, headless Chromium): every graph view --
the computation graph of each sample and of an uploaded Llama, the dominator tree, the F-Tree and the
fusion op graph -- opens with its whole drawing inside its panel and its labels at least 9 px on screen
(median over the drawn labels of font size times zoom, as cytoscape renders them); the search box finds
a node hidden in a collapsed group, draws, selects and centres it; the legend names every mark.
Screenshots go to test-artifacts/."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from app.cyto import clip, stylesheet
from app.fusion_view import fusion_positions
from app.modtree import ModuleTree
from tests.browser_helpers import (
    TIMEOUT,
    _cy,
    cy_eval,
    graph_token,
    pick_dropdown,
    shot,
    wait_cy_stable,
    wait_ready,
)

APP_SAMPLE = "bert_tiny"  # the module's server (conftest.py)
VIEWPORT = {"width": 1600, "height": 1000}
MIN_LABEL_PX = 9.0

# what a person sees of cytoscape view ``id``: the drawing's rendered box and the container's client
# rect (both in page pixels), and each drawn label's size on screen
SEEN = _cy("""(() => {
  const bb = cy.elements().renderedBoundingBox();
  const r = cy.container().getBoundingClientRect();
  const px = cy.nodes().filter(n => n.visible() && String(n.style('label') || '').length > 0)
    .map(n => parseFloat(n.style('font-size')) * cy.zoom());
  return {box: [r.left + bb.x1, r.top + bb.y1, r.left + bb.x2, r.top + bb.y2],
          panel: [r.left, r.top, r.right, r.bottom], px: px, zoom: cy.zoom()};
})()""")


# ---- the pure parts (no browser) ------------------------------------------------------------------
def test_clipped_labels_keep_their_suffix():
    assert clip("convolution_backward", 14) == "conv…_backward"
    assert clip("bert.embeddings.word_embeddings", 24) == "bert.emb…word_embeddings"
    assert clip("addmm_3", 14) == "addmm_3"  # short enough: as it is
    assert clip("convolution", 10) == "convo…tion"  # no separator: head and tail
    for text in ("a" * 40, "x.y_z" * 9, "layer.0.attention.self.query"):
        for n in (8, 12, 24):
            assert len(clip(text, n)) <= n


def test_search_finds_nodes_tensors_and_modules_in_order():
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("bert_tiny")
    t = ModuleTree(g)
    addmm3 = next(n for n in g if n.name == "addmm_3")
    assert t.find("addmm_3") == (("n", addmm3.id), 1)  # a node by its exact name
    assert t.find("ADDMM_3[0]")[0] == ("n", addmm3.id)  # a tensor: an output of that node
    key, n = t.find("layer.1.attention")  # a module before the weights whose names contain it
    assert key == ("g", ("fwd", "bert", "encoder", "layer", "1", "attention")) and n >= 1
    assert t.find("no_such_name") == (None, 0)
    shown = t.show_group(set(), key[1])
    assert t.visible(shown)[t.members(key[1])[0]] == key  # drawn as its own box


@pytest.mark.parametrize("sample", ["bert_tiny", "gpt_neo_tiny", "resnet50_tiny", "unet_tiny", "gpt_neo_1_3b"])
def test_opening_views_fit_the_estimate_and_stay_small(sample):
    from sample_graphs.store import load_sample_graph

    t = ModuleTree(load_sample_graph(sample))
    ex = t.initial_expanded(24)
    assert 3 <= t.count_visible(ex) <= 24 and t.fits(ex)


def test_the_fusion_grid_snakes_in_rows_of_the_panel_shape():
    pos = fusion_positions(99)
    rows = sorted({p["y"] for p in pos})
    cols = sum(p["y"] == rows[0] for p in pos)
    assert 5 <= len(rows) <= 10 and cols * len(rows) >= 99
    assert pos[cols - 1]["x"] == pos[cols]["x"]  # the next row starts under the end of the last
    assert all(abs(a["x"] - b["x"]) + abs(a["y"] - b["y"]) in (100, 64) for a, b in zip(pos, pos[1:], strict=False))


# ---- in the browser ----------------------------------------------------------------------------------
@pytest.fixture
def page(browser, server):
    """A fresh 1600 x 1000 page on the module's server, with no JavaScript errors by the end."""
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(server[0])
    wait_ready(pg)
    try:
        yield pg
        assert not errors, errors
    finally:
        ctx.close()


def seen(pg, view: str) -> dict:
    out = pg.evaluate(SEEN, [view, None])
    assert out is not None and out["px"], f"#{view} draws no labels"
    return out


def assert_readable(pg, view: str) -> dict:
    """``view``'s drawing inside its panel (1 px of rounding), its median label >= 9 px."""
    s = seen(pg, view)
    x1, y1, x2, y2 = s["box"]
    l, t, r, b = s["panel"]
    assert l - 1 <= x1 and t - 1 <= y1 and x2 <= r + 1 and y2 <= b + 1, (view, s["box"], s["panel"])
    med = statistics.median(s["px"])
    assert med >= MIN_LABEL_PX, (view, med, s["zoom"])
    return s


def switch_to(pg, sample: str) -> None:
    old = graph_token(pg)
    pick_dropdown(pg, "model", f"^{sample}")
    pg.wait_for_function("(s) => document.querySelector('#summary .card.model .card-value')?.innerText === s",
                         arg=sample)
    pg.wait_for_function(_cy("cy.nodes().length > 0 && !cy.nodes()[0].id().startsWith(arg + '-')"),
                         arg=["graph", old])
    wait_cy_stable(pg, "graph")


@pytest.mark.parametrize("sample", ["bert_tiny", "gpt_neo_tiny", "resnet50_tiny", "unet_tiny"])
def test_each_sample_opens_fitted_with_readable_labels(page, sample):
    if sample != APP_SAMPLE:
        switch_to(page, sample)
    assert_readable(page, "graph")
    wait_cy_stable(page, "domtree")
    assert_readable(page, "domtree")
    shot(page, f"app_readable_{sample}")


def test_the_dominator_tree_and_the_ftree_of_gpt_neo_are_readable(page):
    switch_to(page, "gpt_neo_tiny")
    wait_cy_stable(page, "domtree")
    assert_readable(page, "domtree")
    page.locator("#side-view").get_by_text("F-Tree").click()
    page.wait_for_selector("#ftree-box", state="visible")
    wait_cy_stable(page, "ftree", 2)
    page.wait_for_function(_cy("cy.width() > 0 && cy.nodes().length > 1"), arg=["ftree", None])
    s = assert_readable(page, "ftree")
    assert len(s["px"]) == cy_eval(page, "ftree", "cy.nodes().length")  # every F-Tree node labelled
    shot(page, "app_readable_ftree")


def test_an_uploaded_llama_opens_fitted_with_readable_labels(page, tmp_path):
    from app.specs import capture_spec
    from core.ir import io

    root = Path(__file__).resolve().parent.parent
    f = tmp_path / "llama.json.gz"
    io.save(capture_spec(f"{root}/examples/hf_causal_lm.py:build"), f)
    old = graph_token(page)
    page.locator("#upload input[type=file]").set_input_files(str(f))
    page.wait_for_function("() => document.querySelector('#summary .card.model .card-value')"
                           "?.innerText.includes('llama.json.gz')")
    page.wait_for_function(_cy("cy.nodes().length > 0 && !cy.nodes()[0].id().startsWith(arg + '-')"),
                           arg=["graph", old])
    wait_cy_stable(page, "graph")
    assert_readable(page, "graph")
    wait_cy_stable(page, "domtree")
    assert_readable(page, "domtree")
    shot(page, "app_readable_llama")


def test_expanding_a_group_fits_the_graph_again(page):
    before = cy_eval(page, "graph", "cy.nodes().length")
    grp = cy_eval(page, "graph", "cy.nodes('.group').max(n => n.data('members')).ele.data('group')")
    cy_eval(page, "graph", "cy.nodes().filter(n => n.data('group') === arg)[0].emit('tap')", grp)
    page.wait_for_function(_cy(f"cy.nodes().length > {before}"), arg=["graph", None])
    wait_cy_stable(page, "graph")
    s = seen(page, "graph")  # labels may be smaller now: the whole graph still fits its panel
    x1, y1, x2, y2 = s["box"]
    l, t, r, b = s["panel"]
    assert l - 1 <= x1 and t - 1 <= y1 and x2 <= r + 1 and y2 <= b + 1, (s["box"], s["panel"])


def test_search_draws_selects_and_centres_a_hidden_node(page, server):
    _url, app = server
    entry = app.magis_state.entry(f"sample:{APP_SAMPLE}")
    g, tree = entry.graph, entry.tree
    drawn = set(cy_eval(page, "graph", "cy.nodes().map(n => n.data('nid')).filter(x => x !== undefined)"))
    target = next(n for n in g if n.name.startswith("addmm_") and n.id not in drawn)  # inside a collapsed group
    assert tree.find(target.name)[0] == ("n", target.id)
    page.fill("#graph-search", target.name)
    page.wait_for_function(_cy("cy.nodes('.found').length === 1 && cy.nodes('.found')[0].data('nid') === arg"),
                           arg=["graph", target.id])
    assert cy_eval(page, "graph", "cy.nodes('.found')[0].hasClass('sel')")  # selected: details follow
    page.wait_for_function("(name) => (document.querySelector('#details')?.innerText || '').includes(name)",
                           arg=target.name)
    off = cy_eval(page, "graph", """(() => { const b = cy.nodes('.found')[0].renderedBoundingBox();
        return [Math.abs((b.x1 + b.x2) / 2 - cy.width() / 2), Math.abs((b.y1 + b.y2) / 2 - cy.height() / 2)]; })()""")
    assert off[0] <= 2 and off[1] <= 2, off  # centred in the panel (the node with its label)
    assert cy_eval(page, "graph", "cy.zoom()") >= 0.9  # close enough to read
    assert "found " + target.name in page.inner_text("#graph-search-note")

    # a module by its dotted name: drawn as one group box, highlighted
    page.fill("#graph-search", "bert.encoder.layer.1.attention")
    page.wait_for_function(_cy("cy.nodes('.found').length === 1 && cy.nodes('.found')[0].data('group') === arg"),
                           arg=["graph", "fwd/bert/encoder/layer/1/attention"])
    page.fill("#graph-search", "no_such_thing_here")
    page.wait_for_function("() => (document.querySelector('#graph-search-note')?.innerText || '')"
                           ".startsWith('no node, tensor or module matches')")
    shot(page, "app_readable_search")


def test_the_legend_names_every_mark_of_the_stylesheet(page):
    legend = page.locator("#graph-legend")
    assert legend.is_visible()
    text = legend.inner_text()
    words = {"mk-fission": "fission", "mk-remat": "recomputed", "mk-swap": "swapped", "mk-substitution": "substituted",
             "ft-sel": "F-Tree", "sel": "selected", "found": "search match", "bwd": "backward"}
    marks = {sel["selector"].split(".")[1].split("[")[0] for sel in stylesheet() if sel["selector"].startswith("node.")}
    for mark in marks & set(words):
        assert words[mark] in text, mark
    assert set(words) <= marks  # the legend's marks are the stylesheet's
    # a swatch per entry, drawn (non-zero size) beside its text
    assert page.evaluate("() => [...document.querySelectorAll('#graph-legend .sw')]"
                         ".every(e => e.getBoundingClientRect().width > 0)")


def test_the_fusion_op_graph_is_readable(page):
    switch_to(page, "mobilenet_v2")
    page.locator("#tabs .tab", has_text="Fusion").first.click()
    wait_cy_stable(page, "fusion-graph", min_nodes=99)
    page.locator("#fusion-graph").scroll_into_view_if_needed()
    assert_readable(page, "fusion-graph")
    labels = cy_eval(page, "fusion-graph", "cy.nodes().map(n => [n.data('label'), n.data('op')])")
    assert max(len(x) for x, _op in labels) <= 12  # clipped in the middle, the suffix kept
    assert all(x == op or op.startswith(x.split("…")[0]) and op.endswith(x.split("…")[1]) for x, op in labels)
    ys = cy_eval(page, "fusion-graph", "cy.nodes().map(n => Math.round(n.position('y')))")
    assert len(set(ys)) > 3  # in rows, not one line
    page.locator(".tab-body:has(#fusion-graph)").screenshot(path=str(Path(__file__).resolve().parents[1]
                                                                       / "test-artifacts" / "app_readable_fusion.png"))
