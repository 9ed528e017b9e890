"""Ops registry: the D-Graph links of the paper's examples, reshape grouping, aliasing from schemas,
the committed pointwise table, and coverage of the workloads' ops."""

from __future__ import annotations

import os

import pytest

from core.ir import io, ops
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.ir.ops import DimLink, reshape_links
from sample_graphs.store import graph_path


def _op(op: str, in_shapes: list[tuple[int, ...]], out_shapes: list[tuple[int, ...]], extra=()):
    g = Graph("t")
    refs = []
    for i, s in enumerate(in_shapes):
        n = g.add_node(name=f"i{i}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                       outputs=[TensorMeta(s, "float32", TensorKind.INPUT)], target=f"input:{i}")
        refs.append(TRef(n.id))
    node = g.add_node(name="op", op=op, args=[*refs, *extra],
                      outputs=[TensorMeta(s, "float32") for s in out_shapes])
    return ops.ctx(node, g.tensor)


def test_matmul_links_are_the_papers():
    # MAGIS 4.1: c[m,n] = sum_k a[m,k] b[k,n]: (<a,1>,<c,1>), (<a,2>,<c,-1>), (<b,1>,<c,-1>), (<b,2>,<c,2>)
    links = ops.dim_links(_op("aten.mm.default", [(4, 3), (3, 5)], [(4, 5)]))
    assert set(links) == {DimLink(0, 0, 0, 0), DimLink(0, 1, 0, -1), DimLink(1, 0, 0, -1), DimLink(1, 1, 0, 1)}


def test_elementwise_broadcast_links():
    links = ops.dim_links(_op("aten.add.Tensor", [(4, 5), (5,)], [(4, 5)]))
    assert set(links) == {DimLink(0, 0, 0, 0), DimLink(0, 1, 0, 1), DimLink(1, 0, 0, 1)}
    # pointwise ops come from the committed table: exp is not listed by hand
    assert ops.get("aten.exp.default").category == "elementwise"


def test_reshape_links_group_products():
    assert reshape_links((2, 3, 4), (6, 4)) == [(0, 0), (2, 1)]
    assert reshape_links((6, 4), (2, 3, 4)) == [(0, 0), (1, 2)]
    assert reshape_links((2, 1, 12), (2, 3, 4)) == [(0, 0), (2, 1)]


def test_sum_reduces_and_mean_does_not_link_its_axis():
    s = ops.dim_links(_op("aten.sum.dim_IntList", [(4, 5)], [(5,)], extra=([0], False)))
    assert set(s) == {DimLink(0, 0, 0, -1), DimLink(0, 1, 0, 0)}
    m = ops.dim_links(_op("aten.mean.dim", [(4, 5)], [(5,)], extra=([0], False)))
    assert set(m) == {DimLink(0, 1, 0, 0)}


def test_unknown_op_has_no_links_but_a_cost():
    c = _op("aten.some_new_op.default", [(4, 4)], [(4, 4)])
    assert ops.dim_links(c) is None and not ops.known("aten.some_new_op.default")
    assert ops.flops(c) == 16 and ops.bytes_moved(c) == 128


def test_output_aliases_from_schemas():
    assert ops.output_aliases("aten.view.default", 1) == (0,)
    assert ops.output_aliases("aten._unsafe_view.default", 1) == (0,)  # no annotation, but a view
    assert ops.output_aliases("aten.split.Tensor", 3) == (0, 0, 0)
    assert ops.output_aliases("aten.clone.default", 1) == (None,)
    assert ops.output_aliases("aten.native_layer_norm.default", 3) == (None, None, None)


def test_pointwise_table_matches_torch():
    import torch

    names = set()
    for schema in torch._C._jit_get_all_schemas():  # every registered op (dir(torch.ops.aten) is lazy)
        ns, _, packet_name = schema.name.partition("::")
        ov = schema.overload_name or "default"
        if ns != "aten" or packet_name.endswith("_") or "out" in ov:
            continue
        try:
            if torch.Tag.pointwise in getattr(getattr(torch.ops.aten, packet_name), ov).tags:
                names.add(f"aten.{packet_name}.{ov}")
        except (AttributeError, RuntimeError):
            continue
    if os.environ.get("MAGIS_WRITE_POINTWISE"):
        head = [ln for ln in ops.POINTWISE_TABLE.read_text().splitlines() if ln.startswith("#")]
        ops.POINTWISE_TABLE.write_text("\n".join(head + sorted(names)) + "\n")
        ops.pointwise_ops.cache_clear()
    assert set(ops.pointwise_ops()) == names


@pytest.mark.parametrize("name", ["resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"])
def test_workload_ops_have_dim_links(name):
    g = io.load(graph_path(name))
    missing = {n.op for n in g if n.kind == NodeKind.OP and ops.dim_links(ops.ctx(n, g.tensor)) is None}
    # advanced indexing (rotary / causal-mask gathers) is the one op family left without links
    assert missing <= {"aten.index.Tensor"}
