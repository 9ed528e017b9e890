"""Graph algorithms of ``core.analysis``: dominators (one algorithm, checked against rustworkx's
``immediate_dominators`` on random DAGs) and reverse post-order."""

from __future__ import annotations

import copy
import random

import rustworkx as rx
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.dominators import DomTree, dag_idom, dominator_tree
from core.analysis.order import reverse_post_order
from core.ir.builder import GraphBuilder
from core.ir.graph import Graph

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)


def random_graph(seed: int, n_ops: int) -> Graph:
    """A random graph: one or two inputs, a weight, ops reading one to three earlier tensors
    (some with no inputs), one or more outputs."""
    rng = random.Random(seed)
    b = GraphBuilder(f"g{seed}")
    pool = [b.input(f"x{k}", rng.randint(1, 64)) for k in range(rng.randint(1, 2))]
    pool.append(b.weight("w", rng.randint(1, 64)))
    for i in range(n_ops):
        ins = [] if rng.random() < 0.05 else rng.sample(pool, rng.randint(1, min(3, len(pool))))
        pool.append(b.op(f"o{i}", ins, rng.randint(1, 16), output=rng.random() < 0.1))
    if not b.graph.outputs:
        b.graph.outputs["out"] = pool[-1]
    return b.graph


def rustworkx_idom(g: Graph, entry: int, post: bool) -> dict[int, int | None]:
    """Immediate dominators by rustworkx on the sub-graph reachable from ``entry`` (reversed
    edges for post-dominators); None for the entry and unreachable nodes."""
    dg = rx.PyDiGraph()
    index = {nid: dg.add_node(nid) for nid in g.nodes}
    for nid in g.nodes:
        for p in g.preds(nid):
            dg.add_edge(*((index[nid], index[p]) if post else (index[p], index[nid])), None)
    reach = sorted(rx.descendants(dg, index[entry]) | {index[entry]})
    sub = dg.subgraph(reach)
    root = next(i for i in sub.node_indices() if sub[i] == entry)
    out: dict[int, int | None] = dict.fromkeys(g.nodes)
    for i, d in rx.immediate_dominators(sub, root).items():
        out[sub[i]] = None if sub[i] == entry else sub[d]
    return out


@SETTINGS
@given(st.integers(0, 10**9), st.integers(1, 40))
def test_dominator_tree_equals_rustworkx(seed, n_ops):
    g = random_graph(seed, n_ops)
    for post in (False, True):
        dt = dominator_tree(g, post=post)
        assert dt.idom == rustworkx_idom(g, dt.entry, post)
    for entry in list(g.nodes)[:: max(1, len(g) // 5)]:  # any node can be the entry
        for post in (False, True):
            assert dominator_tree(g, entry, post).idom == rustworkx_idom(g, entry, post)


@SETTINGS
@given(st.integers(0, 10**9), st.integers(1, 30))
def test_dag_idom_equals_rustworkx_and_dom_tree_answers_dominance(seed, n):
    rng = random.Random(seed)
    preds = [sorted(rng.sample(range(v), rng.randint(0, min(3, v)))) for v in range(n)]
    idom = dag_idom(preds)
    dg = rx.PyDiGraph()
    dg.add_nodes_from(range(n + 1))  # node 0 is the virtual root, node v + 1 is v
    for v, ps in enumerate(preds):
        for p in ps or [-1]:
            dg.add_edge(p + 1, v + 1, None)
    assert idom == [d - 1 for _, d in sorted(rx.immediate_dominators(dg, 0).items())][1:]
    tree = DomTree(idom)
    for a in range(n):
        chain = set()  # a and its dominators, up the idom chain
        v = a
        while v >= 0:
            chain.add(v)
            v = idom[v]
        assert {b for b in range(n) if tree.dominates(b, a)} == chain
        assert tree.subtree(a) == sorted(b for b in range(n) if b != a and tree.dominates(a, b))


def test_reverse_post_order_runs_each_node_after_its_last_input():
    #   0   1
    #   |\ /
    #   | 2     3 (no inputs)
    #    \|    /
    #     4   5
    preds = {0: [], 1: [], 2: [0, 1], 3: [], 4: [0, 2], 5: [3]}
    assert reverse_post_order(preds, [4, 5]) == [0, 1, 2, 4, 3, 5]
    assert reverse_post_order(preds, [5, 4]) == [3, 5, 0, 1, 2, 4]
    assert reverse_post_order([[], [0], [0, 1]], [2]) == [0, 1, 2]  # preds as a list
    assert reverse_post_order(preds, [2]) == [0, 1, 2]  # only what the roots need


@SETTINGS
@given(st.integers(0, 10**9), st.integers(1, 40))
def test_reverse_post_order_is_topological(seed, n):
    rng = random.Random(seed)
    preds = [rng.sample(range(v), rng.randint(0, min(3, v))) for v in range(n)]
    sinks = sorted(set(range(n)) - {p for ps in preds for p in ps})
    order = reverse_post_order(preds, sinks)
    pos = {v: k for k, v in enumerate(order)}
    assert sorted(order) == list(range(n))
    assert all(pos[p] < pos[v] for v in range(n) for p in preds[v])


def test_pull_order_runs_an_appended_node_right_before_its_first_reader():
    b = GraphBuilder()
    x = b.input("x", 4)
    a = b.op("a", [x], 8)
    c = b.op("c", [a], 8)
    d = b.op("d", [c], 8)
    e = b.op("e", [d, a], 8, output=True)
    g = b.graph
    assert g.topo_order() == b.ids("x", "a", "c", "d", "e")  # insertion order, untouched
    dup = g.add_node(name="a2", op="synthetic", args=[x], outputs=[copy.copy(g.tensor(a))])
    g.replace_input(e.node, a, dup.refs()[0])
    assert g.topo_order() == b.ids("x", "a", "c", "d", "a2", "e")


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40))
def test_pull_order_is_topological_on_random_graphs(seed, n):
    from core.ir.topo import pull_order
    from tests.randgraphs import random_graph

    g = random_graph(seed, n)
    order = pull_order(g)
    pos = {v: i for i, v in enumerate(order)}
    assert sorted(order) == sorted(g.nodes)
    assert all(pos[p] < pos[v] for v in g.nodes for p in g.preds(v))
