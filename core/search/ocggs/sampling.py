"""OCGGS's Sampling heuristic (section 5, Algorithm 3): polynomial time and space.

Iteration k takes at most Q sequences (``P_{k-1}``) and evaluates all their children
(``P_tmp``).  Children that do not raise the cost (``P_des``) compete on cost.  A child that raises it,
with at most ``eta`` successive increases, is a *further-exploration* sequence: it is not kept for
itself but for what it opens.  Its *potential* (Definition 12) is the lowest cost reached by a
descendant chain in which each substitution depends on the previous one (replaces a node it
created) and the last one lowers the cost; the Q/2 with the best potential are expanded, their
descendants join ``P_inc`` until no further-exploration sequence is left, and those of ``P_inc``
that end in a decrease compete on cost.  ``P_k`` is the Q/2 best of ``P_des`` plus the Q/2 best of
``P_inc``.  With Q = 20 and eta = 1 (the paper's setting) OCGGS's Fig. 1 -- enlarge a kernel
(+cost), then merge (-more) -- is found where a greedy improving-only search finds nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import RuleNotApplicable
from ...transform.rule import Application
from .result import Budget, SubstResult
from .state import Walk

Q = 20
ETA = 1


@dataclass
class Cand:
    """A child sequence not yet materialised: its parent walk plus one application."""

    parent: Walk
    app: Application
    cost: float
    run: int  # successive cost increases it ends with

    @property
    def increases(self) -> bool:
        return self.run > 0


def _children(w: Walk, run: int, budget: Budget, eps: float) -> list[Cand]:
    out = []
    for app in list(w.matches()):
        if budget.over():
            break
        c = w.estimate(app)
        if c < math.inf:
            out.append(Cand(w, app, c, run + 1 if c > w.cost + eps else 0))
    return out


def _grow(c: Cand) -> Walk | None:
    """The candidate as a walk of its own (None if it does not apply: a cycle)."""
    w = c.parent.fork()
    try:
        w.push(c.app)
    except RuleNotApplicable:
        return None
    w.run = c.run
    return w


def _potential(c: Cand, budget: Budget, eps: float) -> float:
    """Definition 12 for eta-bounded chains of length one: the best decrease among the children of
    ``c`` that depend on its last substitution."""
    w = c.parent
    try:
        w.push(c.app)
    except RuleNotApplicable:
        return math.inf
    try:
        made = set(w.steps[-1].created)
        best = math.inf
        for app in list(w.matches()):
            if budget.over():
                break
            if made.isdisjoint(app.params[:w.rules[app.rule].sub.n_source]):
                continue
            cost = w.estimate(app)
            if cost < w.cost - eps:
                best = min(best, cost)
        return best
    finally:
        w.pop()


def sampling(walk: Walk, max_steps: int, time_budget: float | None, *, q: int = Q, eta: int = ETA) -> SubstResult:
    budget = Budget(time_budget)
    eps = 1e-12
    best_cost, best_seq = walk.cost, []
    level: list[Walk] = [walk]
    half = max(1, q // 2)
    done = True

    def note(w: Walk) -> None:
        nonlocal best_cost, best_seq
        if w.cost < best_cost - eps:
            best_cost, best_seq = w.cost, w.sequence()
            walk.stats.best_at = budget.elapsed()

    for _ in range(max_steps):
        if not level:
            break
        if budget.over():
            done = False
            break
        tmp: list[Cand] = []
        for w in level:
            if w.depth < max_steps:
                tmp.extend(_children(w, w.run, budget, eps))
        for c in sorted(tmp, key=lambda c: c.cost):
            if c.cost >= best_cost - eps:
                break
            if c.parent.check(c.app):
                best_cost, best_seq = c.cost, c.parent.sequence() + [c.app]
                walk.stats.best_at = budget.elapsed()
                break
        des = sorted((c for c in tmp if not c.increases), key=lambda c: c.cost)
        inc_final: list[Cand] = []
        frontier = [c for c in tmp if c.increases and c.run <= eta and c.parent.depth + 1 < max_steps]
        while frontier and not budget.over():
            ranked = sorted(frontier, key=lambda c: (_potential(c, budget, eps), c.cost))[:half]
            frontier = []
            for c in ranked:
                w = _grow(c)
                if w is None:
                    continue
                for d in _children(w, c.run, budget, eps):
                    if d.cost < best_cost - eps and w.check(d.app):
                        best_cost, best_seq = d.cost, w.sequence() + [d.app]
                        walk.stats.best_at = budget.elapsed()
                    if not d.increases:
                        inc_final.append(d)
                    elif d.run <= eta and w.depth + 1 < max_steps:
                        frontier.append(d)
        inc_final.sort(key=lambda c: c.cost)
        nxt = _dedupe(des, half) + _dedupe(inc_final, half)
        level = [w for w in map(_grow, nxt) if w is not None]
        for w in level:
            note(w)
    if budget.over():
        done = False
    st = walk.stats
    return SubstResult("sampling", best_seq, walk.root_cost, best_cost, st.states, st.matches, budget.elapsed(),
                       done, max_steps, st.refused, st.match_seconds, best_seconds=st.best_at)


def _dedupe(cands: list[Cand], k: int) -> list[Cand]:
    """The first ``k`` of ``cands`` (sorted by cost), one per (cost, rule) among equal-cost
    alternatives that differ only in which independent op they touch first."""
    out: list[Cand] = []
    seen: set[tuple] = set()
    for c in cands:
        sig = (round(c.cost, 15), tuple(sorted(str(a) for a in c.parent.sequence() + [c.app])))
        if sig in seen:
            continue
        seen.add(sig)
        out.append(c)
        if len(out) == k:
            break
    return out


__all__ = ["ETA", "Q", "sampling"]
