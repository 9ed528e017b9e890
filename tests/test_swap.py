"""Swapping by hand (MAGIS section 5.2): the Swap / DeSwap rules, the copy stream's timing (a Store
that lags behind compute, a Load that makes compute wait) and the placement of the copies."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.lifetimes import memory_profile
from core.cost.model import CostModel
from core.ir.builder import GraphBuilder
from core.ir.graph import Graph, Node, NodeKind, TRef
from core.schedule import get_scheduler
from core.schedule.placement import place_copies
from core.simulate import simulate
from core.transform.rule import Application
from core.transform.swap import DeSwap, Swap, store_of


class TableCost(CostModel):
    """Seconds per node by name (copies by the name of their kind)."""

    def __init__(self, times: dict[str, float]) -> None:
        self.times = times

    def node_time(self, g: Graph, node: Node) -> float:
        key = node.kind.value if node.kind in (NodeKind.STORE, NodeKind.LOAD) else node.name
        return self.times[key.split("_recompute")[0]]


def swapped_graph(d_bytes: int = 500) -> tuple[Graph, dict[str, int]]:
    """x -> a (1000 B, stored) ; x -> c -> d -> e ; f(load(a), e).  Returns the graph and ids."""
    b = GraphBuilder("lag")
    x = b.input("x", 100)
    a = b.op("a", [x], 1000)
    c = b.op("c", [x], 10)
    d = b.op("d", [c], d_bytes)
    e = b.op("e", [d], 10)
    b.op("f", [a, e], 10, output=True)
    g = b.graph
    Swap().apply(g, Application("swap", (a.node, 0, g.by_name("f").id)))
    ids = {n.name: n.id for n in g}
    ids["store"] = store_of(g, a)
    ids["load"] = next(n.id for n in g if n.kind == NodeKind.LOAD)
    return g, ids


COST = TableCost({"a": 1, "c": 1, "d": 1, "e": 1, "f": 1, "store": 2.5, "load": 1})


def test_a_store_that_lags_behind_compute_keeps_its_tensor_alive_until_the_copy_ends():
    g, ids = swapped_graph()
    order = [ids[k] for k in ("a", "store", "c", "d", "e", "load", "f")]
    sim = simulate(g, order, COST)
    # compute: a [0,1] c [1,2] d [2,3] e [3,4]; the store copies a over [1, 3.5]
    assert sim.start[1] == 1 and sim.end[1] == 3.5
    # freed when the copy is done: alive through the last step issued before 3.5 (e, issued at 3)
    a_free = {s.root.node: s.free for s in sim.memory.storages}[ids["a"]]
    assert a_free == 4
    # per step: x 100 resident; d (500) overlaps the copy, so a's 1000 B are still there
    assert sim.memory.step_bytes.tolist() == [1100, 1100, 1110, 1610, 1610, 1110, 1120]
    # the schedulers' untimed view frees a at its STORE step and misses that peak
    untimed = memory_profile(g, order)
    assert untimed.step_bytes.tolist() == [1100, 1100, 110, 610, 610, 1110, 1120]
    assert untimed.peak == 1120 < sim.peak == 1610
    # over time (seconds): the same peak, during [3, 3.5) where d, e and a's storage overlap
    times, live = sim.memory_over_time()
    assert live.max() == 1610
    at = lambda t: int(live[np.searchsorted(times, t, side="right") - 1])  # noqa: E731
    assert at(3.2) == 1610 and at(3.7) == 610 + 0  # a freed at 3.5; d and e (+x, c gone) remain
    assert sim.memory.host_peak == 1000


def test_a_load_that_makes_compute_wait_adds_exactly_the_wait_to_the_latency():
    g, ids = swapped_graph()
    order = [ids[k] for k in ("a", "store", "c", "d", "e", "load", "f")]
    sim = simulate(g, order, COST)
    # the load is issued after e (t=4) and takes 1 s: f waits from 4 to 5
    assert (sim.start[5], sim.end[5]) == (4, 5)
    assert sim.start[6] == 5 and sim.latency == 6
    compute = sum(COST.times[k] for k in "acdef")
    assert sim.compute_wait == 1 and sim.latency == compute + sim.compute_wait
    # issued one op earlier (before e, t=3) it queues behind the store until 3.5: f still waits 0.5
    early = [ids[k] for k in ("a", "store", "c", "d", "load", "e", "f")]
    sim2 = simulate(g, early, COST)
    assert (sim2.start[4], sim2.end[4]) == (3.5, 4.5)
    assert sim2.compute_wait == 0.5 and sim2.latency == compute + 0.5
    # with a store done by 2.5 the copy is hidden: no wait, latency = compute time
    sim3 = simulate(g, early, TableCost({**COST.times, "store": 1.5}))
    assert sim3.compute_wait == 0 and sim3.latency == compute


def chain_with_swap(n_mid: int = 5) -> tuple[Graph, dict[str, int]]:
    """a -> c1 -> ... -> c_n -> f(c_n, a), a swapped out for f."""
    b = GraphBuilder("chain")
    x = b.input("x", 100)
    a = b.op("a", [x], 1000)
    prev = a
    for i in range(1, n_mid + 1):
        prev = b.op(f"c{i}", [prev], 10)
    b.op("f", [prev, a], 10, output=True)
    g = b.graph
    Swap().apply(g, Application("swap", (a.node, 0, g.by_name("f").id)))
    return g, {n.name: n.id for n in g} | {"load": next(n.id for n in g if n.kind == NodeKind.LOAD),
                                            "store": store_of(g, a)}


def test_placement_stores_early_and_loads_as_late_as_the_transfer_stays_hidden():
    g, ids = chain_with_swap()
    cost = TableCost({"a": 1, **{f"c{i}": 1 for i in range(1, 6)}, "f": 1, "store": 2, "load": 2.5})
    worst = [ids[k] for k in ("a", "c1", "c2", "c3", "c4", "c5", "store", "load", "f")]
    assert simulate(g, worst, cost).compute_wait == 4.5  # store then load, both after c5
    placed = place_copies(g, worst, cost)
    names = [g[v].name for v in placed]
    # store right after a; the load before c3: c3..c5 take 3 s >= 2.5 s (c4, c5 only 2 s)
    assert names == ["a", "a_store", "c1", "c2", g[ids["load"]].name, "c3", "c4", "c5", "f"]
    sim = simulate(g, placed, cost)
    assert sim.compute_wait == 0 and sim.latency == 7
    # a's 1000 B are freed once the store is done (3 s), before the load allocates them again
    assert memory_profile(g, placed).peak == sim.peak == 100 + 1000 + 10 + 10


def test_placement_moves_a_load_earlier_when_the_copy_stream_is_busy():
    g, ids = chain_with_swap()
    # the store takes until 4.5: a load issued before c3 (t=3) would end at 7 > 6 (f's start)
    cost = TableCost({"a": 1, **{f"c{i}": 1 for i in range(1, 6)}, "f": 1, "store": 3.5, "load": 2.5})
    placed = place_copies(g, [ids[k] for k in ("a", "c1", "c2", "c3", "c4", "c5", "store", "load", "f")], cost)
    sim = simulate(g, placed, cost)
    # the load cannot start before the store ends (4.5): f waits 1 s wherever the load goes
    assert sim.compute_wait == pytest.approx(1.0)


def test_schedulers_place_the_copies_of_a_swapped_graph():
    g, ids = chain_with_swap()
    cost = TableCost({"a": 1, **{f"c{i}": 1 for i in range(1, 6)}, "f": 1, "store": 2.5, "load": 2.5})
    for name in ("traced", "rpo", "serenity"):
        s = get_scheduler(name).run(g, cost)
        assert s.order.index(ids["store"]) == s.order.index(ids["a"]) + 1, name
        assert simulate(g, s.order, cost).compute_wait == 0, name
        assert s.peak == simulate(g, s.order, cost).peak


# ---- the rules ------------------------------------------------------------------------------------
def small() -> tuple[Graph, dict[str, int]]:
    b = GraphBuilder("small")
    x = b.input("x", 100)
    a = b.op("a", [x], 1000)
    v = b.op("v", [a], 0, view_of=a)
    c = b.op("c", [a], 10)
    d = b.op("d", [c, a], 10)
    b.op("e", [d, a, v], 10, output=True)
    return b.graph, {n.name: n.id for n in b.graph}


def test_swap_adds_one_store_per_tensor_and_one_load_per_user():
    g, ids = small()
    orig = g.copy()
    a = TRef(ids["a"], 0)
    Swap().apply(g, Application("swap", (ids["a"], 0, ids["d"])))
    st = store_of(g, a)
    assert st is not None and g[st].out.device == "host" and g[st].inputs() == (a,)
    (l1,) = [n.id for n in g if n.kind == NodeKind.LOAD]
    assert g[l1].inputs() == (TRef(st, 0),) and g[l1].out.device == "device"
    assert TRef(l1, 0) in g[ids["d"]].inputs() and a not in g[ids["d"]].inputs()
    Swap().apply(g, Application("swap", (ids["a"], 0, ids["e"])))
    assert [n.id for n in g if n.kind == NodeKind.STORE] == [st]  # the store is shared
    l2 = max(n.id for n in g if n.kind == NodeKind.LOAD)
    assert g.lint_problems() == []
    # De-swap in either order restores the graph exactly; the store goes with its last load
    h = g.copy()
    DeSwap().apply(g, Application("deswap", (l1,)))
    assert store_of(g, a) == st
    DeSwap().apply(g, Application("deswap", (l2,)))
    assert g.same_as(orig)
    DeSwap().apply(h, Application("deswap", (l2,)))
    DeSwap().apply(h, Application("deswap", (l1,)))
    assert h.same_as(orig)


def test_swap_matches_only_tensors_it_can_free_and_refuses_the_rest():
    g, ids = small()
    hot = [TRef(ids[k], 0) for k in ("x", "a", "v", "c")]
    apps = Swap().match(g, hot)
    # a (read by v's view op, c, d, e) and c (read by d); never the input x or the view v
    assert {(p[0], p[2]) for p in (a.params for a in apps)} == {
        (ids["a"], ids["v"]), (ids["a"], ids["c"]), (ids["a"], ids["d"]), (ids["a"], ids["e"]),
        (ids["c"], ids["d"])}
    orig = g.copy()
    for bad in [(ids["x"], 0, ids["a"]), (ids["v"], 0, ids["e"]), (ids["a"], 0, ids["x"])]:
        with pytest.raises(ValueError):
            Swap().apply(g, Application("swap", bad))
        assert g.same_as(orig)  # a refused application changes nothing
    with pytest.raises(ValueError):
        DeSwap().apply(g, Application("deswap", (ids["a"],)))


# ---- SwapLate: every reader after the peak on one LOAD ---------------------------------------------
def late() -> tuple[Graph, dict[str, int]]:
    """x -> a (1000 B) ; v = view(a) ; c = op(a) ; big = op(c) (2000 B, the peak) ; d = op(big) ;
    e = op(d, a) ; f = op(e, v): a is read before the peak (v, c) and after it (e, and f through
    the early view v)."""
    b = GraphBuilder("late")
    x = b.input("x", 100)
    a = b.op("a", [x], 1000)
    v = b.op("v", [a], 0, view_of=a)
    c = b.op("c", [a], 20)
    big = b.op("big", [c], 2000)
    d = b.op("d", [big], 10)
    e = b.op("e", [d, a], 10)
    b.op("f", [e, v], 10, output=True)
    return b.graph, {n.name: n.id for n in b.graph}


def place_and_simulate(g: Graph, cost: CostModel):
    order = place_copies(g, get_scheduler("traced").run(g).order, cost)
    return simulate(g, order, cost)


def _where(g: Graph, order: list[int]):
    from core.transform.rule import Where
    prof = memory_profile(g, order)
    return Where({v: i for i, v in enumerate(order)}, tuple(prof.peak_steps))


def test_swap_late_gives_every_reader_after_the_peak_one_load_and_remakes_early_views():
    from core.transform.swap import SwapLate
    g, ids = late()
    orig = g.copy()
    order = get_scheduler("traced").run(g).order
    assert [g[v].name for v in order] == ["a", "v", "c", "big", "d", "e", "f"]
    where = _where(g, order)
    assert where.peaks == (3,)  # big: x + a + c + big
    (app,) = SwapLate().match(g, [TRef(ids["a"], 0)], where)
    assert app.params == (ids["a"], 0, 2, ids["e"], ids["f"], ids["v"])
    cost = TableCost({"a": 1, "v": 0, "c": 1, "big": 5, "d": 1, "e": 1, "f": 1, "store": 1, "load": 1})
    assert simulate(g, order, cost).peak == 100 + 1000 + 20 + 2000
    # per reader, Swap frees nothing: e's load leaves a alive for f's view, and f's for e
    for u in ("e", "f"):
        h = g.copy()
        Swap().apply(h, Application("swap", (ids["a"], 0, ids[u] if u == "e" else ids["v"])))
        assert place_and_simulate(h, cost).peak >= 100 + 1000 + 20 + 2000
    log = SwapLate().apply(g, app)
    assert g.lint_problems() == []
    st = store_of(g, TRef(ids["a"], 0))
    (load,) = [n for n in g if n.kind == NodeKind.LOAD]
    assert load.inputs() == (TRef(st, 0),)
    assert ids["v"] not in g.nodes  # the early view is made again on the load, and the dead one goes
    (v2,) = [n for n in g if n.name.startswith("v_recompute")]
    assert v2.recompute_of is None  # its original is gone: a plain view of the load
    assert v2.inputs() == (TRef(load.id, 0),) and v2.out.alias == TRef(load.id, 0)
    assert TRef(load.id, 0) in g[ids["e"]].inputs() and TRef(v2.id, 0) in g[ids["f"]].inputs()
    new = [ids["a"], st, ids["c"], ids["big"], ids["d"], load.id, ids["e"], v2.id, ids["f"]]
    assert simulate(g, new, cost).peak == 100 + 20 + 2000  # a is on the host across big
    # taken back exactly; DeSwap leaves a valid graph whose readers read a again
    SwapLate().inverse(g, log)
    assert g.same_as(orig)
    SwapLate().apply(g, app)
    DeSwap().apply(g, Application("deswap", (load.id,)))
    assert g.lint_problems() == [] and store_of(g, TRef(ids["a"], 0)) is None
    assert TRef(ids["a"], 0) in g[ids["e"]].inputs()


def test_swap_late_of_a_loaded_copy_loads_the_same_host_copy_again():
    from core.transform.swap import SwapLate
    g, ids = late()
    SwapLate().apply(g, Application("swap_late", (ids["a"], 0, 1, ids["e"])))
    (l1,) = [n.id for n in g if n.kind == NodeKind.LOAD]
    SwapLate().apply(g, Application("swap_late", (l1, 0, 1, ids["e"])))
    loads = [n for n in g if n.kind == NodeKind.LOAD]
    assert len(loads) == 2 and len({n.inputs() for n in loads}) == 1  # one STORE, read twice
    assert not g.users(l1) and g.lint_problems() == []
    with pytest.raises(ValueError):  # f does not read the first load
        SwapLate().apply(g, Application("swap_late", (l1, 0, 1, ids["f"])))


def test_where_finds_the_first_peak_strictly_inside_a_lifetime():
    from core.transform.rule import Where

    w = Where({}, (3, 7, 9))
    assert [w.peak_between(lo, hi) for lo, hi in [(0, 5), (3, 9), (3, 7), (7, 10), (9, 12), (0, 3)]] == \
        [3, 7, None, 9, None, None]
