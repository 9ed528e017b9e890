"""Rematerialization and swapping end to end on every tiny workload: each hot-spot tensor recomputed
for each of its users and swapped out for each of its users, one at a time, then seeded random
combinations; every transformed graph is scheduled, exported, run, and compared with eager
PyTorch (loss and every gradient) and with the simulator (the measured live bytes equal the
simulated ones after every op, so the peaks are equal); De-remat / De-swap restore the graph exactly.

``pytest -s`` prints how many graphs each workload checked."""

from __future__ import annotations

import random

import pytest

from core.ir.graph import Graph, NodeKind, TRef
from core.schedule import get_scheduler
from core.schedule.baselines import TracedOrder
from core.search.delta import DeltaEvaluator
from core.simulate import simulate
from core.transform.remat import DeRemat, Remat, RematChain
from core.transform.rule import Application
from core.transform.swap import DeSwap, Swap
from tests.workload_cases import TINY, Case

COMBINATIONS = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=TINY)
def case(request) -> Case:
    return Case(request.param)


def hotspots(g: Graph) -> list[TRef]:
    sim = simulate(g, get_scheduler("traced").run(g).order)
    return [s.root for s in sim.hotspots() if s.alloc >= 0 and not s.scratch]


def undo_application(g: Graph, app: Application, added: list[int]) -> Application:
    """The De-rule application that takes ``app`` back (its added copy, or its LOAD)."""
    if app.rule == "remat":
        (dup,) = added
        return Application("deremat", (dup,))
    (load,) = [v for v in added if g[v].kind == NodeKind.LOAD]
    return Application("deswap", (load,))


DE = {"remat": DeRemat(), "swap": DeSwap()}
RULE = {"remat": Remat(), "swap": Swap()}


def test_each_hotspot_tensor_recomputed_and_swapped_for_each_user(case: Case):
    g = case.g
    hot = hotspots(g)
    apps = Remat().match(g, hot) + Swap().match(g, hot)
    assert any(a.rule == "remat" for a in apps) and any(a.rule == "swap" for a in apps)
    peaks = []
    for app in apps:
        h = g.copy()
        log = RULE[app.rule].apply(h, app)
        res = case.verify(h, str(app))
        peaks.append(res["simulated_peak_bytes"])
        DE[app.rule].apply(h, undo_application(h, app, log.added()))
        assert h.same_as(g), app
    base = simulate(g, get_scheduler("traced").run(g).order).peak
    assert min(peaks) < base  # some single application lowers the peak
    print(f"\n{g.name}: {len(hot)} hot-spot tensors, {len(apps)} single applications verified")


def test_random_combinations_of_remat_and_swap(case: Case):
    g = case.g
    for seed in range(COMBINATIONS):
        rng = random.Random(seed)
        h = g.copy()
        undo: list[tuple[str, Application]] = []
        for _ in range(rng.randint(2, 5)):
            hot = hotspots(h)
            apps = Remat().match(h, hot) + Swap().match(h, hot)
            if not apps:
                break
            app = rng.choice(apps)
            log = RULE[app.rule].apply(h, app)
            undo.append((app.rule, undo_application(h, app, log.added())))
        case.verify(h, f"combination {seed}: {len(undo)} applications")
        for rule, inv in reversed(undo):
            DE[rule].apply(h, inv)
        assert h.same_as(g), seed
    print(f"\n{g.name}: {COMBINATIONS} combinations verified")


def test_each_remat_chain_on_the_hotspots(case: Case):
    """Every RematChain on the hot-spots of the traced order matches eager PyTorch and the
    simulator; DeRemat of its copies (last first) restores the graph."""
    g = case.g
    ev = DeltaEvaluator(g.copy(), TracedOrder().order(g))
    apps = RematChain().match(ev.g, [k for k in ev.hotspots() if k.index >= 0], ev.where())
    for app in apps:
        h = g.copy()
        added = RematChain().apply(h, app).added()
        case.verify(h, str(app))
        for v in reversed(added):
            if v in h.nodes:
                DeRemat().apply(h, Application("deremat", (v,)))
        assert h.same_as(g), app
    print(f"\n{g.name}: {len(apps)} chains verified")
