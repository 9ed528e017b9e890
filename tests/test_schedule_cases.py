"""Hand-checked scheduling cases of notes/hmcos.md (cases 1-4), narrow waists, the CLI, and the
schedulers' reported peaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.analysis.dominators import dag_idom, dominator_tree
from core.analysis.lifetimes import memory_profile
from core.analysis.narrow_waist import graph_partition, narrow_waist, nw_values
from core.ir import io
from core.ir.builder import GraphBuilder
from core.schedule import get_scheduler
from core.schedule.brute_force import brute_force_optimum
from core.schedule.footprint import MemoryModel
from core.schedule.hierarchy import build_hierarchy
from core.schedule.incremental import get_reschedule_interval
from core.schedule.units import UnitProblem

HMCOS_MODEL = {"free_inputs": True, "count_weights": False}
ROOT = Path(__file__).resolve().parents[1]


def case1():
    b = GraphBuilder("case1")
    x = b.input("x", 4)
    a = b.op("A", [x], 8)
    b.op("B", [a], 2, output=True)
    return b


def case2():
    b = GraphBuilder("case2")
    x = b.input("x", 1)
    a = b.op("A1", [x], 5)
    b1 = b.op("B1", [x], 8)
    bb = b.op("B2", [b1], 1)
    b.op("J", [a, bb], 1, output=True)
    return b


def test_case1_chain_footprints():
    b = case1()
    order = b.ids("A", "B")
    m = memory_profile(b.graph, order, **HMCOS_MODEL)
    assert m.step_bytes.tolist() == [12, 10] and m.peak == 12
    model = MemoryModel.build(b.graph, **HMCOS_MODEL)
    assert model.simulate(order) == (12, [12, 10])
    # transients mu_t = [4, 8, 2]: before A, after A, after B
    assert model.initial_live() == 4
    assert model.live_after({0}) == 8 and model.live_after({0, 1}) == 2
    # the chain is one sequence (x is read by A only)
    P = UnitProblem(model, range(model.n), sequences=True)
    assert [[model.ops[i] for i in u] for u in P.units] == [order]


@pytest.mark.parametrize("names,peak", [(("A1", "B1", "B2", "J"), 14), (("B1", "A1", "B2", "J"), 14),
                                        (("B1", "B2", "A1", "J"), 10)])
def test_case2_order_matters(names, peak):
    b = case2()
    assert memory_profile(b.graph, b.ids(*names), **HMCOS_MODEL).peak == peak


def test_case2_optimum_and_no_join():
    b = case2()
    g = b.graph
    model = MemoryModel.build(g, **HMCOS_MODEL)
    assert brute_force_optimum(model)[0] == 10
    P = UnitProblem(model, range(model.n), sequences=True)
    names = [[g[model.ops[i]].name for i in u] for u in P.units]
    assert ["B1", "B2"] not in names  # x is shared: B1, B2 must not join (Condition 1)
    for method in ("serenity", "hmcos", "brute"):
        s = get_scheduler(method, **HMCOS_MODEL).run(g)
        assert s.peak == 10, method
        assert [g[i].name for i in s.order] == ["B1", "B2", "A1", "J"]


def test_case3_sequence_join():
    b = GraphBuilder("case3")
    x = b.input("x", 4)
    p = b.op("P", [x], 4)
    q = b.op("Q", [p], 4)
    b.op("R", [q], 2, output=True)
    model = MemoryModel.build(b.graph, **HMCOS_MODEL)
    P = UnitProblem(model, range(model.n), sequences=True)
    assert [[b.graph[model.ops[i]].name for i in u] for u in P.units] == [["P", "Q", "R"]]


def case4():
    b = GraphBuilder("case4")
    x = b.input("in", 4)
    a = b.op("a", [x], 4)
    bb = b.op("b", [a], 4)
    c = b.op("c", [a], 4)
    b.op("d", [bb, c], 4, output=True)
    return b


def test_case4_dominators():
    b = case4()
    g = b.graph
    ia, ib, ic, id_ = b.ids("a", "b", "c", "d")
    dom = dominator_tree(g)
    assert dom.idom[ib] == dom.idom[ic] == dom.idom[id_] == ia
    pdom = dominator_tree(g, post=True)
    assert pdom.idom[ia] == pdom.idom[ib] == pdom.idom[ic] == id_
    # the DAG dominators used by the hierarchy agree (ops numbered a, b, c, d = 0..3); the reversed
    # graph renumbered d, c, b, a = 0..3 has the same shape: d post-dominates a, b and c
    assert dag_idom([[], [0], [0], [1, 2]]) == [-1, 0, 0, 0]


def test_views_and_multi_outputs_in_the_model():
    # x -> M (p 6, q 3); V = view of p; P reads V; Q reads q; J joins -- peaks agree with lifetimes
    from core.ir.graph import TRef

    b = GraphBuilder("mv")
    x = b.input("x", 4)
    m = b.op("M", [x], [6, 3])
    v = b.op("V", [m], 0, view_of=m)
    r = b.op("P", [v], 1)
    s = b.op("Q", [TRef(m.node, 1)], 1)
    b.op("J", [r, s], 1, output=True)
    g = b.graph
    for flags in ({}, HMCOS_MODEL):
        model = MemoryModel.build(g, **flags)
        opt = brute_force_optimum(model)[0]
        for method in ("serenity", "hmcos", "random", "incremental"):
            sch = get_scheduler(method, **flags).run(g)
            assert sch.peak == memory_profile(g, sch.order, **flags).peak
            assert sch.peak >= opt
        assert get_scheduler("serenity", **flags).run(g).peak == opt


def test_narrow_waist_values():
    # a -> b -> {c, d} -> e -> f, plus g hanging off b: nw(a)=nw(b)=0, nw(c)=nw(d)=2, ...
    preds = [[], [0], [1], [1], [2, 3], [4], [1]]
    nw = nw_values(preds)
    assert nw[0] == 0 and nw[1] == 0
    assert nw[2] == 2 and nw[3] == 2  # c: d and g independent
    assert nw[4] == 1 and nw[5] == 1  # e, f: g independent
    assert nw[6] == 4
    parts = graph_partition(preds, threshold=0)
    assert parts == [[0], [1], [2, 3, 4, 5, 6]]
    b = case4()
    nwg = narrow_waist(b.graph)
    ia, ib, ic, id_ = b.ids("a", "b", "c", "d")
    assert nwg == {ia: 0, ib: 1, ic: 1, id_: 0}


def test_reschedule_interval_prefers_low_nw_boundaries():
    nw = [50] * 80
    nw[20] = 3
    nw[15] = 0
    nw[50] = 12
    L, R = get_reschedule_interval(nw, 38, 42)
    assert (L, R) == (21, 49)  # left: the nearest nw <= 10; right: no nw <= 10, the smallest in reach
    # boundaries never closer than the margin
    L, R = get_reschedule_interval([0] * 60, 28, 32)
    assert L == 28 - 4 and R == 32 + 4


def test_hierarchy_groups_are_convex():
    from sample_graphs.nas_random import random_nasnet

    g = random_nasnet(3, cells=4, blocks=4)
    model = MemoryModel.build(g, **HMCOS_MODEL)
    P = UnitProblem(model, range(model.n), sequences=True)
    H = build_hierarchy(P, "complete")
    assert H.groups, "NASNet-like cells should form groups"
    for units in H.groups:
        inside = set(units)
        # no path leaves the group and re-enters it
        reach = set()
        stack = [s for u in units for s in P.usucc[u] if s not in inside]
        while stack:
            v = stack.pop()
            if v in reach:
                continue
            reach.add(v)
            assert v not in inside
            stack.extend(P.usucc[v])


def test_cli_schedule_methods(tmp_path):
    from sample_graphs.nas_random import random_nasnet

    path = io.save(random_nasnet(1, cells=3, blocks=3), tmp_path / "g.json.gz")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    peaks = {}
    for method in ("traced", "rpo", "serenity", "hmcos", "incremental", "random"):
        p = subprocess.run([sys.executable, "-m", "app.cli", "schedule", str(path), "--method", method,
                            "--time-budget", "20", "--json"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
        peaks[method] = res["peak_bytes"]
    assert peaks["hmcos"] <= peaks["rpo"] and peaks["serenity"] <= peaks["rpo"]


def test_registry_lists_every_strategy_by_its_name():
    from core.schedule import SCHEDULERS
    from core.schedule.base import Scheduler

    assert list(SCHEDULERS) == ["traced", "rpo", "random", "brute", "serenity", "hmcos", "incremental"]
    for name, cls in SCHEDULERS.items():
        assert issubclass(cls, Scheduler) and cls.name == name
        assert type(get_scheduler(name)) is cls
    with pytest.raises(ValueError, match=r"unknown schedule 'nope'; known: brute, hmcos, incremental"):
        get_scheduler("nope")
