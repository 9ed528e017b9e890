"""Registry entries of modern models' ops (``core.ir.ops_modern``), each checked by brute force
(``tests.op_bruteforce``: the op on slices along every linked dim against the full op), plus the
FLOPs of attention against torch's flop counter and the refusal of fission through random ops."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

from core.analysis.dgraph import DGraph, SplitError, plan_split
from core.frontend.workload import capture_workload
from core.ir import ops
from core.ir.graph import NodeKind
from core.transform.remat import recomputable
from tests.modern_models import gn_unet, sdpa_transformer
from tests.op_bruteforce import build_node, check_op

D = torch.float64
A = "aten."
NEW_OPS = {op for op in ops._REGISTRY if op.split(".")[1] in (
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "native_group_norm", "native_group_norm_backward", "_unsafe_index", "_unsafe_index_put", "stack")}


def r(*shape, dtype=D):
    return torch.randn(*shape, dtype=dtype)


def splits(checked) -> set[tuple[tuple[int, int], ...]]:
    """What each checked component slices: sorted (input, dim) pairs."""
    return {tuple(sorted(c.inputs.items())) for c in checked}


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# ---- attention ------------------------------------------------------------------------------------
CPU_FWD = A + "_scaled_dot_product_flash_attention_for_cpu.default"
CPU_BWD = A + "_scaled_dot_product_flash_attention_for_cpu_backward.default"


def test_cpu_flash_attention_splits_batch_heads_and_queries():
    q, k, v = r(2, 3, 4, 5), r(2, 3, 6, 5), r(2, 3, 6, 5)
    got = check_op(CPU_FWD, [q, k, v, 0.0, False])
    # batch (q, k, v), heads (q, k, v), query length (q only: keys and values stay whole)
    assert splits(got) == {((0, 0), (1, 0), (2, 0)), ((0, 1), (1, 1), (2, 1)), ((0, 2),)}
    lq = next(c for c in got if c.inputs == {0: 2})
    assert lq.outputs == {0: 2, 1: 2}  # output and logsumexp split along the queries


def test_causal_attention_does_not_split_the_queries():
    q, k, v = r(2, 3, 4, 5), r(2, 3, 4, 5), r(2, 3, 4, 5)
    got = check_op(CPU_FWD, [q, k, v, 0.0, True])
    assert splits(got) == {((0, 0), (1, 0), (2, 0)), ((0, 1), (1, 1), (2, 1))}


def test_attention_with_a_mask_slices_the_mask_along_batch_and_queries():
    q, k, v = r(2, 3, 4, 5), r(2, 3, 6, 5), r(2, 3, 6, 5)
    mask = r(2, 1, 4, 6)  # broadcast over heads
    got = check_op(CPU_FWD, [q, k, v, 0.0, False], {"attn_mask": mask})
    assert splits(got) == {((0, 0), (1, 0), (2, 0), (3, 0)), ((0, 1), (1, 1), (2, 1)), ((0, 2), (3, 2))}


def test_cpu_flash_attention_backward_sums_key_and_value_grads_over_query_blocks():
    q, k, v = r(2, 3, 4, 5), r(2, 3, 6, 5), r(2, 3, 6, 5)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    go = r(*out.shape)
    got = check_op(CPU_BWD, [go, q, k, v, out, lse, 0.0, False], n=2)
    lq = next(c for c in got if 1 in c.inputs and c.inputs[1] == 2)
    assert lq.inputs == {0: 2, 1: 2, 4: 2, 5: 2} and lq.outputs == {0: 2, 1: -1, 2: -1}
    assert len(got) == 3  # and batch, heads


@pytest.mark.parametrize("op,extra", [(A + "_scaled_dot_product_attention_math.default", []),
                                      (A + "scaled_dot_product_attention.default", [])])
def test_math_attention(op, extra):
    q, k, v = r(2, 3, 4, 5), r(2, 3, 6, 5), r(2, 3, 6, 5)
    got = check_op(op, [q, k, v, *extra])
    assert splits(got) == {((0, 0), (1, 0), (2, 0)), ((0, 1), (1, 1), (2, 1)), ((0, 2),)}


def test_grouped_query_attention_splits_batch_and_queries_not_heads():
    q, k, v = r(2, 4, 4, 5), r(2, 2, 6, 5), r(2, 2, 6, 5)
    got = check_op(A + "scaled_dot_product_attention.default", [q, k, v], {"enable_gqa": True})
    assert splits(got) == {((0, 0), (1, 0), (2, 0)), ((0, 2),)}


def test_attention_flops_are_torchs_and_compute_bound():
    q, k, v = r(2, 3, 4, 8), r(2, 3, 6, 8), r(2, 3, 6, 8)
    _, node, _, _ = build_node(CPU_FWD, [q, k, v, 0.0, False])
    g = node  # noqa: F841
    g, node, _, full = build_node(CPU_FWD, [q, k, v, 0.0, False])
    c = ops.ctx(node, g.tensor)
    assert ops.flops(c) == sdpa_flop_count(q.shape, k.shape, v.shape) == 4 * 2 * 3 * 4 * 6 * 8
    assert ops.get(CPU_FWD).category == "matmul"  # costed on the matmul peak, not as elementwise
    # bytes: q, k, v read, output and logsumexp written (the scores never reach memory)
    assert ops.bytes_moved(c) == sum(t.numel() * t.element_size() for t in (q, k, v, *full))
    out, lse = full
    g, node, _, _ = build_node(CPU_BWD, [r(*out.shape), q, k, v, out, lse, 0.0, False])
    fl = ops.flops(ops.ctx(node, g.tensor))
    assert fl == sdpa_backward_flop_count(out.shape, q.shape, k.shape, v.shape)
    assert fl == 2.5 * sdpa_flop_count(q.shape, k.shape, v.shape)


def _meta_node(op: str, ins: list[tuple[int, ...]], outs: list[tuple[int, ...]], extra=()):
    """A node of ``op`` on placeholders of ``ins`` (no values: the CUDA kernels do not run here)."""
    from core.ir.graph import Graph, TensorKind, TensorMeta, TRef

    g = Graph("meta", {"mode": "eval"})
    refs = [TRef(g.add_node(name=f"i{k}", op="placeholder", kind=NodeKind.PLACEHOLDER, target=f"input:{k}",
                            outputs=[TensorMeta(s, "float16", TensorKind.INPUT)]).id) for k, s in enumerate(ins)]
    n = g.add_node(name="op", op=op, args=[*refs, *extra], outputs=[TensorMeta(s, "float16") for s in outs])
    return ops.ctx(n, g.tensor)


def test_cuda_attention_kernels_count_torchs_flops_and_are_not_split():
    q, k = (2, 4, 8, 16), (2, 4, 12, 16)
    fwd = _meta_node(A + "_scaled_dot_product_efficient_attention.default", [q, k, k],
                     [q, (2, 4, 32), (), ()], [None, True, 0.0, False])
    assert ops.flops(fwd) == sdpa_flop_count(q, k, k)
    bwd = _meta_node(A + "_scaled_dot_product_flash_attention_backward.default", [q, q, k, k, q, (2, 4, 8)],
                     [q, k, k], [(), (), 8, 12, 0.0, False])
    assert ops.flops(bwd) == sdpa_backward_flop_count(q, q, k, k)
    # batch and heads link the output, but the RNG-state outputs have no dims: plan_split refuses
    links = ops.dim_links(fwd)
    assert {(lk.in_dim, lk.output, lk.out_dim) for lk in links} == {(0, 0, 0), (1, 0, 1), (2, 0, 2)}
    for op in ["_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_cudnn_attention"]:
        for suffix in ("", "_backward"):
            assert ops.get(f"aten.{op}{suffix}.default").category == "matmul"


# ---- group norm -----------------------------------------------------------------------------------
def test_group_norm_splits_batch_and_whole_groups():
    x, w, b = r(4, 8, 3, 3), r(8), r(8)
    for n in (2, 4):  # 2 groups per part, 1 group per part
        got = check_op(A + "native_group_norm.default", [x, w, b, 4, 8, 9, 4, 1e-5], n=n)
        assert splits(got) == {((0, 0),), ((0, 1), (1, 0), (2, 0))}
        ch = next(c for c in got if 1 in c.inputs)
        assert ch.n == n and ch.outputs == {0: 1, 1: 1, 2: 1}  # mean / rstd split by group


def test_group_norm_refuses_a_part_that_cuts_a_group():
    x, w, b = r(2, 8, 3), r(8), r(8)
    g, node, _, _ = build_node(A + "native_group_norm.default", [x, w, b, 2, 8, 3, 2, 1e-5])
    full = [g.tensor(t) for t in node.inputs()]
    from core.transform.fission import _part  # one part of 4: 2 channels of a group of 4
    outs = [_part(t, 1, 4) for t in node.outputs]
    assert ops.rescale_args(node, full, outs, [1, 0, 0]) is None
    # and the D-Graph's common divisor keeps n within whole groups: gcd(C=8, G=2) = 2
    assert check_op(A + "native_group_norm.default", [x, w, b, 2, 8, 3, 2, 1e-5])


def test_group_norm_backward():
    x, w, b = r(4, 8, 3, 3), r(8), r(8)
    out, mean, rstd = torch.ops.aten.native_group_norm(x, w, b, 4, 8, 9, 4, 1e-5)
    go = r(*out.shape)
    got = check_op(A + "native_group_norm_backward.default",
                   [go, x, mean, rstd, w, 4, 8, 9, 4, [True, True, True]], n=2)
    batch = next(c for c in got if c.inputs.get(0) == 0)
    assert batch.outputs == {0: 0, 1: -1, 2: -1}  # weight and bias gradients summed over the batch
    chans = next(c for c in got if c.inputs.get(0) == 1)
    assert chans.inputs == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0} and chans.outputs == {0: 1, 1: 0, 2: 0}


# ---- upsampling and indexing ----------------------------------------------------------------------
def _nearest_indices(n_in: int, n_out: int) -> torch.Tensor:
    return (torch.arange(n_out, dtype=torch.float32) * (n_in / n_out)).to(torch.int64)


def test_unsafe_index_as_nearest_upsampling():
    x = r(2, 3, 4, 4)
    ih, iw = _nearest_indices(4, 8).unsqueeze(-1), _nearest_indices(4, 8)
    got = check_op(A + "_unsafe_index.Tensor", [x, [None, None, ih, iw]])
    # batch, channels, output rows (from the row index; x shared), output columns
    assert splits(got) == {((0, 0),), ((0, 1),), ((1, 0),), ((2, 0),)}
    ref = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
    assert torch.equal(torch.ops.aten._unsafe_index(x, [None, None, ih, iw]), ref)


def test_index_tensor_gathers_rows():
    cache, pos = r(16, 4), torch.randint(0, 16, (2, 5))
    got = check_op(A + "index.Tensor", [cache, [pos]])
    assert splits(got) == {((1, 0),), ((1, 1),), ((0, 1),)}


def test_unsafe_index_put_accumulates_parts():
    zeros = torch.zeros(2, 3, 4, 4, dtype=D)
    ih, iw = _nearest_indices(4, 8).unsqueeze(-1), _nearest_indices(4, 8)
    vals = r(2, 3, 8, 8)
    got = check_op(A + "_unsafe_index_put.default", [zeros, [None, None, ih, iw], vals, True])
    sums = [c for c in got if any(d < 0 for d in c.outputs.values())]
    assert len(got) == 4 and len(sums) == 2  # batch, channels; rows and columns of values summed


@pytest.mark.parametrize("op,args", [
    ("upsample_nearest2d.vec", lambda x: [x, None, [2.0, 2.0]]),
    ("upsample_bilinear2d.vec", lambda x: [x, None, False, [2.0, 2.0]]),
    ("upsample_nearest2d.default", lambda x: [x, [8, 8]]),
    ("upsample_bilinear2d.default", lambda x: [x, [8, 8], True]),
])
def test_upsampling(op, args):
    got = check_op(A + op, args(r(2, 3, 4, 4)))
    assert splits(got) == {((0, 0),), ((0, 1),)}


@pytest.mark.parametrize("op,args", [
    ("upsample_nearest2d_backward.default", [[8, 8], [2, 3, 4, 4], 2.0, 2.0]),
    ("upsample_bilinear2d_backward.default", [[8, 8], [2, 3, 4, 4], False, 2.0, 2.0]),
])
def test_upsampling_backward_rescales_the_input_size(op, args):
    got = check_op(A + op, [r(2, 3, 8, 8), *args])
    assert splits(got) == {((0, 0),), ((0, 1),)}


# ---- softmax, roll, stack, as_strided -----------------------------------------------------------
def test_safe_softmax_keeps_its_axis():
    got = check_op(A + "_safe_softmax.default", [r(3, 4, 5), -1])
    assert splits(got) == {((0, 0),), ((0, 1),)}
    got = check_op(A + "_safe_softmax.default", [r(3, 4, 5), 1])
    assert splits(got) == {((0, 0),), ((0, 2),)}


def test_scans_keep_their_axis():
    """``cumsum`` (OPT's positions from the attention mask) and ``cumprod``: the other axes split."""
    for op in ("cumsum", "cumprod"):
        assert splits(check_op(A + f"{op}.default", [r(3, 4, 5), 1])) == {((0, 0),), ((0, 2),)}
    ids = torch.ones(4, 6, dtype=torch.int64)
    assert splits(check_op(A + "cumsum.default", [ids, 1])) == {((0, 0),)}


def test_padding_splits_the_axes_it_leaves_alone():
    got = check_op(A + "constant_pad_nd.default", [r(3, 4, 5, 6), [1, 1, 0, 0], 0.0])
    assert splits(got) == {((0, 0),), ((0, 1),), ((0, 2),)}


def test_fill_and_scatters_keep_their_axis():
    assert splits(check_op(A + "fill.Tensor", [r(3, 4), torch.tensor(2.0, dtype=D)])) == {((0, 0),), ((0, 1),)}
    got = check_op(A + "slice_scatter.default", [r(3, 8, 5), r(3, 4, 5), 1, 2, 6])
    assert splits(got) == {((0, 0), (1, 0)), ((0, 2), (1, 2))}
    got = check_op(A + "select_scatter.default", [r(3, 8, 5), r(3, 5), 1, 2])
    assert splits(got) == {((0, 0), (1, 0)), ((0, 2), (1, 1))}


def test_roll():
    assert splits(check_op(A + "roll.default", [r(4, 4, 6), [1], [1]])) == {((0, 0),), ((0, 2),)}
    g, node, _, _ = build_node(A + "roll.default", [r(4, 6), [1]])  # a roll of the flattened tensor
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []


def test_stack():
    got = check_op(A + "stack.default", [[r(4, 6), r(4, 6)], 1])
    assert splits(got) == {((0, 0), (1, 0)), ((0, 1), (1, 1))}


def test_as_strided_view_pattern():
    got = check_op(A + "as_strided.default", [r(4, 6), [4, 2, 3], [6, 3, 1]])
    assert splits(got) == {((0, 0),)}
    g, node, _, _ = build_node(A + "as_strided.default", [r(4, 6), [4, 3], [6, 2]])  # strided: no view
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []


# ---- random ops -----------------------------------------------------------------------------------
@pytest.mark.parametrize("op,args", [("native_dropout.default", [0.5, True]), ("bernoulli.p", [0.5])])
def test_fission_through_random_ops_is_refused(op, args):
    """Fission would draw numbers per part that eager PyTorch's single call does not: refused."""
    from core.ir.graph import Graph, TensorKind, TensorMeta, TRef

    g = Graph("rand", {"mode": "eval"})
    x = g.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER,
                   outputs=[TensorMeta((4, 8), "float32", TensorKind.INPUT)], target="input:0")
    a = g.add_node(name="a", op="aten.relu.default", args=[TRef(x.id)], outputs=[TensorMeta((4, 8), "float32")])
    n_out = 2 if op.startswith("native_dropout") else 1
    outs = [TensorMeta((4, 8), "float32"), TensorMeta((4, 8), "bool")][:n_out]
    d = g.add_node(name="rand", op=A + op, args=[TRef(a.id), *args], outputs=outs)
    g.outputs["y"] = TRef(d.id)
    dg = DGraph(g)
    assert d.id not in dg.unknown  # its dims are known ...
    with pytest.raises(SplitError, match="draws random numbers"):  # ... but it is not split
        plan_split(g, dg, [a.id, d.id], (a.id, 0, 0))
    assert not recomputable(g, d.id)


def test_attention_with_dropout_is_random():
    q = r(2, 3, 4, 5)
    _, node, _, _ = build_node(CPU_FWD, [q, q, q, 0.0, False])
    assert not ops.node_draws_random(node)
    node.args[3] = 0.1
    assert ops.node_draws_random(node)


# ---- whole models -------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [sdpa_transformer, gn_unet])
def test_tiny_modern_models_have_every_op_linked(make):
    g = capture_workload(make())
    missing = {n.op for n in g if n.kind == NodeKind.OP and ops.dim_links(ops.ctx(n, g.tensor)) is None}
    assert missing == set()


# ---- fission through the new ops, end to end ------------------------------------------------------
def _conv_gn() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU()).double()
    return m, (torch.randn(2, 3, 6, 6, dtype=D),)


def test_group_norm_channel_split_only_on_contiguous_parts():
    from core.codegen.verify import problems, verify_module
    from core.frontend.torch_import import capture
    from core.transform.fission import Fission

    m, x = _conv_gn()
    g = capture(m, x, training=False, name="conv_gn")
    conv = next(n.id for n in g if n.op == "aten.convolution.default")
    gn = next(n.id for n in g if n.op == "aten.native_group_norm.default")
    dg = DGraph(g)
    with pytest.raises(SplitError, match="needs contiguous inputs"):  # gn alone: reads a strided slice
        plan_split(g, dg, [gn], (gn, 0, 1))
    s = [n.id for n in g if n.kind == NodeKind.OP and n.id >= conv and n.id <= gn]
    split = plan_split(g, dg, s, (gn, 0, 1))  # conv (out channels) -> gn: gn reads fresh parts
    assert split.length == 4
    h = g.copy()
    Fission().apply(h, Fission.application(2, split.comp, split.nodes))
    res = verify_module(m, x, training=False, graph=h, details=True)
    assert res["fission_nodes"] == 1 and problems(res) == [], problems(res)


@pytest.mark.slow
@pytest.mark.parametrize("make", [sdpa_transformer, gn_unet])
def test_fission_through_each_new_op_of_the_tiny_modern_models_matches_eager(make):
    """Each node of a new op split alone along each dim of its first output that the D-Graph links,
    and every F-Tree candidate, n = the smallest divisor, exported, run and compared with eager
    PyTorch in float64 (loss and every gradient), peak against simulated."""
    from core.analysis.ftree import build_ftree
    from core.codegen.verify import eager_outputs, graph_inputs, problems, verify_graph
    from core.schedule import get_scheduler
    from core.transform.fission import Fission

    w = make(dtype=D)
    g = capture_workload(w)
    tensors = graph_inputs(g, w.module, w.inputs)
    torch.manual_seed(0)
    ref = eager_outputs(g, w.module, w.inputs, w.loss_fn, None)
    splits_ = []
    for n in g:
        if n.op in NEW_OPS:
            for d in range(len(n.outputs[0].shape)):
                try:
                    splits_.append(plan_split(g, DGraph(g, [n.id]), [n.id], (n.id, 0, d)))
                except SplitError:
                    continue
    ft = build_ftree(g)
    splits_ += [f.split for f in ft.nodes]
    done: dict[str, int] = {}
    for sp in splits_:
        h = g.copy()
        Fission().apply(h, Fission.application(sp.divisors()[0], sp.comp, sp.nodes))
        res = verify_graph(h, get_scheduler("traced").run(h).order, tensors, ref, details=True)
        assert problems(res) == [], (sp.nodes, problems(res))
        for v in sp.nodes:
            done[g.nodes[v].op.split(".")[1]] = done.get(g.nodes[v].op.split(".")[1], 0) + 1
    print(f"\n{g.name}: {len(splits_)} fissions verified ({len(ft.nodes)} F-Tree candidates, the largest "
          f"{max(len(f.split.nodes) for f in ft.nodes)} ops), by op: {done}")
    assert max(len(f.split.nodes) for f in ft.nodes) > 30  # a region through attention / group norm
    want = {"sdpa_tiny": {"_scaled_dot_product_flash_attention_for_cpu",
                          "_scaled_dot_product_flash_attention_for_cpu_backward"},
            "gn_unet_tiny": {"native_group_norm", "native_group_norm_backward", "_unsafe_index",
                             "_unsafe_index_put"}}[g.name]
    assert want <= set(done)


def test_unbind_removes_its_dim():
    """unbind(x [3, B, H, L], 0) -> 3 x [B, H, L]: input dim 1 is output dim 0 (it was linked to output
    dim 1, joining the batch of q, k, v with their heads)."""
    got = check_op(A + "unbind.int", [r(3, 2, 2, 4), 0])
    assert splits(got) == {((0, 1),), ((0, 2),), ((0, 3),)}
    assert {tuple(sorted(c.outputs.items())) for c in got} == {((0, 0), (1, 0), (2, 0)), ((0, 1), (1, 1), (2, 1)),
                                                       ((0, 2), (1, 2), (2, 2))}
