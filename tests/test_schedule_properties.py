"""Property tests on random DAGs of at most 10 ops (with views, several-output ops, weights, graph
inputs and outputs), under both memory models (notes/hmcos.md case 6):

* Serenity's DP (flat, and divided at narrow waists) == the brute-force optimum;
* HMCOS with the sequence level only == the optimum (sequence joining is lossless);
* full HMCOS >= the optimum, and its iterations never increase the peak;
* every result is a topological order whose recomputed peak (memory_profile) is the reported one;
* the compiled memory model agrees with memory_profile on any order.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.analysis.lifetimes import check_schedule, memory_profile
from core.ir.builder import GraphBuilder
from core.ir.graph import Graph, TRef
from core.schedule.brute_force import all_topological_orders, brute_force_optimum
from core.schedule.footprint import MemoryModel
from core.schedule.hmcos import HMCOS
from core.schedule.incremental import IncrementalFull
from core.schedule.random_topo import RandomTopological
from core.schedule.serenity import Serenity, unit_dp
from core.schedule.units import UnitProblem

MODELS = [{"free_inputs": False, "count_weights": True}, {"free_inputs": True, "count_weights": False}]


def random_dag(seed: int, n_ops: int) -> Graph:
    """A random DAG: 1-2 inputs, 0-2 weights, ops reading 1-3 earlier tensors; some ops are views
    (no bytes, extend their base's life), have two outputs, have no inputs, or are graph outputs."""
    rng = random.Random(seed)
    b = GraphBuilder(f"dag{seed}")
    pool = [b.input(f"x{k}", rng.randint(1, 16)) for k in range(rng.randint(1, 2))]
    pool += [b.weight(f"w{k}", rng.randint(1, 16)) for k in range(rng.randint(0, 2))]
    last = None
    for i in range(n_ops):
        out = rng.random() < 0.15
        r = rng.random()
        if r < 0.08:
            last = b.op(f"c{i}", [], rng.randint(1, 16), output=out)  # a constant (no inputs)
            pool.append(last)
            continue
        ins = rng.sample(pool, rng.randint(1, min(3, len(pool))))
        if r < 0.28:
            last = b.op(f"v{i}", ins, 0, view_of=ins[0], output=out)
            pool.append(last)
        elif r < 0.43:
            last = b.op(f"m{i}", ins, [rng.randint(0, 16), rng.randint(0, 16)], output=out)
            pool += [last, TRef(last.node, 1)]
        else:
            last = b.op(f"o{i}", ins, rng.randint(0, 16), output=out)
            pool.append(last)
    if not b.graph.outputs:
        b.graph.outputs["out"] = last
    return b.graph


dags = st.builds(random_dag, st.integers(0, 10**9), st.integers(1, 10))
FAST = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _check(g: Graph, s, flags: dict) -> None:
    check_schedule(g, s.order)
    assert s.peak == memory_profile(g, s.order, **flags).peak


@FAST
@given(dags)
def test_dp_equals_brute_force(g):
    for flags in MODELS:
        opt = brute_force_optimum(MemoryModel.build(g, **flags))[0]
        plain = {"forced_moves": False, "beam": None, "max_states": None}
        for sch in (Serenity(soft_budget=False, **flags), Serenity(divide=False, **flags),
                    Serenity(soft_budget=False, **plain, **flags), Serenity(lazy=False, **flags),
                    HMCOS(hierarchy="none", **flags)):
            s = sch.run(g)
            _check(g, s, flags)
            assert s.peak == opt
        s = Serenity(**flags).run(g)
        assert s.info["dp_peak"] == s.peak == opt


@FAST
@given(dags)
def test_sequences_are_lossless_and_hmcos_bounded(g):
    for flags in MODELS:
        opt = brute_force_optimum(MemoryModel.build(g, **flags))[0]
        for kw in ({}, {"forced_moves": False, "beam": None}):
            s = HMCOS(hierarchy="sequence", **kw, **flags).run(g)
            _check(g, s, flags)
            assert s.peak == opt
        for kw in ({}, {"hierarchy": "cell"}, {"strategy_selection": False, "memoize": False},
                   {"soft_budget": False}, {"min_group": 2}):
            s = HMCOS(**kw, **flags).run(g)
            _check(g, s, flags)
            assert s.peak >= opt
            peaks = [h["peak"] for h in s.info["history"] if h["peak"] is not None]
            if kw.get("soft_budget", True):
                assert all(b <= a for a, b in zip(peaks, peaks[1:], strict=False))
            assert s.peak <= min(peaks)


@FAST
@given(dags)
def test_baselines_valid(g):
    for flags in MODELS:
        opt = brute_force_optimum(MemoryModel.build(g, **flags))[0]
        for sch in (RandomTopological(samples=20, **flags), IncrementalFull(**flags)):
            s = sch.run(g)
            _check(g, s, flags)
            assert s.peak >= opt


@FAST
@given(dags, st.integers(0, 10**6))
def test_model_matches_memory_profile(g, k):
    for flags in MODELS:
        model = MemoryModel.build(g, **flags)
        orders = all_topological_orders(model)
        order = [model.ops[i] for i in orders[k % len(orders)]]
        peak, steps = model.simulate(order)
        prof = memory_profile(g, order, **flags)
        assert steps == prof.step_bytes.tolist() and peak == prof.peak
        # the unit problem's DP accounting agrees too
        P = UnitProblem(model, range(model.n))
        res = unit_dp(P)
        assert res is not None
        assert memory_profile(g, P.emit(res[0]), **flags).peak == res[1]


def test_brute_force_checks_every_order():
    g = random_dag(7, 7)
    for flags in MODELS:
        model = MemoryModel.build(g, **flags)
        best = min(model.simulate(o, ids=False)[0] for o in all_topological_orders(model))
        assert brute_force_optimum(model)[0] == best
