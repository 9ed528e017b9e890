"""Spikes of the memory curve (``search.spikes``) and ``MOptimizer.spike_steps``: the local maxima
by hand; on a hand graph whose two blocks peak at the same height, the hot-spot steps stop (any one
application leaves the other block at the peak) while the spike steps lower one block, then the
other, and the peak with them (80 -> 70 bytes); on a tiny U-Net from DTR's plan, every state the
spike steps commit (swaps and recomputation) is exact (its plan replays to the same peak and latency)
and its exported script matches eager PyTorch (float64)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from core.cost.model import AnalyticCost
from core.ir.builder import GraphBuilder
from core.search.moptimizer import MOptimizer
from core.search.peers.dtr import DTR
from core.search.plan import replay
from core.search.spikes import spikes
from core.simulate import simulate
from tests.workload_cases import Case

COST = AnalyticCost("rtx3090")


def test_spikes_are_the_local_maxima_at_or_above_a_level_highest_first():
    c = np.array([0, 5, 1, 5, 0, 3, 3, 1, 4])
    assert spikes(c, 3, 1) == [1, 3, 8, 5]  # the plateau 3, 3 counts once, at its first step
    assert spikes(c, 4, 1) == [1, 3, 8]
    assert spikes(c, 4, 2) == [1, 8]  # 3 is within 2 steps of 1, which holds as much and comes first
    assert spikes(c, 6, 1) == []
    assert spikes(np.array([2, 2, 2]), 0, 5) == [0]
    assert spikes(np.array([], dtype=np.int64), 0, 1) == []


def two_equal_blocks():
    """x (10 B, an input) feeds two blocks in turn; each keeps its t (10 B) across its peak (a 20 B
    and a 40 B tensor) for its last op U.  Traced order: both blocks peak at 80 B (x, t, a, a2)."""
    b = GraphBuilder("two_blocks")
    x = b.input("x", 10)
    t1 = b.op("T1", [x], 10)
    a = b.op("A", [t1], 20)
    a2 = b.op("A2", [a], 40)
    s1 = b.op("S1", [a2], 1)
    u1 = b.op("U1", [t1, s1], 10)
    t2 = b.op("T2", [x], 10)
    bb = b.op("B", [t2, u1], 20)
    b2 = b.op("B2", [bb], 40)
    s2 = b.op("S2", [b2], 1)
    b.op("U2", [t2, s2], 10, output=True)
    return b.graph


def test_hot_spot_steps_stop_at_two_equal_peaks_and_spike_steps_lower_both():
    g = two_equal_blocks()
    m = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    ev = m.ev
    names = {n.id: n.name for n in g}
    assert m.root.peak == 80
    assert [names[ev.order[p]] for p in np.flatnonzero(ev.curve == 80)] == ["A2", "B2"]
    # recomputing T1 for U1 lowers the first block to 70 B, but the second still holds 80 B
    assert m.remat_steps(m.root, 10.0).peak == 80
    end = m.spike_steps(m.root, 10.0, sep=2, width=1, step_rules=("remat",))
    assert end.peak == 70
    # T1 recomputed for U1 (the first block), then T2 for one of its readers: the copy for B, or
    # for U2, and the original moved to the other side of the spike -- the same schedule of work
    made = [(a.rule, names[a.params[0]], names[a.params[1]]) for a in end.applications()]
    assert made[0] == ("remat", "T1", "U1") and made[1] in (("remat", "T2", "B"), ("remat", "T2", "U2"))
    assert len(made) == 2
    sim = simulate(replay(g, end.applications()), m.plan(end).order, COST)
    assert sim.peak == end.peak and sim.latency == pytest.approx(end.latency, rel=1e-9)
    # with every rule of the spike steps: each t swapped out across its block instead (a copy that
    # overlaps compute costs less than recomputing), the same 70 B
    end = m.spike_steps(m.root, 10.0, sep=2, width=1)
    assert end.peak == 70 and sorted(names[a.params[0]] for a in end.applications()) == ["T1", "T2"]
    sim = simulate(replay(g, end.applications()), m.plan(end).order, COST)
    assert sim.peak == end.peak and sim.latency == pytest.approx(end.latency, rel=1e-9)


def test_a_focused_child_is_judged_by_its_spike_and_the_working_state_is_kept():
    g = two_equal_blocks()
    m = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    ev = m.ev
    p = int(np.flatnonzero(ev.curve == 80)[0])
    remat = ev.rules["remat"]
    ids = {n.name: n.id for n in g}
    app = next(a for a in remat.match(ev.g, ev.hotspots_at(p), ev.where()) if a.params == (ids["T1"], ids["U1"]))
    with ev.focused(p, 1):
        assert ev.where().peaks == (p,)
        c = ev.evaluate(app)
    assert c.peak == 80 and c.focus_peak == 70
    assert ev.evaluate(app).focus_peak is None  # not focused: no focus peak
    assert ev.where().peaks == tuple(int(q) for q in np.flatnonzero(ev.curve == 80))
    with pytest.raises(RuntimeError, match="already focused"), ev.focused(p, 1), ev.focused(p, 1):
        pass


@pytest.mark.slow
def test_spike_steps_after_swaps_on_a_tiny_unet_are_exact_and_match_eager():
    case = Case("unet_tiny", torch.float64)
    m = MOptimizer(case.g, COST)
    plan = next(p for p in DTR().plans(case.g, COST, time_budget=30) if p.label == "budget 0.8")
    s = m.adopt(plan)
    end = m.spike_steps(s, 20.0)
    chain = end.path()[len(s.path()):]
    assert len(chain) >= 3 and end.peak < s.peak  # (0.724x -> 0.553x in 10 steps, swaps among them)
    assert {a.rule for a in end.applications()[len(s.applications()):]} & {"swap", "swap_late"}
    for st in chain[:: max(1, len(chain) // 3)] + [end]:
        q = m.plan(st)
        h = replay(case.g, q.applications)
        sim = simulate(h, q.order, COST)
        assert sim.peak == st.peak and sim.latency == pytest.approx(st.latency, rel=1e-9)
        assert h.lint_problems() == []
    q = m.plan(end)
    case.verify_order(replay(case.g, q.applications), q.order, "spike steps")


@pytest.mark.parametrize("swaps_end_early", [True, False])
def test_the_warm_start_hands_what_its_swap_steps_leave_to_the_spike_steps(monkeypatch, swaps_end_early):
    """Swap steps that stop before their share ends give the rest to ``spike_steps``, from the
    lowest state they reached within their slack; Swap steps that use their share leave none."""
    import time

    from core.search import moptimizer
    from sample_graphs.store import load_sample_graph

    calls = []
    real_steps, real_spikes = MOptimizer.remat_steps, MOptimizer.spike_steps

    def steps(self, s, time_budget, *args, step_rules=None, **kw):
        if step_rules == ("swap", "swap_late") and not swaps_end_early:
            time.sleep(time_budget)  # a graph whose Swap steps use all of their share
            return s
        return real_steps(self, s, time_budget, *args, step_rules=step_rules, **kw)

    def spikes(self, s, time_budget, **kw):
        calls.append((s, time_budget))
        assert s.latency <= max(moptimizer.DEFAULT_CONFIG.swap_from) * self.root.latency
        return real_spikes(self, s, time_budget, **kw)

    monkeypatch.setattr(MOptimizer, "remat_steps", steps)
    monkeypatch.setattr(MOptimizer, "spike_steps", spikes)
    m = MOptimizer(load_sample_graph("bert_tiny"), COST)
    m.warm_start(6.0, 1.0)
    assert (len(calls) > 0) == swaps_end_early
    assert all(0 < t <= 6.0 for _, t in calls)


def test_under_a_latency_limit_spike_steps_start_below_it_and_lower_the_peak():
    """``spikes_within``: spike steps from the archive's lowest-peak states at each of
    ``config.spike_from`` below the limit; on the two equal blocks, the peak falls from 80 B to 70 B
    within the limit."""
    from core.search.moptimizer import DEFAULT_CONFIG, spikes_within

    g = two_equal_blocks()
    m = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    limit = 1.5 * m.root.latency
    spikes_within(m, 10.0, limit, sep=2, width=1)
    ok = [s for s in m.archive if s.latency <= limit]
    assert min(s.peak for s in ok) == 70
    # a limit below every state but the root's latency: spike steps from the root only
    calls = []
    real = MOptimizer.spike_steps

    def spy(self, s, time_budget, **kw):
        calls.append(s)
        return real(self, s, time_budget, **kw)

    m2 = MOptimizer(g, COST, order=[n.id for n in g.ops()])
    MOptimizer.spike_steps = spy
    try:
        spikes_within(m2, 5.0, m2.root.latency * (1 + max(DEFAULT_CONFIG.spike_from)))
    finally:
        MOptimizer.spike_steps = real
    assert calls == [m2.root]


def test_optimize_under_a_latency_limit_gives_the_spike_steps_their_share(monkeypatch):
    from core.search import moptimizer
    from sample_graphs.store import load_sample_graph

    shares = []
    real = moptimizer.spikes_within

    def spy(m, time_budget, limit):
        shares.append((time_budget, limit / m.root.latency))
        return real(m, time_budget, limit)

    monkeypatch.setattr(moptimizer, "spikes_within", spy)
    pf = moptimizer.optimize(load_sample_graph("bert_tiny"), latency_limit=1.1, time_budget=6.0)
    assert len(shares) == 1 and 0 <= shares[0][0] <= 6.0 and shares[0][1] == pytest.approx(1.1)
    assert pf.points[0].metrics["latency"] <= 1.1 * pf.points[-1].metrics["latency"] * (1 + 1e-9)
    shares.clear()
    moptimizer.optimize(load_sample_graph("bert_tiny"), memory_limit=0.9, time_budget=3.0)
    assert shares == []  # a memory limit: no spike steps of their own


def test_the_pareto_mode_runs_spike_steps_below_ten_percent_where_its_budget_is_long_enough(monkeypatch):
    from core.search import moptimizer
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("bert_tiny")
    ops = len(g.ops())
    config = dataclasses.replace(moptimizer.DEFAULT_CONFIG, pareto_spike_seconds=4000 / ops)  # 4 s on this graph
    assert moptimizer.pareto_spikes(g, 4.0, config) and not moptimizer.pareto_spikes(g, 3.9, config)
    calls, warms = [], []
    real, warm_start = moptimizer.spikes_within, moptimizer.MOptimizer.warm_start
    monkeypatch.setattr(moptimizer, "spikes_within",
                        lambda m, t, limit: calls.append(limit / m.root.latency) or real(m, t, limit))
    monkeypatch.setattr(moptimizer.MOptimizer, "warm_start",
                        lambda self, t, seed=None, quick=True: warms.append(t) or warm_start(self, t, seed, quick))
    pf = moptimizer.optimize(g, pareto=True, time_budget=3.0, config=config)
    assert calls == [] and warms == [pytest.approx(config.warm * 3.0)]
    assert pf.meta["mode"] == "pareto" and len(pf.points) >= 2
    warms.clear()
    pf = moptimizer.optimize(g, pareto=True, time_budget=4.0, config=config)
    assert calls == [pytest.approx(config.pareto_spikes)] and warms == [pytest.approx(config.latency_warm * 4.0)]
    eager = pf.points[-1]
    assert any(p.latency <= 1.1 * eager.latency and p.peak < eager.peak for p in pf.points[:-1])
