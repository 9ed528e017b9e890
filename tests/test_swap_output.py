"""Swapping a graph output (``transform.swap.SwapOutput``): a result no op reads -- a weight's
gradient made early in the backward -- goes to host memory once made and comes back for the end of
the step.  By hand: which tensors it applies to, the peak it lowers (the output's bytes are off the
device across the later block), where the LOAD goes (after the last peak, in time for the end) and
its inverse; on the tiny U-Net, the exported script of a plan with output swaps returns the same
loss and gradients as eager PyTorch, on the device, and its measured live bytes equal the
simulator's."""

from __future__ import annotations

import pytest
import torch

from core.cost.model import AnalyticCost
from core.errors import RuleNotApplicable
from core.ir.builder import GraphBuilder
from core.ir.graph import NodeKind, TRef
from core.search.moptimizer import MOptimizer
from core.search.plan import replay
from core.simulate import simulate
from core.transform.registry import RULES
from core.transform.rule import Application, Where

COST = AnalyticCost("rtx3090")
RULE = RULES["swap_output"]


def early_output():
    """G (1 MB, a graph output nothing reads: 50 us of copy) is made from x, then a chain A1..A8
    (9 us each) runs, a block peaks (B: 4 MB) and C1..C8 and U end the step.  Traced order: G,
    A1..A8, B, C1..C8, U; the peak is at B with x, G, A8 and B alive."""
    b = GraphBuilder("early_output")
    x = b.input("x", 1000)
    b.op("G", [x], 1_000_000, output=True)
    a = x
    for i in range(1, 9):  # compute before the peak, for the STORE to hide behind
        a = b.op(f"A{i}", [a], 1000)
    bb = b.op("B", [a], 4_000_000)
    c = a
    for i in range(1, 9):  # compute after the peak, for the LOAD to hide behind
        c = b.op(f"C{i}", [bb if i == 1 else c], 1000)
    b.op("U", [c], 1000, output=True)
    return b.graph


def test_swap_output_applies_to_outputs_no_op_reads_made_before_the_last_peak():
    g = early_output()
    ids = {n.name: n.id for n in g}
    order = [n.id for n in g.ops()]
    pos = {v: i for i, v in enumerate(order)}
    where = Where(pos, (pos[ids["B"]],))
    hot = [TRef(ids[k], 0) for k in ("G", "A8", "B", "U")]
    assert RULE.match(g, hot, where) == [Application("swap_output", (ids["G"], 0))]  # U is made after the peak
    assert RULE.match(g, hot, None) == []  # it needs the schedule
    with pytest.raises(RuleNotApplicable, match="not a graph output"):
        RULE.apply(g.copy(), Application("swap_output", (ids["A8"], 0)))
    b = GraphBuilder("read_output")
    x = b.input("x", 10)
    t = b.op("T", [x], 10, output=True)
    b.op("U", [t], 10, output=True)
    h = b.graph
    with pytest.raises(RuleNotApplicable, match="read by an op"):
        RULE.apply(h, Application("swap_output", (h.by_name("T").id, 0)))


def test_swap_output_lowers_the_peak_and_loads_the_output_back_for_the_end():
    g = early_output()
    m = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    ev = m.ev
    G = g.by_name("G").id
    assert m.root.peak == 1000 + 1_000_000 + 1000 + 4_000_000  # x, G, A8, B
    c = ev.evaluate(Application("swap_output", (G, 0)))
    assert c.peak == m.root.peak - 1_000_000
    s = ev.child_state(c)
    ev.commit(s)
    names = [ev.g.nodes[v].name for v in ev.order]
    (ld,) = [v for v in ev.order if ev.g.nodes[v].kind == NodeKind.LOAD]
    # the STORE right after G; the LOAD after the peak (B) and C1 that reads it, in time for the end
    assert names[:2] == ["G", "G_store"]
    assert names.index(ev.g.nodes[ld].name) > names.index("C1")
    assert ev.g.outputs["output_0"] == TRef(ld, 0)
    sim = simulate(ev.g, ev.order, COST)
    assert (sim.peak, sim.latency) == (s.peak, pytest.approx(s.latency, rel=1e-12))
    assert sim.compute_wait == 0 and sim.latency == pytest.approx(m.root.latency, rel=1e-9)  # both copies hide
    # the inverse: the graph as it was
    h = g.copy()
    log = RULE.apply(h, Application("swap_output", (G, 0)))
    RULE.inverse(h, log)
    assert h.outputs == g.outputs and sorted(h.nodes) == sorted(g.nodes)
    # DeSwap takes it back too: the output is G again
    h2 = replay(g, [Application("swap_output", (G, 0))])
    RULES["deswap"].apply(h2, Application("deswap", (ld,)))
    assert h2.outputs["output_0"] == TRef(G, 0) and not [n for n in h2.nodes.values() if n.kind == NodeKind.STORE]


@pytest.mark.slow
def test_a_plan_with_output_swaps_matches_eager_on_a_tiny_unet():
    from tests.workload_cases import Case

    case = Case("unet_tiny", torch.float64)
    m = MOptimizer(case.g, COST)
    ev = m.ev
    outs = sorted((o for o in case.g.output_refs() if RULE.match(case.g, [o], ev.where())),
                  key=lambda r: -case.g.nodes[r.node].outputs[r.index].nbytes)
    assert len(outs) >= 2
    for ref in outs[:2]:  # the two largest outputs made before the peak, one after another
        ev.advance(Application("swap_output", (ref.node, ref.index)))
    s = ev.state
    q = m.plan(s)
    h = replay(case.g, q.applications)
    assert sum(n.kind == NodeKind.LOAD for n in h.nodes.values()) == 2
    sim = simulate(h, q.order, COST)
    assert sim.peak == s.peak and sim.latency == pytest.approx(s.latency, rel=1e-9)
    res = case.verify_order(h, q.order, "output swaps")
    assert res["peak_ratio"] == 1.0
