"""MAGIS incremental scheduling (Algorithm 2): valid splices, peaks equal to full scheduling on
NASNet-like graphs under local rewrites, and the fallbacks."""

from __future__ import annotations

import random

from core.analysis.lifetimes import check_schedule, memory_profile
from core.ir.graph import TensorKind, TensorMeta, TRef
from core.schedule.footprint import MemoryModel, rpo_order
from core.schedule.incremental import IncrementalFull, incremental_schedule, refine_peak_windows
from sample_graphs.nas_random import local_rewrite, random_nasnet

MODEL = {"free_inputs": True, "count_weights": False}


def test_incremental_matches_full_scheduling():
    same = total = 0
    for seed in range(3):
        g = random_nasnet(seed, cells=6, blocks=4, normal=2)
        order = IncrementalFull(**MODEL).run(g).order
        rng = random.Random(seed)
        for _ in range(4):
            new, mutated = local_rewrite(g, rng)
            info: dict = {}
            o = incremental_schedule(g, order, new, mutated, info=info, **MODEL)
            check_schedule(new, o)
            assert info["window_ops"] < len(new.ops())
            p_is = memory_profile(new, o, **MODEL).peak
            p_fs = IncrementalFull(**MODEL).run(new).peak
            assert p_is <= 1.1 * p_fs
            same += p_is == p_fs
            total += 1
            g, order = new, o
    assert same >= total - 1


def test_no_mutation_keeps_the_schedule():
    g = random_nasnet(5, cells=3, blocks=3)
    order = IncrementalFull(**MODEL).run(g).order
    o = incremental_schedule(g, order, g, set(), **MODEL)
    check_schedule(g, o)
    assert memory_profile(g, o, **MODEL).peak <= memory_profile(g, order, **MODEL).peak


def test_far_apart_rewire_falls_back_to_a_valid_order():
    g = random_nasnet(2, cells=4, blocks=3)
    order = IncrementalFull(**MODEL).run(g).order
    new = g.copy()
    first, last = order[0], order[-1]
    n = new.add_node(name="bridge", op="synthetic", args=[TRef(first, 0)],
                     outputs=[TensorMeta((8,), "uint8", TensorKind.ACTIVATION)])
    new.nodes[last].args = list(new.nodes[last].args) + [TRef(n.id, 0)]
    new.invalidate()
    o = incremental_schedule(g, order, new, {n.id, last}, **MODEL)
    check_schedule(new, o)


def test_refine_windows_never_raise_the_peak():
    g = random_nasnet(4, cells=5, blocks=4)
    m = MemoryModel.build(g, **MODEL)
    start = rpo_order(m)
    o, info = refine_peak_windows(m, start, max_windows=20)
    check_schedule(g, o)
    assert info["to_peak"] == m.simulate(o)[0] <= m.simulate(start)[0] == info["from_peak"]
