"""Re-issuing LOADs (``transform.swap.Reissue``, ``placement.hoist_loads``,
``DeltaEvaluator._reissued``, ``MOptimizer._reissue``): a LOAD placed right before its reader holds
up compute for its whole copy; re-issued, it goes back to where the compute before the reader
covers the copy, but never so far that its bytes raise the peak.  By hand on the placement, then on
a hand graph through the optimizer: the latency falls by the stall, the peak stays, and the plan
replays to the same numbers; with a spike between, the LOAD stops after the spike."""

from __future__ import annotations

import numpy as np
import pytest

from core.cost.model import AnalyticCost
from core.errors import RuleNotApplicable
from core.ir.builder import GraphBuilder
from core.ir.graph import NodeKind
from core.schedule.placement import hoist_loads
from core.search.moptimizer import MOptimizer
from core.search.plan import Plan, replay
from core.simulate import simulate
from core.transform.registry import RULES
from core.transform.rule import Application

COST = AnalyticCost("rtx3090")


def unit(order: list[int]):
    """Step times of ``order``: 1 s each, but the LOADs' (ids 5 and 6) 0 s."""
    return lambda q: 0.0 if order[q] in (5, 6) else 1.0


def test_a_load_goes_back_to_its_just_in_time_slot_as_far_as_the_cap_allows():
    order = [0, 1, 2, 3, 4, 5, 7]  # LOAD 5 at position 5, its reader 7 at position 6
    flat = np.full(7, 5)
    # 2.5 s of transfer: positions 4, 3, 2 cover it (3 s) -> slot 2, right before node 2
    new, slot = hoist_loads(order, flat, 10, [(5, 5, 1, 6, 2.5, 3)], unit(order))
    assert new == [0, 1, 5, 2, 3, 4, 7] and slot == {5: 2}
    # the floor (one past its STORE) comes first
    new, slot = hoist_loads(order, flat, 10, [(5, 5, 4, 6, 2.5, 3)], unit(order))
    assert new == [0, 1, 2, 3, 5, 4, 7] and slot == {5: 4}
    # 3 bytes more at position 3 would make 11 > 10: the LOAD stops after it
    spiky = np.array([5, 5, 5, 8, 5, 5, 5])
    new, slot = hoist_loads(order, spiky, 10, [(5, 5, 1, 6, 2.5, 3)], unit(order))
    assert new == [0, 1, 2, 3, 5, 4, 7] and slot == {5: 4}
    # already just in time (node 4 between it and its reader covers 0.5 s): nothing moves
    early = [0, 1, 2, 3, 5, 4, 7]
    assert hoist_loads(early, flat, 10, [(5, 4, 1, 6, 0.5, 3)], unit(early)) == (early, {})


def test_loads_are_placed_one_after_another_on_the_curve_they_leave():
    order = [0, 1, 2, 3, 4, 5, 6, 7]  # LOADs 5 and 6, both read by 7
    flat = np.full(8, 4)
    # alone, each would go to slot 2 (+3 bytes: 7 <= 10); together the second finds 7 + 3 = 10
    # at positions 2..4, still within the cap, so both go; with a cap of 9 the second stays right
    # before its reader (at most past the step the first one left)
    new, slot = hoist_loads(order, flat, 10, [(5, 5, 0, 7, 2.5, 3), (6, 6, 0, 7, 2.5, 3)], unit(order))
    assert slot == {5: 2, 6: 2} and new == [0, 1, 5, 6, 2, 3, 4, 7]
    new, slot = hoist_loads(order, flat, 9, [(5, 5, 0, 7, 2.5, 3), (6, 6, 0, 7, 2.5, 3)], unit(order))
    assert slot[5] == 2 and slot.get(6, 6) >= 5 and new == [0, 1, 5, 2, 3, 4, 6, 7]


def swapped_chain(spike: bool):
    """T (1 MB: 50 us of copy) is read by U at the end of a chain of small ops C1..C16 (9 us each)
    from x; Swap(T, U) with the LOAD placed right before U.  With ``spike``, C12 makes a 4 MB
    tensor that C13 reads."""
    b = GraphBuilder("chain")
    x = b.input("x", 1000)
    t = b.op("T", [x], 1_000_000)
    c = x
    for i in range(1, 17):
        c = b.op(f"C{i}", [c], 4_000_000 if spike and i == 12 else 1000)
    b.op("U", [t, c], 1000, output=True)
    g = b.graph
    T, U = g.by_name("T").id, g.by_name("U").id
    app = Application("swap", (T, 0, U))
    h = g.copy()
    RULES["swap"].apply(h, app)
    (st,) = [n.id for n in h.nodes.values() if n.kind == NodeKind.STORE]
    (ld,) = [n.id for n in h.nodes.values() if n.kind == NodeKind.LOAD]
    chain = {i: h.by_name(f"C{i}").id for i in range(1, 17)}
    order = [T, st, *chain.values(), ld, U]
    return g, Plan("magis", [app], order, {}), ld, chain


@pytest.mark.parametrize("spike", [False, True])
def test_the_optimizer_reissues_a_late_load_without_raising_the_peak(spike: bool):
    g, plan, ld, chain = swapped_chain(spike)
    m = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    late = m.adopt(plan)
    ev = m.ev
    stall = simulate(ev.g, ev.order, COST).compute_wait
    assert stall > 0.5 * COST.transfer_time(1_000_000)  # the reader waits for most of the copy
    m._reissue()
    s = ev.state
    assert s is not late and s.app.rule == "reissue" and s.parent is late
    assert s.peak == late.peak and s.latency < late.latency
    pos = {v: i for i, v in enumerate(ev.order)}
    after = simulate(ev.g, ev.order, COST).compute_wait
    if spike:  # T's 1 MB across C12's 4 MB would raise the peak: the LOAD waits until C13 is done
        assert pos[ld] == pos[chain[13]] + 1
        assert 0 < after < stall
    else:  # the copy hides behind the chain: no wait left
        assert pos[ld] < pos[chain[12]]
        assert after == 0 and s.latency == pytest.approx(late.latency - stall, rel=1e-9)
    # exact: the plan replays to the same peak and latency
    p = m.plan(s)
    assert [a.rule for a in p.applications] == ["swap", "reissue"]
    sim = simulate(replay(g, p.applications), p.order, COST)
    assert sim.peak == s.peak and sim.latency == pytest.approx(s.latency, rel=1e-9)
    # nothing left to gain: re-issued again, the LOAD stays put or the peak would go up
    m._reissue()
    assert ev.state is s


def test_reissue_names_loads_only():
    g, plan, _, chain = swapped_chain(False)
    h = replay(g, plan.applications)
    with pytest.raises(RuleNotApplicable, match="not a LOAD"):
        RULES["reissue"].apply(h, Application("reissue", (chain[1],)))
    assert RULES["reissue"].match(h, []) == []
