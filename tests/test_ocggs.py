"""The OCGGS searches on the notes' hand-checked cases: Fig. 1/2 (enlarge then merge), Example 5's
labels and keys, Example 4's pruned ordering, and random small DAGs on which ENU, Pruning and DPP
reach one optimum; DPP's reused matches equal a fresh match in every state; the result record,
replay and option checks."""

from __future__ import annotations

import pytest
import torch

from core.cost.model import AnalyticCost
from core.frontend.torch_import import capture
from core.schedule import get_scheduler
from core.search.ocggs import SEARCHES, check_options, replay, search, substitute
from core.search.ocggs.state import GraphCost, Walk, search_rules
from core.simulate import simulate
from tests.subst_cases import Fig3, module_fig1, random_module


@pytest.fixture(scope="module")
def fig1():
    m, x = module_fig1()
    return capture(m, x, training=False, name="fig1")


def _walk(g, reuse=True, rules=None):
    h = g.copy()
    return Walk(h, search_rules(rules), GraphCost(h, AnalyticCost()), reuse=reuse)


def test_fig1_exact_k2_finds_enlarge_then_merge_greedy_does_not(fig1):
    w = _walk(fig1)
    (enlarge,) = [a for a in w.matches() if a.rule == "enlarge_conv"]
    up = w.try_cost(enlarge)
    assert up > w.cost  # enlarging alone costs more (OCGGS: +0.04 ms)
    for method in ("enu", "pruning", "dpp", "sampling"):
        r = search(fig1, method, max_steps=2)
        assert [a.rule for a in r.sequence] == ["enlarge_conv", "merge_conv"], method
        assert r.cost_after < r.cost_before and r.complete
    g = search(fig1, "greedy", max_steps=2)
    assert g.sequence == [] and g.cost_after == g.cost_before
    k1 = search(fig1, "dpp", max_steps=1)
    assert k1.sequence == []  # with K = 1 the merge is out of reach


def test_example5_labels_and_keys():
    torch.manual_seed(0)
    g = capture(Fig3(), (torch.randn(1, 16, 8, 8),), training=False, name="fig3")
    w = _walk(g, rules=["merge_conv"])
    m1, m2 = sorted(w.matches(), key=lambda a: a.params)
    v3, v7 = m1.params[1], m2.params[1]
    assert w.key(m1) == (0, v3) and w.key(m2) == (0, v7) and w.key(m1) < w.key(m2)
    s1 = w.push(m1)
    assert [w.labels[v] for v in s1.created] == [(1, j) for j in range(len(s1.created))]
    assert w.ordered() == [m2]  # tau1 <= tau2: the sequence (tau1, tau2) is ordered
    s2 = w.push(m2)
    assert [w.labels[v] for v in s2.created] == [(2, j) for j in range(len(s2.created))]
    w.pop()
    w.pop()
    w.push(m2)
    assert m1 in w.matches() and m1 not in w.ordered()  # (tau2, tau1) is not


def test_example4_one_of_two_equivalent_orders_is_visited():
    torch.manual_seed(0)
    g = capture(Fig3(), (torch.randn(1, 16, 8, 8),), training=False, name="fig3")
    enu = search(g, "enu", max_steps=2, rules=["merge_conv"])
    pruning = search(g, "pruning", max_steps=2, rules=["merge_conv"])
    dpp = search(g, "dpp", max_steps=2, rules=["merge_conv"])
    assert enu.cost_after == pruning.cost_after == dpp.cost_after < enu.cost_before
    # root, two sequences of length 1, then ENU both orders of length 2, Pruning one
    assert (enu.states, pruning.states, dpp.states) == (5, 4, 4)


@pytest.mark.parametrize("seed", range(8))
def test_random_dags_exact_searches_agree(seed):
    m = random_module(seed)
    g = capture(m, (torch.randn(1, 8, 6, 6),), training=False, name=f"rand{seed}")
    rules = ["merge_conv", "enlarge_conv", "cse_relu", "cat_relu", "split_relu", "add_assoc", "add_comm"]
    for k in (2, 3):
        res = {meth: search(g, meth, max_steps=k, rules=rules, time_budget=None) for meth in ("enu", "pruning", "dpp")}
        costs = {meth: r.cost_after for meth, r in res.items()}
        assert costs["pruning"] == pytest.approx(costs["enu"], rel=1e-12), (k, costs)
        assert costs["dpp"] == pytest.approx(costs["enu"], rel=1e-12), (k, costs)
        assert res["pruning"].states <= res["enu"].states
        sampling = search(g, "sampling", max_steps=k, rules=rules)
        assert sampling.cost_after >= costs["enu"] - 1e-15  # a heuristic never beats the optimum


@pytest.mark.parametrize("seed", range(6))
def test_dpp_reused_matches_equal_a_fresh_match(seed):
    """Along a seeded walk, the matches DPP keeps from the parent plus those found around the
    change are exactly every match of the new graph."""
    import random

    m = random_module(seed + 100)
    g = capture(m, (torch.randn(1, 8, 6, 6),), training=False, name="rand")
    w = _walk(g, reuse=True)
    rng = random.Random(seed)
    for _ in range(6):
        apps = w.matches()
        fresh = {(a.rule, a.params) for a in w._find()}
        assert {(a.rule, a.params) for a in apps} == fresh
        if not apps:
            break
        try:
            w.push(rng.choice(apps))
        except ValueError:
            continue


def test_result_replay_and_simulated_cost(fig1):
    res, h = substitute(fig1, "sampling", max_steps=2)
    assert [t["rule"] for t in res.trace] == ["enlarge_conv", "merge_conv"]
    t0, t1 = res.trace
    assert t0["replaced"] and t0["created"] and t1["cost_ms"] == pytest.approx(res.cost_after * 1e3)
    assert h.meta["transforms"][-1].startswith("substitute merge_conv ")
    h.lint()
    again, _ = replay(fig1, res.sequence)
    assert again.same_as(h)
    # the search's cost is the simulator's latency of the same graph, weights folded at inference
    sim = simulate(h, get_scheduler("traced").run(h).order)
    folded = GraphCost(h, AnalyticCost(), fold_weights=True)
    assert sim.latency >= folded.total(h)
    assert GraphCost(h, AnalyticCost(), fold_weights=False).total(h) == pytest.approx(sim.latency)


def test_training_graph_cost_is_the_simulated_latency():
    from app.specs import build_workload
    from core.codegen.verify import capture_real

    g = capture_real(build_workload("bert_tiny", 0), name="bert_tiny")
    gc = GraphCost(g, AnalyticCost())
    assert not gc.fold
    assert gc.total(g) == pytest.approx(simulate(g, get_scheduler("traced").run(g).order).latency)


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown substitution search"):
        check_options("magic", 10, 1.0)
    for k in (0, -1, 101):
        with pytest.raises(ValueError, match="max-steps"):
            check_options("sampling", k, 1.0)
    with pytest.raises(ValueError, match="time-budget"):
        check_options("sampling", 10, 0)
    with pytest.raises(ValueError, match="unknown substitution rule"):
        search_rules(["merge_everything"])
    assert set(SEARCHES) == {"sampling", "dpp", "pruning", "taso", "metaflow", "enu", "greedy"}


def test_budget_stops_an_exact_search_and_says_so():
    torch.manual_seed(0)
    g = capture(random_module(3), (torch.randn(1, 8, 6, 6),), training=False, name="r")
    r = search(g, "enu", max_steps=8, time_budget=0.05, rules=["add_comm", "cse_relu", "add_assoc"])
    assert not r.complete and r.seconds >= 0.05  # it ran until the budget was spent, then stopped
