"""The graph's edit primitives: use lists after every primitive, erase refused while a node has
users, undo restores the graph exactly, copies share nothing mutable, lint finds what bypasses the
primitives and broken node contracts."""

from __future__ import annotations

import copy
import random

import pytest

from core.ir.builder import GraphBuilder
from core.ir.graph import FissionSpec, Graph, GraphError, NodeKind, TensorMeta, TRef
from sample_graphs.store import load_sample_graph


def chain() -> tuple[Graph, dict[str, int]]:
    """x -> a -> b -> c (output), and a -> c."""
    b = GraphBuilder("chain")
    x = b.input("x", 16)
    a = b.op("a", [x], 16)
    bb = b.op("b", [a], 16)
    b.op("c", [bb, a], 16, output=True)
    g = b.graph
    return g, {n.name: n.id for n in g}


def recomputed_users(g: Graph) -> dict[int, list[int]]:
    users: dict[int, set[int]] = {i: set() for i in g.nodes}
    for n in g:
        for r in n.scan_inputs():
            users[r.node].add(n.id)
    return {i: sorted(s) for i, s in users.items()}


def assert_uses_correct(g: Graph) -> None:
    assert {i: g.users(i) for i in g.nodes} == recomputed_users(g)
    for n in g:
        assert n.inputs() == n.scan_inputs()
        assert g.preds(n.id) == tuple(sorted({r.node for r in n.inputs()}))
    assert g.lint_problems() == []


def test_use_lists_follow_every_primitive():
    g, ids = chain()
    assert g.users(ids["a"]) == [ids["b"], ids["c"]]
    # set_args through the property
    g[ids["c"]].args = [TRef(ids["b"])]
    assert g.users(ids["a"]) == [ids["b"]]
    assert_uses_correct(g)
    # replace_input / replace_all_uses_with
    d = g.add_node(name="d", op="synthetic", args=[TRef(ids["a"])], outputs=[TensorMeta((4,), "float32")])
    assert g.replace_input(ids["c"], TRef(ids["b"]), TRef(d.id))
    assert g.users(ids["b"]) == [] and g.users(d.id) == [ids["c"]]
    assert_uses_correct(g)
    changed = g.replace_all_uses_with(TRef(ids["a"]), TRef(ids["x"]))
    assert changed == [ids["b"], d.id] and g.users(ids["a"]) == []
    assert_uses_correct(g)
    # erase once unused
    g.erase_node(ids["b"])
    g.erase_node(ids["a"])
    assert ids["a"] not in g.nodes and ids["x"] in g.nodes
    assert_uses_correct(g)


def test_erase_is_refused_with_users_or_as_output():
    g, ids = chain()
    with pytest.raises(GraphError, match="still has users"):
        g.erase_node(ids["a"])
    with pytest.raises(GraphError, match="graph output"):
        g.erase_node(ids["c"])
    assert_uses_correct(g)


def test_edits_refuse_dangling_references():
    g, ids = chain()
    with pytest.raises(GraphError, match="missing node id 99"):
        g.add_node(name="bad", op="synthetic", args=[TRef(99)], outputs=[TensorMeta((1,), "float32")])
    with pytest.raises(GraphError, match="output 3"):
        g.set_args(ids["c"], [TRef(ids["a"], 3)])
    assert_uses_correct(g)


def test_undo_restores_the_graph_exactly():
    g, ids = chain()
    before = g.copy()
    next_id = g.new_id()
    with g.recording() as log:
        d = g.add_node(name="d", op="synthetic", args=[TRef(ids["x"])], outputs=[TensorMeta((4,), "float32")])
        g.replace_all_uses_with(TRef(ids["b"]), TRef(d.id))
        g.erase_node(ids["b"])  # erased from the middle of the node order
        g.set_output("extra", TRef(ids["a"]))
        g.set_output("output_0", TRef(d.id))
    assert log.added() == [d.id] and ids["b"] in log.touched()
    g.undo(log)
    assert g.same_as(before) and g.new_id() == next_id
    assert list(g.nodes) == list(before.nodes)
    assert_uses_correct(g)
    with g.recording() as log2:  # the same edits made again allocate the same ids
        d2 = g.add_node(name="d", op="synthetic", args=[TRef(ids["x"])], outputs=[TensorMeta((4,), "float32")])
    assert d2.id == d.id
    g.undo(log2)


@pytest.mark.parametrize("seed", range(6))
def test_undo_restores_the_node_order_after_random_adds_and_erases(seed):
    """Erases journal each node's position (a Fenwick count over the order at the first erase,
    nodes added since at its end): any mix of adds and erases, in any order, undoes exactly."""
    rng = random.Random(seed)
    b = GraphBuilder("fan")
    x = b.input("x", 16)
    for k in range(30):
        b.op(f"o{k}", [x], 16, output=k == 0)
    g = b.graph
    before = g.copy()
    with g.recording() as log:
        for step in range(80):
            free = [v for v in g.nodes if g[v].op != "placeholder" and not g.users(v)
                    and all(r.node != v for r in g.outputs.values())]
            if free and rng.random() < 0.6:
                g.erase_node(rng.choice(free))
            else:
                g.add_node(name=f"n{step}", op="synthetic", args=[TRef(x.node)],
                           outputs=[TensorMeta((4,), "float32")])
    erased = {e.nid for e in log.edits if e.kind == "erase"}
    assert len(erased & set(before.nodes)) > 5 and erased - set(before.nodes)  # old nodes and new ones
    g.undo(log)
    assert list(g.nodes) == list(before.nodes) and g.same_as(before)
    assert_uses_correct(g)


def test_copy_shares_nothing_mutable():
    b = GraphBuilder("part")
    b.op("p", [b.input("x", 16)], 16, output=True)
    g, ids = chain()
    node = g[ids["b"]]
    node.kind = NodeKind.FISSION
    node.fission = FissionSpec(b.graph, 1, [0], [("cat", 0)])
    h = g.copy()
    h[ids["b"]].fission.n = 4
    h[ids["b"]].fission.in_dims[0] = None
    h[ids["b"]].fission.graph.by_name("p").name = "q"
    h[ids["c"]].args = [TRef(ids["x"])]
    h[ids["a"]].outputs[0].dtype = "float16"
    h.meta["x"] = 1
    assert node.fission.n == 1 and node.fission.in_dims == [0]
    assert node.fission.graph.by_name("p").name == "p"
    assert g.users(ids["a"]) == [ids["b"], ids["c"]] and g[ids["a"]].outputs[0].dtype == "uint8"
    assert "x" not in g.meta
    assert_uses_correct(g)
    assert {i: h.users(i) for i in h.nodes} == recomputed_users(h)
    assert any("gives (64,)" in p for p in h.lint_problems())


def test_erasing_an_op_makes_its_copies_copies_of_its_original_or_plain_and_undo_restores_them():
    """A recomputed copy's original is always in the graph: erasing the middle of a chain a <- a1 <- a2
    makes a2 a copy of a; erasing the original a makes a2 a plain op.  Journaled: undo restores it."""
    g, ids = chain()
    a, x = ids["a"], ids["x"]

    def copy_of(v: int, name: str) -> int:
        return g.add_node(name=name, op=g[v].op, args=[TRef(x)], outputs=[copy.copy(g[a].outputs[0])],
                          recompute_of=v).id

    a1 = copy_of(a, "a1")
    a2 = copy_of(a1, "a2")
    g.replace_input(ids["b"], TRef(a), TRef(a2))
    before = g.copy()
    assert g.copies(a) == [a1] and g.copies(a1) == [a2] and g.recomputed() == [a, a1]
    with g.recording() as log:
        g.erase_node(a1)  # nothing reads it
        assert g[a2].recompute_of == a and g.copies(a) == [a2] and g.lint_problems() == []
        g.replace_all_uses_with(TRef(a), TRef(a2))
        g.erase_node(a)
        assert g[a2].recompute_of is None and g.recomputed() == [] and g.lint_problems() == []
    assert a2 in log.touched()
    g.undo(log)
    assert g.same_as(before) and g.copies(a1) == [a2] and g.lint_problems() == []
    g[a2].recompute_of = None  # bypasses the primitives
    assert any("index of recomputed copies is stale" in p for p in g.lint_problems())


def test_promoting_a_copy_makes_it_the_original_of_the_former_original_and_its_copies():
    """a with copies a1, a1' and a1's copy a2: promoting a1 makes a and a1' copies of a1 (a2 stays
    a1's), so a can then be erased with every copy still a copy.  Journaled: undo restores it."""
    g, ids = chain()
    a, x = ids["a"], ids["x"]

    def copy_of(v: int, name: str) -> int:
        return g.add_node(name=name, op=g[v].op, args=[TRef(x)], outputs=[copy.copy(g[a].outputs[0])],
                          recompute_of=v).id

    a1, b1 = copy_of(a, "a1"), copy_of(a, "a1_")
    a2 = copy_of(a1, "a2")
    before = g.copy()
    with g.recording() as log:
        assert g.promote_copy(a1) == a
        assert g[a1].recompute_of is None and g.copies(a1) == sorted([a, b1, a2]) and g.copies(a) == []
        assert g.lint_problems() == []
        g.replace_all_uses_with(TRef(a), TRef(a1))
        g.erase_node(a)
        assert g.copies(a1) == sorted([b1, a2]) and g.lint_problems() == []
    g.undo(log)
    assert g.same_as(before) and g.copies(a) == sorted([a1, b1]) and g.copies(a1) == [a2]
    with pytest.raises(GraphError, match="not a recomputed copy"):
        g.promote_copy(a)
    with pytest.raises(GraphError, match="itself a copy"):
        g.promote_copy(a2)


def test_lint_finds_in_place_mutation_and_broken_contracts():
    g, ids = chain()
    g[ids["c"]].args.append(TRef(ids["x"]))  # bypasses the primitives
    problems = g.lint_problems()
    assert any("changed in place" in p for p in problems)
    with pytest.raises(GraphError, match="changed in place"):
        g.lint()
    g, ids = chain()
    g.add_node(name="rc", op="synthetic", args=[TRef(ids["x"]), TRef(ids["x"])], recompute_of=ids["a"],
               outputs=[TensorMeta((4,), "float32")])
    assert any("recomputes 'a' but differs" in p for p in g.lint_problems())
    g, ids = chain()
    g.add_node(name="st", op="store", kind=NodeKind.STORE, args=[TRef(ids["a"])],
               outputs=[TensorMeta((4,), "float32")])  # not on the host
    assert any("device -> host" in p for p in g.lint_problems())


def fission_graph(part_shape, in_dims, combine, full_out=(8, 4)) -> Graph:
    sub = Graph("part")
    x = sub.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER,
                     outputs=[TensorMeta(part_shape, "float32")])
    y = sub.add_node(name="y", op="synthetic", args=[TRef(x.id)], outputs=[TensorMeta(part_shape, "float32")])
    sub.set_output("out", TRef(y.id))
    g = Graph("outer")
    x = g.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER, outputs=[TensorMeta((8, 4), "float32")])
    f = g.add_node(name="f", op="fission", kind=NodeKind.FISSION, args=[TRef(x.id)],
                   outputs=[TensorMeta(full_out, "float32")], fission=FissionSpec(sub, 2, in_dims, combine))
    g.set_output("out", TRef(f.id))
    return g


def test_lint_checks_the_fission_contract():
    assert fission_graph((4, 4), [0], [("cat", 0)]).lint_problems() == []
    assert fission_graph((8, 4), [None], [("sum", None)]).lint_problems() == []
    assert any("does not match" in p for p in fission_graph((8, 4), [0], [("cat", 0)]).lint_problems())
    assert any("gives (4, 8)" in p for p in fission_graph((4, 4), [0], [("cat", 1)]).lint_problems())
    assert any("unknown combine" in p for p in fission_graph((4, 4), [0], [("max", 0)]).lint_problems())
    assert any("split dim 5" in p for p in fission_graph((4, 4), [5], [("cat", 0)]).lint_problems())


def test_committed_graph_lints_and_copies_independently():
    g = load_sample_graph("bert_tiny")
    assert g.lint_problems() == []
    h = g.copy()
    assert h.same_as(g)
    op = next(n for n in h.ops() if len(h.users(n.id)) > 1)
    user = h.users(op.id)[0]
    h.replace_input(user, TRef(op.id), TRef(h.placeholders()[0].id))
    assert not h.same_as(g) and g.lint_problems() == [] and h.lint_problems() == []
