"""Optimizing a computation graph with graph substitutions (OCGGS, Fang et al., PVLDB 2020).

``substitute(g, method)`` finds a sequence of at most K substitutions (``transform.substitution``)
that minimises the graph's cost (the sum of its ops' times under the analytic cost model) and
returns it with the rewritten graph.  The methods (``SEARCHES``), each behind one function ``(walk, K,
seconds) -> SubstResult``:

=========  ===================================================================================
enu        every sequence (brute force; tiny graphs only)
pruning    ordered sequences only (Algorithm 1), matches found from scratch in every state
dpp        ordered sequences, the parent's matches reused (Algorithm 2)
sampling   Q/2 best plus Q/2 most promising further-exploration sequences per step (Algorithm 3)
taso       TASO's cost-based backtracking (alpha = 1.05, hash dedupe)
metaflow   the same on pieces of at most 30 ops (MetaFlow's graph splitting)
greedy     the best cost-lowering substitution, repeatedly (the improving-only reference)
=========  ===================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...cost.model import AnalyticCost, CostModel
from ...ir.graph import Graph
from ...registry import Registry
from ...transform.rule import Application
from .backtrack import metaflow, taso
from .exact import exact_search
from .greedy import greedy
from .result import Budget, SubstResult
from .sampling import sampling
from .state import GraphCost, Walk, search_rules

MAX_STEPS = 10
MAX_STEPS_LIMIT = 100


@dataclass(frozen=True)
class SubstSearch:
    """One substitution search: ``run(walk, K, seconds) -> SubstResult``, whether its walk reuses the
    parent's matches (``Walk(reuse=...)``), and one line on what it is."""

    run: Callable[[Walk, int, float | None], SubstResult]
    reuse: bool
    text: str


SEARCHES: Registry[SubstSearch] = Registry("substitution search")
SEARCHES.register("sampling", SubstSearch(sampling, True, "OCGGS Sampling (Algorithm 3, Q = 20, eta = 1)"))
SEARCHES.register("dpp", SubstSearch(lambda w, k, t: exact_search("dpp", w, k, t), True,
                                     "OCGGS DPP: exact, matches reused (Algorithm 2)"))
SEARCHES.register("pruning", SubstSearch(lambda w, k, t: exact_search("pruning", w, k, t), False,
                                         "OCGGS Pruning: exact, ordered sequences only (Algorithm 1)"))
SEARCHES.register("taso", SubstSearch(taso, True, "TASO's cost-based backtracking (alpha 1.05)"))
SEARCHES.register("metaflow", SubstSearch(metaflow, True, "MetaFlow: backtracking on pieces of <= 30 ops"))
SEARCHES.register("enu", SubstSearch(lambda w, k, t: exact_search("enu", w, k, t), False,
                                     "brute-force enumeration (tiny graphs)"))
SEARCHES.register("greedy", SubstSearch(greedy, True,
                                        "improving-only greedy: the best decreasing substitution, repeatedly"))


def check_options(method: str, max_steps: int, time_budget: float | None) -> None:
    SEARCHES.get(method)  # ValueError listing the searches for an unknown one
    if not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_STEPS_LIMIT:
        raise ValueError(f"--max-steps must be an integer from 1 to {MAX_STEPS_LIMIT} (got {max_steps})")
    if time_budget is not None and not time_budget > 0:
        raise ValueError(f"--time-budget must be a positive number of seconds (got {time_budget})")


def search(g: Graph, method: str = "sampling", *, max_steps: int = MAX_STEPS, time_budget: float | None = 60.0,
           rules: Iterable[str] | None = None, cost: CostModel | None = None,
           fold_weights: bool | None = None) -> SubstResult:
    """Run substitution search ``method`` on a copy of ``g`` (``g`` is left as it is)."""
    check_options(method, max_steps, time_budget)
    s = SEARCHES.get(method)
    h = g.copy()
    walk = Walk(h, search_rules(rules), GraphCost(h, cost or AnalyticCost(), fold_weights), reuse=s.reuse)
    return s.run(walk, max_steps, time_budget)


def replay(g: Graph, sequence: list[Application], *, cost: CostModel | None = None,
           fold_weights: bool | None = None) -> tuple[Graph, list[dict[str, Any]]]:
    """``g`` rewritten by ``sequence`` (a new graph) and one record per step: the rule, the nodes
    it replaced and created (by name), the search's cost after it, and the simulated latency and
    peak of the traced order after it."""
    from ...schedule import get_scheduler
    from ...simulate import simulate
    from ...transform.substitution import SUBSTITUTE_RULES

    cost = cost or AnalyticCost()
    by = {r.name: r for r in SUBSTITUTE_RULES}
    h = g.copy()
    gc = GraphCost(h, cost, fold_weights)
    total = gc.total(h)
    trace = []
    for app in sequence:
        rule = by[app.rule]
        replaced = [h.nodes[v].name for v in app.params[:rule.sub.n_source]]
        log = rule.apply(h, app)
        total += gc.delta(h, log)
        sim = simulate(h, get_scheduler("traced").run(h).order, cost)
        trace.append({"rule": app.rule, "kind": rule.sub.kind, "application": str(app), "replaced": replaced,
                      "created": [h.nodes[v].name for v in sorted(log.added())], "cost_ms": total * 1e3,
                      "latency_ms": sim.latency * 1e3, "peak_bytes": int(sim.peak)})
    h.lint()
    return h, trace


def substitute(g: Graph, method: str = "sampling", *, max_steps: int = MAX_STEPS, time_budget: float | None = 60.0,
               rules: Iterable[str] | None = None, cost: CostModel | None = None,
               fold_weights: bool | None = None) -> tuple[SubstResult, Graph]:
    """Search, then replay the best sequence onto a copy of ``g``: the result (its ``trace`` filled)
    and the rewritten graph, whose ``meta["transforms"]`` lists the substitutions."""
    res = search(g, method, max_steps=max_steps, time_budget=time_budget, rules=rules, cost=cost,
                 fold_weights=fold_weights)
    h, res.trace = replay(g, res.sequence, cost=cost, fold_weights=fold_weights)
    h.meta["transforms"] = list(h.meta.get("transforms", [])) + [
        f"substitute {t['rule']} {','.join(t['replaced'])}" for t in res.trace]
    return res, h


__all__ = ["Budget", "GraphCost", "MAX_STEPS", "SEARCHES", "SubstResult", "SubstSearch", "Walk", "check_options", "replay", "search",
           "search_rules", "substitute"]
