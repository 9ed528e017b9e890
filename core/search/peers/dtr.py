"""Dynamic Tensor Rematerialization (Kirisame, Lyubomirsky, Haan, Brennan, He, Roesch, Chen,
Tatlock: "Dynamic Tensor Rematerialization", ICLR 2021), simulated on our graph and cost model.

The traced program runs op by op under a memory budget B.  The unit of memory is a *storage* (one
output tensor that owns its bytes; a view adds none and is valid only while its base storage is
resident), as in the paper's runtime, which tracks, evicts and frees tensors, not ops (Sec. 2,
"Algorithm 1"): an op's output whose last use has passed is freed (banished) even while a sibling
output of the same op is still needed -- a batch norm's large output goes after its last forward
reader although its tiny mean/invstd stay for the backward.  Before an op runs, its evicted inputs
are rematerialised (recursively: an evicted input of a recomputation is recomputed first) and
pinned; recomputing an evicted tensor reruns its op, and all the op's outputs come back (the new
copies replace resident siblings; what nobody needs any more is freed at once).  While the new
outputs do not fit in B, the resident storage with the smallest

    h_DTR(t) = (c(t) + sum of c(u) over u in e*(t)) / (m(t) * s(t))

is evicted -- c = compute time of the op producing t (from our cost model), m = bytes, s =
staleness (seconds since its last access), e*(t) = the *evicted neighbourhood*: the evicted
storages that recomputing t would need (evicted ancestors through evicted ones) and the evicted
storages whose recomputation would need t (evicted descendants through evicted ones), each op
counted once.  This is the paper's exact h_DTR, with e* searched per candidate, not the union-find
approximation h_DTR-eq; candidates are taken by h's lower bound c(t) / (m(t) s(t)), and a search
stops once it cannot beat the best h found, which chooses exactly what searching every e* whole
would (tested) at a fraction of the cost.  Graph outputs and outputs of ops that draw random
numbers are never evicted.

Budgets are fractions of DTR's own unbudgeted peak (one run with no budget first), as the paper's
evaluation sets them (ratios of the peak without rematerialisation).  Every computation is an
instance; which instance each reader read becomes remat applications (``common.realise``), and
DTR's execution order is the plan's schedule.  After the grid of budgets, while the time budget
lasts, the peer bisects between neighbouring budgets whose plans leave a gap in the frontier
(``refine_budgets``: the bisection the warm start's DTR seeds use too).  A budget fails when an allocation finds nothing
evictable (infeasible) or recomputation exceeds ``thrash`` times the op count (thrashing); a
run stops at its deadline (DTRTimeout: the budget's fate unknown).
"""

from __future__ import annotations

import copy
import math
import time
from collections import Counter

import numpy as np

from ...fmt import format_bytes
from ...ir.graph import Graph, NodeKind, TRef
from ...transform.remat import recomputable
from ..plan import Plan
from .base import Method, eager_peak, refining
from .common import Failure, Inst, RematDecision, make_plan, realise, traced_order

BUDGETS = tuple(round(1 - 0.05 * i, 2) for i in range(1, 15))  # 0.95, 0.9, ..., 0.3
REFINE_HALVINGS = 4  # the peer's refinement: a grid step halved at most 4 times (0.05 -> 0.003125)
REFINE_TOL = 0.01  # ... between neighbouring budgets whose peaks and latencies both differ by more than 1%

Result = tuple[int, float] | str | None  # a run at a budget: (peak, latency), why it failed, or None (not known)


class Refined(list):
    """The runs :func:`refine_budgets` made, in order, as (budget, result); ``exhausted``: it stopped
    because nothing was left to split (not at its deadline or its count of runs)."""

    exhausted: bool = False


def refine_budgets(run, done: dict, *, slack: float | tuple[float, ...] | None = None, base: float | None = None,
                   halvings: int = 2, deadline: float | None = None, clock=time.perf_counter,
                   max_runs: int | None = None, tol: float = REFINE_TOL, digits: int = 4) -> Refined:
    """Bisection of DTR's budgets between neighbouring ones already run: the one refinement of the
    warm start's seeds (``search.seeds.dtr_seeds``) and of the DTR peer.

    ``run(b)``: DTR at budget fraction ``b`` -> (peak, latency), a failure's reason (a str: the budget
    cannot be met), or None (not known: the run passed its deadline).  ``done``: budget -> such a
    result for every budget run so far (the grid); each new known result is added to it.  Before
    each run the clock is read and the refinement stops once ``clock()`` passes ``deadline``, or
    after ``max_runs`` runs.  A midpoint is rounded to ``digits`` decimals; one already run ends the
    split.

    With ``slack`` (one latency slack or several, relative to the latency ``base``; the seeds'
    rule): for each slack in turn, up to ``halvings`` times, the step between the lowest budget whose
    plan is within the slack and the next lower budget run is halved -- only where that lower one
    gave a plan (too slow): just above a budget DTR cannot meet it may thrash for tens of seconds.

    Without ``slack`` (the peer's rule: fill the frontier's gaps): again and again, of the pairs of
    neighbouring budgets run, the one whose plans differ most -- the smaller of the relative
    differences of their peaks and of their latencies, a pair within ``tol`` in either being no gap
    (the plans between them lie on a flat piece of the frontier) -- is split at its midpoint; then,
    no such gap left, the widest pair of a budget DTR cannot meet and the plan above it (the
    lowest peak DTR reaches); never a pair narrower than twice the grid's finest step halved
    ``halvings`` times.  Nothing left to split: ``exhausted``.  Returns the runs made, in order."""
    out = Refined()
    if isinstance(slack, (int, float)):
        slack = (slack,)

    def ok(r: Result) -> bool:
        return isinstance(r, tuple)

    def late() -> bool:
        return (deadline is not None and clock() > deadline) or (max_runs is not None and len(out) >= max_runs)

    def go(b: float) -> Result:
        r = run(b)
        out.append((b, r))
        if r is not None:
            done[b] = r
        return r

    if slack is not None:
        if base is None:
            raise ValueError("a latency slack needs the latency it is relative to (base)")
        for x in slack:
            for _ in range(halvings):
                lowest = min((b for b, r in done.items() if ok(r) and r[1] <= x * base), default=None)
                below = max((b for b in done if lowest is not None and b < lowest), default=None)
                if below is None or not ok(done[below]) or late():
                    break
                mid = round((below + lowest) / 2, digits)
                if mid in done:
                    break
                go(mid)
        out.exhausted = not late()
        return out
    bs = sorted(done)
    if len(bs) < 2:
        out.exhausted = True
        return out
    finest = min(b - a for a, b in zip(bs, bs[1:], strict=False))
    narrowest = 2 * finest / 2 ** halvings * (1 - 1e-9)  # a pair at least this wide is split
    blocked: set[tuple[float, float]] = set()  # pairs whose midpoint rounds onto an end or gave nothing
    while True:
        bs = sorted(done)
        best = None
        for lo, hi in zip(bs, bs[1:], strict=False):
            if hi - lo < narrowest or (lo, hi) in blocked:
                continue
            a, b = done[lo], done[hi]
            if ok(a) and ok(b):
                gap = min(abs(a[0] - b[0]) / max(a[0], b[0], 1), abs(a[1] - b[1]) / max(a[1], b[1], 1e-300))
                if gap <= tol:
                    continue
                key = (0, -gap, -hi)
            elif ok(b):  # a budget DTR cannot meet below a plan: where its lowest peak is
                key = (1, -(hi - lo), -hi)
            else:
                continue
            if best is None or key < best[0]:
                best = (key, lo, hi)
        if best is None:
            out.exhausted = True
            return out
        if late():
            return out
        _, lo, hi = best
        mid = round((lo + hi) / 2, digits)
        if mid in done or not lo < mid < hi:
            blocked.add((lo, hi))
            continue
        if go(mid) is None:  # not known (its deadline): not split again
            blocked.add((lo, hi))



class DTRFailure(Exception):
    """The budget cannot be met (infeasible) or DTR thrashes."""


class DTRTimeout(DTRFailure):
    """A run passed its deadline: whether the budget can be met is not known."""


class DTRSim:
    """One run of DTR over the traced order of ``g`` under ``budget`` bytes (None: no budget)."""

    def __init__(self, g: Graph, cost, budget: int | None, thrash: float = 10.0,
                 deadline: float | None = None, exhaustive: bool = False) -> None:
        self.g, self.budget, self.deadline = g, budget, deadline
        self.exhaustive = exhaustive  # every candidate's whole e* searched (the reference for _choose)
        self.order = traced_order(g)
        self.pos = {v: i for i, v in enumerate(self.order)}
        ops = self.order
        end = len(ops)
        self.cost = {v: cost.node_time(g, g.nodes[v]) for v in ops}
        self.preds = {v: [p for p in g.preds(v) if g.nodes[p].kind != NodeKind.PLACEHOLDER] for v in ops}
        kept_roots = {g.storage_root(r) for r in g.outputs.values()}
        # storages (outputs owning bytes) and views (outputs aliasing a storage) of each op
        self.own: dict[int, list[TRef]] = {}
        self.vouts: dict[int, list[TRef]] = {}
        self.size: dict[TRef, int] = {}
        self.kept: set[TRef] = set()  # graph outputs: instance 0's never freed
        self.views: dict[TRef, list[TRef]] = {}  # storage -> the view outputs aliasing it
        for v in ops:
            n = g.nodes[v]
            self.own[v], self.vouts[v] = [], []
            for j, t in enumerate(n.outputs):
                r = TRef(v, j)
                if t.alias is None:
                    self.own[v].append(r)
                    self.size[r] = t.nbytes if t.device == "device" else 0
                    if r in kept_roots:
                        self.kept.add(r)
                else:
                    self.vouts[v].append(r)
                    root = g.storage_root(r)
                    if root.node in self.pos:
                        self.views.setdefault(root, []).append(r)
        self.owner = {r: r.node for rs in self.own.values() for r in rs}
        # what each op reads: its input refs (not placeholders') and the storages behind them
        self.inputs: dict[int, list[TRef]] = {}
        self.in_st: dict[int, set[TRef]] = {}
        readers: dict[TRef, set[int]] = {r: set() for r in self.size}
        for v in ops:
            refs = [r for r in dict.fromkeys(g.nodes[v].inputs()) if r.node in self.pos]
            self.inputs[v] = refs
            st = {g.storage_root(r) for r in refs}
            self.in_st[v] = {s for s in st if s in self.size}
            for s in self.in_st[v]:
                readers[s].add(v)
        self.readers = {s: sorted(rs, key=self.pos.__getitem__) for s, rs in readers.items()}
        self.last_read = {s: max([-1] + [self.pos[u] for u in rs]) for s, rs in readers.items()}
        self.last_use = {s: max(self.pos[s.node], self.last_read[s]) for s in self.size}
        for s in self.kept:
            self.last_use[s] = end
        self.evictable = {s for s in self.size
                          if self.size[s] > 0 and s not in self.kept and recomputable(g, s.node)}
        ev_ops = {s.node for s in self.evictable}
        may_redo = {v for v in ops if recomputable(g, v)
                    and (v in ev_ops or any(g.storage_root(r) in self.evictable for r in self.vouts[v]))}
        for s in self.size:  # a storage that cannot be recomputed stays while a recomputation may read it
            if not recomputable(g, s.node) and any(u in may_redo for u in readers[s]):
                self.last_use[s] = end
        # e*'s search runs on storage indices: the storages each storage's op reads (up) and the
        # storages of the ops that read it (down)
        refs = list(self.size)
        self.sid = {r: i for i, r in enumerate(refs)}
        self.s_node = [r.node for r in refs]
        self.s_last = [self.last_use[r] for r in refs]
        self.up = [[self.sid[p] for p in self.in_st[r.node]] for r in refs]
        self.down = [list(dict.fromkeys(self.sid[c] for w in self.readers[r] for c in self.own[w])) for r in refs]
        self.refs = refs
        self.s_size = np.array([float(self.size[r]) for r in refs])
        self.s_cost = np.array([self.cost[r.node] for r in refs])
        self.s_evictable = np.array([r in self.evictable for r in refs], dtype=bool)
        self.banish: dict[int, list[TRef]] = {}  # step -> the storages whose last use it is
        for st, last in self.last_use.items():
            self.banish.setdefault(last, []).append(st)
        self.resident0 = 0  # placeholders: held by the caller for the whole step
        for n in g.placeholders():
            self.resident0 += sum(t.nbytes for t in n.outputs if t.alias is None and t.device == "device")
        self.max_recomputes = int(thrash * len(ops))

    def rebudget(self, budget: int | None, thrash: float = 10.0, deadline: float | None = None) -> DTRSim:
        """This run's graph tables (built once: on a graph of 100k ops they take seconds, the run
        itself less) under another ``budget``: a shallow copy that ``run`` fills with its own state
        (no table of the constructor is written by a run)."""
        c = copy.copy(self)
        c.budget, c.deadline = budget, deadline
        c.max_recomputes = int(thrash * len(self.order))
        return c

    def run(self) -> tuple[RematDecision, dict]:
        self.mem = self.resident0
        self.peak = self.mem
        self.res: set[TRef] = set()  # resident storages
        self.ev = [False] * len(self.sid)  # by storage index: computed and not resident (evicted or banished)
        self.valid: set[TRef] = set()  # valid views
        self.inst: dict[int, int] = {}
        n = len(self.refs)
        self.access = np.zeros(n)  # by storage index: the clock at its last access
        self.pinned = np.zeros(n, dtype=np.int64)  # by storage index: ops on the stack reading it
        self.s_res = np.zeros(n, dtype=bool)  # by storage index: resident
        self.needed: Counter[TRef] = Counter()  # read by an op on the stack of computations
        self.clock = 0.0
        self.events: list[Inst] = []
        self.reads: dict[Inst, dict[int, int]] = {}
        self.recomputes = 0
        self.evictions = 0
        self.now = 0
        self.fixed = self.resident0  # bytes no eviction can free: inputs, and resident storages not evictable
        self.floor = 0  # the most bytes an op needs with everything evictable but its own inputs evicted
        self.floor_op = -1
        for i, v in enumerate(self.order):
            self.now = i
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise DTRTimeout(f"time budget spent at op {i} of {len(self.order)}")
            self.revived: set[TRef] = set()  # storages a recomputation made resident during this step
            self._evaluate(v)
            # banish what no later op reads: the storages whose last use this step is, and those a
            # recomputation brought back after their last use (a first computation's storage is
            # read later or at this step)
            for s in [*self.banish.get(i, ()), *self.revived]:
                if s in self.res and self.last_use[s] <= i:
                    self._drop(s)
        stats = {"evictions": self.evictions, "dtr_recomputes": self.recomputes,
                 "dtr_peak": self.peak, "dtr_compute_seconds": round(self.clock, 9), "dtr_floor": self.floor,
                 "dtr_floor_op": self.g.nodes[self.floor_op].name if self.floor_op >= 0 else ""}
        return RematDecision(self.events, self.reads), stats

    # ---- execution -------------------------------------------------------------------------------
    def _available(self, r: TRef) -> bool:
        return r in self.res if r in self.size else r in self.valid

    def _evaluate(self, v: int) -> None:
        """Compute op v (first time or again): its inputs made resident and pinned first.  Of a
        recomputation's outputs, what no op on the stack of recomputations and no later op reads
        is freed at once."""
        held: set[TRef] = set()
        self.needed.update(self.in_st[v])

        def pin_present() -> None:  # so rematerialising the rest cannot evict it
            for s in self.in_st[v]:
                if s in self.res and s not in held:
                    self.pinned[self.sid[s]] += 1
                    held.add(s)

        pin_present()
        while missing := [r for r in self.inputs[v] if not self._available(r)]:
            # a recomputation replaces the resident copies of its op's outputs, so a view read
            # before may need recomputing again: check until every input is there
            for r in missing:
                if self._available(r):
                    continue
                self.recomputes += 1
                if self.recomputes > self.max_recomputes:
                    raise DTRFailure(f"thrashing: more than {self.max_recomputes} recomputations")
                self._evaluate(r.node)
                pin_present()
        need = sum(self.size[s] for s in self.own[v])
        pinned = sum(self.size[s] for s in self.in_st[v] if s in self.evictable and s in self.res)
        if self.fixed + pinned + need > self.floor:
            self.floor, self.floor_op = self.fixed + pinned + need, v
        while self.budget is not None and self.mem + need > self.budget:
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
        self.events.append((v, k))
        self.reads[(v, k)] = {p: self.inst[p] for p in self.preds[v]}
        self.clock += self.cost[v]
        for s in self.in_st[v]:
            self.access[self.sid[s]] = self.clock
        if k > 0:
            self.revived.update(self.own[v])
        for s in self.own[v]:
            self.access[self.sid[s]] = self.clock
            if k > 0 and s in self.kept:  # a copy's graph outputs are not the graph's: they die at once
                self.mem -= self.size[s]
            elif s in self.res:  # the new copy replaces the resident one (and its views)
                self.mem -= self.size[s]
                for w in self.views.get(s, ()):
                    self.valid.discard(w)
            else:
                self.res.add(s)
                self.ev[self.sid[s]] = False
                self.s_res[self.sid[s]] = True
                if s not in self.evictable:
                    self.fixed += self.size[s]
        self.valid.update(self.vouts[v])
        for s in held:
            self.pinned[self.sid[s]] -= 1
        self.needed.subtract(self.in_st[v])
        if k > 0:
            for s in self.own[v]:
                if s in self.res and s not in self.kept and self.last_use[s] < self.now \
                        and self.needed[s] <= 0:
                    self._drop(s)

    def _drop(self, s: TRef) -> None:
        """Storage s leaves memory (evicted or banished); its views become invalid."""
        if s not in self.res:
            return
        self.res.discard(s)
        self.ev[self.sid[s]] = True
        self.s_res[self.sid[s]] = False
        self.mem -= self.size[s]
        if s not in self.evictable:
            self.fixed -= self.size[s]
        for w in self.views.get(s, ()):
            self.valid.discard(w)

    def _evict(self, s: TRef) -> None:
        self.evictions += 1
        self._drop(s)

    # ---- the heuristic ---------------------------------------------------------------------------
    def _e_cost(self, t: TRef, cap: float) -> float:
        """c(t) plus the cost of the ops of e*(t): the evicted ancestor storages reachable through
        evicted ones, and the evicted descendant storages (still to be used) reachable through
        evicted ones, each op counted once.  The search stops, returning inf, once the cost found
        exceeds ``cap`` (costs are never negative, so the whole of e* would exceed it too)."""
        ev, up, down, last, now, node_of, cost = self.ev, self.up, self.down, self.s_last, self.now, self.s_node, self.cost
        cap *= 1 + 1e-9  # the running sum rounds; the returned one is exact
        i = self.sid[t]
        seen: set[int] = set()
        nodes = {t.node}
        total = cost[t.node]
        for step, first in ((up, [p for p in up[i] if ev[p]]),
                            (down, [c for c in down[i] if ev[c] and last[c] > now])):
            stack = first
            while stack:
                u = stack.pop()
                if u in seen:
                    continue
                seen.add(u)
                n = node_of[u]
                if n not in nodes:
                    nodes.add(n)
                    total += cost[n]
                    if total > cap:
                        return math.inf
                if step is up:
                    stack.extend(p for p in up[u] if ev[p] and p not in seen)
                else:
                    stack.extend(c for c in down[u] if ev[c] and last[c] > now and c not in seen)
        return math.fsum(cost[n] for n in nodes)

    def _choose(self) -> TRef | None:
        """The evictable resident storage of least h_DTR (ties: the smallest ref).  Candidates are
        taken in order of h's lower bound c(t) / (m(t) s(t)) (e* adds cost, never removes it); e* is
        searched only while that bound can beat the best h found, and only until its cost shows it
        cannot: the same choice as searching every candidate's whole e*, in a fraction of the work
        (``exhaustive``: every one searched whole, as the paper writes it)."""
        cand = np.flatnonzero(self.s_res & self.s_evictable & (self.pinned <= 0))
        m_s = self.s_size[cand] * (self.clock - self.access[cand] + 1e-12)
        lb = self.s_cost[cand] / m_s
        best, best_h = None, math.inf
        if self.exhaustive:
            for k in range(len(cand)):
                t, ms = self.refs[cand[k]], float(m_s[k])
                h = self._e_cost(t, math.inf) / ms
                if h < best_h or (h == best_h and best is not None and t < best):
                    best, best_h = t, h
            return best
        for k in np.argsort(lb, kind="stable").tolist():
            if lb[k] > best_h:
                break
            t, ms = self.refs[cand[k]], float(m_s[k])
            h = self._e_cost(t, best_h * ms) / ms
            if h < best_h or (h == best_h and best is not None and t < best):
                best, best_h = t, h
        return best


def below_floor(limit: int, free: dict) -> str:
    """Why a budget under the unbudgeted run's ``dtr_floor`` is infeasible, as a failing run says it."""
    return (f"infeasible under a budget of {format_bytes(limit)}: {free['dtr_floor_op']!r} needs "
            f"{format_bytes(free['dtr_floor'])} with everything else evicted (inputs, weights, outputs, random ops "
            f"and the op's own inputs cannot be evicted)")


def budget_plan(g: Graph, cost, fraction: float, free: dict, thrash: float = 10.0, deadline: float | None = None,
                prepared: DTRSim | None = None, **stats) -> Plan:
    """DTR's plan at ``fraction`` of its unbudgeted peak (``free``: the unbudgeted run's stats), its
    label "budget F"; DTRFailure where the budget cannot be met -- without a run under the floor --
    and DTRTimeout where the run passes ``deadline`` (a ``time.perf_counter()`` value).
    ``prepared``: a ``DTRSim`` of ``g`` and ``cost`` whose tables the run reuses (``rebudget``)."""
    limit = int(fraction * free["dtr_peak"])
    if limit < free["dtr_floor"]:  # no run needed: it would fail at that op
        raise DTRFailure(below_floor(limit, free))
    sim = prepared.rebudget(limit, thrash, deadline) if prepared is not None else DTRSim(g, cost, limit, thrash, deadline)
    d, run_stats = sim.run()
    return make_plan(DTR.name, f"budget {fraction:g}", realise(g, d), cost, budget=limit, budget_fraction=fraction,
                     **stats, dtr_unbudgeted_peak=free["dtr_peak"],
                     heuristic="h_DTR per storage (exact evicted neighbourhood)", **run_stats)


class DTR(Method):
    name = "dtr"
    label = "DTR"
    colour = "#f97316"
    symbol = "diamond"
    family = "peer"
    paper = "Kirisame et al. 2021, Dynamic Tensor Rematerialization (ICLR 2021)"

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, thrash=10.0, refine=None,
             halvings=REFINE_HALVINGS, tol=REFINE_TOL, **_):
        """Budgets are fractions of DTR's own unbudgeted peak (a first run with no budget), as in
        the paper's evaluation; ``budget_fraction`` is that fraction, ``eager_fraction`` the
        budget over eager's peak.  After the grid ``budgets``, with ``refine``, while ``time_budget``
        lasts: the budgets between neighbouring ones whose plans leave a gap in the frontier, by
        :func:`refine_budgets` (the warm start's bisection; ``halvings``, ``tol``), until no gap is
        left.  A plan of the same peak and latency as an earlier one is given once.  ``extra``:
        the grid's size, the budgets run after it, whether the refinement ran out of gaps
        (``exhausted``) and the duplicates dropped."""
        refine = refining(refine)
        t0 = time.perf_counter()
        base = eager_peak(g, cost)
        prepared = DTRSim(g, cost, None, thrash)
        _, free = prepared.run()
        top = free["dtr_peak"]
        progress(f"dtr unbudgeted: peak {format_bytes(top)} ({top / base:.3f}x eager)")
        plans, failures = [], []
        done: dict[float, Result] = {}  # budget -> (peak, latency) or why it failed: what the refinement splits
        points: set[tuple[int, float]] = set()
        dups = 0

        def one(b: float) -> Result:
            nonlocal dups
            label = f"budget {b:g}"
            try:
                p = budget_plan(g, cost, b, free, thrash, deadline=t0 + time_budget, prepared=prepared,
                                eager_fraction=round(int(b * top) / base, 6))
            except DTRTimeout:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent during the run"))
                return None
            except DTRFailure as e:
                failures.append(Failure(label, str(e)))
                progress(f"dtr {label}: {e}")
                return str(e)
            if (p.peak, p.latency) in points:
                dups += 1
            else:
                points.add((p.peak, p.latency))
                plans.append(p)
            progress(f"dtr {label}: {p.stats['evictions']} evictions, {p.stats['dtr_recomputes']} recomputations")
            return p.peak, p.latency

        tried = 0
        for b in budgets:
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(f"budget {b:g}", f"time budget {time_budget:g} s spent"))
                continue
            tried += 1
            r = one(b)
            if r is not None:
                done[b] = r
        new = Refined()
        if refine:
            new = refine_budgets(one, done, halvings=halvings, tol=tol, deadline=t0 + time_budget)
            progress(f"dtr refinement: {len(new)} budgets between the grid's"
                     + (", no gap left" if new.exhausted else ", time budget spent"))
        extra = {"grid": len(budgets), "tried": tried, "refined": len(new), "duplicates": dups,
                 "exhausted": tried == len(budgets) and (not refine or new.exhausted)}
        return plans, failures, extra


__all__ = ["BUDGETS", "DTR", "REFINE_HALVINGS", "REFINE_TOL", "DTRFailure", "DTRSim", "DTRTimeout", "Refined",
           "below_floor", "budget_plan", "refine_budgets"]
