"""RematChain: the readers after a peak step read recomputed copies, and the copies' inputs that
would otherwise stay alive across the peak are recomputed too (hand-checked on a small graph);
DeRemat of its last copy erases the copies that nothing reads any more."""

from __future__ import annotations

from core.ir.builder import GraphBuilder
from core.schedule.baselines import TracedOrder
from core.search.delta import DeltaEvaluator
from core.simulate import simulate
from core.transform.remat import DeRemat, Remat, RematChain
from core.transform.rule import Application


def cnn_like():
    """conv C -> batch norm N -> ReLU R -> next layer F -> G (the peak); the backward reads R and
    C late (BR, BC), as a CNN's backward reads its ReLU's output and its batch norm's input."""
    b = GraphBuilder()
    x = b.input("x", 1)
    c = b.op("C", [x], 8)
    n = b.op("N", [c], 8)
    r = b.op("R", [n], 8)
    f = b.op("F", [r], 8)
    g = b.op("G", [f], 16)
    h = b.op("H", [g], 1)
    br = b.op("BR", [r, h], 1)
    b.op("BC", [c, br], 1, output=True)
    return b


def test_chain_recomputes_the_input_a_single_remat_would_keep_alive():
    b = cnn_like()
    g = b.graph
    ev = DeltaEvaluator(g.copy(), TracedOrder().order(g))
    # memory at G: x 1 + C 8 + R 8 + F 8 + G 16
    assert ev.peak == 41
    R, N, BR = b.ids("R", "N", "BR")
    # a plain Remat(R, BR) keeps N alive instead of R: the peak stays
    assert ev.evaluate(Application("remat", (R, BR))).peak == 41
    hot = [k for k in ev.hotspots() if k.index >= 0]
    apps = RematChain().match(ev.g, hot, ev.where())
    # R's chain: BR reads copies of N and R; C is read by BC anyway, so it is not recomputed
    assert Application("remat_chain", (1, BR, N, R)) in apps
    c = ev.evaluate(Application("remat_chain", (1, BR, N, R)))
    assert c.peak == 33  # at G: x 1 + C 8 + F 8 + G 16
    h = ev.g.copy()
    log = RematChain().apply(h, c.app)
    order = ev.order[:c.lo] + list(c.window) + ev.order[c.hi + 1:]
    sim = simulate(h, order)
    assert (sim.peak, sim.latency) == (c.peak, c.latency)
    copies = log.added()
    assert [h.nodes[v].recompute_of for v in copies] == [N, R]
    assert set(h.preds(BR)) == {copies[1], b.ids("H")[0]}


def test_match_needs_the_schedule_and_skips_plain_remats():
    b = cnn_like()
    g = b.graph
    ev = DeltaEvaluator(g.copy(), TracedOrder().order(g))
    hot = [k for k in ev.hotspots() if k.index >= 0]
    assert RematChain().match(ev.g, hot) == []  # no schedule, no chains
    for app in RematChain().match(ev.g, hot, ev.where()):
        k = app.params[0]
        assert k + 1 < len(app.params) and not (k == 1 and len(app.params) == 3)


def test_deremat_of_the_last_copy_erases_the_chain():
    b = cnn_like()
    g = b.graph
    R, N, BR = b.ids("R", "N", "BR")
    h = g.copy()
    log = RematChain().apply(h, Application("remat_chain", (1, BR, N, R)))
    n_copy, r_copy = log.added()
    DeRemat().apply(h, Application("deremat", (r_copy,)))
    assert n_copy not in h.nodes and r_copy not in h.nodes
    assert h.same_as(g)
    # a plain Remat's copy of a copy is merged from its end, as before
    h = g.copy()
    (r1,) = Remat().apply(h, Application("remat", (R, BR))).added()
    assert h.nodes[r1].recompute_of == R


def test_bad_chains_are_refused_and_leave_the_graph_as_it_was():
    b = cnn_like()
    g = b.graph
    R, N, BR, x = b.ids("R", "N", "BR", "x")
    h = g.copy()
    for params in [(1, BR, R, N),  # N comes after R reads it
                   (1, BR, x),  # a placeholder is not recomputed
                   (1, N, R),  # N reads nothing of the chain
                   (1, R, R)]:
        try:
            RematChain().apply(h, Application("remat_chain", params))
        except ValueError:
            pass
        else:
            raise AssertionError(params)
        assert h.same_as(g)
