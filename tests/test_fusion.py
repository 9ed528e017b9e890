"""GET layer fusion: the plan model, F_D / F_beta, cuts, the tree split and the searches (the notes'
four hand-checked cases, ``notes/get-fusion.md``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.ir.builder import GraphBuilder
from core.search.fusion.explain import oracle_explainer, random_explainer
from core.search.fusion.problem import FusionProblem, check_plan
from core.search.fusion.search import PlanSearch, decode, run_search
from core.search.fusion.split import UNFIXABLE, Splitter, candidate_cuts


def chain():
    """x(4) -> A(8) -> B(16) -> C(2, output); A and B have weights 10 and 20."""
    b = GraphBuilder()
    x = b.input("x", 4)
    a = b.op("A", [x, b.weight("wA", 10)], 8)
    bb = b.op("B", [a, b.weight("wB", 20)], 16)
    b.op("C", [bb], 2, output=True)
    return FusionProblem(b.graph, "lbdf")


def residual():
    """x -> f -> c1 -> r -> c2 -> add(c2, f) -> out: a residual block with a skip edge f -> add."""
    b = GraphBuilder()
    x = b.input("x", 4)
    f = b.op("f", [x], 10)
    c1 = b.op("c1", [f, b.weight("w1", 50)], 10)
    r = b.op("r", [c1], 10)
    c2 = b.op("c2", [r, b.weight("w2", 50)], 10)
    b.op("add", [c2, f], 10, output=True)
    return FusionProblem(b.graph, "lbdf")


def fs(*xs):
    return frozenset(xs)


# ---- hand case 1: a fused chain saves exactly twice its internal tensors -----------------------
def test_trivial_plan_dram_is_the_sum_over_edges():
    p = chain()
    # every edge written once and read once, plus the graph input read, the output written, weights
    assert p.total_dram(p.trivial()) == 2 * (8 + 16) + 4 + 2 + 10 + 20
    assert check_plan(p, p.trivial()) == []


def test_fusing_a_chain_saves_twice_its_internal_tensors():
    p = chain()
    trivial = p.total_dram(p.trivial())
    for lo in range(3):
        for hi in range(lo + 1, 3):
            group = frozenset(range(lo, hi + 1))
            plan = [group] + [fs(v) for v in range(3) if v not in group]
            assert check_plan(p, plan) == []
            internal = p.internal_bytes(group)
            assert internal == sum((8, 16)[v] for v in range(lo, hi))
            assert trivial - p.total_dram(plan) == 2 * internal


# ---- hand case 2: LBDF monotonicity (property) --------------------------------------------------
@st.composite
def dags(draw):
    n = draw(st.integers(3, 12))
    b = GraphBuilder()
    refs = [b.input("x", draw(st.integers(1, 64)))]
    for i in range(n):
        k = draw(st.integers(1, min(2, len(refs))))
        ins = draw(st.lists(st.sampled_from(refs), min_size=k, max_size=k, unique=True))
        if draw(st.booleans()):
            ins.append(b.weight(f"w{i}", draw(st.integers(1, 200))))
        refs.append(b.op(f"op{i}", ins, draw(st.integers(1, 64)), output=i == n - 1))
    p = FusionProblem(b.graph, "lbdf")
    p.kh = [draw(st.sampled_from([1, 3, 5])) for _ in range(p.n)]  # sliding windows of any height
    return p, draw(st.randoms(use_true_random=False))


@settings(max_examples=150, deadline=None)
@given(dags())
def test_lbdf_every_weakly_connected_subgroup_of_a_valid_group_is_valid(case):
    p, rnd = case
    for group in p.components(range(p.n)):
        beta = p.buffer(group) + 1  # the group is valid, just
        for _ in range(10):
            sub = [v for v in group if rnd.random() < 0.6]
            for comp in p.components(sub):
                assert p.buffer(comp) <= p.buffer(group)
                assert p.valid(comp, beta)


def test_delay_line_of_a_residual_block():
    p = residual()
    group = frozenset(range(p.n))
    f, c1, r, c2, add = range(5)
    # weights + one line per layer input (add reads two) + the skip held over c1, r, c2
    assert p.buffer(group) == 100 + (4 + 10 + 10 + 10 + 10 + 10) + 10 * 3
    assert p.buffer(fs(f, c1, r, c2)) == 100 + 4 + 30  # no skip inside: no delay line


# ---- hand case 3: the residual block's cuts ----------------------------------------------------
def removed(p, parts):
    where = {v: i for i, part in enumerate(parts) for v in part}
    return {(u, v) for u, v in p.edges() if u in where and v in where and where[u] != where[v]}


def test_skip_edge_explanation_cuts_the_skip_and_each_main_path_edge():
    p = residual()
    f, c1, r, c2, add = range(5)
    group = frozenset(range(5))
    cuts = candidate_cuts(p, group, [(f, add)])
    assert [removed(p, parts) for parts in cuts] == [
        {(f, add), (f, c1)}, {(f, add), (c1, r)}, {(f, add), (r, c2)}, {(f, add), (c2, add)}]
    for parts in cuts:
        assert all(len(p.components(x)) == 1 for x in parts)
        assert check_plan(p, parts) == []
    # an edge of the main path under the skip: that edge and the skip, one solution
    assert [removed(p, parts) for parts in candidate_cuts(p, group, [(c1, r)])] == [{(f, add), (c1, r)}]
    # duplicates are kept once: the minimal set of solutions
    assert len(candidate_cuts(p, group, [(f, add), (c1, r), (f, c1)])) == 4


def test_tree_split_of_the_residual_block_picks_the_least_dram_valid_cut():
    p = residual()
    group = frozenset(range(5))
    beta = 150  # the whole block needs 184, every cut through the skip leaves both sides valid
    sp = Splitter(p, beta, oracle_explainer)
    parts, ok = sp.split_once(group)
    assert ok and all(p.valid(x, beta) for x in parts) and check_plan(p, parts) == []
    best = min((pp for pp in candidate_cuts(p, group, [(0, 4)]) if all(p.valid(x, beta) for x in pp)),
               key=p.total_dram)
    assert p.total_dram(parts) == p.total_dram(best)


# ---- hand case 4: unfixable one-op groups, cache hit counts ------------------------------------
def test_one_op_invalid_group_is_unfixable_and_filtered_out():
    p = chain()
    beta = 25  # B alone needs 20 (weights) + 8 (its input line) = 28
    assert p.unfusable(beta) == [1]
    assert Splitter(p, beta, oracle_explainer).split_once(fs(1)) == UNFIXABLE
    r = run_search(p, beta, "random", Splitter(p, beta), 50, seed=0)
    assert fs(1) in r.groups and check_plan(p, r.groups) == []


def test_caches_cut_the_number_of_evaluations():
    p = residual()
    r = run_search(p, 150, "local", Splitter(p, 150, oracle_explainer), 60, seed=1)
    s = p.stats
    assert s.fb_hits > s.fb_evals > 0 and s.fd_hits > s.fd_evals > 0
    # at most one evaluation per distinct group: 5 ops have at most 15 weakly connected groups
    assert s.fb_evals <= 15 and s.fd_evals <= 15
    before = (s.fb_evals, s.fd_evals)
    p.total_dram(r.groups), [p.buffer(x) for x in r.groups]
    assert (s.fb_evals, s.fd_evals) == before


# ---- plans and searches ------------------------------------------------------------------------
def test_decode_gives_weakly_connected_groups_in_a_dag():
    p = residual()
    cuts = np.array([False, True, False, False])  # segments {f, c1} and {r, c2, add}
    assert decode(p, cuts) == [fs(0, 1), fs(2, 3, 4)]
    b = GraphBuilder()  # two parallel branches in one segment fall apart into components
    x = b.input("x", 4)
    b.op("a", [x], 4, output=True)
    b.op("b", [x], 4, output=True)
    q = FusionProblem(b.graph)
    assert decode(q, np.array([False])) == [fs(0), fs(1)]


def test_searches_are_deterministic_valid_and_never_worse_than_trivial():
    p = residual()
    for search in ("random", "local", "nsga2"):
        for explainer in (None, oracle_explainer, random_explainer(0)):
            results = [run_search(p, 150, search, Splitter(p, 150, explainer, seed=3), 40, seed=7)
                       for _ in range(2)]
            a, b = results
            assert a.groups == b.groups and a.curve == b.curve
            assert check_plan(p, a.groups) == [] and all(p.valid(x, 150) for x in a.groups)
            # a guided local search evaluates a genotype once: on this 5-op block it runs out of
            # plans (2^free of them) before the budget
            free = len(PlanSearch(p, 150, Splitter(p, 150), 40).free)
            plans = min(40, 2 ** free) if search == "local" and explainer is not None else 40
            assert a.dram <= a.trivial_dram and a.plans == plans
            assert all(x >= y for x, y in zip(a.curve, a.curve[1:], strict=False))


# ---- BRR ---------------------------------------------------------------------------------------
def test_brr_live_lines_plus_one_weight_tile():
    p = FusionProblem(chain().graph, "brr")
    # held lines plus the line being written: at A x + a + a; at B a + b + b (the peak); at C b + c
    assert p.buffer(frozenset(range(3))) == (8 + 16 + 16) + 20  # one tile: the largest layer's weights
    assert p.buffer(fs(0)) == 4 + 8 + 10


def test_brr_refuses_a_squeeze_excite_gate_inside_the_group():
    from tests.hand_graphs import G

    b = G()
    x = b.input("x", (1, 4, 8, 8))
    s = b.op("s", "aten.mean.dim", [x, [2, 3], True], (1, 4, 1, 1))
    g = b.op("g", "aten.sigmoid.default", [s], (1, 4, 1, 1))
    b.op("y", "aten.mul.Tensor", [x, g], (1, 4, 8, 8), output=True)
    p = FusionProblem(b.g, "brr")
    assert p.buffer(frozenset(range(3))) == float("inf")  # the gate is computed in the group
    assert p.buffer(fs(2)) < float("inf") and p.buffer(fs(0, 1)) < float("inf")
    assert FusionProblem(b.g, "lbdf").buffer(frozenset(range(3))) < float("inf")


def test_split_results_are_memoised_per_group():
    p = residual()
    calls = []

    def explainer(problem, group, beta, k):
        calls.append(group)
        return oracle_explainer(problem, group, beta, k)

    sp = Splitter(p, 150, explainer)
    first = sp.split_once(frozenset(range(5)))
    assert sp.split_once(frozenset(range(5))) == first
    assert len(calls) == 1 and sp.stats.memo_hits == 1 and sp.stats.explanations == 1


def test_fused_groups_lower_the_roofline_latency_and_nsga2_keeps_a_front():
    from core.search.fusion.search import plan_latency

    p = chain()
    assert plan_latency(p, [frozenset(range(3))]) < plan_latency(p, p.trivial())
    r = run_search(p, 10**6, "nsga2", Splitter(p, 10**6), 40, seed=0, second="latency")
    assert r.front and r.front[0][0] == r.dram  # the front's least-DRAM end is the best plan
    for a in r.front:  # non-dominated
        assert not any(b != a and b[0] <= a[0] and b[1] <= a[1] for b in r.front)


# ---- the split steps behind a plan ---------------------------------------------------------------
def test_a_plan_keeps_the_split_steps_of_its_repaired_groups():
    from core.search.fusion.search import PlanSearch

    p = residual()
    s = PlanSearch(p, 150, Splitter(p, 150, oracle_explainer), 10)
    ev = s.evaluate(np.zeros(p.n - 1, dtype=bool))  # one segment: the whole block, invalid (184 >= 150)
    (step,) = ev.steps
    assert step.group == frozenset(range(5)) and step.buffer == 184 and step.depth == 0 and step.how == "cut"
    assert (0, 4) in step.explained and list(step.parts) == ev.groups
    assert sorted(step.cut_edges(p)) == [(0, 4), (1, 2)]  # the skip and the main-path edge it spans
    again = s.evaluate(np.zeros(p.n - 1, dtype=bool))  # the repaired group again: the same steps, no explanation
    assert again.steps == ev.steps and s.splitter.stats.explanations == 1
    r = s.result("local", 0.0)
    assert r.steps == ev.steps  # the best plan's steps come with the result


def test_memoised_inner_splits_keep_their_steps_at_their_depth():
    p = residual()
    sp = Splitter(p, 70, oracle_explainer)  # tight: the block is split over several rounds
    parts, _ok = sp.split_once(frozenset(range(5)))
    trace = list(sp.last_trace)
    assert trace[0].group == frozenset(range(5)) and trace[0].depth == 0
    assert all(0 <= t.depth < sp.max_depth + 1 for t in trace)
    assert all(t.group <= frozenset(range(5)) for t in trace)
    for t in trace:
        if t.depth:  # each deeper step splits a part of an earlier, shallower step
            assert any(t.group in u.parts for u in trace if u.depth == t.depth - 1)
    inner = next((t for t in trace if t.depth == 1), None)
    if inner is not None:  # split again from the top: the memoised group brings its steps, at depth 0
        sp.split_once(inner.group)
        assert sp.last_trace[0].group == inner.group and sp.last_trace[0].depth == 0


def test_fuse_writes_the_split_steps_and_keeps_the_old_keys():
    from core.search.fusion import fuse
    from core.search.fusion.fuse import SPLIT_STEPS_KEPT

    p = residual()
    plan = fuse(p.graph, 150, "lbdf", "random", "oracle", plans=30, seed=0)
    d = plan.to_json()
    for key in ("format", "version", "graph", "scheme", "buffer_bytes", "search", "explainer", "plans", "seed",
                "metrics", "dram_bytes", "trivial_dram_bytes", "reduction", "latency_seconds",
                "trivial_latency_seconds", "max_buffer_bytes", "unfused", "fused_groups", "groups", "splits",
                "cache", "classifier", "seconds", "front"):
        assert key in d
    assert d["version"] == 1 and d["cancelled"] is False
    assert len(d["split_steps"]) == min(d["split_steps_total"], SPLIT_STEPS_KEPT)
    names = set(p.names)
    for step in d["split_steps"]:
        assert set(step) == {"ops", "buffer_bytes", "depth", "how", "explained", "cut", "parts"}
        assert set(step["ops"]) <= names and step["buffer_bytes"] >= 150
        assert all(u in step["ops"] and v in step["ops"] for u, v in step["explained"] + step["cut"])
        assert sorted(o for x in step["parts"] for o in x["ops"]) == sorted(step["ops"])


def test_a_cancelled_search_returns_its_best_plan_so_far():
    import threading

    from core.search.fusion import fuse

    p = residual()
    stop = threading.Event()
    seen = []

    def on_plan(n, best):
        seen.append((n, best))
        if n == 3:
            stop.set()

    for search in ("random", "local", "nsga2"):
        seen.clear()
        stop.clear()
        plan = fuse(p.graph, 150, "lbdf", search, "oracle", plans=500, on_plan=on_plan, cancel=stop)
        assert plan.cancelled and plan.plans < 500 and check_plan(p, [frozenset(p.names.index(o) for o in gr)
                                                                         for gr in plan.groups]) == []
        assert [n for n, _ in seen] == list(range(1, plan.plans + 1))
        assert plan.dram == seen[-1][1]
