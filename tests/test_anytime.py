"""The M-Optimizer as an anytime search (a point early, then improvement, the budget kept on long
graphs): the DTR seeds adopted as soon as their bisection ends, the first slack's bisection allowed
its own share, seeds offered to the search once, the F-Tree built only when something needs it,
greedy fission skipped where its share cannot pay for it, and the stage record that
``bench/profile_search.py`` prints."""

from __future__ import annotations

import pytest

from core.cost.model import AnalyticCost
from core.search import moptimizer
from core.search.moptimizer import MOptimizer, optimize
from core.search.seeds import SEED_SLACK, Seeds, adopt_seeds, dtr_seeds, seed
from sample_graphs.store import load_sample_graph

COST = AnalyticCost("rtx3090")


@pytest.fixture(scope="module")
def gpt():
    return load_sample_graph("gpt_neo_tiny")


def test_the_first_slacks_bisection_runs_on_its_own_share(gpt):
    m = MOptimizer(gpt, COST)
    none = dtr_seeds(m, 0.0)  # no time: not even the unbudgeted run (it has a deadline too)
    assert none.plans == [] and none.dtr_free is None and "time budget spent" in none.runs["dtr unbudgeted"]
    first = dtr_seeds(m, 0.0, first=60.0)  # the first slack (+10%) gets its share; the others none
    assert first.plans
    base = m.root.latency
    within = [p for p in first.plans if p.latency <= SEED_SLACK[0] * base]
    assert within, "the +10% bisection ended with a plan within +10%"
    alone = dtr_seeds(m, 60.0, slack=SEED_SLACK[:1], refine=0)  # that slack's bisection, unhurried
    assert min(p.peak for p in within) == min(p.peak for p in alone.plans if p.latency <= SEED_SLACK[0] * base)
    assert len(dtr_seeds(m, 60.0).plans) > len(first.plans)  # the other slacks and the refinement: more runs


def test_seeds_are_adopted_after_dtr_and_offered_once(gpt):
    m = MOptimizer(gpt, COST)
    out = seed(m, 30.0)
    names = [st.name for st in m.stages]
    assert names[:4] == ["evaluator", "DTR seeds within +10%", "offloading-with-checkpointing seeds", "DTR seeds, every slack"]
    dtr_stage = m.stages[1]
    assert dtr_stage.states >= 1 and dtr_stage.peak_at_10pct < m.root.peak  # a point right after DTR
    assert out.adopted and len(out.tried) >= len(out.adopted)
    places = []
    orig = m.adopt
    m.adopt = lambda p: places.append(p) or orig(p)
    adopt_seeds(m, out)  # everything chosen was offered before: nothing is placed again
    assert places == []


def test_the_ftree_is_built_on_first_use_and_greedy_fission_skipped_where_it_cannot_pay(gpt, monkeypatch):
    m = MOptimizer(gpt, COST)
    assert m._ftree is None
    m.evaluator_seconds = 1e9  # a graph whose one simulation outlasts any share
    m.warm_start(2.0, seed_budget=2.0)
    names = [st.name for st in m.stages]
    assert "greedy fission" not in names and "Remat steps" in names
    # where one simulation is cheap and no seed takes the time first, greedy fission runs (building the F-Tree)
    monkeypatch.setattr("core.search.seeds.seed", lambda m, budget, first=0.0: Seeds())
    m2 = MOptimizer(gpt, COST)
    m2.evaluator_seconds = 0.0
    m2.warm_start(4.0, seed_budget=2.0)
    assert "greedy fission" in [st.name for st in m2.stages] and m2._ftree is not None
    assert m2.ftree is m2._ftree  # built once


def test_the_stage_record_follows_the_run_and_its_points_only_go_down(gpt):
    pf = optimize(gpt, pareto=True, time_budget=4.0, device="rtx3090")
    stages = pf.meta["stages"]
    assert stages[0]["name"] == "evaluator" and stages[-1]["name"] == "Pareto sweep (Algorithm 3)"
    names = [st["name"] for st in stages]
    assert names.index("DTR seeds within +10%") < names.index("Swap steps within +5% from the seeds") < names.index("Remat steps")
    for a, b in zip(stages, stages[1:], strict=False):
        assert a["end"] <= b["start"] + 1e-6  # one after the other
        assert b["peak_at_10pct"] <= a["peak_at_10pct"] and b["peak_at_5pct"] <= a["peak_at_5pct"]  # an archive
    eager = pf.points[-1].peak
    within = [p.peak for p in pf.points[:-1] if p.latency <= 1.10 * pf.points[-1].latency * (1 + 1e-12)]
    assert min(within) == stages[-1]["peak_at_10pct"] < eager  # the frontier is the archive's


def test_no_seed_no_quick_swap_phase(gpt, monkeypatch):
    monkeypatch.setattr("core.search.seeds.seed", lambda m, budget, first=0.0: Seeds())
    m = MOptimizer(gpt, COST)
    m.warm_start(2.0)
    assert not any(st.name.endswith("from the seeds") for st in m.stages)
    assert moptimizer.DEFAULT_CONFIG.quick_swap_share > 0


def test_a_rebudgeted_dtr_run_is_a_fresh_run(gpt):
    """DTR's tables built once (``DTRSim.rebudget``) give the same plan at every budget as a run
    built from scratch, and a run leaves the shared tables as they were."""
    from core.search.peers.dtr import DTRFailure, DTRSim, budget_plan

    prepared = DTRSim(gpt, COST, None)
    _, free = prepared.run()
    tables = (dict(prepared.last_use), {k: list(v) for k, v in prepared.banish.items()}, set(prepared.evictable))
    compared = 0
    for b in (0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.5, 0.3):
        try:
            fresh = budget_plan(gpt, COST, b, free)
        except DTRFailure as e:
            with pytest.raises(DTRFailure, match=str(e)[:30]):
                budget_plan(gpt, COST, b, free, prepared=prepared)
            continue
        again = budget_plan(gpt, COST, b, free, prepared=prepared)
        assert (again.peak, again.latency, again.order) == (fresh.peak, fresh.latency, fresh.order)
        assert [a.params for a in again.applications] == [a.params for a in fresh.applications]
        compared += 1
    assert compared >= 3
    assert (prepared.last_use, {k: list(v) for k, v in prepared.banish.items()}, prepared.evictable) == tables


def test_on_stage_hears_every_stage_and_cancel_stops_after_the_current_one(gpt):
    import threading

    heard = []
    pf = optimize(gpt, pareto=True, time_budget=3.0, device="rtx3090", on_stage=heard.append)
    assert [st.to_dict() for st in heard] == pf.meta["stages"][1:]  # the evaluator's is recorded before any
    cancel = threading.Event()

    def stop_after_dtr(st) -> None:
        if st.name.startswith("DTR seeds"):
            cancel.set()

    early = optimize(gpt, pareto=True, time_budget=60.0, device="rtx3090", on_stage=stop_after_dtr, cancel=cancel)
    names = [st["name"] for st in early.meta["stages"]]
    assert names[:2] == ["evaluator", "DTR seeds within +10%"]
    assert not any(n.startswith(("offloading", "greedy", "Remat", "Swap")) for n in names)
    assert early.meta["stopped"] == "cancelled"
    dtr_point = early.meta["stages"][1]["peak_at_10pct"]
    assert min(p.peak for p in early.points[:-1]) <= dtr_point < early.points[-1].peak  # DTR's seed is kept


def test_the_quick_swap_steps_run_where_the_user_waits_not_at_a_long_budget(gpt):
    m = MOptimizer(gpt, COST)
    m.warm_start(2.0, seed_budget=2.0, quick=False)
    assert not any(st.name.endswith("from the seeds") for st in m.stages)
    ops = len(gpt.ops())
    assert not moptimizer.pareto_spikes(gpt, 1.0) and moptimizer.pareto_spikes(gpt, 40.0 * ops / 1000)
    short = optimize(gpt, pareto=True, time_budget=1.0, device="rtx3090")  # under 30 s per thousand ops
    assert any(st["name"].endswith("from the seeds") for st in short.meta["stages"])
