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
        ranked = []
        for app in list(walk.matches()):
            if budget.over():
                done = False
                break
            c = walk.estimate(app)
            if c < walk.cost - 1e-12:
                ranked.append((c, str(app), app))
        best_app = next((app for _, _, app in sorted(ranked) if walk.check(app)), None)
        if best_app is None or not done:
            break
        walk.push(best_app)
        walk.stats.best_at = budget.elapsed()
    st = walk.stats
    return SubstResult("greedy", walk.sequence(), walk.root_cost, walk.cost, st.states, st.matches, budget.elapsed(),
                       done, max_steps, st.refused, st.match_seconds, best_seconds=st.best_at)


__all__ = ["greedy"]
