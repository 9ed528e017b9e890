"""Graph IR: hand-computed peaks (views, several outputs), JSON round trip of every node kind,
and validation of bad files."""

from __future__ import annotations

import math

import pytest

from core.analysis.lifetimes import memory_profile
from core.ir import io
from core.ir.builder import GraphBuilder
from core.ir.graph import (
    FissionSpec,
    Graph,
    GraphError,
    NodeKind,
    TensorKind,
    TensorMeta,
    TorchConst,
    TRef,
)


def test_view_shares_its_base_storage():
    # x(4) -A-> a(8) -V-> view of a -B-> b(2, output). Inputs are resident.
    b = GraphBuilder()
    x = b.input("x", 4)
    a = b.op("A", [x], 8)
    v = b.op("V", [a], 8, view_of=a)
    b.op("B", [v], 2, output=True)
    m = memory_profile(b.graph, b.ids("A", "V", "B"))
    assert m.step_bytes.tolist() == [12, 12, 14]  # a view adds no bytes
    assert m.peak == 14
    assert b.graph.tensor(v).nbytes == 0


def test_base_lives_until_last_use_of_its_view():
    # a is read directly by B, and through its view V by C (the last step): a lives until C.
    b = GraphBuilder()
    x = b.input("x", 4)
    a = b.op("A", [x], 8)
    v = b.op("V", [a], 8, view_of=a)
    b.op("B", [a], 2)  # b(2) has no users and is not an output: dies after its own step
    b.op("C", [v], 1, output=True)
    m = memory_profile(b.graph, b.ids("A", "V", "B", "C"))
    assert m.step_bytes.tolist() == [12, 12, 14, 13]
    a_storage = next(s for s in m.storages if s.root == a)
    assert (a_storage.alloc, a_storage.free) == (0, 3)


def test_op_with_several_outputs():
    # M: x -> (p 6, q 3); P: p -> r(1); Q: q -> s(1); J: r, s -> out(1)
    b = GraphBuilder()
    x = b.input("x", 4)
    p = b.op("M", [x], [6, 3])
    q = TRef(p.node, 1)
    r = b.op("P", [p], 1)
    s = b.op("Q", [q], 1)
    b.op("J", [r, s], 1, output=True)
    m = memory_profile(b.graph, b.ids("M", "P", "Q", "J"))
    assert m.step_bytes.tolist() == [13, 14, 9, 7]
    m2 = memory_profile(b.graph, b.ids("M", "Q", "P", "J"))
    assert m2.step_bytes.tolist() == [13, 14, 12, 7]
    hot = {(st.root.node, st.root.index) for st in m.hotspots()}
    assert hot == {(x.node, 0), (p.node, 0), (p.node, 1), (r.node, 0)}


def test_hmcos_memory_model_switches():
    # notes/hmcos.md case 1: inputs freed after last use, weights not counted
    b = GraphBuilder()
    x = b.input("x", 4)
    w = b.weight("w", 100)
    a = b.op("A", [x, w], 8)
    b.op("B", [a], 2, output=True)
    m = memory_profile(b.graph, b.ids("A", "B"), free_inputs=True, count_weights=False)
    assert m.step_bytes.tolist() == [12, 10]
    assert memory_profile(b.graph, b.ids("A", "B")).step_bytes.tolist() == [112, 114]


def test_schedule_must_be_topological():
    b = GraphBuilder()
    x = b.input("x", 1)
    a = b.op("A", [x], 1)
    b.op("B", [a], 1, output=True)
    with pytest.raises(GraphError, match="before its input"):
        memory_profile(b.graph, b.ids("B", "A"))
    with pytest.raises(GraphError, match="exactly once"):
        memory_profile(b.graph, b.ids("A"))


def _all_kinds_graph() -> Graph:
    sub = Graph("part")
    sx = sub.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER,
                      outputs=[TensorMeta((2, 8), "float32", TensorKind.INPUT)], target="input:0")
    sw = sub.add_node(name="w", op="placeholder", kind=NodeKind.PLACEHOLDER,
                      outputs=[TensorMeta((8, 8), "float32", TensorKind.WEIGHT)], target="param:w")
    mm = sub.add_node(name="mm", op="aten.mm.default", args=[TRef(sx.id), TRef(sw.id)],
                      outputs=[TensorMeta((2, 8), "float32")])
    sub.outputs["output_0"] = TRef(mm.id)

    g = Graph("all-kinds", {"mode": "train", "note": "every node kind"})
    x = g.add_node(name="input_0", op="placeholder", kind=NodeKind.PLACEHOLDER,
                   outputs=[TensorMeta((4, 8), "float32", TensorKind.INPUT)], target="input:0")
    w = g.add_node(name="w", op="placeholder", kind=NodeKind.PLACEHOLDER,
                   outputs=[TensorMeta((8, 8), "float32", TensorKind.WEIGHT)], target="param:w",
                   module="layer")
    t = g.add_node(name="t", op="aten.t.default", args=[TRef(w.id)],
                   outputs=[TensorMeta((8, 8), "float32", TensorKind.ACTIVATION, alias=TRef(w.id))])
    f = g.add_node(name="fission", op="fission", kind=NodeKind.FISSION, args=[TRef(x.id), TRef(t.id)],
                   outputs=[TensorMeta((4, 8), "float32")],
                   fission=FissionSpec(sub, 2, [0, None], [("cat", 0)]), module="layer")
    ln = g.add_node(name="ln", op="aten.native_layer_norm.default",
                    args=[TRef(f.id), [8], None, None, 1e-5],
                    outputs=[TensorMeta((4, 8), "float32"), TensorMeta((4, 1), "float32"),
                             TensorMeta((4, 1), "float32")])
    st = g.add_node(name="store", op="store", kind=NodeKind.STORE, args=[TRef(ln.id, 0)],
                    outputs=[TensorMeta((4, 8), "float32", device="host")])
    ld = g.add_node(name="load", op="load", kind=NodeKind.LOAD, args=[TRef(st.id)],
                    outputs=[TensorMeta((4, 8), "float32")])
    rc = g.add_node(name="ln_recompute", op="aten.native_layer_norm.default",
                    args=[TRef(f.id), [8], None, None, 1e-5], recompute_of=ln.id,
                    outputs=[TensorMeta((4, 8), "float32"), TensorMeta((4, 1), "float32"),
                             TensorMeta((4, 1), "float32")])
    c = g.add_node(name="cast", op="aten._to_copy.default", args=[TRef(ld.id)],
                   kwargs={"dtype": TorchConst("dtype", "bfloat16"),
                           "device": TorchConst("device", "cpu"), "fill": -math.inf,
                           "pair": (1, 2), "opts": {"a": [1, 2.5]}},
                   outputs=[TensorMeta((4, 8), "bfloat16", TensorKind.GRADIENT)])
    add = g.add_node(name="add", op="aten.add.Tensor", args=[TRef(c.id), TRef(rc.id, 0)],
                     outputs=[TensorMeta((4, 8), "float32", TensorKind.OUTPUT)])
    g.outputs["output_0"] = TRef(add.id)
    g.outputs["buffer:mean"] = TRef(ln.id, 1)
    return g


def test_json_round_trip_of_every_node_kind(tmp_path):
    g = _all_kinds_graph()
    g.validate()
    kinds = {n.kind for n in g}
    assert kinds == set(NodeKind)
    assert any(n.recompute_of is not None for n in g)
    d = io.graph_to_dict(g)
    for suffix in (".json", ".json.gz"):
        path = io.save(g, tmp_path / f"g{suffix}")
        g2 = io.load(path)
        assert io.graph_to_dict(g2) == d
    g2 = io.load(tmp_path / "g.json.gz")
    f = g2.by_name("fission")
    assert f.fission.n == 2 and f.fission.in_dims == [0, None] and f.fission.out_combine == [("cat", 0)]
    assert f.fission.graph.by_name("mm").op == "aten.mm.default"
    cast = g2.by_name("cast")
    assert cast.kwargs["dtype"] == TorchConst("dtype", "bfloat16")
    assert cast.kwargs["fill"] == -math.inf and cast.kwargs["pair"] == (1, 2)
    assert g2.by_name("store").out.device == "host"
    assert g2.by_name("t").out.alias == TRef(g.by_name("w").id)
    assert g2.by_name("ln_recompute").recompute_of == g.by_name("ln").id
    assert g2.outputs["buffer:mean"] == TRef(g.by_name("ln").id, 1)


def test_store_output_takes_no_device_memory():
    g = _all_kinds_graph()
    order = g.topo_order()
    order = [i for i in order if g[i].kind != NodeKind.PLACEHOLDER]
    m = memory_profile(g, order)
    store = g.by_name("store")
    assert all(s.root.node != store.id for s in m.storages)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.__setitem__("version", 99), "unsupported graph schema version 99"),
        (lambda d: d.__setitem__("schema", "other"), "not a MAGIS graph"),
        (lambda d: d["nodes"][2]["outputs"][0].pop("shape"), "has no shape"),
        (lambda d: d["nodes"][2]["outputs"][0].pop("dtype"), "has no dtype"),
        (lambda d: d["nodes"][2].__setitem__("args", [{"$t": [12345, 0]}]), "missing node id 12345"),
    ],
)
def test_bad_graph_dicts(mutate, message):
    d = io.graph_to_dict(_all_kinds_graph())
    mutate(d)
    with pytest.raises(GraphError, match=message):
        io.graph_from_dict(d)


def test_cycle_is_rejected():
    d = io.graph_to_dict(_all_kinds_graph())
    by_name = {n["name"]: n for n in d["nodes"]}
    # make the layer norm read the final add: ln -> store -> load -> cast -> add -> ln
    by_name["ln"]["args"][0] = {"$t": [by_name["add"]["id"], 0]}
    by_name["ln_recompute"]["args"][0] = {"$t": [by_name["add"]["id"], 0]}  # still a copy of ln
    with pytest.raises(GraphError, match="cycle"):
        io.graph_from_dict(d)


def test_truncated_and_non_json():
    data = io.graph_to_dict(_all_kinds_graph())
    import json

    raw = json.dumps(data).encode()
    with pytest.raises(GraphError, match="not valid JSON"):
        io.loads(raw[: len(raw) // 2])
    with pytest.raises(GraphError, match="not valid JSON"):
        io.loads(b"\x89PNG\r\n")
    import gzip

    with pytest.raises(GraphError, match="gzip"):
        io.loads(gzip.compress(raw)[:40])


def test_rpo_with_an_input_that_is_also_an_output():
    from core.schedule import get_scheduler

    b = GraphBuilder()
    x = b.input("x", 4)
    b.op("A", [x], 8, output=True)
    b.graph.outputs["passthrough"] = x
    s = get_scheduler("rpo").run(b.graph)
    assert s.order == b.ids("A") and s.peak == 12
    assert {"random", "brute"} <= set(__import__("core.schedule", fromlist=["x"]).SCHEDULERS)
