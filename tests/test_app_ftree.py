"""The F-Tree view's pure builders (``app.ftree_view``) on the ``fig6_ftree`` sample.

Its forward graph's F-Tree is the chain of four nested batch splits that
``test_fission.py::test_algorithm_1_on_the_fig6_sample_by_hand`` computes by hand: heat 1792, 1536,
1280 and 512 bytes, scores 896, 768, 640 and 256 (the root is the whole graph, dominated by the input).  The training graph (what the app opens) has two
roots, so its view hangs them under a synthetic "F-Tree" node.
"""

from __future__ import annotations

import pytest

from app.ftree_view import (
    FT_FULL_MAX,
    FT_TOP,
    FTreeCache,
    enabled_from_marks,
    enabled_in_graph,
    ftree_details,
    ftree_elements,
    op_dims,
    shown_nodes,
    split_dim,
)
from core.analysis.ftree import build_ftree


def _text(component) -> str:
    """The text of a dash component tree."""
    if component is None:
        return ""
    if isinstance(component, (str, int, float)):
        return str(component)
    if isinstance(component, (list, tuple)):
        return " ".join(_text(c) for c in component)
    return _text(getattr(component, "children", None))


@pytest.fixture(scope="module")
def fig6_forward():
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("fig6_ftree", "eval")  # captured (no committed file): the hand-checked graph
    return g, build_ftree(g)


@pytest.fixture(scope="module")
def fig6_train():
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("fig6_ftree")
    return g, build_ftree(g)


def _nodes(els):
    return [e for e in els if "source" not in e["data"]]


def _edges(els):
    return [(e["data"]["source"], e["data"]["target"]) for e in els if "source" in e["data"]]


def test_elements_of_the_hand_checked_chain(fig6_forward):
    g, ft = fig6_forward
    assert len(ft.nodes) == 4
    els = ftree_elements(g, ft, "t", set())
    nodes = _nodes(els)
    assert [n["data"]["fid"] for n in nodes] == [0, 1, 2, 3]  # one root: no synthetic node
    assert _edges(els) == [("t-f0", "t-f1"), ("t-f1", "t-f2"), ("t-f2", "t-f3")]
    labels = [n["data"]["label"] for n in nodes]
    assert labels == ["#0 · dim 0 · n = 1\nheat 1.75 KiB\n12 ops", "#1 · dim 0 · n = 1\nheat 1.50 KiB\n11 ops",
                      "#2 · dim 0 · n = 1\nheat 1.25 KiB\n5 ops", "#3 · dim 0 · n = 1\nheat 512 B\n1 op"]
    assert [f.heat for f in ft.nodes] == [1792, 1536, 1280, 512]
    assert {n["classes"] for n in nodes} == {"ft-cand"}
    assert [n["data"]["dominator"] for n in nodes] == ["input_0", "addmm", "addmm_1", "sigmoid"]
    # the hottest node is the darkest
    assert nodes[0]["data"]["color"] != nodes[3]["data"]["color"] and nodes[0]["data"]["fg"] == "#ffffff"


def test_enabled_classes_from_the_plan_marks(fig6_forward):
    g, ft = fig6_forward
    by = {g[v].name: v for v in g.nodes}
    inner = ["addmm_3", "addmm_2", "mul", "sigmoid", "relu_1"]  # S of node 2
    marks = {str(by[n]): "fission" for n in inner} | {str(by["relu"]): "remat"}
    on = enabled_from_marks(ft, marks)
    assert on == {2, 3}  # node 3's S (addmm_3) lies inside node 2's: the marks cannot tell them apart
    assert enabled_from_marks(ft, {by[n]: "fission" for n in inner[:3]}) == {3}  # int keys too
    assert enabled_from_marks(ft, {str(by["relu"]): "swap"}) == set()
    els = ftree_elements(g, ft, "t", on, {2: 4})
    cls = {n["data"]["fid"]: n["classes"] for n in _nodes(els)}
    assert cls == {0: "ft-cand", 1: "ft-cand", 2: "ft-enabled", 3: "ft-enabled"}
    lab = {n["data"]["fid"]: n["data"]["label"] for n in _nodes(els)}
    assert lab[2].startswith("#2 · dim 0 · n = 4\n") and lab[3].startswith("#3 · dim 0 · n > 1\n")
    assert lab[0].startswith("#0 · dim 0 · n = 1\n")


def test_details_of_a_node(fig6_forward):
    g, ft = fig6_forward
    f = ft.nodes[2]
    assert split_dim(g, f)[2] == 0 and set(op_dims(g, f).values()) == {"dim 0"}
    text = _text(ftree_details(g, f, None, ft.dgraph.describe))
    for part in ("F-Tree node #2", "candidate", "5 ops: ", "relu_1", "sigmoid", "addmm_3", "split dimension",
                 "dim 0 of", "[8, 8]", "1 · candidate (n = 1)", "1.25 KiB", "score (Eq. 4)", "640 B",
                 "level", "2 (of the score", "dominator", "addmm_1 (addmm)", "parent", "#1", "children", "#3"):
        assert part in text, part
    on = _text(ftree_details(g, ft.nodes[0], 4))
    assert "4 · enabled (n > 1) in the selected plan" in on and "12 ops: " in on and "(+4 more)" in on
    assert "896 B" in on and "input_0 (placeholder)" in on and "- (a root)" in on
    assert ftree_details(g, f).to_plotly_json()["props"]["data-fid"] == 2


def test_training_graph_has_a_synthetic_root_and_reduce_axes(fig6_train):
    g, ft = fig6_train
    roots = [f.id for f in ft.nodes if f.parent is None]
    assert len(roots) > 1
    els = ftree_elements(g, ft, "t", set())
    nodes = _nodes(els)
    assert nodes[0]["data"]["id"] == "t-froot" and nodes[0]["classes"] == "ft-root" and "fid" not in nodes[0]["data"]
    assert len(nodes) == len(ft.nodes) + 1
    edges = _edges(els)
    assert sorted(edges) == sorted([("t-froot", f"t-f{r}") for r in roots]
                                   + [(f"t-f{f.parent}", f"t-f{f.id}") for f in ft.nodes if f.parent is not None])
    assert len({e["data"]["id"] for e in els}) == len(els)
    # a split along the mean loss's reduce axis: its parts are summed
    red = [f for f in ft.nodes if split_dim(g, f) and split_dim(g, f)[2] < 0]
    assert red and all("Σ axis" in n["data"]["label"] for n in nodes if n["data"].get("fid") == red[0].id)
    assert "reduce axis" in _text(ftree_details(g, red[0]))


def test_a_larger_tree_is_drawn_in_part_and_opens_on_click():
    """bert_tiny's F-Tree (over FT_FULL_MAX nodes): the hottest nodes, the enabled ones and their
    ancestors are drawn; a drawn node says how many nodes below it are not ("▾N"), and opening it draws
    its children."""
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("bert_tiny")
    ft = build_ftree(g)
    assert len(ft.nodes) > FT_FULL_MAX and len(ft.roots()) > 1
    coldest = min(ft.nodes, key=lambda f: f.heat)
    els = ftree_elements(g, ft, "t", {coldest.id})
    nodes = {n["data"]["fid"]: n["data"] for n in _nodes(els) if "fid" in n["data"]}
    drawn = set(nodes)
    assert drawn == shown_nodes(ft, {coldest.id})
    hottest = sorted(ft.nodes, key=lambda f: (-f.heat, -f.score, f.id))[:FT_TOP]
    assert {f.id for f in hottest} | {coldest.id} <= drawn < set(range(len(ft.nodes)))
    assert all(ft.nodes[k].parent is None or ft.nodes[k].parent in drawn for k in drawn)  # ancestors drawn
    assert sorted(_edges(els)) == sorted([("t-froot", f"t-f{f.id}") for f in ft.roots() if f.id in drawn]
                                         + [(f"t-f{ft.nodes[k].parent}", f"t-f{k}") for k in drawn
                                            if ft.nodes[k].parent is not None])

    def subtree(k):
        out, stack = [], list(ft.nodes[k].children)
        while stack:
            out.append(stack.pop())
            stack.extend(ft.nodes[out[-1]].children)
        return out

    for k, d in nodes.items():
        below = sum(1 for c in subtree(k) if c not in drawn)
        assert d["below"] == below and (f"▾{below}" in d["label"]) == (below > 0)
    root = _nodes(els)[0]["data"]
    assert root["id"] == "t-froot" and root["below"] == len(ft.nodes) - len(drawn)  # every node is under it
    assert root["label"] == f"F-Tree ▾{root['below']}"
    # a click opens a node: its children are drawn
    k = next(k for k, d in nodes.items() if d["below"])
    els2 = ftree_elements(g, ft, "t", {coldest.id}, open_=[k])
    drawn2 = {n["data"]["fid"] for n in _nodes(els2) if "fid" in n["data"]}
    assert drawn2 == drawn | set(ft.nodes[k].children)
    assert len(_nodes(ftree_elements(g, ft, "t", set(), full_max=len(ft.nodes)))) == len(ft.nodes) + 1  # + root


def test_enabled_in_a_plans_graph_and_the_cache(fig6_train):
    """The sample's precomputed frontier: its first MAGIS point enables F-Tree nodes at the n of its
    fission applications, which the marks agree with."""
    from app.state import AppState

    st = AppState(time_budget=1.0)
    try:
        gid = "sample:fig6_ftree"
        cache = FTreeCache(st.entry)
        built = cache.get(gid, wait=30)
        assert built is not None and len(built.ftree.nodes) == len(fig6_train[1].nodes)
        assert cache.get(gid, wait=0) is built  # built once
        f = st.plans.frontier(gid)
        magis = next(k for k in f.slider() if f.points[k].method == "magis")
        v = st.plans.view(gid, magis, wait=60)
        on = enabled_in_graph(built, v.graph)
        apps = f.points[magis].applications
        ns = {a.params[0] for a in apps if a.rule == "fission"}
        assert ns and not any(a.rule == "mutate" for a in apps)  # each node at the n it was enabled with
        assert on and set(on.values()) == ns
        assert set(on) <= enabled_from_marks(built.ftree, {str(k): m for k, m in v.marks.items()})
        eager = st.plans.view(gid, f.baseline(), wait=60)
        assert enabled_in_graph(built, eager.graph) == {}
    finally:
        st.shutdown()


def test_cache_reports_a_failed_build_once_and_retries():
    from app.state import AppError

    calls = []

    def entry(gid):
        calls.append(gid)
        raise AppError(f"{gid} is no longer in memory")

    cache = FTreeCache(entry)
    with pytest.raises(AppError, match="no longer in memory"):
        cache.get("upload:x", wait=10)
    # the next request builds again and reports that build's failure (a request still waiting on a
    # build returns None instead of raising)
    with pytest.raises(AppError, match="no longer in memory"):
        cache.get("upload:x", wait=10)
    assert calls == ["upload:x", "upload:x"]
