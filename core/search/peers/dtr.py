"""Dynamic Tensor Rematerialization (Kirisame, Lyubomirsky, Haan, Brennan, He, Roesch, Chen,
Tatlock: "Dynamic Tensor Rematerialization", ICLR 2021), simulated on our graph and cost model.

The traced program runs op by op under a memory budget B.  Before an op runs, its evicted inputs
are rematerialised (recursively: an evicted input of a recomputation is recomputed first) and
pinned; while the new output does not fit in B, the resident tensor with the smallest

    h_DTR(t) = (c(t) + sum of c(u) over u in e*(t)) / (m(t) * s(t))

is evicted -- c = compute time from our cost model, m = bytes, s = staleness (seconds since its
last access), e*(t) = the *evicted neighbourhood*: the evicted tensors that recomputing t would
need (evicted ancestors through evicted ones) and the evicted tensors whose recomputation would
need t (evicted descendants through evicted ones).  This is the paper's exact h_DTR, with e*
searched per candidate, not the union-find approximation h_DTR-eq.  A tensor whose last use has
passed is freed (banished); a view is valid only while its base is resident.  The unit of
eviction is an op (all its outputs); graph outputs and ops that draw random numbers are never
evicted.

Every computation is an instance; which instance each reader read becomes remat applications
(``common.realise``), and DTR's execution order is the plan's schedule.  A budget fails when an
allocation finds nothing evictable (infeasible) or recomputation exceeds ``thrash`` times the op
count (thrashing).
"""

from __future__ import annotations

import time
from collections import Counter

from ...fmt import format_bytes
from ...ir.graph import Graph, NodeKind, TRef
from ...transform.remat import recomputable
from .base import Peer, eager_peak
from .common import Failure, Inst, RematDecision, make_plan, realise, storage_members, traced_order

BUDGETS = (0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


class DTRFailure(Exception):
    """The budget cannot be met (infeasible) or DTR thrashes."""


class DTRSim:
    """One run of DTR over the traced order of ``g`` under ``budget`` bytes."""

    def __init__(self, g: Graph, cost, budget: int, thrash: float = 10.0) -> None:
        self.g, self.budget = g, budget
        self.order = traced_order(g)
        self.pos = {v: i for i, v in enumerate(self.order)}
        ops = self.order
        self.cost = {v: cost.node_time(g, g.nodes[v]) for v in ops}
        self.preds = {v: [p for p in g.preds(v) if g.nodes[p].kind != NodeKind.PLACEHOLDER] for v in ops}
        self.users = {v: [u for u in g.users(v) if u in self.pos] for v in ops}
        kept_roots = {g.storage_root(r) for r in g.outputs.values()}
        self.size: dict[int, int] = {}  # bytes an evaluation allocates
        self.kept: dict[int, int] = {}  # of which graph outputs (never freed after instance 0)
        self.roots: dict[int, set[int]] = {}  # op -> ops owning the storages its views alias
        for v in ops:
            n = g.nodes[v]
            own = [(j, t) for j, t in enumerate(n.outputs) if t.alias is None and t.device == "device"]
            self.size[v] = sum(t.nbytes for _, t in own)
            self.kept[v] = sum(t.nbytes for j, t in own if TRef(v, j) in kept_roots)
            self.roots[v] = {g.storage_root(TRef(v, j)).node for j, t in enumerate(n.outputs)
                             if t.alias is not None} - {v}
        self.views: dict[int, list[int]] = {}
        for v, rs in self.roots.items():
            for r in rs:
                self.views.setdefault(r, []).append(v)
        members = storage_members(g)
        self.last_use = {v: max([self.pos[v]] + [self.pos[m] for m in members[v] if m in self.pos]) for v in ops}
        self.evictable = {v for v in ops if self.size[v] > self.kept[v] and recomputable(g, v)}
        for v in ops:  # an op that cannot be recomputed stays while an evictable op may need it
            if not recomputable(g, v) and any(u in self.evictable for u in self.users[v]):
                self.last_use[v] = len(ops)
        self.resident0 = 0  # placeholders: held by the caller for the whole step
        for n in g.placeholders():
            self.resident0 += sum(t.nbytes for t in n.outputs if t.alias is None and t.device == "device")
        self.max_recomputes = int(thrash * len(ops))

    def run(self) -> tuple[RematDecision, dict]:
        self.mem = self.resident0
        self.peak = self.mem
        self.res: set[int] = set()
        self.inst: dict[int, int] = {}
        self.access: dict[int, float] = {}
        self.pinned: Counter[int] = Counter()
        self.clock = 0.0
        self.events: list[Inst] = []
        self.reads: dict[Inst, dict[int, int]] = {}
        self.recomputes = 0
        self.evictions = 0
        self.now = 0
        for i, v in enumerate(self.order):
            self.now = i
            self._evaluate(v)
            for u in [u for u in self.res if self.last_use[u] <= i]:  # banish what no later op reads
                self._drop(u)
        stats = {"evictions": self.evictions, "dtr_recomputes": self.recomputes,
                 "dtr_peak": self.peak, "dtr_compute_seconds": round(self.clock, 9)}
        return RematDecision(self.events, self.reads), stats

    # ---- execution -------------------------------------------------------------------------------
    def _evaluate(self, v: int) -> None:
        """Compute op v (first time or again): its inputs made resident and pinned first."""
        ps = self.preds[v]
        held = []
        for p in ps:  # pin what is there, so rematerialising the rest cannot evict it
            if p in self.res:
                self._pin(p, held)
        for p in ps:
            if p not in self.res:
                self.recomputes += 1
                if self.recomputes > self.max_recomputes:
                    raise DTRFailure(f"thrashing: more than {self.max_recomputes} recomputations")
                self._evaluate(p)
                self._pin(p, held)
        need = self.size[v]
        while self.mem + need > self.budget:
            victim = self._choose()
            if victim is None:
                raise DTRFailure(f"infeasible under a budget of {format_bytes(self.budget)}: "
                                 f"{self.g.nodes[v].name!r} needs {format_bytes(need)} more while "
                                 f"{format_bytes(self.mem)} is held by tensors that cannot be evicted "
                                 f"(inputs, weights, outputs, random ops, or inputs of the op being computed)")
            self._evict(victim)
        self.mem += need
        self.peak = max(self.peak, self.mem)
        k = self.inst.get(v, -1) + 1
        self.inst[v] = k
        self.res.add(v)
        self.events.append((v, k))
        self.reads[(v, k)] = {p: self.inst[p] for p in ps}
        self.clock += self.cost[v]
        for x in (v, *ps):
            self.access[x] = self.clock
        if k > 0:  # a copy's graph outputs are not the graph's: they die at once
            self.mem -= self.kept[v]
        for p in held:
            self.pinned[p] -= 1

    def _pin(self, p: int, held: list[int]) -> None:
        for x in (p, *self.roots[p]):
            self.pinned[x] += 1
            held.append(x)

    def _drop(self, u: int) -> None:
        """u leaves memory (evicted or banished); its views become invalid."""
        if u not in self.res:
            return
        self.res.discard(u)
        self.mem -= self.size[u] - self.kept[u]  # graph outputs stay (a copy's died at once)
        for w in self.views.get(u, ()):
            self.res.discard(w)

    def _evict(self, u: int) -> None:
        self.evictions += 1
        self._drop(u)

    # ---- the heuristic ---------------------------------------------------------------------------
    def _evicted(self, u: int) -> bool:
        return u in self.inst and u not in self.res

    def _neighbourhood(self, t: int) -> set[int]:
        """e*(t): evicted ancestors reachable through evicted ops, and evicted descendants (still
        to be used) reachable through evicted ops."""
        seen: set[int] = set()
        stack = [p for p in self.preds[t] if self._evicted(p)]
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            stack.extend(p for p in self.preds[u] if self._evicted(p) and p not in seen)
        down: set[int] = set()
        stack = [w for w in self.users[t] if self._evicted(w) and self.last_use[w] > self.now]
        while stack:
            u = stack.pop()
            if u in down:
                continue
            down.add(u)
            stack.extend(w for w in self.users[u] if self._evicted(w) and self.last_use[w] > self.now
                         and w not in down)
        return seen | down

    def _choose(self) -> int | None:
        best, best_h = None, float("inf")
        for t in self.res:
            if t not in self.evictable or self.pinned[t] > 0:
                continue
            c = self.cost[t] + sum(self.cost[u] for u in self._neighbourhood(t))
            stale = self.clock - self.access.get(t, 0.0) + 1e-12
            h = c / ((self.size[t] - self.kept[t]) * stale)
            if h < best_h or (h == best_h and best is not None and t < best):
                best, best_h = t, h
        return best


class DTR(Peer):
    name = "dtr"
    label = "DTR"
    colour = "#f97316"
    symbol = "diamond"
    family = "peer"
    paper = "Kirisame et al. 2021, Dynamic Tensor Rematerialization (ICLR 2021)"

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, thrash=10.0, **_):
        t0 = time.perf_counter()
        base = eager_peak(g, cost)
        plans, failures = [], []
        for b in budgets:
            label = f"budget {b:g}"
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            limit = int(b * base)
            try:
                d, stats = DTRSim(g, cost, limit, thrash).run()
            except DTRFailure as e:
                failures.append(Failure(label, str(e)))
                progress(f"dtr {label}: {e}")
                continue
            r = realise(g, d)
            plans.append(make_plan(self.name, label, r, cost, budget=limit, budget_fraction=b,
                                   heuristic="h_DTR (exact evicted neighbourhood)", **stats))
            progress(f"dtr {label}: {stats['evictions']} evictions, {stats['dtr_recomputes']} recomputations")
        return plans, failures


__all__ = ["BUDGETS", "DTR", "DTRFailure", "DTRSim"]
