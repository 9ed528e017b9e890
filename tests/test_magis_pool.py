"""MAGIS with SwapAdvisor's planner (``search.magis_pool``): a base -- a plan of graph transformations,
here sqrt(n) checkpointing's -- swapped within a memory limit below its own peak.  The plan is the
base's applications then the swaps; exported, it gives eager PyTorch's loss and every gradient, and
the device bytes measured on the CPU fallback equal the simulated ones."""

from __future__ import annotations

import pytest

from core.codegen.verify import problems, verify_graph
from core.cost.model import AnalyticCost
from core.search.magis_pool import bases_of, pool_plans
from core.search.methods import run_method
from core.search.peers.swapadvisor import pool_occupancy
from core.search.plan import check_order, replay, sim_options
from tests.workload_cases import Case


@pytest.fixture(scope="module")
def unet():
    case = Case("unet_tiny")
    cost = AnalyticCost("rtx3090")
    frontier = run_method("sqrt_n", case.g, cost).plans
    return case, cost, frontier


def test_a_base_swapped_below_its_peak_matches_eager(unet):
    case, cost, frontier = unet
    bases = bases_of(case.g, frontier, cost)
    low = min(frontier, key=lambda p: p.peak)
    floor = min(b.problem.working_set() for b in bases)
    limit = int(floor + 0.5 * (low.peak - floor))
    assert floor < limit < low.peak
    plans, failures = pool_plans(case.g, frontier, cost, [("half way", limit)], 20, lambda _m: None)
    assert failures == [] and len(plans) == 1
    plan = plans[0]
    assert plan.method == "magis_pool" and plan.peak <= limit and plan.stats["swap_ins"] > 0
    base = next(p for p in frontier if p.label == plan.stats["base_label"])
    assert plan.applications[:plan.stats["base_steps"]] == base.applications
    assert plan.latency >= base.latency  # the swaps cost time, never save it
    h = replay(case.g, plan.applications)
    check_order(h, plan.order)
    res = verify_graph(h, plan.order, case.tensors, case.ref, schedule="magis_pool", cost=cost,
                       sim_options=sim_options(plan))
    assert problems(res) == [], problems(res)
    assert res["measured_peak_bytes"] == plan.peak and res["compared"] > 1
    if "allocation" in plan.stats:  # the app's pool view rebuilds it on the base's graph
        occ = pool_occupancy(case.g, plan, cost)
        assert occ.device_bytes <= limit


def test_a_limit_the_frontier_meets_needs_no_swap(unet):
    case, cost, frontier = unet
    top = max(frontier, key=lambda p: p.peak)
    plans, failures = pool_plans(case.g, frontier, cost, [("roomy", top.peak)], 5, lambda _m: None)
    assert failures == []
    best = min((p for p in frontier if p.peak <= top.peak), key=lambda p: p.latency)
    assert plans[0].applications == best.applications and plans[0].latency == best.latency


def test_a_limit_below_every_working_set_is_one_line(unet):
    case, cost, frontier = unet
    floor = min(b.problem.working_set() for b in bases_of(case.g, frontier, cost))
    plans, failures = pool_plans(case.g, frontier, cost, [("tight", floor - 1)], 5, lambda _m: None)
    assert plans == [] and len(failures) == 1 and "least working set" in failures[0].reason
