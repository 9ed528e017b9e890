"""Delta evaluation of M-States equals a from-scratch evaluation over random sequences of edits:
evaluate children, move down (commit, advance), back up and across the state tree (goto), on a committed
training graph and on random graphs with swaps and fission nodes."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.lifetimes import memory_profile
from core.errors import RuleNotApplicable
from core.ir.graph import GraphError, TRef
from core.schedule.baselines import TracedOrder
from core.search.delta import DeltaEvaluator
from core.search.wl_hash import graph_hash
from core.simulate import simulate
from core.transform.remat import DeRemat, Remat
from core.transform.rule import Application, Rule
from sample_graphs.store import load_sample_graph
from tests.randgraphs import random_graph, random_order


def scratch(g, order, cost=None):
    sim = simulate(g, order, cost)
    return sim.peak, sim.latency, graph_hash(g)


def assert_working_state_exact(ev: DeltaEvaluator) -> None:
    g, order = ev.g, ev.order
    assert g.lint_problems() == []
    assert ev.curve.tolist() == memory_profile(g, order).step_bytes.tolist()
    peak, latency, h = scratch(g, order, ev.cost)
    assert math.isclose(ev.latency, latency, rel_tol=1e-9)
    assert ev.wl.value() == h == ev.state.hash
    assert ev.state.peak == peak
    assert ev.pos == {v: i for i, v in enumerate(order)}


def assert_child_exact(ev: DeltaEvaluator, c) -> None:
    log = ev.rules[c.app.rule].apply(ev.g, c.app)
    try:
        order = ev.order[:c.lo] + list(c.window) + ev.order[c.hi + 1:]
        peak, latency, h = scratch(ev.g, order, ev.cost)
    finally:
        ev.rules[c.app.rule].inverse(ev.g, log)
    assert (c.peak, c.hash) == (peak, h), c.app
    assert math.isclose(c.latency, latency, rel_tol=1e-9)


def walk(ev: DeltaEvaluator, rng: random.Random, steps: int) -> None:
    """Random moves: evaluate a few children (checked), commit one (or advance: both at once), go
    back, or jump."""
    seen = [ev.root]
    for _ in range(steps):
        apps = ev.applications() + DeRemat().match(ev.g)
        move = rng.random()
        if apps and move < 0.15:  # evaluate and commit in one application of the rule
            s = ev.advance(rng.choice(apps))
            assert s.parent is seen[-1] or s.parent in seen
            seen.append(s)
        elif apps and move < 0.6:
            kids = [ev.evaluate(a) for a in rng.sample(apps, min(3, len(apps)))]
            for c in kids:
                assert_child_exact(ev, c)
            s = ev.child_state(rng.choice(kids))
            ev.commit(s)
            seen.append(s)
        elif move < 0.8 and ev.state is not ev.root:
            ev.back()
        else:
            ev.goto(rng.choice(seen))
        assert_working_state_exact(ev)


@pytest.fixture(scope="module")
def bert_tiny():
    g = load_sample_graph("bert_tiny")
    return g, TracedOrder().order(g)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 1000))
def test_random_walks_on_a_training_graph(bert_tiny, seed):
    g, order = bert_tiny
    ev = DeltaEvaluator(g.copy(), order, rules={r.name: r for r in (Remat(), DeRemat())})
    assert_working_state_exact(ev)
    walk(ev, random.Random(seed), 6)
    ev.goto(ev.root)
    assert ev.g.same_as(g) and ev.order == order  # back at the imported graph, exactly


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), order_seed=st.integers(0, 50))
def test_random_walks_on_random_graphs(seed, order_seed):
    g = random_graph(seed, 22)
    order = random_order(g, order_seed)
    ev = DeltaEvaluator(g.copy(), order, rules={r.name: r for r in (Remat(), DeRemat())})
    assert_working_state_exact(ev)
    walk(ev, random.Random(seed), 5)


def test_remat_then_deremat_is_the_identity_and_hash_is_canonical(bert_tiny):
    g, order = bert_tiny
    ev = DeltaEvaluator(g.copy(), order)
    apps = ev.applications()
    assert apps, "bert_tiny has hot-spot tensors with several readers"
    h = g.copy()
    log = Remat().apply(h, apps[0])
    assert h.lint_problems() == [] and not h.same_as(g)
    Remat().inverse(h, log)
    assert h.same_as(g)
    # two readers rematerialised in either order: the same graph up to node ids, the same hash
    a, b = [x for x in apps if x.params[0] == apps[0].params[0]][:2]
    h1, h2 = g.copy(), g.copy()
    Remat().apply(h1, a)
    Remat().apply(h1, b)
    Remat().apply(h2, b)
    Remat().apply(h2, a)
    assert not h1.same_as(h2) and graph_hash(h1) == graph_hash(h2) != graph_hash(g)
    # De-remat of the copy merges it back: the original graph's hash again
    copy_id = next(n.id for n in h1 if n.recompute_of is not None)
    DeRemat().apply(h1, Application("deremat", (copy_id,)))
    h3 = g.copy()
    Remat().apply(h3, b)
    assert graph_hash(h1) == graph_hash(h3)


class _Loop(Rule):
    """A broken rule: op v reads its own user u (a cycle)."""

    name = "loop"

    def match(self, g, hot=(), where=None):
        return []

    def edit(self, g, app):
        v, u = app.params
        g.set_args(v, [TRef(u, 0), *g.nodes[v].args[1:]])


def test_an_edit_that_makes_a_cycle_is_refused_and_the_state_stays(bert_tiny):
    g, order = bert_tiny
    ev = DeltaEvaluator(g.copy(), order, rules={"loop": _Loop()})
    v = next(n.id for n in g.ops() if isinstance(n.args[0], TRef) and g.users(n.id))
    with pytest.raises(RuleNotApplicable, match="cycle"):  # the rewrite does not apply (OCGGS section 2)
        ev.advance(Application("loop", (v, g.users(v)[0])))
    assert ev.g.same_as(g) and ev.state is ev.root
    assert_working_state_exact(ev)


def test_a_queued_state_is_small(bert_tiny):
    g, order = bert_tiny
    ev = DeltaEvaluator(g.copy(), order)
    states = [ev.child_state(ev.evaluate(a)) for a in ev.applications()[:10]]
    assert all(s.nbytes() < 4096 for s in states)
    assert states[0].applications() == [states[0].app]


def test_a_swap_is_placed_store_after_the_producer_and_load_just_in_time():
    """A swap's child keeps the schedule between and places the copies: the STORE right after the
    tensor's producer, the LOAD after the last peak step before its reader, late enough that
    compute covers the transfer.  On resnet50 the largest early activation then leaves the device
    across the peak at no latency (the simulator's numbers, checked from scratch)."""
    from core.cost.model import AnalyticCost
    from core.ir.graph import NodeKind
    from core.transform.swap import DeSwap, Swap

    g = load_sample_graph("resnet50")
    cost = AnalyticCost("rtx3090")
    order = TracedOrder().order(g)
    ev = DeltaEvaluator(g.copy(), order, cost, rules={"swap": Swap()})
    root = ev.state
    ref = next(k for k in ev.hotspots() if k.index >= 0 and ev.rules["swap"].match(ev.g, [k], ev.where()))
    (app,) = ev.rules["swap"].match(ev.g, [ref], ev.where())
    reader = app.params[2]
    peak_step = max(p for p in ev.where().peaks if p < ev.pos[reader])
    s = ev.advance(app)
    pos = {v: i for i, v in enumerate(ev.order)}
    (st,) = [v for v in ev.g.nodes if ev.g.nodes[v].kind == NodeKind.STORE]
    (ld,) = [v for v in ev.g.nodes if ev.g.nodes[v].kind == NodeKind.LOAD]
    assert pos[st] == pos[ref.node] + 1
    assert peak_step < pos[ld] < pos[reader]
    between = sum(ev.times[v] for v in ev.order[pos[ld] + 1:pos[reader]])
    assert between >= cost.transfer_time(ev.g.nodes[ld].outputs[0].nbytes)
    sim = simulate(ev.g, ev.order, cost)
    assert (s.peak, s.latency) == (sim.peak, sim.latency)
    assert s.peak < root.peak and math.isclose(s.latency, root.latency, rel_tol=1e-9)
    # taking the last swap back: the overlapped copies cost nothing, so nothing comes off the latency
    ev.rules["deswap"] = DeSwap()
    c = ev.evaluate(Application("deswap", (ld,)))
    assert_child_exact(ev, c)
    assert math.isclose(c.latency, root.latency, rel_tol=1e-9)


@pytest.mark.parametrize("name", ["resnet50_tiny", "unet_tiny", "bert_tiny"])
@pytest.mark.parametrize("link", [22e9, 2e8])
def test_children_of_graphs_with_copies_equal_the_simulator(name, link):
    """Once a graph has STORE/LOAD copies a child is simulated (the copy stream moves frees); the
    evaluator's simulation from its caches equals ``simulate`` from scratch, over walks of swaps
    (Swap, SwapLate, DeSwap) mixed with Remat chains, swaps placed and children rescheduled alike --
    on the RTX 3090's host link and on one 100x slower, where stores lag and loads stall."""
    from dataclasses import replace

    from core.cost.devices import get_device
    from core.cost.model import AnalyticCost
    from core.transform.registry import RULES

    g = load_sample_graph(name)
    order = TracedOrder().order(g)
    rules = {k: RULES[k] for k in ("swap", "swap_late", "deswap", "remat", "remat_chain", "deremat")}
    cost = AnalyticCost(replace(get_device("rtx3090"), host_bandwidth=link))
    ev = DeltaEvaluator(g.copy(), order, cost, rules=rules)
    rng = random.Random(0)
    kinds: set[str] = set()
    for _ in range(6):
        apps = ev.applications()
        kids = []
        for a in rng.sample(apps, min(6, len(apps))):
            try:
                kids.append(ev.evaluate(a))
            except (ValueError, GraphError):
                continue
        for c in kids:
            assert_child_exact(ev, c)
            kinds.add(c.app.rule)
        swaps = [c for c in kids if c.app.rule.startswith("swap")]
        ev.commit(ev.child_state(rng.choice(swaps or kids)))
        assert_working_state_exact(ev)
    assert ev.storages.copy_nodes and {"swap", "swap_late"} <= kinds
