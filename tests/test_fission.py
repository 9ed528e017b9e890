"""Fission by hand (MAGIS sections 4.1-4.3): the D-Graph of small aten graphs, the validity rules of
a split, F-Trans applied and taken back, its memory, and its exported loop run against the unsplit
computation."""

from __future__ import annotations

import pytest
import torch

from core.analysis.dgraph import DGraph, SplitError, plan_split
from core.analysis.ftree import _reachable, _scores, build_ftree, hot_bytes
from core.analysis.lifetimes import memory_profile
from core.ir.graph import Graph, NodeKind
from core.schedule import get_scheduler
from core.simulate import simulate
from core.transform.fission import Fission, apply_split
from tests.hand_graphs import G, mlp, run_mlp_script


def test_dgraph_links_matmul_dims_as_the_paper_describes():
    g, t = mlp()
    dg = DGraph(g)
    comp = dg.component
    # MAGIS 4.1: c[m,n] = sum_k a[m,k] b[k,n] links <a,1>-<c,1>, <a,2>-<c,-1>, <b,1>-<c,-1>, <b,2>-<c,2>
    x, w1, a = t["x"].node, t["w1"].node, t["a"].node
    assert comp((x, 0, 0)) == comp((a, 0, 0))  # the batch
    assert comp((x, 0, 1)) == comp((w1, 0, 0)) == comp((a, 0, -1))  # k: a reduce axis of a
    assert comp((w1, 0, 1)) == comp((a, 0, 1))
    assert comp((x, 0, 0)) != comp((x, 0, 1))
    batch = comp((x, 0, 0))
    assert {t[k].node for k in ("x", "a", "r", "y")} <= dg.components()[batch]
    assert "dim 0" in dg.describe(batch)


def test_plan_split_slices_along_the_batch_and_shares_the_weights():
    g, t = mlp()
    dg = DGraph(g)
    s = plan_split(g, dg, [t[k].node for k in ("a", "r", "y")], (t["x"].node, 0, 0))
    assert s.length == 8 and s.divisors() == [2, 4, 8]
    assert dict(zip(s.inputs, s.in_dims, strict=True)) == {t["x"]: 0, t["w1"]: None, t["w2"]: None}
    assert s.outputs == [t["y"]] and s.combine == [("cat", 0)]


def test_plan_split_refuses_what_the_paper_forbids():
    g, t = mlp()
    dg = DGraph(g)
    batch = (t["x"].node, 0, 0)
    with pytest.raises(SplitError, match="not weakly connected"):
        plan_split(g, dg, [t["a"].node, t["y"].node], batch)
    # along k the first mm's output is a partial sum that relu reads inside the sub-graph
    k = (t["x"].node, 0, 1)
    with pytest.raises(SplitError, match="dims in the split dimension|partial sum"):
        plan_split(g, dg, [t["a"].node, t["r"].node], k)
    with pytest.raises(SplitError, match="placeholder"):
        plan_split(g, dg, [t["x"].node, t["a"].node], batch)
    # a diamond with one side left out is not convex
    b = G()
    x = b.input("x", (8, 4))
    p = b.op("p", "aten.relu.default", [x], (8, 4))
    q = b.op("q", "aten.sigmoid.default", [p], (8, 4))
    b.op("o", "aten.mul.Tensor", [p, q], (8, 4), output=True)
    dg2 = DGraph(b.g)
    with pytest.raises(SplitError, match="not convex"):
        plan_split(b.g, dg2, [p.node, b.g.by_name("o").id], (x.node, 0, 0))


def test_a_summed_output_may_not_share_a_bias():
    b = G()
    x = b.input("x", (8, 4))
    w = b.input("w", (4, 6), weight=True)
    bias = b.input("bias", (6,), weight=True)
    y = b.op("y", "aten.addmm.default", [bias, x, w], (8, 6), output=True)
    dg = DGraph(b.g)
    with pytest.raises(SplitError, match="bias"):
        plan_split(b.g, dg, [y.node], (x.node, 0, 1))  # along k: y = sum of parts, bias n times
    ok = plan_split(b.g, dg, [y.node], (x.node, 0, 0))  # along the batch: fine
    assert ok.combine == [("cat", 0)]


def test_fission_lowers_the_peak_by_the_hand_computed_bytes_and_takes_back_exactly():
    g, t = mlp()
    orig = g.copy()
    order = get_scheduler("traced").run(g).order
    # resident x 128 + w1 1024 + w2 1024 = 2176; a and r are 2048 each: the peak is at r
    assert memory_profile(g, order).peak == 2176 + 2048 + 2048
    app = Fission.application(2, (t["x"].node, 0, 0), [t[k].node for k in ("a", "r", "y")])
    log = Fission().apply(g, app)
    assert g.lint_problems() == []
    (f,) = [n for n in g.nodes.values() if n.kind == NodeKind.FISSION]
    assert f.fission.n == 2 and f.fission.in_dims == [0, None, None]
    assert [p.out.shape for p in f.fission.graph.placeholders()] == [(4, 4), (4, 64), (64, 4)]
    # one step: residents + the full output (128) + one part's a and r (1024 each)
    new_order = get_scheduler("traced").run(g).order
    assert memory_profile(g, new_order).peak == 2176 + 128 + 2048
    sim = simulate(g, new_order)
    assert sim.latency > simulate(orig, order).latency  # two smaller mm's run less efficiently
    Fission().inverse(g, log)
    assert g.same_as(orig)


def test_exported_fission_loop_computes_the_unsplit_result_at_the_simulated_peak(tmp_path):
    g, t = mlp()
    apply_split(g, plan_split(g, DGraph(g), [t[k].node for k in ("a", "r", "y")], (t["x"].node, 0, 0)), 4)
    src, measured, simulated = run_mlp_script(g, tmp_path)
    assert "for _k1 in range(4):" in src and ".copy_(" in src
    assert measured == simulated == 2176 + 128 + 2 * 512


def test_algorithm_1_on_the_mlp_by_hand():
    """Hot-spots at the peak (step r): x, w1, w2 (resident) and a, r (2048 B each); y is not hot.
    T is the dominator tree from the activation input x, so x is T's root in every component that
    holds a dim of x.  Along the batch G' = {x, a, r, y} is a chain.  Eq. 3: heat(x) = |x| + |a| + |r|
    = 128 + 4096 = 4224, heat(a) = 4096, heat(r) = 2048, heat(y) = 0.  Eq. 4 with n = 2: every input
    from outside (w1, w2) is a hot-spot, so score(x) = 2112, score(a) = 2048, score(r) = 1024.
    Normalised by s_max = 2112 with L = 4: x is in level [1, 1.25), a (0.97) in [0.75, 1), r (0.48)
    in [0.25, 0.5).  Candidates S = T.des(v) minus v: {a, r, y}, {r, y} and {y}, every output
    concatenated along the batch.  Along the hidden dim of 64, G' = {a, r, y} (x has no dim there):
    score(a) = 2048, score(r) = 1024 (levels 4 and 2), S = {r, y} and {y}, y a partial sum over it.
    Along k (x's dim 1, a reduce axis of a), G' = {x, a}: heat(x) = 128 + 2048, score 1088, S = {a},
    a partial sum."""
    g, t = mlp()
    ft = build_ftree(g)
    dg = ft.dgraph
    batch, hidden = dg.component((t["x"].node, 0, 0)), dg.component((t["w1"].node, 0, 1))
    k = dg.component((t["x"].node, 0, 1))
    x, r, y, a = t["x"].node, t["r"].node, t["y"].node, t["a"].node
    got = {(frozenset(f.split.nodes), dg.component(f.split.comp)): (f.dominator, f.heat, f.score, f.level,
                                                      f.split.combine) for f in ft.nodes}
    assert got == {
        (frozenset({a, r, y}), batch): (x, 4224, 2112.0, 4, [("cat", 0)]),
        (frozenset({r, y}), batch): (a, 4096, 2048.0, 3, [("cat", 0)]),
        (frozenset({y}), batch): (r, 2048, 1024.0, 1, [("cat", 0)]),
        (frozenset({r, y}), hidden): (a, 4096, 2048.0, 4, [("sum", None)]),
        (frozenset({y}), hidden): (r, 2048, 1024.0, 2, [("sum", None)]),
        (frozenset({a}), k): (x, 2176, 1088.0, 4, [("sum", None)]),
    }
    parent = {frozenset(f.split.nodes) | {dg.component(f.split.comp)}:
              None if f.parent is None else frozenset(ft.nodes[f.parent].split.nodes) for f in ft.nodes}
    assert parent == {frozenset({a, r, y, batch}): None, frozenset({r, y, batch}): frozenset({a, r, y}),
                      frozenset({y, batch}): frozenset({r, y}), frozenset({r, y, hidden}): frozenset({a, r, y}),
                      frozenset({y, hidden}): frozenset({r, y}), frozenset({a, k}): frozenset({a, r, y})}
    assert all(f.n == 1 for f in ft.nodes)


def fig6_forward() -> Graph:
    """The forward graph of the ``fig6_ftree`` sample (8 x 8 activations of 256 B each)."""
    from core.frontend.torch_import import capture
    from sample_graphs.toy import Fig6FTree

    torch.manual_seed(0)
    return capture(Fig6FTree(8), (torch.randn(8, 8),), training=False, name="fig6")


def test_algorithm_1_on_the_fig6_sample_by_hand():
    """MAGIS Fig. 6 shows Algorithm 1 on one D-Graph component of a graph whose tensors all have one
    size; the ``fig6_ftree`` sample is our reconstruction (its topology is in the sample's docstring):
    v1 = addmm, v2 = relu, v3 = addmm_1, v4 = relu_1, v5 = addmm_2, s = sigmoid, v6 = addmm_3,
    v7 = mul, v8 = add, v9 = addmm_4, tanh, out = mul_1, every activation 8 x 8 float32 = 256 B.

    H: in the traced order four activations are alive at each of three steps (sigmoid: v2 v4 v5 s;
    addmm_3: v2 v5 s v6; mul: v2 v5 v6 v7), so H is their union {v2, v4, v5, s, v6, v7} plus the
    resident input and parameters.

    The batch component holds every op but the weights' transposes.  Dominator tree: v1 -> v2;
    v2 -> {v3, v8} (v8 joins the residual, so only v2 dominates it); v3 -> v4 -> {v5, s, v7};
    s -> v6; v8 -> v9 -> {tanh, out}.  Eq. 3 (T.des(v) includes v): heat(v1) = heat(v2) = 6 x 256
    = 1536, heat(v3) = heat(v4) = 5 x 256 = 1280, heat(s) = 512, heat(v5) = heat(v6) = heat(v7) = 256,
    and 0 below v8.  Eq. 4 with n = 2 charges the inputs from outside T.des(v) that are not in H:
    only v1's subtree reads nothing but resident tensors (768); T.des(v2) reads v1 (768 - 256 = 512);
    T.des(v3) reads v2, hot (640); T.des(v4) reads v3, not hot (640 - 256 = 384); s: 256; v5, v6,
    v7: 128 (the table below, over the ops alone).

    T is the dominator tree from the activation input, so the input is T's root (G' holds every node
    with a dim in the component, the input too): heat(input) = 1536 + its own 256 = 1792, score 896
    (it reads nothing from outside).  Normalised by s_max = 896: input = 1 (level 4), v1 = 0.86
    (level 3), v3 = 0.71 and v2 = 0.57 (level 2: v2 has v3 below it, so only v3 is picked), v4 =
    0.43 and s = 0.29 (level 1: v4 has s below it, so only s), v5, v6, v7 = 0.14 (below the first
    level).  Candidates S = T.des(v) minus v, each
    inside the previous one, so the F-Tree is one chain of four concatenated batch splits, the root
    the whole graph.

    The width components give no candidate: their best sub-graphs end in an addmm whose reduce
    axis is the split one, and its bias would be added once per part (four rejected picks, one of
    them the input's in its width component)."""
    g = fig6_forward()
    by = {g.nodes[v].name: v for v in g.topo_order()}
    ft = build_ftree(g)
    order = [v for v in g.topo_order() if g.nodes[v].kind != NodeKind.PLACEHOLDER]
    act = {"relu", "relu_1", "addmm_2", "sigmoid", "addmm_3", "mul"}
    assert {g.nodes[r.node].name: b for r, b in hot_bytes(g, order).items()
            if g.nodes[r.node].kind == NodeKind.OP} == {a: 256 for a in act}

    batch = ft.dgraph.component((by["input_0"], 0, 0))
    members = sorted((v for v in ft.dgraph.components()[batch] if g.nodes[v].kind == NodeKind.OP),
                     key=g.topo_order().index)
    idom, heat, score, _ = _scores(g, members, hot_bytes(g, order), 2, _reachable(g))
    name = [g.nodes[v].name for v in members]
    table = {name[i]: (name[idom[i]] if idom[i] >= 0 else None, heat[i], score[i]) for i in range(len(members))}
    ninf = float("-inf")
    assert table == {
        "addmm": (None, 1536, 768.0), "relu": ("addmm", 1536, 512.0),
        "addmm_1": ("relu", 1280, 640.0), "relu_1": ("addmm_1", 1280, 384.0),
        "addmm_2": ("relu_1", 256, 128.0), "sigmoid": ("relu_1", 512, 256.0),
        "addmm_3": ("sigmoid", 256, 128.0), "mul": ("relu_1", 256, 128.0),
        "add": ("relu", 0, ninf), "addmm_4": ("add", 0, ninf), "tanh": ("addmm_4", 0, ninf),
        "mul_1": ("addmm_4", 0, ninf),
    }

    got = [(f.id, f.parent, g.nodes[f.dominator].name, sorted(g.nodes[v].name for v in f.split.nodes),
            f.heat, f.score, f.level, ft.dgraph.component(f.split.comp), f.split.combine, f.n) for f in ft.nodes]
    inner = ["addmm_2", "addmm_3", "mul", "sigmoid"]
    cat = [("cat", 0)]
    below = sorted(["relu", "addmm_1", "relu_1", *inner, "add", "addmm_4", "tanh", "mul_1"])
    assert got == [
        (0, None, "input_0", sorted(["addmm", *below]), 1792, 896.0, 4, batch, cat, 1),
        (1, 0, "addmm", below, 1536, 768.0, 3, batch, cat, 1),
        (2, 1, "addmm_1", sorted(["relu_1", *inner]), 1280, 640.0, 2, batch, cat, 1),
        (3, 2, "sigmoid", ["addmm_3"], 512, 256.0, 1, batch, cat, 1),
    ]
    assert [f.children for f in ft.nodes] == [[1], [2], [3], []]
    assert ft.rejected == 4
    width = ft.dgraph.component((by["relu_1"], 0, 1))
    with pytest.raises(SplitError, match="bias would be added once per part"):
        plan_split(g, ft.dgraph, frozenset({by["addmm_3"]}), width)


def test_a_region_its_mean_loss_and_its_backward_split_together_exactly():
    """Micro-batching: an MLP's forward, its cross-entropy (mean over the counted targets) and its
    backward as one F-Trans along the batch.  The targets that ``ignore_index`` skips all fall in
    the first part, so a part-wise mean would be wrong: the total weight is computed before the
    parts and the summed loss divided once after them."""
    from core.codegen.verify import problems, verify_module
    from core.frontend.torch_import import capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.GELU(), torch.nn.Linear(32, 5)).double()
    x = torch.randn(8, 6, dtype=torch.float64)
    y = torch.tensor([-100, -100, -100, 1, 2, 3, 4, 0])

    def loss_fn(m, x, y):
        return torch.nn.functional.cross_entropy(m(x), y)

    g = capture(model, (x, y), loss_fn, name="mlp_ce")
    ft = build_ftree(g)
    f = next(f for f in ft.nodes if any(g[v].op == "aten.nll_loss_forward.default" for v in f.split.nodes)
             and any(g[v].op == "aten.nll_loss_backward.default" for v in f.split.nodes))
    assert f.split.mean_losses and f.split.tw_from
    for n in (2, 4):
        h = g.copy()
        log = Fission().apply(h, Fission.application(n, f.split.comp, f.split.nodes))
        assert h.lint_problems() == []
        res = verify_module(model, (x, y), loss_fn, graph=h, order=get_scheduler("traced").run(h).order)
        assert problems(res) == [], problems(res)
        assert res["fission_nodes"] == 1 and res["peak_ratio"] == 1.0
        Fission().inverse(h, log)
        assert h.same_as(g)


def test_integer_input_ranges_see_inside_fission_nodes():
    """A plan's exported script draws the same integer inputs (token ids, labels) as the imported
    graph's: the ranges come from the ops that index with them, also where those ops (the MLM loss)
    were taken into a fission node.  (Before, labels read only inside a fission region got the
    default range [0, 1): every label 0, another loss -- seen comparing bert_base's plan scripts
    with its eager script on a GPU.)"""
    from core.codegen.release import integer_ranges
    from core.search.plan import load_plans
    from sample_graphs.frontiers import plan_path
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("bert_base")
    want = integer_ranges(g)
    labels = [n.id for n in g.placeholders() if n.id in want and want[n.id] == (0, 30522)]
    assert len(labels) == 2  # input ids (embedding rows) and labels (classes of the loss)
    fission = load_plans(plan_path("bert_base"), g).points[0].applications[0]
    assert fission.rule == "fission"
    g2 = g.copy()
    from core.transform.registry import RULES

    RULES["fission"].apply(g2, fission)
    assert not any("nll_loss" in n.op for n in g2.ops())  # the loss is inside the fission node now
    assert integer_ranges(g2) == want
