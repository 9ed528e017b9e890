"""The M-Optimizer (MAGIS Algorithm 3) and plan files: the paper's lexicographic comparisons by hand,
a search on the hand-built MLP that must use fission to meet a memory limit, plans that replay to the
simulated numbers, the Pareto archive, and one-line errors for bad plan files."""

from __future__ import annotations

import gzip
import itertools
import json

import pytest

from core.metrics import metrics
from core.search.moptimizer import MOptimizer, Objective, optimize
from core.search.mstate import MState
from core.search.plan import (
    Plan,
    PlanError,
    check_order,
    load_plans,
    plans_from_bytes,
    replay,
    save_plans,
    thin,
)
from core.simulate import simulate
from tests.hand_graphs import mlp


def _m(peak, latency):
    return {"peak": peak, "latency": latency}


def _s(peak, latency):
    return MState(None, None, 0, -1, (), _m(peak, latency), 0)


def test_the_lexicographic_comparisons_of_both_modes():
    mem = Objective("memory", 100)
    # both meet the limit: latency decides; else memory decides
    assert mem.key(_m(90, 1.0)) < mem.key(_m(50, 2.0))
    assert mem.key(_m(100, 5.0)) < mem.key(_m(101, 1.0))
    assert mem.key(_m(150, 5.0)) < mem.key(_m(160, 1.0))
    lat = Objective("latency", 1.5)
    assert lat.key(_m(50, 1.4)) < lat.key(_m(60, 1.0))
    assert lat.key(_m(999, 1.5)) < lat.key(_m(1, 1.6))
    assert lat.key(_m(10, 2.0)) < lat.key(_m(5, 3.0))
    # the push test: within delta = 1.1 of the best in the quantity compared first
    best = _s(90, 1.0)
    assert mem.relaxed(_m(95, 1.1), best.metrics, 1.1) and not mem.relaxed(_m(95, 1.2), best.metrics, 1.1)
    assert mem.relaxed(_m(98, 9.0), _m(120, 1.0), 1.1) and not mem.relaxed(_m(140, 0.1), _m(120, 1.0), 1.1)
    with pytest.raises(ValueError, match="unknown mode"):
        Objective("speed", 1)


def test_the_search_meets_a_memory_limit_on_the_mlp_and_its_plan_replays():
    g, _ = mlp()
    m = MOptimizer(g)
    limit = int(0.8 * m.root.peak)
    res = m.search("memory", limit, time_budget=20)
    assert res.best.peak <= limit < m.root.peak
    assert res.records and all(a.best_peak >= b.best_peak for a, b in zip(res.records, res.records[1:], strict=False))
    plan = m.plan(res.best)
    h = replay(g, plan.applications)
    check_order(h, plan.order)
    sim = simulate(h, plan.order)
    assert plan.peak == sim.peak <= limit and plan.latency == pytest.approx(sim.latency, rel=1e-9)
    assert any(a.rule in ("fission", "lift", "mutate") for a in plan.applications)
    # every archived state's plan: the schedule the evaluator has there, its numbers
    plans = m.plans(res.archive)
    for s, p in zip(res.archive, plans, strict=True):
        m.ev.goto(s)
        assert p.order == m.ev.order and (p.peak, p.latency) == (s.peak, s.latency)
        assert p.applications == s.applications()
    # the archive holds no dominated state
    arc = res.archive
    assert all(not (b.peak <= a.peak and b.latency <= a.latency and (b.peak, b.latency) != (a.peak, a.latency))
               for a in arc for b in arc)


def test_the_sweep_searches_the_widest_gap_and_below_its_lowest_point():
    """Frontier peaks 1000, 900, 500 (with ``config.floor`` = 0.8): the gap 900 -> 500 (1.8x) is searched first,
    at 700 from the 900 state; then below the lowest point (1.25x): at 400, from the 500 state; then
    1000 -> 900 (1.11x) at 950; then nothing is left wider than ``config.min_gap``."""
    from core.search import moptimizer as mo

    g, _ = mlp()
    m = MOptimizer(g)
    a, b, c = _s(1000, 1.0), _s(900, 1.1), _s(500, 1.5)
    m.pareto_archive.items = [a, b, c]
    assert mo.DEFAULT_CONFIG.floor == 0.8
    tried: set[int] = set()
    got = []
    while (gap := m._widest_gap(tried)) is not None:
        tried.add(gap[0])
        got.append((gap[0], gap[1].peak))
    assert got == [(700, 900), (400, 500), (950, 1000)]


def test_a_latency_limit_is_kept_when_the_warm_start_ends_above_it():
    """unet_tiny's warm start ends at about twice eager's latency; under a 1.1x latency limit the
    answer is the best state known that meets it (the imported graph at worst), not that end."""
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("unet_tiny")
    pf = optimize(g, latency_limit=1.1, time_budget=4)
    best, eager = pf.points[0], pf.points[-1]
    assert best.latency <= 1.1 * eager.latency and best.peak <= eager.peak
    assert best.label == f"latency limit {1.1 * eager.latency * 1e3:.2f} ms"


def test_plan_files_round_trip_and_belong_to_their_graph(tmp_path):
    g, _ = mlp()
    pf = optimize(g, memory_limit=0.8, time_budget=8, warm=0)
    assert [p.method for p in pf.points] == ["magis", "eager"] and pf.records
    # the limit as given and the bytes it resolved to (0.8 of the imported peak, rounded down)
    assert (pf.meta["limit"], pf.meta["limit_bytes"]) == ("0.8", int(0.8 * pf.points[-1].peak))
    path = save_plans(pf, tmp_path / "p.json.gz")
    back = load_plans(path, g)
    assert back.to_dict() == json.loads(json.dumps(pf.to_dict()))
    with pytest.raises(PlanError, match="no point 5: the plan file has points 0-1"):
        back.point(5)
    other, _ = mlp()
    other.nodes[next(iter(other.nodes))].outputs[0].shape = (8, 5)
    with pytest.raises(PlanError, match="not for"):
        load_plans(path, other)


@pytest.mark.parametrize("limit, words", [
    (1.5, "a fraction of the peak must be at most 1; for a size give units, e.g. 1.5GiB"),
    ("4096", "for a size give units, e.g. 4096B"),
    ("0", "above 0"),
])
def test_optimize_refuses_a_bare_number_above_1_before_searching(limit, words):
    g, _ = mlp()
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        optimize(g, memory_limit=limit, time_budget=60)


def test_a_size_limit_is_the_bytes_themselves():
    g, _ = mlp()
    pf = optimize(g, memory_limit="1GiB", time_budget=1, warm=0)
    assert (pf.meta["mode"], pf.meta["limit"], pf.meta["limit_bytes"]) == ("memory", "1GiB", 1 << 30)
    assert pf.points[0].label == "memory limit 1.00 GiB"
    assert optimize(g, latency_limit=1.1, time_budget=1, warm=0).meta["limit_bytes"] is None


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(schema="x"), "not a MAGIS plan file"),
    (lambda d: d.update(version=99), "unsupported plan file version"),
    (lambda d: d["points"][0].update(applications=[["teleport", 1]]), "unknown rule 'teleport'"),
    (lambda d: d["points"][0].update(applications=[["remat", "a"]]), "expected [rule, int, ...]"),
    (lambda d: d["points"][0].update(peak=-1), "'peak' is not a byte count"),
    (lambda d: d["points"][0].update(order="x"), "'order' is not a list of node ids"),
    (lambda d: d.update(points={}), "'points' is not a list"),
    (lambda d: d.update(device="tpu-v9"), "plan file: unknown device 'tpu-v9' (known: rtx3090, a100-80gb"),
    (lambda d: d.update(device=7), "plan file: 'device' is not a string"),
])
def test_bad_plan_files_are_one_line(edit, words):
    g, _ = mlp()
    d = optimize(g, memory_limit=0.9, time_budget=2, warm=0).to_dict()
    edit(d)
    with pytest.raises(PlanError) as e:
        plans_from_bytes(gzip.compress(json.dumps(d).encode()))
    assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PlanError, match="not a MAGIS plan file"):
        plans_from_bytes(b"\x00garbage")


def test_a_plan_file_without_a_device_is_for_the_default_one():
    g, _ = mlp()
    d = optimize(g, memory_limit=0.9, time_budget=1, warm=0, device="a100-80gb").to_dict()
    assert plans_from_bytes(json.dumps(d).encode()).device == "a100-80gb"
    del d["device"]
    assert plans_from_bytes(json.dumps(d).encode()).device == "rtx3090"


def test_a_plan_that_does_not_replay_names_its_step():
    g, _ = mlp()
    from core.transform.rule import Application

    with pytest.raises(PlanError, match="step 1 .*remat"):
        replay(g, [Application("remat", (999, 1000))])


def test_remat_steps_lower_the_peak_each_step_kind_by_kind_and_replay():
    """The warm start's Remat steps on a many-layer model: every step lowers the peak, the same
    kind of tensor (one per layer) is taken step after step, every state enters the archive and
    the seen set, and the last state's plan replays to its numbers."""
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("gpt_neo_tiny")
    m = MOptimizer(g)
    end = m.remat_steps(m.root, time_budget=30)
    path = end.path()
    assert len(path) >= 4 and all(s.app.rule in ("remat", "remat_chain") for s in path)
    assert all(b.peak < a.peak for a, b in zip([m.root, *path], path, strict=False))
    assert all(s.hash in m.seen for s in path)
    assert min(a.peak for a in m.archive) == end.peak

    plan = m.plan(end)
    h = replay(g, plan.applications)
    check_order(h, plan.order)
    sim = simulate(h, plan.order)
    assert plan.peak == sim.peak and plan.latency == pytest.approx(sim.latency, rel=1e-9)

    def kind(s):  # the recomputed tensor's producer: the first op of both rules' parameters
        a = s.app.params
        node = h.nodes[a[0] if s.app.rule == "remat" else a[1 + a[0]]]
        return node.op, tuple(node.outputs[0].shape)

    kinds = [kind(s) for s in path]
    assert any(a == b for a, b in zip(kinds, kinds[1:], strict=False))  # a kind's next layer, lazily


def test_the_warm_start_ends_with_swap_steps_that_lower_the_peak_and_replay():
    """After the Remat chains, Swap and SwapLate steps from the lowest-peak states within +5% and
    +10% latency: on resnet50_tiny some frontier states end in swaps, each swap step lowered the
    peak (each Reissue after one lowered the latency at the same peak; spike steps, with any of
    their rules, may follow Swap steps that end early), and their plans replay to their numbers."""
    from core.cost.model import AnalyticCost
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("resnet50_tiny")
    cost = AnalyticCost("rtx3090")
    m = MOptimizer(g, cost)
    m.warm_start(4)
    swaps = ("swap", "swap_late", "reissue")
    swapped = [s for s in m.frontier() if s.app is not None and s.app.rule in swaps]
    assert swapped
    for s in swapped:
        path = s.path()
        first = next(i for i, x in enumerate(path) if x.app.rule in swaps)
        start = path[first - 1] if first else m.root
        assert start.latency <= 1.10 * m.root.latency + 1e-12
        # the Swap steps; spike steps may follow where they ended early (any of their rules)
        chain = list(itertools.takewhile(lambda x: x.app.rule in swaps, path[first:]))
        for a, b in zip([start, *chain], chain, strict=False):
            if b.app.rule == "reissue":  # a LOAD issued earlier: the same peak, less latency
                assert b.peak == a.peak and b.latency < a.latency
            else:
                assert b.peak < a.peak
        plan = m.plan(s)
        h = replay(g, plan.applications)
        sim = simulate(h, plan.order, cost)
        assert plan.peak == sim.peak and plan.latency == pytest.approx(sim.latency, rel=1e-9)


def test_thin_keeps_the_ends_and_the_points_nearest_even_peaks():
    pts = [Plan("magis", [], [], metrics(peak, 1.0 + 1 / peak)) for peak in (100, 10, 11, 12, 40, 52, 90, 95, 99)]
    assert [p.peak for p in thin(pts, 4)] == [10, 40, 52, 100]  # targets 40 and 70 (52 is 18 away, 90 is 20)
    assert [p.peak for p in thin(pts, 3)] == [10, 52, 100]  # target 55
    assert [p.peak for p in thin(pts, 20)] == sorted(p.peak for p in pts)
    with pytest.raises(ValueError, match="k >= 2"):
        thin(pts, 1)


def _batch_fission_children(g, cost):
    m = MOptimizer(g, cost)
    end = m.remat_steps(m.root, time_budget=30)
    # slow=inf: the tiny models' parts are all launch overhead (n = 2 costs 3.4x on unet_tiny)
    return m, end, m.batch_fission(end, time_budget=120, slow=float("inf"))


def test_batch_fission_splits_every_state_of_the_remat_chain_and_replays():
    """Micro-batching of a partly recomputed step: each state of the Remat chain (the imported
    graph first) split along the batch in every n that divides it; the deepest split state's has a
    lower peak than the imported graph's split in as many parts (each part recomputes what the
    chain recomputes), and every child's plan replays to its numbers."""
    from core.cost.model import AnalyticCost
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("unet_tiny")
    cost = AnalyticCost("rtx3090")
    m, end, kids = _batch_fission_children(g, cost)
    assert m.batch_splits()
    chain = [m.root, *end.path()]
    assert 2 <= len(chain) <= 24 and len(end.path()) >= 4
    assert all(c.app.rule == "fission" and c.hash in m.seen for c in kids)
    # unet_tiny's batch of 2: n = 2 only; from depth 10 on, a recomputed copy leaves the batch's ops
    # not weakly connected (the split is refused, those states are skipped)
    parents = [c.parent for c in kids]
    assert parents == chain[:len(parents)] and len(parents) >= 5
    assert all(c.app.params[0] == 2 for c in kids)
    assert kids[-1].peak < kids[0].peak
    assert min(a.peak for a in m.archive) <= kids[-1].peak
    for c in (kids[0], kids[len(kids) // 2], kids[-1]):
        plan = m.plan(c)
        assert [a.rule for a in plan.applications][-1] == "fission"
        h = replay(g, plan.applications)
        check_order(h, plan.order)
        sim = simulate(h, plan.order, cost)
        assert plan.peak == sim.peak and plan.latency == pytest.approx(sim.latency, rel=1e-9)


def test_batch_fission_leaves_a_batch_norm_model_after_one_check():
    """Training batch norm reduces over the batch: the root does not split, so no state does."""
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("resnet50_tiny")
    m = MOptimizer(g)
    end = m.remat_steps(m.root, time_budget=10)
    before = len(m.seen)
    assert not m.batch_splits()  # so the warm start gives batch_fission no share
    assert m.batch_fission(end, time_budget=60) == [] and len(m.seen) == before


@pytest.mark.slow
def test_batch_fission_plans_reproduce_eager_pytorch():
    """The exported script of the deepest Remat state's split (parts recompute, then sum their
    weight gradients) against eager PyTorch, in float64 (fission sums the parts in another order)."""
    import torch

    from core.cost.model import AnalyticCost
    from tests.workload_cases import Case

    case = Case("unet_tiny", torch.float64)
    cost = AnalyticCost("rtx3090")
    m, end, kids = _batch_fission_children(case.g, cost)
    for c in (kids[0], kids[-1]):
        plan = m.plan(c)
        h = replay(case.g, plan.applications)
        case.verify_order(h, plan.order, f"batch fission at depth {c.parent.depth}")
    assert case.checked == 2


def test_spaced_first_takes_the_spaced_states_first_then_the_rest_in_order():
    from core.search.warm_start import spaced_first

    assert spaced_first(9, 3) == [0, 4, 8, 1, 2, 3, 5, 6, 7]
    assert spaced_first(5, 24) == [0, 1, 2, 3, 4]
    assert spaced_first(0, 24) == [] and spaced_first(1, 24) == [0]
    for n in range(2, 80):
        for first in (1, 2, 3, 7, 24):
            order = spaced_first(n, first)
            assert sorted(order) == list(range(n))  # each state once
            k = len(set(round(i * (n - 1) / (max(first, 2) - 1)) for i in range(max(first, 2)))) if n > first else n
            head, rest = order[:k], order[k:]
            assert head[0] == 0 and (n - 1) in head and head == sorted(head)  # both ends in the first pass
            assert rest == sorted(rest)
