"""Every peer spends its time budget or exhausts its grid: the budget bisection shared by the warm
start's DTR seeds and the DTR peer (``peers.dtr.refine_budgets``), the DTR peer's refinement after
its grid, and the grid peers' finer grids (sqrt(n), offloading, micro-batching and their
checkpointed variants) -- counted (``MethodRun.extra``), never timed by the wall clock."""

from __future__ import annotations

import itertools
import random

import pytest

from core.cost.model import AnalyticCost
from core.search.methods import run_method
from core.search.peers.dtr import BUDGETS, refine_budgets
from core.search.seeds import SEED_BUDGETS, SEED_REFINE, SEED_SLACK
from sample_graphs.store import load_sample_graph

COST = AnalyticCost("rtx3090")
GRID = tuple(sorted(BUDGETS))  # 0.3 .. 0.95


def staircase(edge: float = 0.4137, floor: float = 0.331):
    """A toy DTR: fails under ``floor``; peak = the budget's bytes; twice the latency under ``edge``."""
    calls: list[float] = []

    def run(b: float):
        calls.append(b)
        if b < floor:
            return "infeasible"
        return int(b * 10**6), (1.0 if b >= edge else 2.0)

    return run, calls


def test_bisection_finds_the_staircase_edge_then_the_floor_to_the_resolution_asked():
    run, calls = staircase()
    done = {b: run(b) for b in GRID}
    calls.clear()
    new = refine_budgets(run, done, halvings=8, tol=1e-6, digits=6)  # the resolution: the halvings alone
    assert new.exhausted
    assert [b for b, _ in new] == calls  # the runs, in the order made
    assert all(done[b] == r for b, r in new)
    step = 0.05 / 2 ** 8
    # the latency edge, to the resolution: the lowest fast budget and the highest slow one
    fast = min(b for b, r in done.items() if isinstance(r, tuple) and r[1] == 1.0)
    slow = max(b for b, r in done.items() if isinstance(r, tuple) and r[1] == 2.0)
    assert slow < 0.4137 <= fast and fast - slow < 2 * step
    # the floor, to the resolution, after every gap of the frontier was split
    ok = min(b for b, r in done.items() if isinstance(r, tuple))
    failed = max(b for b, r in done.items() if not isinstance(r, tuple))
    assert failed < 0.331 <= ok and ok - failed < 2 * step
    edge_runs = [i for i, (b, _) in enumerate(new) if 0.4 < b < 0.45]
    floor_runs = [i for i, (b, _) in enumerate(new) if 0.3 < b < 0.35]
    assert edge_runs and floor_runs and max(edge_runs) < min(floor_runs)
    # no other pair was split: equal latencies leave no gap (the plans between are dominated)
    assert all(0.3 < b < 0.35 or 0.4 < b < 0.45 for b, _ in new)
    # each split lies between two neighbours run before it
    for i, (b, _) in enumerate(new):
        before = sorted([*GRID, *(x for x, _ in new[:i])])
        lo, hi = max(x for x in before if x < b), min(x for x in before if x > b)
        assert b == round((lo + hi) / 2, 6)


def test_bisection_honours_a_fake_clock_and_a_count_of_runs():
    run, calls = staircase()
    grid = {b: run(b) for b in GRID}
    calls.clear()
    ticks = itertools.count()  # one tick per reading of the clock
    new = refine_budgets(run, dict(grid), halvings=8, deadline=3.5, clock=lambda: next(ticks))
    assert not new.exhausted and len(new) == len(calls) == 4  # read at 0, 1, 2, 3: run; at 4: stop
    calls.clear()
    new = refine_budgets(run, dict(grid), halvings=8, max_runs=2)
    assert not new.exhausted and [b for b, _ in new] == calls and len(calls) == 2
    full = refine_budgets(run, dict(grid), halvings=8)
    assert [b for b, _ in full][:2] == [b for b, _ in new]  # a cut run is the start of the full one


def old_refinement(run, plans: dict, slack, base: float, refine: int, late) -> None:
    """The warm start's refinement as ``seeds.dtr_seeds`` wrote it before ``refine_budgets`` (plans:
    budget -> (peak, latency), or None where DTR failed)."""
    for x in slack:
        for _ in range(refine):
            lowest = min((b for b, p in plans.items() if p is not None and p[1] <= x * base), default=None)
            below = max((b for b in plans if lowest is not None and b < lowest), default=None)
            if below is None or plans[below] is None or late():
                break
            mid = round((below + lowest) / 2, 4)
            if mid in plans:
                break
            r = run(mid)
            plans[mid] = r if isinstance(r, tuple) else None


@pytest.mark.parametrize("seed", range(40))
def test_the_seeds_rule_makes_the_runs_the_old_code_made(seed):
    """On random DTR-like curves (latency falling with the budget in random steps, a random floor)
    and random grids already run, the slack rule of ``refine_budgets`` runs exactly the budgets, in
    the order, of the refinement ``dtr_seeds`` had before it was factored out."""
    rng = random.Random(seed)
    floor = rng.choice([0.3, 0.42, 0.5, 0.61])
    steps = sorted(rng.uniform(0.3, 1.0) for _ in range(rng.randint(1, 6)))
    jumps = [rng.uniform(0.01, 0.2) for _ in steps]

    def run(b: float):
        if b < floor:
            return "infeasible"
        return int(b * 10**6), 1.0 + sum(j for s, j in zip(steps, jumps, strict=True) if b < s)

    grid = [b for b in SEED_BUDGETS if rng.random() < 0.6]
    ran_old: list[float] = []
    plans = {}
    for b in grid:
        r = run(b)
        plans[b] = r if isinstance(r, tuple) else None
    done = {b: run(b) for b in grid}
    old_refinement(lambda b: ran_old.append(b) or run(b), plans, SEED_SLACK, 1.0, SEED_REFINE, lambda: False)
    new = refine_budgets(run, done, slack=SEED_SLACK, base=1.0, halvings=SEED_REFINE)
    assert [b for b, _ in new] == ran_old


def _seed_runs(name: str) -> tuple[list[float], list[float]]:
    """The budgets ``dtr_seeds`` ran on sample ``name``, and those the old rule (its bisection over
    the grid, then ``old_refinement``) runs on the same DTR results."""
    import core.search.peers.dtr as dtr
    from core.search.moptimizer import MOptimizer
    from core.search.seeds import dtr_seeds

    g = load_sample_graph(name)
    m = MOptimizer(g, COST)
    ran: list[float] = []
    real = dtr.budget_plan

    def spy(graph, cost, fraction, free, *a, **k):
        ran.append(fraction)
        return real(graph, cost, fraction, free, *a, **k)

    dtr.budget_plan = spy
    try:
        seeds = dtr_seeds(m, 600.0)
    finally:
        dtr.budget_plan = real
    free, base = seeds.dtr_free, m.root.latency
    cache: dict[float, tuple | str] = {}

    def run(b: float):
        if b not in cache:
            try:
                p = real(g, COST, b, free, prepared=seeds.dtr_prepared)
                cache[b] = (p.peak, p.latency)
            except dtr.DTRFailure as e:
                cache[b] = str(e)
        return cache[b]

    old: list[float] = []
    plans: dict[float, tuple | None] = {}

    def go(b: float):
        if b not in plans:
            old.append(b)
            r = run(b)
            plans[b] = r if isinstance(r, tuple) else None
        return plans[b]

    budgets = SEED_BUDGETS
    above = next((i for i, b in enumerate(budgets) if int(b * free["dtr_peak"]) >= free["dtr_floor"]), len(budgets))
    for x in SEED_SLACK:  # the bisection, a third of the way up
        lo, hi = above, len(budgets) - 1
        while lo <= hi:
            mid = lo + (hi - lo) // 3
            p = go(budgets[mid])
            if p is not None and p[1] <= x * base:
                hi = mid - 1
            else:
                lo = mid + 1
    old_refinement(lambda b: go(b), plans, SEED_SLACK, base, SEED_REFINE, lambda: False)
    return ran, old


def test_dtr_seeds_run_the_budgets_the_old_rule_runs_on_real_graphs():
    for name in ("gpt_neo_tiny", "bert_tiny"):
        ran, old = _seed_runs(name)
        assert ran == old, name
    # recorded before the bisection was factored out of ``dtr_seeds`` (the old rule's runs)
    assert _seed_runs("gpt_neo_tiny")[0] == [0.75, 0.85, 0.8, 0.775, 0.7875, 0.825, 0.8375, 0.7625, 0.7562]


# ---- the DTR peer ---------------------------------------------------------------------------------
def best_at(points, latency: float) -> float:
    return min((p for p, lat in points if lat <= latency), default=float("inf"))


@pytest.mark.parametrize("name", ["gpt_neo_tiny", "unet_tiny"])
def test_dtr_refinement_adds_points_and_never_a_worse_best(name):
    g = load_sample_graph(name)
    grid = run_method("dtr", g, COST, time_budget=600, refine=False)
    fine = run_method("dtr", g, COST, time_budget=600, refine=True)
    assert grid.extra["refined"] == 0 and fine.extra["refined"] > 0
    assert fine.extra["exhausted"] and fine.extra["tried"] == fine.extra["grid"] == len(BUDGETS)
    a = {(p.label, p.peak, p.latency) for p in grid.plans}
    b = {(p.label, p.peak, p.latency) for p in fine.plans}
    assert a < b  # the grid's plans, and more
    assert len({(p.peak, p.latency) for p in fine.plans}) > len({(p.peak, p.latency) for p in grid.plans})
    pa, pb = [(p.peak, p.latency) for p in grid.plans], [(p.peak, p.latency) for p in fine.plans]
    for lat in {x for _, x in pa + pb}:  # at every latency, the refined best at or below the grid's
        assert best_at(pb, lat) <= best_at(pa, lat)
    assert any(best_at(pb, lat) < best_at(pa, lat) for lat in {x for _, x in pb})


# ---- the grid peers ---------------------------------------------------------------------------------
def test_micro_batching_tries_every_count_dividing_the_batch_and_stops():
    from tests.test_baselines import B, KernelCost, mlp_step

    g = mlp_step()
    run = run_method("microbatch", g, KernelCost("rtx3090"), time_budget=10**9)
    counts = [k for k in range(2, B + 1) if B % k == 0]
    assert run.extra["grid"] == run.extra["tried"] == len(counts) and run.extra["exhausted"]
    assert [p.stats["parts"] for p in run.plans] == counts  # given in increasing k
    spent = run_method("microbatch", g, KernelCost("rtx3090"), time_budget=0.0)
    assert spent.extra["tried"] == 0 and spent.extra["untried"] == len(counts) and not spent.extra["exhausted"]
    assert not spent.plans and all("time budget" in f.reason for f in spent.failures)


def test_offloading_reaches_every_size_threshold_and_stops():
    from core.search.peers.offload import FRACTIONS, saved_activations, size_grid

    g = load_sample_graph("unet_tiny")
    run = run_method("offload", g, COST, time_budget=10**9, refine=True)
    saved = saved_activations(g)
    largest = max(g.tensor(r).nbytes for r, _, _ in saved)
    sets = {frozenset(r for r, _, _ in saved if d is None or g.tensor(r).nbytes * d >= largest) for d in FRACTIONS}
    sets |= {frozenset(r for r, _, _ in pick) for _, pick in size_grid(g, saved)}
    thresholds = {g.tensor(r).nbytes for r, _, _ in saved}
    assert len(sets) >= len(thresholds) > 4  # finer than the four fractions
    x = run.extra
    assert x["exhausted"] and x["untried"] == 0 and x["tried"] + x["stale"] == x["grid"] + x["stale"] == len(sets)
    assert len(run.plans) == x["tried"] - x["duplicates"] > 4
    base = run_method("offload", g, COST, time_budget=10**9, refine=False)
    assert [p.label for p in run.plans][:len(base.plans)] == [p.label for p in base.plans]


def test_sqrt_n_refines_until_a_level_gives_nothing_new():
    from tests.test_peers import chain

    g, cost = chain(16)
    base = run_method("sqrt_n", g, cost, time_budget=10**9, variants=("segments",), refine=False)
    run = run_method("sqrt_n", g, cost, time_budget=10**9, variants=("segments",), refine=True)
    assert [p.stats["segments"] for p in run.plans][:3] == [p.stats["segments"] for p in base.plans] == [2, 4, 8]
    assert len(run.plans) > len(base.plans) and run.extra["exhausted"] and run.extra["untried"] == 0
    # every segment count from 2 to n = 17 forward ops was reached (the grid's finest levels give nothing new)
    assert run.extra["tried"] > 3


@pytest.mark.parametrize("method", ["dtr", "sqrt_n", "offload", "offload_ckpt", "microbatch", "microbatch_ckpt"])
def test_no_method_gives_two_plans_of_equal_peak_and_latency(method):
    g = load_sample_graph("unet_tiny")
    run = run_method(method, g, COST, time_budget=60, refine=True)
    points = [(p.peak, p.latency) for p in run.plans]
    assert points and len(points) == len(set(points))
    assert run.extra["exhausted"]  # a tiny graph: every grid exhausted well within the budget
