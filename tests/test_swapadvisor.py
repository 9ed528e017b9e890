"""SwapAdvisor (issue 30): the notes' seven hand-checked cases (notes/swapadvisor.md), the pool, the
planner's decisions on a hand-built problem (Belady, never the current op, clean drops, the
threshold, LRU for ODSwap), the three-stream bound as a property, and the methods' plans replaying
with their stored simulation."""

from __future__ import annotations

import math
import random
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.mempool import (
    Allocation,
    cls_crossover,
    cnt_crossover,
    cnt_ext,
    cnt_from_ext,
    fit_capacity,
    object_sizes_of,
    repair_cls,
    size_classes,
    valid_cls,
)
from core.cost.devices import DEVICES, duplex_factor
from core.cost.model import AnalyticCost
from core.schedule.swap_planner import InfeasibleLimit, SwapProblem, plan_swaps, realise, swap_bound
from core.search.methods import METHODS, run_method
from core.search.peers.base import eager_peak
from core.search.plan import PlanFile, check_order, plans_from_bytes, plans_to_bytes, replay, sim_options
from core.search.swapadvisor import (
    SwapAdvisorGA,
    allocation_of,
    class_maps,
    is_topological,
    maximal_pools,
    pool_ceiling,
    schedule_crossover,
    schedule_mutation,
    softmax_probs,
)
from core.search.wl_hash import graph_hash
from core.simulate import simulate
from sample_graphs.store import load_sample_graph

MB = 1 << 20


# ---- the notes' hand-checked cases ----------------------------------------------------------------
# nodes 1..5 of the notes as indices 0..4: 3 after 2, 4 after 3, 5 after 1 and 4
PREDS = [[], [], [1], [2], [0, 3]]


def test_case1_schedule_crossover_prefix_of_one_parent_rest_in_the_others_order():
    sch1 = [0, 1, 2, 3, 4]  # notes: [1, 2, 3, 4, 5]
    sch2 = [1, 2, 3, 0, 4]  # notes: [2, 3, 4, 1, 5]
    c1, c2 = schedule_crossover(sch1, sch2, 3)
    assert [v + 1 for v in c1] == [2, 3, 4, 1, 5]  # SCH2's prefix [2, 3, 4], then 1 and 5 in SCH1's order
    assert [v + 1 for v in c2] == [1, 2, 3, 4, 5]
    assert is_topological(PREDS, c1) and is_topological(PREDS, c2)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 30))
def test_schedule_crossover_of_topological_orders_is_topological(seed, n):
    rng = random.Random(seed)
    preds = [sorted(rng.sample(range(v), min(v, rng.randint(0, 3)))) for v in range(n)]
    a = schedule_mutation(preds, list(range(n)), 1.0, rng)
    b = schedule_mutation(preds, list(range(n)), 1.0, rng)
    for cut in (1, n // 2, n - 1):
        for child in schedule_crossover(a, b, cut):
            assert is_topological(preds, child)


def test_case2_schedule_mutation_p0_is_the_parent_p1_a_valid_order():
    parent = [1, 0, 2, 3, 4]
    assert schedule_mutation(PREDS, parent, 0.0, random.Random(0)) == parent
    seen = set()
    for seed in range(20):
        child = schedule_mutation(PREDS, parent, 1.0, random.Random(seed))
        assert is_topological(PREDS, child)
        seen.add(tuple(child))
    assert len(seen) > 1  # P = 1 explores other orders


def test_case3_cls_crossover_with_repair():
    c1, c2 = cls_crossover([1, 1, 1, 1], [1, 2, 2, 2], 2)
    assert c1 == [1, 1, 2, 2]  # head of the first parent, tail of the second: already 0/+1 steps
    assert c2 == [1, 2, 2, 2]  # [1, 2 | 1, 1]: the tail shifted up so the step is 0
    assert repair_cls([0, 3, 3, 4]) == [0, 1, 1, 2] and valid_cls(repair_cls([0, 3, 3, 4]))


def test_case4_cnt_crossover_expansion_average_and_reduction():
    sizes = (1 * MB, 2 * MB, 3 * MB, 4 * MB)
    cls = [0, 1, 1, 1]  # object sizes 1 MB and 4 MB
    obj = Allocation(sizes, tuple(cls), (1, 1)).object_sizes()
    assert obj == [1 * MB, 4 * MB]
    assert cnt_from_ext(cls, [8, 1, 4, 4]) == [8, 3]
    assert fit_capacity([8, 3], obj, 12 * MB) == [4, 2]  # 20 MB over 12: each class gives up 4 MB
    ext_a, ext_b = [8, 1, 9, 9], [5, 5, 4, 4]  # crossed at 2: CNT_EXT [8, 1, 4, 4]
    assert cnt_crossover(cls, ext_a, ext_b, 2, obj, 12 * MB) == [4, 2]
    assert cnt_ext([0, 1, 1, 1], [4, 2]) == [4, 2, 2, 2]


def test_case5_softmax_selection_on_normalised_time():
    probs = softmax_probs([10.0, 12.0, 15.0])
    assert probs == pytest.approx([0.412, 0.338, 0.250], abs=1e-3)
    assert softmax_probs([10.0, math.inf]) == [1.0, 0.0]  # no plan: never selected


@cache
def tiny(name: str):
    g = load_sample_graph(name)
    cost = AnalyticCost("rtx3090")
    return g, cost, SwapProblem.from_graph(g, cost), eager_peak(g, cost)


def test_case6_no_memory_pressure_no_swaps_time_is_ideal():
    g, cost, p, peak = tiny("bert_tiny")
    run = run_method("swapadvisor", g, cost, time_budget=10, memory_limit=2 * peak)
    (plan,) = run.plans
    assert plan.applications == [] and plan.stats["swap_ins"] == 0 and plan.stats["swap_outs"] == 0
    ideal = run_method("ideal", g, cost).plans[0]
    assert plan.latency == pytest.approx(ideal.latency, rel=1e-12) == pytest.approx(sum(p.time), rel=1e-12)
    assert plan.stats["throughput_vs_ideal"] == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["bert_tiny", "unet_tiny", "resnet50_tiny", "gpt_neo_tiny"]), st.floats(0.0, 1.0),
       st.integers(0, 1000), st.booleans())
def test_case7_lower_bound_on_three_streams(name, frac, seed, on_demand):
    """T >= max(sum of compute, swap-in bytes / B, swap-out bytes / B) for the planner's plan of a
    random schedule and pool, and the realised plan simulates to the same T."""
    g, cost, p, peak = tiny(name)
    lo = max(p.working_set(), p.pool_floor())
    limit = int(lo + frac * max(0, peak - lo))
    rng = random.Random(seed)
    sch = schedule_mutation(p.preds, list(range(p.n)), rng.choice((0.0, 0.05, 0.3)), rng)
    if on_demand:
        sp = plan_swaps(p, list(range(p.n)), None, capacity=limit - p.resident)
    else:
        sp = plan_swaps(p, sch, allocation_of(p, limit))
    assert sp.feasible, sp.why
    bw = cost.device.host_bandwidth
    assert sp.time >= max(sum(p.time), sp.bytes_in / bw, sp.bytes_out / bw) * (1 - 1e-12)
    # the ceiling of any swap plan of the schedule: bytes that must be out after an op go out before and in after
    assert sp.time >= swap_bound(p, sp.schedule, limit) * (1 - 1e-12)
    apps, h, order, waits = realise(p, sp)
    check_order(h, order)
    sim = simulate(h, order, cost, swap_streams=True, waits=waits)
    assert sim.latency == pytest.approx(sp.time, rel=1e-12)
    assert sim.peak <= sp.pool_bytes + p.resident  # live bytes within the pool the device holds


# ---- the pool ----------------------------------------------------------------------------------------
def test_pool_size_classes_objects_and_bytes():
    sizes = size_classes([4, 0, 12, 4, 8, 100])
    assert sizes == (4, 8, 12, 100)
    a = Allocation(sizes, (0, 0, 1, 2), (3, 2, 1))
    assert a.object_sizes() == [8, 12, 100] and a.pool_bytes == 3 * 8 + 2 * 12 + 100
    assert a.class_of(4) == a.class_of(8) == 0 and a.class_of(100) == 2
    with pytest.raises(ValueError):
        a.class_of(5)
    assert fit_capacity([5, 5], [8, 12], 30, floor=[2, 1]) is not None
    assert fit_capacity([5, 5], [8, 12], 20, floor=[2, 1]) is None  # the floor alone is 28 bytes


# ---- the planner on a hand-built problem ---------------------------------------------------------
def hand_problem(times=None, copy=0.5e-3) -> SwapProblem:
    """Nine ops, five tensors of one byte each (A..E = 0..4):
    op0 makes A; op1 reads A, makes B; op2 makes C; op3 reads A, C; op4 makes D; op5 reads B, D;
    op6 reads A; op7 reads B, makes E; op8 reads A, E."""
    reads = {1: [0], 3: [0, 2], 5: [1, 3], 6: [0], 7: [1], 8: [0, 4]}
    makes = {0: [0], 1: [1], 2: [2], 4: [3], 7: [4]}
    n, nt = 9, 5
    prod = [0] * nt
    for o, ts in makes.items():
        for t in ts:
            prod[t] = o
    users = [[o for o in range(n) if t in reads.get(o, [])] for t in range(nt)]
    preds = [sorted({prod[t] for t in reads.get(o, [])} | ({o - 1} if o else set())) for o in range(n)]
    return SwapProblem(None, list(range(n)), times or [1e-3] * n, preds, [None] * nt, [1] * nt, prod, users,
                       [False] * nt, [False] * nt, [reads.get(o, []) for o in range(n)],
                       [makes.get(o, []) for o in range(n)], 0, [copy] * nt, 1.2, True)


def test_planner_belady_never_the_current_op_clean_drop():
    p = hand_problem()
    sp = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,)))
    assert sp.feasible
    # op2 needs an object: A (next use op3) and B (op5) are resident; Belady evicts B, copied out after op1
    # op5 needs B back: A (next use op6) goes out (D is the current op's); op7 makes E: A is evicted again,
    # now dropped without a copy (its host copy is still valid); op8 loads it once more
    assert sp.stores == [(1, 1), (0, 3)]
    assert sp.drops == [(0, 6)]
    assert [t for t, _ in sp.loads] == [1, 0, 0]
    assert sp.bytes_out == 2 and sp.bytes_in == 3
    for t, at, _k in sp.evictions:  # a victim is never read by the op that evicts it
        assert at < min(u for u in p.t_users[t] if u > at)


def test_planner_takes_no_more_objects_than_a_class_has_tensors():
    """A count can reach capacity / a tiny object (the GA's crossover fills capacity): the planner
    holds one object per tensor at most -- a billion-object class plans as one with five, in the
    same plan (bert_base's GA once asked for 3e9 four-byte objects and ran out of memory)."""
    p = hand_problem()
    plenty = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (5,)))
    huge = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (10**9,)))
    assert huge.feasible and (huge.time, huge.stores, huge.loads) == (plenty.time, plenty.stores, plenty.loads)
    assert huge.stores == [] and huge.loads == []  # every tensor has its own object: no swap


def test_planner_prefers_a_victim_whose_swap_out_fits_in_the_gap():
    """op2 must evict A or B: B's next use (op7) is later than A's (op6), but B was used by op1 only
    0.1 ms of compute ago and its swap-out takes 0.5 ms; A, idle since op0 (op1 is 10 ms), is taken."""
    p = hand_problem(times=[1e-3, 10e-3] + [1e-4] * 7)
    p.t_users[0] = [3, 6]  # A: not read by op1 here
    p.op_in[1] = []
    p.t_users[1] = [7]  # B: made at op1, next read at op7
    p.op_in[5] = [3]
    sp = plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,)))
    assert sp.evictions[0][0] == 0  # A, not Belady's B
    p.copy_time = [0.0] * 5  # free copies: both fit, Belady's furthest next use wins
    assert plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,))).evictions[0][0] == 1


def test_swap_bound_by_hand():
    """The hand problem with 5 ms copies (1 ms ops).  The bytes read later: A after op0; A, B after op1;
    A, B, C after op2; A, B after op3; A, B, D after op4; A, B after op5 and op6; A, E after op7.
    Within 2 bytes one of them is off the device after op2: copied out within max(3 ms of compute,
    5 ms) and back within max(6 ms, 5 ms), T >= 11 ms (after op4: 5 + 5 = 10 ms); within 3 bytes
    nothing need move: the compute's 9 ms."""
    p = hand_problem(copy=5e-3)
    assert swap_bound(p, range(9), 2) == pytest.approx(11e-3)
    assert swap_bound(p, range(9), 3) == pytest.approx(9e-3)
    for sp in (plan_swaps(p, list(range(9)), Allocation((1,), (0,), (2,))),
               plan_swaps(p, list(range(9)), None, capacity=2)):
        assert sp.feasible and sp.time >= 11e-3


def test_odswap_evicts_the_least_recently_used_on_demand():
    p = hand_problem()
    sp = plan_swaps(p, list(range(9)), None, capacity=2)
    assert sp.feasible
    assert sp.evictions[0][0] == 0  # op2: A (used at op1 like B, but made earlier) is the least recent
    assert sp.evictions[0][1] == 1  # swapped out right before op2, the op that needs the memory
    opj = {i: j for j, (k, i) in enumerate(sp.program) if k == "op"}
    inj = {i: j for j, (k, i) in enumerate(sp.program) if k == "in"}
    for li, (_t, c) in enumerate(sp.loads):  # every swap-in right before the op that reads it
        assert all(sp.program[j][0] == "in" for j in range(inj[li], opj[c]))


def test_duplex_factor_of_the_profiles():
    assert duplex_factor(DEVICES["rtx3090"]) == pytest.approx(1.2)  # 12 GB/s one way, 20 both: 20/12 ratio


# ---- the search and the methods --------------------------------------------------------------------
def test_ga_is_seeded_and_returns_valid_schedules():
    g, cost, p, peak = tiny("unet_tiny")
    limit = int(p.pool_floor() + 0.3 * (peak - p.pool_floor()))
    runs = [SwapAdvisorGA(p, limit, seed=3, population=16).run(generations=3) for _ in range(2)]
    assert runs[0].best.key() == runs[1].best.key() and runs[0].best.time == runs[1].best.time
    assert is_topological(p.preds, runs[0].best.sch)
    assert runs[0].best.time <= runs[0].records[0]["best"]  # best-ever kept
    assert runs[0].allocation.pool_bytes <= limit - p.resident


def test_infeasible_limit_is_one_line_naming_the_bound():
    g, cost, p, peak = tiny("bert_tiny")
    with pytest.raises(InfeasibleLimit, match="largest op's working set") as e:
        p.check_limit(p.working_set() - 1)
    assert "\n" not in str(e.value)
    run = run_method("swapadvisor", g, cost, time_budget=5, memory_limit=p.working_set() - 1)
    assert run.plans == [] and "working set" in run.failures[0].reason


def test_methods_registered_and_plans_replay_with_their_simulation():
    assert {"swapadvisor", "odswap", "ideal"} <= set(METHODS)
    g, cost, p, peak = tiny("unet_tiny")
    limit = int(p.pool_floor() + 0.2 * (peak - p.pool_floor()))
    plans = []
    for m in ("swapadvisor", "odswap"):
        run = run_method(m, g, cost, time_budget=5, memory_limit=limit, **({"generations": 2} if m == "swapadvisor"
                                                                           else {}))
        assert run.plans, run.failures
        plans += run.plans
    for plan in plans:
        assert plan.peak <= limit
        assert plan.peak <= plan.metrics["pool_bytes"] <= limit or plan.method == "odswap"
        h = replay(g, plan.applications)
        check_order(h, plan.order)
        sim = simulate(h, plan.order, cost, **sim_options(plan))
        assert (sim.peak, sim.latency) == (plan.peak, pytest.approx(plan.latency, rel=1e-12))
    pf = PlanFile(g.name, graph_hash(g), "rtx3090", plans)
    back = plans_from_bytes(plans_to_bytes(pf))
    assert [sim_options(q) for q in back.points] == [sim_options(q) for q in plans]
    assert back.points[0].metrics["pool_bytes"] == plans[0].metrics["pool_bytes"]


@pytest.mark.parametrize("name", ["unet_tiny", "resnet50_tiny", "gpt_neo_tiny"])
def test_every_child_of_the_ga_realises_to_the_planners_time_and_pool(name):
    """Children of crossovers and mutations (other schedules, merged classes) realise as rule
    applications whose simulation is the planner's time, with live bytes within the pool."""
    g, cost, p, peak = tiny(name)
    lo = max(p.working_set(), p.pool_floor())
    ga = SwapAdvisorGA(p, int(lo + 0.1 * (peak - lo)), seed=1, population=12)
    pop = [ga.evaluate(c) for c in ga.initial()]
    kids = [k for _ in range(6) for k in ga.children(*ga.rng.sample(pop, 2))]
    checked = 0
    for k in kids:
        if not math.isfinite(ga.evaluate(k).time):
            continue
        sp = plan_swaps(p, k.sch, ga.alloc(k))
        apps, h, order, waits = realise(p, sp)
        check_order(h, order)
        sim = simulate(h, order, cost, swap_streams=True, waits=waits)
        assert sim.latency == pytest.approx(sp.time, rel=1e-12)
        assert sim.peak <= sp.pool_bytes + p.resident
        checked += 1
    assert checked >= len(kids) // 2


@pytest.mark.parametrize("name, frac", [("unet_tiny", 0.8), ("unet_tiny", 0.9), ("bert_tiny", 0.9)])
def test_maximal_pools_hold_the_best_pool_of_every_allocation(name, frac):
    """Every pool the GA could hold (each CLS, each CNT between the floors and the tensor counts,
    within the capacity), brute force: the maximal ones are exactly those no object can be added to,
    and the planner's best over them is its best over all of them (more objects never hurt here)."""
    import itertools
    from collections import Counter

    g, cost = load_sample_graph(name), AnalyticCost("rtx3090")
    p = SwapProblem.from_graph(g, cost)
    limit = int(eager_peak(g, cost) * frac)
    sizes, cap = p.pool_sizes(), p.pool_capacity(limit)
    tensors = Counter(b for b, pin in zip(p.t_bytes, p.t_pinned, strict=True) if b > 0 and not pin)
    every, maximal, best_all = [], set(), math.inf
    for cls in class_maps(len(sizes)):
        obj, floor = object_sizes_of(sizes, cls), p.class_floor(sizes, cls)
        most = [max(f, sum(tensors[b] for b, c in zip(sizes, cls, strict=True) if c == k)) for k, f in enumerate(floor)]
        for cnt in itertools.product(*(range(f, m + 1) for f, m in zip(floor, most, strict=True))):
            left = cap - sum(c * o for c, o in zip(cnt, obj, strict=True))
            if left < 0:
                continue
            every.append((cls, cnt))
            if not any(c < m and o <= left for c, m, o in zip(cnt, most, obj, strict=True)):
                maximal.add((cls, cnt))
            sp = plan_swaps(p, list(range(p.n)), Allocation(sizes, cls, cnt))
            if sp.feasible:
                best_all = min(best_all, sp.time)
    got = list(maximal_pools(p, limit))
    assert {(a.cls, a.cnt) for a in got} == maximal and len(got) == len(maximal) > 0
    assert len(every) > len(maximal)  # the pruning prunes
    ceiling = pool_ceiling(p, limit)
    assert ceiling.complete and ceiling.pools == len(maximal)
    assert ceiling.time == pytest.approx(best_all, rel=1e-12)
    first = allocation_of(p, limit)  # the GA's first chromosome's pool, on the same order
    if first is not None:
        assert ceiling.time <= plan_swaps(p, list(range(p.n)), first).time


def test_class_maps_are_the_runs_of_consecutive_sizes():
    assert list(class_maps(1)) == [(0,)]
    assert list(class_maps(3)) == [(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 2)]
    assert all(valid_cls(c) for c in class_maps(6)) and len(set(class_maps(6))) == 2**5


def test_pool_ceiling_stops_at_its_deadline():
    g, cost = load_sample_graph("unet_tiny"), AnalyticCost("rtx3090")
    p = SwapProblem.from_graph(g, cost)
    c = pool_ceiling(p, int(eager_peak(g, cost) * 0.9), deadline=0.0)  # long past
    assert not c.complete and c.pools == 0 and c.allocation is None
