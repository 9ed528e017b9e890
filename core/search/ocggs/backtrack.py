"""The baselines of OCGGS's evaluation: TASO's cost-based backtracking search and MetaFlow's, the
same search after splitting the graph.

TASO-style (Jia et al., SOSP'19, Algorithm 2): a priority queue of graphs by cost; the cheapest is
taken out and every substitution of it applied; a new graph enters the queue when it costs less
than ``alpha`` times the best so far and its canonical hash is new (``alpha`` = 1.05 lets it pass
through slightly worse graphs).  Sequences are at most K long.

MetaFlow-style (Jia et al., SysML'19): the graph's ops in topological order are cut into pieces of
at most ``PIECE`` (30) ops; each piece is searched in turn, TASO-style, with only the
substitutions whose source ops lie in the piece (or were created while searching it), continuing
from the best graph of the previous piece, the K steps shared.
"""

from __future__ import annotations

import heapq
import itertools

from ...errors import RuleNotApplicable
from ..wl_hash import graph_hash
from .result import Budget, SubstResult
from .state import Walk

ALPHA = 1.05
PIECE = 30


def _best_first(root: Walk, max_steps: int, budget: Budget, alpha: float, allowed=None) -> tuple[Walk, list, float, bool]:
    """TASO's loop from ``root``: the walk of the best graph, its sequence, cost, and whether the
    queue was exhausted."""
    eps = 1e-12
    tick = itertools.count()
    queue = [(root.cost, next(tick), root)]
    seen = {graph_hash(root.g)}
    best_walk, best = root, root.cost
    while queue:
        if budget.over():
            return best_walk, best_walk.sequence(), best, False
        _, _, w = heapq.heappop(queue)
        if w.depth >= max_steps:
            continue
        for app in list(w.matches()):
            if allowed is not None and not allowed(w, app):
                continue
            if budget.over():
                return best_walk, best_walk.sequence(), best, False
            c = w.estimate(app)
            if c >= alpha * best:
                continue
            child = w.fork()
            try:
                child.push(app)
            except RuleNotApplicable:
                continue
            h = graph_hash(child.g)
            if h in seen:
                continue
            seen.add(h)
            if c < best - eps:
                best_walk, best = child, c
                root.stats.best_at = budget.elapsed()
            heapq.heappush(queue, (c, next(tick), child))
    return best_walk, best_walk.sequence(), best, True


def taso(walk: Walk, max_steps: int, time_budget: float | None, *, alpha: float = ALPHA) -> SubstResult:
    budget = Budget(time_budget)
    walk.stats.states += 1
    _, seq, best, done = _best_first(walk, max_steps, budget, alpha)
    st = walk.stats
    return SubstResult("taso", seq, walk.root_cost, best, st.states, st.matches, budget.elapsed(), done, max_steps,
                       st.refused, st.match_seconds, best_seconds=st.best_at)


def pieces(walk: Walk, size: int = PIECE) -> list[set[int]]:
    ops = [v for v in walk.g.topo_order() if walk.g.nodes[v].kind.value != "placeholder"]
    return [set(ops[i:i + size]) for i in range(0, len(ops), size)]


def metaflow(walk: Walk, max_steps: int, time_budget: float | None, *, alpha: float = ALPHA,
             piece: int = PIECE) -> SubstResult:
    budget = Budget(time_budget)
    walk.stats.states += 1
    parts = pieces(walk, piece)
    cur = walk
    done = True
    for i, part in enumerate(parts):
        left = max_steps - cur.depth
        if left <= 0:
            break
        if budget.over():
            done = False
            break
        first_new = cur.g.new_id()

        def allowed(w: Walk, app, part=part, first_new=first_new) -> bool:
            n = w.rules[app.rule].sub.n_source
            return all(v in part or v >= first_new for v in app.params[:n])

        share = None
        if time_budget is not None:
            share = max(0.0, (time_budget - budget.elapsed()) / (len(parts) - i))
        sub_budget = Budget(share)
        best_walk, _, _, finished = _best_first(cur, cur.depth + left, sub_budget, alpha, allowed)
        done = done and finished
        cur = best_walk
    st = walk.stats
    return SubstResult("metaflow", cur.sequence(), walk.root_cost, cur.cost, st.states, st.matches,
                       budget.elapsed(), done and not budget.over(), max_steps, st.refused, st.match_seconds,
                       best_seconds=budget.elapsed())


__all__ = ["ALPHA", "PIECE", "metaflow", "pieces", "taso"]
