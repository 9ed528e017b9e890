"""The exact searches of OCGGS: ENU (every sequence of at most K substitutions, the brute-force
baseline), Pruning (Algorithm 1: only ordered sequences, matches found from scratch in every
state) and DPP (Algorithm 2: ordered sequences, matches reused from the parent).  All three are a
depth-first walk over one graph edited in place; each reaches the optimum of sequences of length
<= K when it finishes inside its budget."""

from __future__ import annotations

from ...errors import RuleNotApplicable
from .result import Budget, SubstResult
from .state import Walk


def dfs(walk: Walk, max_steps: int, budget: Budget, *, ordered: bool) -> tuple[list, float, bool]:
    """The best sequence of the walk's subtree, its cost, and whether the walk finished."""
    best_seq: list = []
    best = walk.cost
    stopped = False

    def visit() -> None:
        nonlocal best, best_seq, stopped
        if walk.cost < best - 1e-15:
            best, best_seq = walk.cost, walk.sequence()
            walk.stats.best_at = budget.elapsed()
        if walk.depth >= max_steps:
            return
        for app in (walk.ordered() if ordered else list(walk.matches())):
            if budget.over():
                stopped = True
                return
            try:
                walk.push(app)
            except RuleNotApplicable:
                continue
            visit()
            walk.pop()
            if stopped:
                return

    walk.stats.states += 1  # the empty sequence
    visit()
    return best_seq, best, not stopped


def exact_search(method: str, walk: Walk, max_steps: int, time_budget: float | None) -> SubstResult:
    budget = Budget(time_budget)
    seq, best, done = dfs(walk, max_steps, budget, ordered=method != "enu")
    st = walk.stats
    return SubstResult(method, seq, walk.root_cost, best, st.states, st.matches, budget.elapsed(), done, max_steps,
                       st.refused, st.match_seconds, best_seconds=st.best_at)


__all__ = ["dfs", "exact_search"]
