"""Serenity's memory-aware scheduling (Ahn et al., "Ordering Chaos", MLSys'20), as used by HMCOS's
Algorithm 2 (ScheduleGraph) and MAGIS's Algorithm 2 (DpSchedule).

Dynamic programming over the set of scheduled ops: a state is the bitmask S of ops (units) already
run -- equivalent to Serenity's signature, the zero-indegree frontier, since S is the complement of
the frontier's up-closure -- and a transition appends one zero-indegree unit.  The live bytes after S
do not depend on the order S ran in, so keeping, per state, the partial schedule with the lowest
peak is exact (two partial schedules of the same state always have the same live bytes: no other
tie-break is needed).  States are processed layer by layer (|S| = k), as in Serenity's Algorithm 1.

Serenity's own refinements:

* an optional memory ``budget`` prunes every partial schedule whose peak exceeds it (Serenity's
  budgeted DP; an upper bound from a heuristic schedule keeps the result exact: ``soft_budget``);
* divide and conquer at narrow waists, nw(v) = 0 (Serenity section 3.3, MAGIS section 6.1): the parts
  between cut points are scheduled independently and concatenated -- exact.

Exact accelerations of ours (each argued where it lives; the property tests check the DP against
brute force): *forced moves* (``dp_schedule``), an *upper bound then branch and bound* below it
(``solve`` / ``dfs_schedule``), and *floors* (a part or group whose schedule does not lift the
running peak needs no better one).  ``Serenity(soft_budget=False, forced_moves=False, beam=None,
max_states=None)`` is the plain DP, as the HMCOS evaluation ran Serenity.

It always returns: ``max_states`` caps the states (the layered DP becomes a beam that keeps the
lowest-peak states of a layer) and the time budget completes the best partial schedule in a
reference order; the result is never worse than the traced / RPO orders.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..analysis.narrow_waist import graph_partition
from ..ir.graph import Graph
from .deadline import Deadline
from .footprint import MemoryModel, MemoryScheduler, best_of, bits, rpo_order, traced_order
from .units import UnitProblem

INF = math.inf


@dataclass
class DPStats:
    states: int = 0  # states created
    layers: int = 0
    truncated: bool = False  # a layer was cut to the state cap: the result may not be optimal
    timed_out: bool = False  # completed in reference order after the deadline
    pruned: int = 0  # transitions over the budget
    forced: int = 0  # states expanded by a single forced move
    early: bool = False  # stopped at a schedule within the floor (good enough, not proven optimal)


@dataclass
class DPResult:
    vertices: list[int]  # vertex order
    payloads: list  # per vertex, what the transition returned (group orders)
    peak: int
    live: int
    stats: DPStats = field(default_factory=DPStats)


# Scheduled-set masks key the DP's tables.  Python hashes an int modulo 2**61 - 1, so two masks
# whose bits differ by multiples of 61 positions collide (a layer of n wide masks that differ in one
# bit has only 61 distinct hashes): beyond 61 units the key also carries the mask modulo a prime
# for which 2 has a large multiplicative order.
_HASH_BITS = 61
_HASH_PRIME = 1_000_000_007

# A group transition: (vertex, S, peak, live) -> (peak, live, payload) or None (over budget)
GroupFn = Callable[[int, int, int, int], "tuple[int, int, object] | None"]


def dp_schedule(P: UnitProblem, vbits: Sequence[int], vpred: Sequence[int], vunit: Sequence[int],
                S0: int = 0, live0: int | None = None, peak0: int | None = None, budget: float = INF,
                max_states: int | None = None, min_layer_states: int = 64,
                deadline: Deadline | None = None, reference: Sequence[int] | None = None,
                group_fn: GroupFn | None = None, stats: DPStats | None = None,
                forced_moves: bool = True) -> DPResult | None:
    """Serenity's DP (HMCOS Algorithm 2, ScheduleGraph) over vertices of a unit problem.

    Vertex x covers the units ``vbits[x]`` (a mask); it is ready once ``vpred[x]`` (a unit mask) is a
    subset of the scheduled set.  ``vunit[x] >= 0``: x is that single unit (applied inline);
    ``vunit[x] < 0``: x is a group, applied by ``group_fn``.  Returns None when no schedule stays
    within ``budget``.  ``max_states`` bounds the states created (deterministically); ``deadline``
    bounds the time -- the best partial schedule is then completed in ``reference`` vertex order.

    ``forced_moves`` (exact): a ready unit that neither raises the state's running peak nor increases
    its live bytes is run first and alone.  Moving it to the front of any completion cannot hurt:
    it allocates the same bytes wherever it runs and frees at least as much later (more of the
    other readers of its inputs have run), so every step in between sees the same or less memory.
    """
    stats = stats if stats is not None else DPStats()
    deadline = deadline or Deadline(None)
    nv = len(vbits)
    live0 = P.live0 if live0 is None else live0
    peak0 = live0 if peak0 is None else peak0
    steps, simple = P.steps, P.simple
    vsucc, ready0 = _prepare(vbits, vpred, S0)
    wide = P.n_units > _HASH_BITS
    layer: dict = {S0: (peak0, live0, ready0, None, S0)}
    remaining_states = max_states
    for k in range(nv):
        if deadline.expired():
            stats.timed_out = True
            return _complete(P, layer, vbits, vunit, reference, group_fn, stats)
        nxt: dict = {}
        tick = 0
        for pk, lv, rd, ch, S in layer.values():
            # the transitions out of S, inline: the same loop as dfs_schedule's and the arithmetic
            # of UnitProblem.apply; a shared helper measured 7% slower on NASNet-CIFAR
            r = rd
            cands = []
            groups = []
            forced = None
            while r:
                low = r & -r
                x = low.bit_length() - 1
                r ^= low
                u = vunit[x]
                if u < 0:
                    groups.append((x, low))
                    continue
                sp = simple[u]
                if sp is not None:
                    t = lv + sp[0]
                    npk = t if t > pk else pk
                    nlv = lv + sp[1]
                else:
                    npk, nlv = pk, lv
                    for a, f, conds in steps[u]:
                        nlv += a
                        if nlv > npk:
                            npk = nlv
                        nlv -= f
                        for m, sz in conds:
                            if (m & ~S).bit_count() == 1:
                                nlv -= sz
                if forced_moves and npk <= pk and nlv <= lv:
                    forced = (x, low, npk, nlv, None)
                    break
                cands.append((x, low, npk, nlv, None))
            if forced is not None:
                cands = [forced]
                stats.forced += 1
            else:
                for x, low in groups:
                    res = group_fn(x, S, pk, lv)  # type: ignore[misc]
                    if res is None:
                        stats.pruned += 1
                        continue
                    cands.append((x, low, res[0], res[1], res[2]))
            for x, low, npk, nlv, payload in cands:
                if npk > budget:
                    stats.pruned += 1
                    continue
                S2 = S | vbits[x]
                key = (S2, S2 % _HASH_PRIME) if wide else S2
                old = nxt.get(key)
                if old is not None and old[0] <= npk:
                    continue
                rd2 = rd ^ low
                for y, m in vsucc[x]:
                    if m & S2 == m:
                        rd2 |= 1 << y
                nxt[key] = (npk, nlv, rd2, (x, payload, ch), S2)
            tick += 1 + (len(cands) >> 6)  # a state with many ready vertices costs as many as them
            if tick >= 1024:
                tick = 0
                if deadline.expired():
                    break
        if not nxt:
            if deadline.expired():
                stats.timed_out = True
                return _complete(P, layer, vbits, vunit, reference, group_fn, stats)
            return None
        stats.layers += 1
        if remaining_states is not None:
            cap = max(min_layer_states, remaining_states // max(1, nv - k))
            if len(nxt) > cap:
                stats.truncated = True
                best = heapq.nsmallest(cap, nxt.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[1][4]))
                nxt = dict(best)
            remaining_states = max(0, remaining_states - len(nxt))
        stats.states += len(nxt)
        layer = nxt
        if deadline.expired() and k + 1 < nv:
            stats.timed_out = True
            return _complete(P, layer, vbits, vunit, reference, group_fn, stats)
    (pk, lv, _, ch, _S), = layer.values()
    return _unwind(ch, pk, lv, stats)


def _unwind(ch, pk: int, lv: int, stats: DPStats) -> DPResult:
    verts: list[int] = []
    pays: list = []
    while ch is not None:
        x, pay, ch = ch
        verts.append(x)
        pays.append(pay)
    verts.reverse()
    pays.reverse()
    return DPResult(verts, pays, pk, lv, stats)


def _complete(P: UnitProblem, layer: dict, vbits: Sequence[int], vunit: Sequence[int],
              reference: Sequence[int] | None, group_fn: GroupFn | None, stats: DPStats) -> DPResult:
    """Finish the best state of ``layer`` by running the remaining vertices in reference order."""
    pk, lv, _, ch, S = min(layer.values(), key=lambda v: (v[0], v[1], v[4]))
    ref = list(reference) if reference is not None else list(range(len(vbits)))
    for x in ref:
        if vbits[x] & S:
            continue
        u = vunit[x]
        pay = None
        if u >= 0:
            pk, lv = P.apply(u, S, pk, lv)
        else:
            res = group_fn(x, S, pk, lv)  # type: ignore[misc]
            assert res is not None, "group transitions must succeed without a budget"
            pk, lv, pay = res
        S |= vbits[x]
        ch = (x, pay, ch)
    return _unwind(ch, pk, lv, stats)


def dfs_schedule(P: UnitProblem, vbits: Sequence[int], vpred: Sequence[int], vunit: Sequence[int],
                 S0: int = 0, live0: int | None = None, peak0: int | None = None, budget: float = INF,
                 max_states: int | None = None, deadline: Deadline | None = None,
                 group_fn: GroupFn | None = None, stats: DPStats | None = None,
                 forced_moves: bool = True, floor: float = -INF) -> DPResult | None:
    """The same DP as ``dp_schedule`` explored depth-first, lowest-peak child first, as branch and
    bound: a state is expanded only with a running peak below every one it was expanded with
    before (the DP's table), and only while it can still beat the best complete schedule found.
    Finding complete schedules early tightens the bound, which prunes the partial schedules that
    sit on the peak's plateau -- the bulk of the layered DP.  Exact unless ``max_states`` (states
    expanded) or the deadline cut it: returns the best schedule with peak <= ``budget``, or None."""
    stats = stats if stats is not None else DPStats()
    deadline = deadline or Deadline(None)
    live0 = P.live0 if live0 is None else live0
    peak0 = live0 if peak0 is None else peak0
    steps, simple = P.steps, P.simple
    vsucc, ready0 = _prepare(vbits, vpred, S0)
    full = S0
    for b in vbits:
        full |= b
    best = budget + 1 if budget < INF else INF
    best_node = None
    seen: dict = {}
    wide = P.n_units > _HASH_BITS
    stack = [(S0, peak0, live0, ready0, None)]
    expanded = 0
    while stack:
        S, pk, lv, rd, ch = stack.pop()
        if pk >= best:
            continue
        key = (S, S % _HASH_PRIME) if wide else S
        old = seen.get(key)
        if old is not None and old <= pk:
            continue
        seen[key] = pk
        if S == full:
            best, best_node = pk, (pk, lv, ch)
            if pk <= floor:
                stats.early = True
                break
            continue
        expanded += 1
        if max_states is not None and expanded > max_states:
            stats.truncated = True
            break
        if (expanded & 1023 == 0 or rd.bit_length() > 4096) and deadline.expired():
            stats.timed_out = True
            break
        r = rd  # the transitions out of S, inline (see dp_schedule)
        kids = []
        groups = []
        forced = None
        while r:
            low = r & -r
            x = low.bit_length() - 1
            r ^= low
            u = vunit[x]
            if u < 0:
                groups.append((x, low))
                continue
            sp = simple[u]
            if sp is not None:
                t = lv + sp[0]
                npk = t if t > pk else pk
                nlv = lv + sp[1]
            else:
                npk, nlv = pk, lv
                for a, f, conds in steps[u]:
                    nlv += a
                    if nlv > npk:
                        npk = nlv
                    nlv -= f
                    for m, sz in conds:
                        if (m & ~S).bit_count() == 1:
                            nlv -= sz
            if forced_moves and npk <= pk and nlv <= lv:
                forced = (npk, nlv, x, low, None)
                break
            kids.append((npk, nlv, x, low, None))
        if forced is not None:
            kids = [forced]
            stats.forced += 1
        else:
            for x, low in groups:
                res = group_fn(x, S, pk, lv)  # type: ignore[misc]
                if res is None:
                    continue
                kids.append((res[0], res[1], x, low, res[2]))
            kids.sort(key=lambda k: (k[0], k[1], k[2]), reverse=True)
        for npk, nlv, x, low, payload in kids:
            if npk >= best:
                continue
            S2 = S | vbits[x]
            rd2 = rd ^ low
            for y, m in vsucc[x]:
                if m & S2 == m:
                    rd2 |= 1 << y
            stack.append((S2, npk, nlv, rd2, (x, payload, ch)))
    stats.states += len(seen)
    if best_node is None:
        return None
    pk, lv, ch = best_node
    return _unwind(ch, pk, lv, stats)


def _prepare(vbits: Sequence[int], vpred: Sequence[int], S0: int) -> tuple[list[list[tuple[int, int]]], int]:
    """Successor lists (vertex, its predecessor mask) and the initially ready vertices."""
    nv = len(vbits)
    vsucc: list[list[tuple[int, int]]] = [[] for _ in range(nv)]
    owner: dict[int, int] = {}
    for x in range(nv):
        m = vbits[x]
        while m:
            low = m & -m
            owner[low.bit_length() - 1] = x
            m ^= low
    for y in range(nv):
        seen: set[int] = set()
        m = vpred[y]
        while m:
            low = m & -m
            x = owner.get(low.bit_length() - 1)
            m ^= low
            if x is not None and x not in seen and x != y:
                seen.add(x)
                vsucc[x].append((y, vpred[y]))
    ready0 = 0
    for y in range(nv):
        if not vpred[y] & ~S0:
            ready0 |= 1 << y
    return vsucc, ready0


def solve(P: UnitProblem, vbits: Sequence[int], vpred: Sequence[int], vunit: Sequence[int],
          S0: int = 0, live0: int | None = None, peak0: int | None = None, budget: float = INF,
          max_states: int | None = None, deadline: Deadline | None = None,
          reference: Sequence[int] | None = None, group_fn: GroupFn | None = None,
          stats: DPStats | None = None, forced_moves: bool = True, beam: int | None = 128,
          floor: float = -INF, proof_states: int | None = None) -> DPResult | None:
    """``dp_schedule`` with an upper bound first (exact): a beam of ``beam`` states per layer finds
    a schedule of peak UB, then the exact DP runs with the budget UB - 1.  States whose running
    peak has reached UB are pruned -- after the peak step every partial schedule of the optimum
    sits exactly at the peak, so this removes most of the state space -- and the exact run either
    finds the optimum below UB or proves that the beam's schedule is optimal.  ``stats.truncated``
    tells whether the exact run had to be cut (the result is then the best found).

    ``floor``: a peak the caller cannot tell apart from a lower one (the running peak before a group
    or a divide-and-conquer part) -- the search stops at the first schedule within it.
    ``proof_states`` caps the states of the exact run once the beam has a schedule (then the result
    may not be optimal: ``stats.truncated``).
    """
    stats = stats if stats is not None else DPStats()
    nv = len(vbits)
    first = None
    if beam and nv > 1 and (max_states is None or beam * nv < max_states):
        bstats = DPStats()
        first = dp_schedule(P, vbits, vpred, vunit, S0=S0, live0=live0, peak0=peak0, budget=budget,
                            max_states=beam * nv, min_layer_states=beam, deadline=deadline,
                            reference=reference, group_fn=group_fn, stats=bstats,
                            forced_moves=forced_moves)
        stats.states += bstats.states
        stats.forced += bstats.forced
        if first is not None and not (bstats.truncated or bstats.timed_out):
            return first  # the beam never had to cut: it was the exact DP
        if first is not None and first.peak <= floor:
            stats.early = True
            return first
        if bstats.timed_out:
            stats.timed_out = True
            return first
    bound = budget if first is None else min(budget, first.peak - 1)
    xstats = DPStats()
    cap = max_states
    if first is not None and proof_states is not None:
        cap = proof_states if cap is None else min(cap, proof_states)
    res = dfs_schedule(P, vbits, vpred, vunit, S0=S0, live0=live0, peak0=peak0, budget=bound,
                       max_states=cap, deadline=deadline, group_fn=group_fn, stats=xstats,
                       forced_moves=forced_moves, floor=floor)
    stats.states += xstats.states
    stats.forced += xstats.forced
    stats.pruned += xstats.pruned
    stats.layers += xstats.layers
    stats.truncated |= xstats.truncated
    stats.timed_out |= xstats.timed_out
    stats.early |= xstats.early
    if res is None or (first is not None and res.peak >= first.peak):
        return first
    return res


def solve_parts(P: UnitProblem, vbits: Sequence[int], vpred: Sequence[int], vunit: Sequence[int],
                S0: int = 0, live0: int | None = None, peak0: int | None = None, budget: float = INF,
                max_states: int | None = None, deadline: Deadline | None = None,
                reference: Sequence[int] | None = None, group_fn: GroupFn | None = None,
                stats: DPStats | None = None, forced_moves: bool = True, beam: int | None = 128,
                floor: float = -INF, proof_states: int | None = None) -> DPResult | None:
    """``solve`` after Serenity's divide and conquer: the vertex graph is cut at its narrow waists
    (nw = 0) and the parts are solved one after another, each from the state the previous one
    left (exact: every order runs a part's vertices between the same two cut points)."""
    stats = stats if stats is not None else DPStats()
    live0 = P.live0 if live0 is None else live0
    peak0 = live0 if peak0 is None else peak0
    nv = len(vbits)
    kw = dict(max_states=max_states, deadline=deadline, group_fn=group_fn, stats=stats,
              forced_moves=forced_moves, beam=beam, proof_states=proof_states)
    if nv <= 3:
        return solve(P, vbits, vpred, vunit, S0=S0, live0=live0, peak0=peak0, budget=budget,
                     reference=reference, floor=floor, **kw)
    vsucc, _ = _prepare(vbits, vpred, S0)
    topo = list(reference) if reference is not None and len(reference) == nv else _topo(vsucc, nv)
    rank = {x: k for k, x in enumerate(topo)}
    lpreds: list[list[int]] = [[] for _ in range(nv)]
    for x in range(nv):
        for y, _ in vsucc[x]:
            lpreds[rank[y]].append(rank[x])
    if any(p >= k for k, ps in enumerate(lpreds) for p in ps):  # reference not topological
        topo = _topo(vsucc, nv)
        rank = {x: k for k, x in enumerate(topo)}
        lpreds = [[] for _ in range(nv)]
        for x in range(nv):
            for y, _ in vsucc[x]:
                lpreds[rank[y]].append(rank[x])
    parts = graph_partition(lpreds, threshold=0)
    if len(parts) == 1:
        return solve(P, vbits, vpred, vunit, S0=S0, live0=live0, peak0=peak0, budget=budget,
                     reference=reference, floor=floor, **kw)
    S, lv, pk = S0, live0, peak0
    verts: list[int] = []
    pays: list = []
    for part in parts:
        xs = [topo[k] for k in part]
        sub_fn = None if group_fn is None else _remap_group_fn(group_fn, xs)
        cap = None if max_states is None else max(256, max_states * len(xs) // nv)
        res = solve(P, [vbits[x] for x in xs], [vpred[x] & ~S for x in xs], [vunit[x] for x in xs],
                    S0=S, live0=lv, peak0=pk, budget=budget, max_states=cap, deadline=deadline,
                    reference=list(range(len(xs))), group_fn=sub_fn, stats=stats,
                    forced_moves=forced_moves, beam=beam, floor=max(floor, pk), proof_states=proof_states)
        if res is None:
            return None
        verts.extend(xs[y] for y in res.vertices)
        pays.extend(res.payloads)
        for x in xs:
            S |= vbits[x]
        lv, pk = res.live, res.peak
    return DPResult(verts, pays, pk, lv, stats)


def _remap_group_fn(group_fn: GroupFn, xs: list[int]) -> GroupFn:
    """``group_fn`` for a sub-list of the vertices (vertex y of the part is ``xs[y]``)."""

    def fn(y: int, S: int, pk: int, lv: int):
        return group_fn(xs[y], S, pk, lv)

    return fn


def _topo(vsucc: list[list[tuple[int, int]]], nv: int) -> list[int]:
    indeg = [0] * nv
    for x in range(nv):
        for y, _ in vsucc[x]:
            indeg[y] += 1
    ready = [x for x in range(nv) if indeg[x] == 0]
    ready.reverse()
    out: list[int] = []
    while ready:
        x = ready.pop()
        out.append(x)
        for y, _ in reversed(vsucc[x]):
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    return out


def unit_dp(P: UnitProblem, units: Sequence[int] | None = None, S0: int = 0, live0: int | None = None,
            budget: float = INF, max_states: int | None = None, deadline: Deadline | None = None,
            reference: Sequence[int] | None = None, stats: DPStats | None = None,
            forced_moves: bool = True, beam: int | None = 128, floor: float = -INF
            ) -> tuple[list[int], int, int] | None:
    """Serenity's DP over single units (``units``: a subset whose outside predecessors are in S0).
    Returns (unit order, peak, live after) or None if over ``budget``.  ``beam=None`` runs the plain
    DP (no upper bound first)."""
    us = list(range(P.n_units)) if units is None else list(units)
    pos = {u: k for k, u in enumerate(us)}
    ref = None
    if reference is not None:
        ref = [pos[u] for u in reference if u in pos]
    args = (P, [1 << u for u in us], [P.upred[u] & ~S0 for u in us], us)
    kw = dict(S0=S0, live0=live0, budget=budget, max_states=max_states, deadline=deadline, reference=ref,
              stats=stats, forced_moves=forced_moves)
    res = solve(*args, beam=beam, floor=floor, **kw) if beam else dp_schedule(*args, **kw)
    if res is None:
        return None
    return [us[x] for x in res.vertices], res.peak, res.live


# ------------------------------------------------------------------------------------------------
class Serenity(MemoryScheduler):
    """Serenity: DP over sets of scheduled ops with divide and conquer at narrow waists.

    Options: ``budget`` (bytes; prune partial schedules above it, ``info["budget_met"]`` says if
    the result fits), ``soft_budget`` (prune with the peak of the best heuristic order of each part
    -- exact; the HMCOS evaluation ran Serenity without it), ``divide`` (cut at nw = 0),
    ``max_states`` (states over the whole run, split across parts; beyond it the DP is a beam),
    ``lazy`` (leave zero-cost ops out of the DP, see ``footprint``), ``forced_moves`` / ``beam``
    (our exact accelerations; ``beam=None`` is the plain layered DP) and ``time_budget`` (seconds).
    ``info["exact"]`` is True when the schedule is proven optimal.
    """

    name = "serenity"

    def __init__(self, time_budget: float | None = None, budget: float | None = None,
                 soft_budget: bool = True, divide: bool = True, max_states: int | None = 2_000_000,
                 lazy: bool = True, forced_moves: bool = True, beam: int | None = 128,
                 free_inputs: bool = False, count_weights: bool = True) -> None:
        super().__init__(time_budget=time_budget, free_inputs=free_inputs, count_weights=count_weights)
        self.forced_moves = forced_moves
        self.beam = beam
        self.budget = INF if budget is None else float(budget)
        self.soft_budget = soft_budget
        self.divide = divide
        self.max_states = max_states
        self.lazy = lazy

    def order(self, g: Graph) -> list[int]:
        deadline = self.deadline(0.7)
        model = MemoryModel.build(g, self.free_inputs, self.count_weights)
        P = UnitProblem(model, range(model.n), sequences=False, lazy=self.lazy)
        self.problem = P
        upreds = [bits(P.upred[u]) for u in range(P.n_units)]
        parts = graph_partition(upreds, threshold=0) if self.divide else [list(range(P.n_units))]
        ref_pos = {u: k for k, u in enumerate(P.reference_units())}
        order_units: list[int] = []
        S, live, peak = 0, P.live0, P.live0
        stats = DPStats()
        exact = True
        budget_met = True
        states_left = self.max_states
        left = P.n_units
        for part in parts:
            share = len(part) / max(1, left)
            heur = {"traced": sorted(part, key=ref_pos.__getitem__), "rpo": P.rpo_units(part)}
            scored = {k: run_units(P, v, S, live) for k, v in heur.items()}
            best_name = min(scored, key=lambda k: (scored[k][0], k))
            hpeak = scored[best_name][0]
            budget = self.budget
            if self.soft_budget:
                budget = min(budget, hpeak)
            cap = None if states_left is None else max(256, int(states_left * share))
            pstats = DPStats()
            if self.beam and hpeak <= peak:  # the heuristic does not lift the running peak
                res = None
            else:
                res = unit_dp(P, part, S0=S, live0=live, budget=budget, max_states=cap,
                              deadline=deadline.sub(share), reference=heur[best_name], stats=pstats,
                              forced_moves=self.forced_moves, beam=self.beam,
                              floor=peak if self.beam else -INF)
            if states_left is not None:
                states_left = max(0, states_left - pstats.states)
            stats.states += pstats.states
            if pstats.truncated or pstats.timed_out:
                exact = False
            stats.timed_out |= pstats.timed_out
            if res is None or res[1] > hpeak:
                if hpeak > self.budget:
                    budget_met = False
                exact = exact and (res is not None or hpeak <= peak)  # None: nothing fits the budget
                units, (ppeak, plive) = heur[best_name], scored[best_name]
            else:
                units, ppeak, plive = res
            order_units.extend(units)
            for u in part:
                S |= 1 << u
            peak, live = max(peak, ppeak), plive
            left -= len(part)
        ops = P.emit(order_units)
        pick, ops = best_of(model, {"serenity": ops, "traced": traced_order(model), "rpo": rpo_order(model)})
        self.info = {"parts": len(parts), "states": stats.states, "exact": exact,
                     "timed_out": stats.timed_out, "budget_met": budget_met, "dp_peak": peak,
                     "picked": pick}
        return ops


def run_units(P: UnitProblem, order: Sequence[int], S: int, live: int) -> tuple[int, int]:
    """(peak, live after) of running units in ``order`` from state ``S`` with ``live`` bytes."""
    peak = live
    for u in order:
        peak, live = P.apply(u, S, peak, live)
        S |= 1 << u
    return peak, live
