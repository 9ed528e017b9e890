"""SwapAdvisor end to end (issue 30): on every tiny workload, at three memory limits between the least
a plan needs and the eager peak, SwapAdvisor's and ODSwap's plans export as scripts that give eager
PyTorch's loss and every gradient, and the device bytes measured on the CPU fallback (host copies kept
apart) equal the simulated ones step by step."""

from __future__ import annotations

import pytest

from core.codegen.verify import problems, verify_graph
from core.cost.model import AnalyticCost
from core.schedule.swap_planner import SwapProblem
from core.search.methods import run_method
from core.search.peers.base import eager_peak
from core.search.plan import check_order, replay, sim_options
from tests.workload_cases import TINY, Case

FRACTIONS = (0.05, 0.35, 0.7)  # of the way from the least a plan needs to the eager peak


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_swap_plans_match_eager_and_measured_bytes_equal_simulated(name):
    case = Case(name)
    cost = AnalyticCost("rtx3090")
    p = SwapProblem.from_graph(case.g, cost)
    peak = eager_peak(case.g, cost)
    lo = max(p.working_set(), p.pool_floor())
    swapped = 0
    for f in FRACTIONS:
        limit = int(lo + f * (peak - lo))
        for method, opts in (("swapadvisor", {"generations": 2, "population": 12}), ("odswap", {})):
            run = run_method(method, case.g, cost, time_budget=60, memory_limit=limit, **opts)
            assert run.plans, (method, limit, [x.reason for x in run.failures])
            plan = run.plans[0]
            assert plan.peak <= limit, (method, f)
            h = replay(case.g, plan.applications)
            check_order(h, plan.order)
            res = verify_graph(h, plan.order, case.tensors, case.ref, schedule=f"{method}_{f}", cost=cost,
                               sim_options=sim_options(plan))
            assert problems(res) == [], (method, f, problems(res))
            assert res["first_step_mismatch"] is None and res["measured_peak_bytes"] == plan.peak
            assert "loss" in res and res["compared"] > 1
            swapped += plan.stats["swap_ins"]
    assert swapped > 0  # the tighter limits swap
