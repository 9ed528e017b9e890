"""Windows bounded by work (``DeltaEvaluator(window_cap=...)``): when the ops to reschedule around a
change exceed the cap, only a segment of ``window_cap`` of them is given to the DP and the rest keep
the parent's order.  Every child still equals a from-scratch evaluation of its full order, and the DP
never sees more ops than the cap."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import RuleNotApplicable
from core.schedule.baselines import TracedOrder
from core.search.delta import WINDOW_CAP, DeltaEvaluator, bounded_segment
from core.search.moptimizer import MOptimizer
from core.simulate import simulate
from core.transform.remat import DeRemat, Remat
from core.transform.rule import Application
from sample_graphs.store import load_sample_graph
from tests.hand_graphs import G
from tests.randgraphs import random_graph, random_order
from tests.test_delta_eval import assert_child_exact, assert_working_state_exact, walk


# ---- the segment ---------------------------------------------------------------------------------
def test_segment_is_the_whole_window_when_it_fits():
    assert bounded_segment(np.array([1, 5, 2]), [9, 9, 9], 3) == (0, 2)
    assert bounded_segment(np.array([1, 5, 2]), [9, 9, 9], 8) == (0, 2)


def test_segment_holds_the_peak_with_margin_and_ends_at_small_waists():
    curve = np.array([0, 1, 2, 3, 4, 5, 9, 5, 4, 3, 2, 1, 0, 0])  # peak at 6, 14 steps
    nw = [5] * 14
    # cap 6, margin 2: starts 3..4 keep two steps either side of the peak; equal waists: centred
    assert bounded_segment(curve, nw, 6, margin=2) == (3, 8)
    nw[9] = 0  # just right of a segment starting at 3 -> the cut there is cheaper
    assert bounded_segment(curve, nw, 6, margin=2) == (3, 8)
    nw = [5] * 14
    nw[10] = 0  # right of the segment starting at 4
    assert bounded_segment(curve, nw, 6, margin=2) == (4, 9)


def test_segment_at_a_window_edge_still_holds_the_peak():
    curve = np.array([9, 1, 1, 1, 1, 1])
    assert bounded_segment(curve, [0] * 6, 4) == (0, 3)
    curve = np.array([1, 1, 1, 1, 1, 9])
    assert bounded_segment(curve, [0] * 6, 4) == (2, 5)


# ---- a hand case where the cap binds ---------------------------------------------------------------
def u_chain():
    """a1..a6 forward (40 B each), g6..g1 backward (4 B each), g_k reads g_{k+1} and a_k: a U with a
    skip at every level; x is a 4-byte input (resident)."""
    b = G()
    x = b.input("x", (1,))
    a = {}
    prev = x
    for k in range(1, 7):
        prev = a[k] = b.op(f"a{k}", "aten.relu.default", [prev], (10,))
    gk = b.op("g6", "aten.relu.default", [a[6]], (1,))
    g = {6: gk}
    for k in range(5, 0, -1):
        gk = g[k] = b.op(f"g{k}", "aten.add.Tensor", [gk, a[k]], (1,), output=(k == 1))
    return b.g, a, g


def test_hand_case_where_the_cap_binds():
    g, a, gr = u_chain()
    order = [a[k].node for k in range(1, 7)] + [gr[k].node for k in range(6, 0, -1)]
    assert simulate(g, order).peak == 4 + 6 * 40 + 4  # x, a1..a6 and g6 at g6
    ev = DeltaEvaluator(g.copy(), order, rules={"remat": Remat()}, window_cap=4)
    c = ev.evaluate(Application("remat", (a[1].node, gr[1].node)))  # recompute a1 for g1
    # every op has nw 0 (a total order): the window is g5..g1 plus the copy r1 (6 ops), 4 scheduled
    assert (c.lo, c.hi) == (7, 11)
    assert c.scheduled == 4
    assert c.peak == 4 + 5 * 40 + 4  # a1 is freed after a2: x, a2..a6 and g6 at g6
    assert_child_exact(ev, c)
    ev.commit(ev.child_state(c))
    names = [ev.g.nodes[v].name for v in c.window]
    assert names[:4] == ["g5", "g4", "g3", "g2"]  # the segment: the window's peak step g5 and after
    assert names[5] == "g1" and ev.g.nodes[c.window[4]].recompute_of == a[1].node  # r1 kept its place
    assert_working_state_exact(ev)
    uncapped = DeltaEvaluator(g.copy(), order, rules={"remat": Remat()}, window_cap=None)
    u = uncapped.evaluate(Application("remat", (a[1].node, gr[1].node)))
    assert u.scheduled == 6 and u.peak == c.peak


# ---- property tests --------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), order_seed=st.integers(0, 50), cap=st.integers(1, 6),
       copies=st.booleans())
def test_bounded_windows_on_random_graphs_equal_scratch(seed, order_seed, cap, copies):
    g = random_graph(seed, 24, copies=copies)
    order = random_order(g, order_seed)
    ev = DeltaEvaluator(g.copy(), order, rules={r.name: r for r in (Remat(), DeRemat())}, window_cap=cap)
    assert_working_state_exact(ev)
    for app in ev.applications():
        try:
            c = ev.evaluate(app)
        except RuleNotApplicable:
            continue
        assert c.scheduled <= cap
        assert_child_exact(ev, c)
    walk(ev, random.Random(seed), 5)


@pytest.fixture(scope="module")
def unet_search():
    g = load_sample_graph("unet")
    return MOptimizer(g, order=TracedOrder().order(g))


@pytest.mark.parametrize("cap", [8, 24])
def test_bounded_windows_on_unet_equal_scratch(unet_search, cap):
    """Fission, remat and swap children of unet under a cap that binds, checked against scratch, then
    a walk down the best children (each working state checked in full)."""
    ev = unet_search.ev
    ev.goto(ev.root)
    old = ev.window_cap
    ev.window_cap = cap
    rng = random.Random(cap)
    bound = 0
    try:
        for _ in range(4):
            apps = unet_search._applications()
            kids = []
            for app in rng.sample(apps, min(25, len(apps))):
                try:
                    c = ev.evaluate(app)
                except RuleNotApplicable:
                    continue
                assert c.scheduled <= cap
                bound += len(c.window) > cap and not ev.storages.copy_nodes
                assert_child_exact(ev, c)
                kids.append(c)
            ev.commit(ev.child_state(min(kids, key=lambda c: (c.peak, c.latency))))
            assert_working_state_exact(ev)
        assert bound, "the cap bound no window"
    finally:
        ev.goto(ev.root)
        ev.window_cap = old


def test_windows_within_the_cap_are_scheduled_as_before(unet_search):
    """Where the window between narrow waists has at most ``WINDOW_CAP`` ops, the bounded evaluator
    gives the child the unbounded one gives (same window order, same metrics)."""
    ev = unet_search.ev
    ev.goto(ev.root)
    old = ev.window_cap
    same = 0
    try:
        for app in unet_search._applications():
            try:
                ev.window_cap = None
                free = ev.evaluate(app)
                ev.window_cap = WINDOW_CAP
                capped = ev.evaluate(app)
            except RuleNotApplicable:
                continue
            if free.scheduled <= WINDOW_CAP:
                assert (capped.lo, capped.hi, capped.window) == (free.lo, free.hi, free.window)
                assert capped.metrics == free.metrics and capped.scheduled == free.scheduled
                same += 1
            else:
                assert capped.scheduled == WINDOW_CAP
    finally:
        ev.window_cap = old
    assert same


def shuffled(g, window: list[int], moving: set[int], rng: random.Random) -> list[int]:
    """A random topological order of ``window`` in which the ops not in ``moving`` keep their order."""
    inside = set(window)
    fixed = [v for v in window if v not in moving]
    indeg = {v: sum(p in inside for p in g.preds(v)) for v in window}
    out: list[int] = []
    k = 0
    ready = {v for v in window if not indeg[v]}
    while ready:
        cands = [v for v in ready if v in moving or (k < len(fixed) and v == fixed[k])]
        v = rng.choice(cands)
        ready.discard(v)
        out.append(v)
        k += v not in moving
        for u in g.users(v):
            if u in inside:
                indeg[u] -= 1
                if not indeg[u]:
                    ready.add(u)
    assert len(out) == len(window)
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), order_seed=st.integers(0, 50), pick=st.integers(0, 10**6))
def test_spliced_curve_equals_the_full_transition(seed, order_seed, pick):
    """``_spliced`` (work in the storages of the change and of the reordered ops) gives the curve
    ``_transition`` computes over every storage of the window, for windows ending anywhere (the
    schedule's last op included) and any reordering of a random set of the window's ops; and refuses
    exactly the windows where other old ops change their relative order."""
    g = random_graph(seed, 24, copies=False)
    ev = DeltaEvaluator(g.copy(), random_order(g, order_seed), rules={r.name: r for r in (Remat(), DeRemat())})
    rng = random.Random(pick)
    apps = ev.applications() + DeRemat().match(ev.g)
    if not apps:
        return
    app = rng.choice(apps)
    try:
        log, changed, saved = ev._apply(app)
    except RuleNotApplicable:
        return
    try:
        n = len(ev.order)
        lo, hi, added = ev._region(log)
        L, R = max(1, min(lo, rng.randint(1, n - 1))), max(hi, rng.choice([n - 1, rng.randint(1, n - 1)]))
        win = ev._window(L, R, added) if L <= R else None
        if win is None:
            return
        L, R, ops = win
        moving = set(rng.sample(ops, rng.randint(0, len(ops))))
        window = shuffled(ev.g, ops, moving, rng)
        affected = changed | ev.storages.roots_of(ops) | ev.storages.roots_of(ev.order[L:R + 1])
        full, _, _ = ev._transition(L, R, window, affected)
        spliced = ev._spliced(L, R, window, changed | ev.storages.roots_of(moving), moving)
        kept = [ev.pos[v] for v in window if v in ev.pos and v not in moving]
        if kept != sorted(kept):  # the change itself moved an old op past another: not for splicing
            assert spliced is None
            return
        assert spliced is not None
        assert spliced[0].tolist() == full.tolist()
    finally:
        ev._undo(app, log, saved)
    assert_working_state_exact(ev)
