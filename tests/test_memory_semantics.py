"""One memory semantics: every consumer agrees with ``lifetimes.storage_events`` on random graphs
with views, multi-output ops, STORE/LOAD, recomputed copies and FISSION nodes -- the memory
profile, the schedulers' MemoryModel, codegen's release plan, the hot-spots, the simulator's timed
curve and the delta evaluator's curve."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.lifetimes import fission_scratch, memory_profile, storage_events, storage_table
from core.codegen.release import release_plan
from core.ir.builder import GraphBuilder
from core.ir.graph import FissionSpec, NodeKind, TRef
from core.schedule.footprint import MemoryModel
from core.search.delta import DeltaEvaluator
from core.simulate import simulate
from tests.randgraphs import random_graph, random_order

FLAGS = [dict(free_inputs=False, count_weights=True), dict(free_inputs=True, count_weights=False)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), order_seed=st.integers(0, 100), n_ops=st.integers(2, 24))
def test_every_consumer_agrees_with_the_event_plan(seed, order_seed, n_ops):
    g = random_graph(seed, n_ops)
    assert g.lint_problems() == []
    order = random_order(g, order_seed)
    for flags in FLAGS:
        prof = memory_profile(g, order, **flags)
        events = [s for s in storage_events(g, order, **flags) if s.device == "device"]
        # the curve is the sum of the event intervals
        n = len(order)
        curve = np.zeros(n, np.int64)
        for s in events:
            curve[max(s.alloc, 0):s.free + 1] += s.nbytes
        assert curve.tolist() == prof.step_bytes.tolist()
        # the schedulers' compiled model
        model = MemoryModel.build(g, **flags)
        peak, steps = model.simulate(order)
        assert steps == prof.step_bytes.tolist() and peak == prof.peak
        # hot-spots: every storage alive at a peak step, by brute force
        brute = {(s.root, s.scratch) for s in events if s.nbytes > 0
                 and any(s.alloc <= p <= s.free for p in prof.peak_steps)}
        assert {(s.root, s.scratch) for s in prof.hotspots()} == brute
    # codegen deletes each storage's last name exactly at its free step
    plan = release_plan(g, order)
    deleted = {r: i for i, rs in enumerate(plan.after) for r in rs}
    for s in storage_events(g, order):
        if s.alloc < 0 or s.scratch or s.root in {g.storage_root(r) for r in g.outputs.values()}:
            continue
        names = [deleted[r] for r in deleted if g.storage_root(r) == s.root]
        assert max(names) == s.free, (s, names)
    # the delta evaluator's curve (copies completing within their step)
    ev = DeltaEvaluator(g.copy(), order)
    assert ev.curve.tolist() == memory_profile(g, order).step_bytes.tolist()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), order_seed=st.integers(0, 100))
def test_timed_copies_only_delay_frees(seed, order_seed):
    g = random_graph(seed, 20)
    order = random_order(g, order_seed)
    untimed = memory_profile(g, order)
    sim = simulate(g, order)
    assert (sim.memory.step_bytes >= untimed.step_bytes).all()
    has_copies = any(g[v].kind == NodeKind.STORE for v in order)
    if not has_copies:
        assert sim.memory.step_bytes.tolist() == untimed.step_bytes.tolist()
    times, live = sim.memory_over_time()
    # the step peak is the peak over time (equal unless the op that frees a storage takes no time)
    assert (live >= 0).all() and live.max() <= sim.peak
    if all(sim.end[k] > sim.start[k] for k in range(len(order))):
        assert live.max() == sim.peak


def test_store_frees_the_device_copy_when_the_copy_completes():
    b = GraphBuilder("swap")
    x = b.input("x", 100)
    a = b.op("a", [x], 1_000_000)  # 1 MB stored to the host
    c = b.op("c", [a], 10)
    g = b.graph
    from core.ir.graph import TensorMeta

    st_ = g.add_node(name="store", op="store", kind=NodeKind.STORE, args=[a],
                     outputs=[TensorMeta((1_000_000,), "uint8", device="host")])
    d = b.op("d", [c], 10)
    e = b.op("e", [d], 10)
    ld = g.add_node(name="load", op="load", kind=NodeKind.LOAD, args=[TRef(st_.id)],
                    outputs=[TensorMeta((1_000_000,), "uint8")])
    b.op("f", [TRef(ld.id), e], 10, output=True)
    order = b.ids("a", "c", "store", "d", "e", "load", "f")
    untimed = memory_profile(g, order)
    a_free = {s.root.node: s.free for s in untimed.storages}[a.node]
    assert a_free == 2  # the STORE's step
    sim = simulate(g, order)
    timed_free = {s.root.node: s.free for s in sim.memory.storages}[a.node]
    # d and e are tiny: the 1 MB copy is still running when they are issued
    assert timed_free > 2
    assert sim.memory.host_peak == 1_000_000
    times, live = sim.memory_over_time()
    t_copy_end = sim.end[2]
    assert live[np.searchsorted(times, t_copy_end, side="left") - 1] >= 1_000_000


def test_fission_holds_one_part_of_its_intermediates_during_its_step():
    sub = GraphBuilder("part")
    h = sub.op("h", [sub.input("x", 50)], 400)  # one part's intermediate
    sub.op("y", [h], 50, output=True)
    b = GraphBuilder("outer")
    x = b.input("x", 100)
    f = b.op("f", [x], 100)
    g = b.graph
    node = g[f.node]
    node.kind = NodeKind.FISSION
    node.fission = FissionSpec(sub.graph, 2, [0], [("cat", 0)])
    b.op("z", [f], 10, output=True)
    assert g.lint_problems() == []
    assert fission_scratch(node) == 450  # h and the part's output y
    order = b.ids("f", "z")
    prof = memory_profile(g, order)
    # step 0: input 100 + full output 100 + scratch 450; step 1: input + f + z
    assert prof.step_bytes.tolist() == [650, 210]
    table = storage_table(g)
    assert sum(s.scratch for s in table.storages) == 1
