"""Checkmate on a coarsened graph (``core.search.peers.coarsen``): groups of consecutive ops in the
traced order, solved as Checkmate's MILP over the groups and mapped back to a plan of ops."""

from __future__ import annotations

import pytest

from core.ir.builder import GraphBuilder
from core.ir.graph import Graph, TensorKind
from core.search.methods import METHODS
from core.search.peers.checkmate import coarse_problem, formulate, problem, size, solve
from core.search.peers.coarsen import (
    BACKWARD,
    CAND,
    Grouping,
    coarse_decision,
    kinds,
    levels,
    module_groups,
    segment_groups,
    working_set,
)
from core.search.peers.common import realise, traced_order
from tests.test_peers import TableCost, check_plan


def layered(layers: int, per: int = 2) -> tuple[Graph, TableCost]:
    """chain(layers * per) with module paths: a_i in "net.layer.L.op{i}" (L = (i-1) // per), its
    gradient g_i in the same module; the loss and its gradient in "head"."""
    n = layers * per
    b = GraphBuilder("layered")
    acts = [b.input("x", 100)]
    for i in range(1, n + 1):
        acts.append(b.op(f"a{i}", [acts[-1]], 100, module=f"net.layer.{(i - 1) // per}.op{i}"))
    loss = b.op("loss", [acts[-1]], 1, module="head")
    gr = b.op("g_loss", [loss, acts[-1]], 100, module="head")
    for i in range(n, 0, -1):
        gr = b.op(f"g{i}", [gr, acts[i - 1]], 100, module=f"net.layer.{(i - 1) // per}.op{i}")
    g = b.graph
    g.outputs.update({"loss": loss, "grad": gr})
    for node in g.ops():
        if node.name.startswith("g"):
            node.outputs[0].kind = TensorKind.GRADIENT
    g.tensor(loss).kind = TensorKind.OUTPUT
    times = {f"a{i}": 1.0 for i in range(1, n + 1)} | {f"g{i}": 2.0 for i in range(1, n + 1)}
    return g, TableCost(times | {"loss": 1.0, "g_loss": 1.0})


def eager_of(g, cost):
    return METHODS["eager"].plans(g, cost)[0]


# ---- the groupings ---------------------------------------------------------------------------------
def check_grouping(g: Graph, grouping: Grouping) -> None:
    order = traced_order(g)
    flat = [v for grp in grouping.groups for v in grp]
    assert flat == order, grouping.name  # every op exactly once, in the traced order
    kind = kinds(g, order)
    for grp in grouping.groups:
        assert grp and len({kind[v] for v in grp}) == 1, grouping.name  # one kind of op per group


def test_groupings_cover_every_op_once_in_the_traced_order_and_get_coarser():
    g, _ = layered(4, 3)
    got = list(levels(g))
    names = [x.name for x in got]
    assert names[0] == "module depth 3"  # depth 4 is one op per group: not coarser than per op
    assert len(names) >= 2  # then depths 2 and 1 ("net.layer", "net"): fewer groups, no segments
    sizes = [len(x.groups) for x in got]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    for grouping in got:
        check_grouping(g, grouping)
    # module depth 3: one group per layer call, forward and backward apart; loss and g_loss ("head") one each
    d3 = dict((x.name, x.groups) for x in got)["module depth 3"]
    by_name = [[g.nodes[v].name for v in grp] for grp in d3]
    assert by_name == [["a1", "a2", "a3"], ["a4", "a5", "a6"], ["a7", "a8", "a9"], ["a10", "a11", "a12"],
                       ["loss"], ["g_loss"], ["g12", "g11", "g10"], ["g9", "g8", "g7"], ["g6", "g5", "g4"],
                       ["g3", "g2", "g1"]]


def test_groupings_of_a_real_graph_cover_every_op_once():
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("bert_tiny")
    order = traced_order(g)
    kind = kinds(g, order)
    got = list(levels(g, order, kind))
    assert len(got) >= 3 and any(x.name.startswith("segments") for x in got)
    for grouping in got:
        check_grouping(g, grouping)
    for n in (5, 40, 1000):
        check_grouping(g, Grouping(f"segments {n}", segment_groups(order, kind, n)))
    # a group of forward candidates never holds a backward op (only such groups are recomputed)
    for grp in module_groups(g, order, kind, 3):
        assert not ({kind[v] for v in grp} >= {CAND, BACKWARD})


# ---- the coarse problem ------------------------------------------------------------------------------
def test_a_groups_working_set_and_outputs_by_hand():
    """Layer 0 of layered(2, 3) is a1 -> a2 -> a3 (100 B each); a3 is read by a4 (layer 1, forward)
    and every a_i by the backward.  Its outputs: one checkpoint of the storages the forward reads
    on (a3's), one of those only the backward reads (a1's and a2's).  Working set: all three (the
    backward keeps them)."""
    g, cost = layered(2, 3)
    order = traced_order(g)
    grouping = Grouping("module depth 3", module_groups(g, order, kinds(g, order), 3))
    p = coarse_problem(g, cost, grouping)
    assert [g.nodes[v].name for v in p.groups[0]] == ["a1", "a2", "a3"]
    assert sorted(p.outs[0]) == [100, 200] and p.work[0] == 300 and p.cost[0] == 3.0
    assert 0 in p.cand and 2 not in p.cand  # the loss (a graph output) is not recomputed
    # an internal intermediate nobody outside reads is freed inside the group: a chain group whose
    # only output is its last tensor holds two tensors at a time
    b = GraphBuilder("internal")
    x = b.input("x", 100)
    t1 = b.op("t1", [x], 100)
    t2 = b.op("t2", [t1], 100)
    t3 = b.op("t3", [t2], 100)
    h = b.graph
    ids = [t1.node, t2.node, t3.node]
    assert working_set(h, ids, {t3}, set()) == 200
    assert working_set(h, ids, {t3, t1}, set()) == 300


def test_a_recomputed_group_recomputes_only_the_ops_its_readers_need():
    """layered(2, 3) at module depth 3: layer 0 (a1..a3) recomputed in stage g3..g1's group: its
    readers there (g3, g2, g1) read a2, a1 and x, so a3 is not recomputed."""
    g, cost = layered(2, 3)
    order = traced_order(g)
    groups = module_groups(g, order, kinds(g, order), 3)
    last = len(groups) - 1
    d = coarse_decision(g, groups, {(last, 0)})
    name = {v: g.nodes[v].name for v in g.nodes}
    again = [name[v] for v, k in d.events if k]
    assert again == ["a1", "a2"]
    r = realise(g, d)
    assert r.stats["recomputed"] == 2


# ---- the method on coarse problems ----------------------------------------------------------------------
@pytest.mark.parametrize("granularity", ["module depth 3", "segments 4"])
def test_coarse_plans_are_valid_and_within_their_budgets(granularity):
    g, cost = layered(3, 2)
    eager = eager_of(g, cost)
    run = METHODS["checkmate"].run(g, cost, budgets=(0.9, 0.8, 0.7, 0.6), granularity=granularity)
    assert run.plans, run.failures
    for p in run.plans:
        check_plan(g, p, cost)  # replays, lints, runs its order, its simulation is a fresh one
        assert p.peak <= p.stats["budget"] < eager.peak
        assert p.stats["granularity"] == granularity and p.stats["coarse_nodes"] < len(g.ops())
    for f in run.failures:
        assert f.reason.startswith(("infeasible", "not run"))


def test_coarse_is_a_restriction_no_better_than_the_op_level_optimum():
    g, cost = layered(3, 2)
    eager = eager_of(g, cost)
    fine = problem(g, cost)
    order = traced_order(g)
    coarse = coarse_problem(g, cost, Grouping("module depth 3", module_groups(g, order, kinds(g, order), 3)))
    assert size(coarse) < size(fine)
    compared = 0
    for b in (0.9, 0.8, 0.7, 0.6, 0.5):
        limit = int(b * eager.peak)
        op = solve(fine, limit)
        co = solve(coarse, limit, g=g)
        if co.decision is not None:
            assert op.decision is not None  # feasible coarse -> feasible per op
            assert co.objective >= op.objective - 1e-9, b
            compared += 1
    assert compared >= 2
    # the same through the method: the coarse plan is never faster than the op-level optimum
    for b in (0.8, 0.7):
        (o,) = METHODS["checkmate"].plans(g, cost, budgets=(b,), granularity="op", solver="milp")
        for c in METHODS["checkmate"].plans(g, cost, budgets=(b,), granularity="module depth 3"):
            assert c.latency >= o.latency - 1e-9


def test_the_coarse_working_set_keeps_the_milp_memory_honest():
    """The coarse formulation counts each group's working set: its memory never lies below what the
    realised schedule holds, so the MILP's plan meets the budget it was solved at."""
    g, cost = layered(3, 2)
    eager = eager_of(g, cost)
    order = traced_order(g)
    p = coarse_problem(g, cost, Grouping("segments 3", segment_groups(order, kinds(g, order), 3)))
    assert any(w > p.mem(i) + p.kept[i] for i, w in enumerate(p.work))
    f = formulate(p)
    for b in (0.9, 0.8, 0.7):
        limit = int(b * eager.peak)
        sol = solve(p, limit, f=f, g=g)
        if sol.decision is None:
            continue
        r = realise(g, sol.decision)
        from core.simulate import simulate

        assert simulate(r.graph, r.order, cost).peak <= limit, b


def test_a_graph_too_large_for_the_op_level_milp_still_gets_points_and_says_its_granularity():
    g, cost = layered(6, 2)
    eager = eager_of(g, cost)
    nv = len(formulate(problem(g, cost)).model.integer)
    run = METHODS["checkmate"].run(g, cost, budgets=(0.9, 0.8, 0.7), milp_max_vars=nv // 2)
    assert run.plans, run.failures
    for p in run.plans:
        check_plan(g, p, cost)
        assert p.stats["granularity"] == "module depth 3" and p.stats["coarse_nodes"] == 14 < len(g.ops())
        assert p.stats["variables"] <= nv // 2 and p.peak <= p.stats["budget"] < eager.peak
        assert p.stats["solver"] in ("milp", "lp-rounded") and "finer_passed_over" in p.stats
    # coarser still (module depth 2: the whole forward one group, which holds every activation
    # while it runs): no budget is met, and each says at what granularity it is infeasible
    run = METHODS["checkmate"].run(g, cost, budgets=(0.9, 0.8), milp_max_vars=100)
    assert run.plans == [] and all(f.reason.startswith("infeasible at granularity module depth 2")
                                   for f in run.failures)
    # the op level where it fits (the default caps): the same graph solved per op
    run = METHODS["checkmate"].run(g, cost, budgets=(0.8,))
    assert [p.stats["granularity"] for p in run.plans] == ["op"]


def test_max_vars_below_the_coarsest_granularity_is_not_attempted():
    g, cost = layered(3, 2)
    run = METHODS["checkmate"].run(g, cost, max_vars=0)
    assert run.plans == [] and run.failures[0].reason.startswith("not attempted")
    with pytest.raises(ValueError, match="granularity"):
        METHODS["checkmate"].run(g, cost, granularity="layers 3")
