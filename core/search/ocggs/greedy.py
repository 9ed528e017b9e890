"""The improving-only greedy search: apply the substitution that lowers the cost most, until none
does or K are applied.  OCGGS's Fig. 1 is the case it cannot solve: enlarging a kernel raises the
cost, and only the merge it opens lowers it again."""

from __future__ import annotations

from .result import Budget, SubstResult
from .state import Walk


def greedy(walk: Walk, max_steps: int, time_budget: float | None) -> SubstResult:
    budget = Budget(time_budget)
    walk.stats.states += 1
    done = True
    while walk.depth < max_steps:
        best, best_app = walk.cost, None
        for app in list(walk.matches()):
            if budget.over():
                done = False
                break
            c = walk.try_cost(app)
            if c is not None and c < best - 1e-12:
                best, best_app = c, app
        if best_app is None or not done:
            break
        walk.push(best_app)
    st = walk.stats
    return SubstResult("greedy", walk.sequence(), walk.root_cost, walk.cost, st.states, st.matches, budget.elapsed(),
                       done, max_steps, st.refused, st.match_seconds)


__all__ = ["greedy"]
