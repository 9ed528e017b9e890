"""The greedy one-family passes (``core.search.greedy``): each lowers the simulated peak, never
raises it, and its applications replay onto the input graph to the graph it returns."""

from __future__ import annotations

from core.schedule import get_scheduler
from core.search.greedy import greedy_fission, greedy_remat, greedy_swap
from core.simulate import simulate
from core.transform.registry import RULES
from sample_graphs.store import load_sample_graph
from tests.hand_graphs import mlp


def replay(g, apps):
    h = g.copy()
    for app in apps:
        RULES[app.rule].apply(h, app)
    return h


def test_greedy_fission_splits_the_mlp_and_replays():
    g, _ = mlp()
    r = greedy_fission(g, time_budget=30)
    assert r.applications and r.applications[0].rule == "fission"
    assert r.peak < simulate(g, get_scheduler("traced").run(g).order).peak == 2176 + 2 * 2048
    assert r.peak == simulate(r.graph(g), r.order).peak


def test_greedy_remat_and_swap_lower_a_cnn_peak_and_replay():
    g = load_sample_graph("unet_tiny")
    order = get_scheduler("traced").run(g).order
    base = simulate(g, order).peak
    for fn in (greedy_remat, greedy_swap):
        r = fn(g, order, max_steps=5, time_budget=30)
        assert r.applications, fn.__name__
        assert r.peak < base and r.peak == simulate(r.graph(g), r.order).peak
