"""The fusion-aware cost model (``core.cost.compiled``): hand-computed times of fused chains on tiny
graphs, the forward/backward boundary, a recomputed pointwise op fused into its backward reader,
and every incremental user of op times (the M-Optimizer's delta evaluator, OCGGS) agreeing with a
from-scratch simulation under it."""

from __future__ import annotations

import pytest

from core.cost.choice import COST_MODELS, make_cost
from core.cost.compiled import CompiledCost, fusible, phase
from core.cost.model import AnalyticCost
from core.ir import ops
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.simulate import simulate

N = 1024 * 1024  # elements of each tensor: 4 MiB in float32
SHAPE = (1024, 1024)


def _add(g: Graph, name: str, op: str, args: list, kind=TensorKind.ACTIVATION, recompute_of=None) -> TRef:
    n = g.add_node(name=name, op=op, args=args, outputs=[TensorMeta(SHAPE, "float32", kind)])
    if recompute_of is not None:
        n.recompute_of = recompute_of
    return TRef(n.id, 0)


def _input(g: Graph, name: str, kind=TensorKind.INPUT) -> TRef:
    n = g.add_node(name=name, op="placeholder", kind=NodeKind.PLACEHOLDER, target=f"input:{name}",
                   outputs=[TensorMeta(SHAPE, "float32", kind)])
    return TRef(n.id, 0)


def chain() -> tuple[Graph, dict[str, TRef]]:
    """x -> relu -> mul(a, a) -> mm(b, w): two pointwise ops fused, a library matmul after them."""
    g = Graph("chain")
    x, w = _input(g, "x"), _input(g, "w", TensorKind.WEIGHT)
    a = _add(g, "relu", "aten.relu.default", [x])
    b = _add(g, "mul", "aten.mul.Tensor", [a, a])
    c = _add(g, "mm", "aten.mm.default", [b, w])
    g.outputs["out"] = c
    return g, {"x": x, "a": a, "b": b, "c": c}


def _flops(g: Graph, ref: TRef) -> float:
    node = g.nodes[ref.node]
    return float(ops.flops(ops.ctx(node, g.tensor)))


def _parts(cost: CompiledCost) -> tuple[float, float, float]:
    dev = cost.device
    return (dev.vector_flops * dev.compute_efficiency, dev.mem_bandwidth * dev.memory_efficiency,
            dev.launch_overhead + dev.half_time)


def test_a_pointwise_chain_reads_its_input_once_and_writes_only_what_a_library_kernel_reads():
    g, r = chain()
    cost = CompiledCost("rtx3090")
    pc, pm, start = _parts(cost)
    nbytes = 4 * N
    relu, mul, mm = (g.nodes[r[k].node] for k in "abc")
    # relu starts the kernel: reads x, writes nothing (its only reader, mul, is fused with it)
    assert cost.node_time(g, relu) == pytest.approx(start + max(_flops(g, r["a"]) / pc, nbytes / pm))
    # mul reads relu's value in registers, writes b for the matmul, no launch of its own
    assert cost.node_time(g, mul) == pytest.approx(max(_flops(g, r["b"]) / pc, nbytes / pm))
    # the matmul is a library kernel: what the eager roofline says
    assert cost.node_time(g, mm) == AnalyticCost("rtx3090").node_time(g, mm)
    eager = simulate(g, [n.id for n in g.ops()], AnalyticCost("rtx3090")).latency
    compiled = simulate(g, [n.id for n in g.ops()], cost).latency
    assert compiled < eager


def test_no_kernel_spans_the_forward_and_the_backward():
    g = Graph("fb")
    x, grad = _input(g, "x"), _input(g, "grad", TensorKind.GRADIENT)
    a = _add(g, "relu", "aten.relu.default", [x])
    gb = _add(g, "relu_bwd", "aten.threshold_backward.default", [grad, a, 0], kind=TensorKind.GRADIENT)
    g.outputs["dx"] = gb
    cost = CompiledCost("rtx3090")
    pc, pm, start = _parts(cost)
    relu, bwd = g.nodes[a.node], g.nodes[gb.node]
    assert (phase(relu), phase(bwd)) == ("forward", "backward")
    # the forward writes the activation the backward reads; the backward reads both of its inputs
    assert cost.node_time(g, relu) == pytest.approx(start + max(_flops(g, a) / pc, 8 * N / pm))
    assert cost.node_time(g, bwd) == pytest.approx(start + max(_flops(g, gb) / pc, 12 * N / pm))


def test_a_recomputed_pointwise_op_fuses_into_its_backward_reader():
    """Rematerialising relu for its backward reader: the copy reads x (as relu did) and its value
    never reaches memory; the reader no longer reads the activation nor starts a kernel."""
    g = Graph("remat")
    x, grad = _input(g, "x"), _input(g, "grad", TensorKind.GRADIENT)
    a = _add(g, "relu", "aten.relu.default", [x])
    g.outputs["y"] = _add(g, "neg", "aten.neg.default", [a])
    again = _add(g, "relu_again", "aten.relu.default", [x], recompute_of=a.node)
    gb = _add(g, "relu_bwd", "aten.threshold_backward.default", [grad, again, 0], kind=TensorKind.GRADIENT)
    g.outputs["dx"] = gb
    cost = CompiledCost("rtx3090")
    pc, pm, start = _parts(cost)
    copy, bwd = g.nodes[again.node], g.nodes[gb.node]
    assert fusible(copy) and phase(copy) == "backward"
    assert cost.node_time(g, copy) == pytest.approx(start + max(_flops(g, again) / pc, 4 * N / pm))
    assert cost.node_time(g, bwd) == pytest.approx(max(_flops(g, gb) / pc, 8 * N / pm))  # grad in, dx out
    # under eager kernels the copy is an op of its own: launch, read x, write its output
    assert AnalyticCost("rtx3090").node_time(g, copy) > cost.node_time(g, copy)


def test_affected_names_the_neighbours_an_edit_re_times():
    g, r = chain()
    cost = CompiledCost("rtx3090")
    with g.recording() as log:  # mm reads relu's output directly: mul is left without a reader
        g.replace_input(g.nodes[r["c"].node], r["b"], r["a"])
    before = cost.node_time(g, g.nodes[r["a"].node])
    assert {r["a"].node, r["b"].node, r["c"].node} <= cost.affected(g, log)
    assert r["b"].node in cost.affected(g, log)  # mul lost its reader: an old argument's producer
    # relu's output is now read by the matmul: written, and its time says so
    pc, pm, start = _parts(cost)
    assert before == pytest.approx(start + max(_flops(g, r["a"]) / pc, 8 * N / pm))


def test_compiled_is_a_cost_model_a_user_can_name():
    assert "compiled" in COST_MODELS
    cost = make_cost("compiled", "a100-80gb")
    assert isinstance(cost, CompiledCost) and cost.device.name == "a100-80gb" and cost.contextual
    assert not AnalyticCost().contextual


def test_the_delta_evaluator_agrees_with_a_fresh_simulation_under_fusion():
    """Every point of a short M-Optimizer run under the compiled model, replayed from the imported
    graph and simulated from scratch with a fresh model, has the peak and latency the search gave
    it (the delta evaluator re-times each edit's neighbours, ``CostModel.affected``)."""
    from core.ir import io
    from core.search.moptimizer import optimize
    from core.search.plan import check_order, replay
    from sample_graphs.store import graph_path

    g = io.load(graph_path("bert_tiny"))
    pf = optimize(g, pareto=True, time_budget=6, device="rtx3090", cost=CompiledCost("rtx3090"),
                  cost_name="compiled")
    assert pf.meta["cost"] == "compiled" and len(pf.points) > 2
    transformed = 0
    for p in pf.points:
        h = replay(g, p.applications)
        check_order(h, p.order)
        transformed += bool(p.applications)
        sim = simulate(h, p.order, CompiledCost("rtx3090"), validate=False)
        assert sim.peak == p.peak
        assert sim.latency == pytest.approx(p.latency, rel=1e-9)
    assert transformed >= 1


def test_ocggs_totals_match_a_fresh_sum_under_fusion():
    """OCGGS's running cost under the compiled model equals the sum of op times of the rewritten
    graph, timed afresh (its incremental deltas re-time the neighbours of each substitution)."""
    from core.frontend.torch_import import capture
    from core.search.ocggs import search
    from core.search.ocggs.state import GraphCost
    from tests.subst_cases import module_fig1

    m, x = module_fig1()
    g = capture(m, x, training=False, name="fig1")
    res = search(g, "sampling", max_steps=3, cost=CompiledCost("rtx3090"))
    from core.search.ocggs import replay as ocggs_replay

    h, trace = ocggs_replay(g, res.sequence, cost=CompiledCost("rtx3090"))
    fresh = GraphCost(h, CompiledCost("rtx3090"), fold_weights=None).total(h)
    assert trace, "the search found no substitution to check"
    assert trace[-1]["cost_ms"] == pytest.approx(fresh * 1e3, rel=1e-9)
