"""HMCOS: hierarchical memory-constrained operator scheduling (Wang et al., DAC'22, section 3.2).

Algorithm 1 (iterative scheduling) over the hierarchy of ``hierarchy.py``:

    s, mu_peak <- <>, inf
    loop:
        R <- ScheduleGraph(G, {})                       # Algorithm 2 = Serenity's DP over vertices
        save R if it is the best so far                 # (the paper tests termination first; we save first)
        X_peak <- values alive at the peak step(s) of R
        disassemble every group holding the producer of a value in X_peak
        stop if no group was disassembled

A vertex is a sequence (its footprint follows Eq. 4-5) or a group, scheduled by ScheduleGraph on its
own sequences from the current state.  Our graphs carry no NAS cell labels: cells are derived from
post-dominator regions and refined by HMCOS's intrusion groups (``hierarchy.py`` explains how).  The paper's three scheduling optimisations, each of which can
be switched off for the ablation (Table 2, configurations 5-7):

1. ``soft_budget`` -- adaptive soft budgeting: iteration k prunes partial schedules whose peak exceeds
   the best peak so far (the previous schedule is still representable, so nothing is lost);
2. ``strategy_selection`` -- a group is scheduled by reverse post-order when that does not lift the
   running peak (then DP could not do better for this transition: the live bytes after a group do not
   depend on its internal order), else by DP;
3. ``memoize`` -- group schedules are reused across states and iterations, keyed by the value context
   Gamma(g, U) (Eq. 6): which values read inside g are used for the last time there.

``hierarchy`` selects the levels (Table 2, configurations 1-4): "none" (flat DP over ops), "sequence",
"cell" (sequences grouped by cells) or "complete" (cells plus intrusion groups, section 3.1.2).

Beyond the paper (each documented where it lives; none changes what a DP run returns unless it is
cut by ``max_states`` / ``proof_states`` / the time budget):

* ScheduleGraph is ``serenity.solve_parts``: divide and conquer at narrow waists, forced moves, an
  upper bound from a beam then branch and bound strictly below it, and a *floor* -- a group
  transition stops at the first inner schedule that does not lift the running peak;
* a *sealed* group (between narrow waists) is never disassembled: its inner schedule is optimal;
* ``ungroup_users``: disassemble the groups of a peak value's pending readers too, not only of its
  definer; ``patience``: stop after that many iterations without a lower peak.

The result is never worse than the traced order or RPO (checked at the end).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir.graph import Graph
from .deadline import Deadline
from .footprint import MemoryModel, MemoryScheduler, rpo_order, traced_order
from .hierarchy import Hierarchy, build_hierarchy
from .serenity import DPStats, run_units, solve_parts
from .units import UnitProblem

INF = math.inf


class _GroupScheduler:
    """ScheduleVertex for groups: RPO-or-DP, memoised by value context."""

    def __init__(self, P: UnitProblem, H: Hierarchy, strategy_selection: bool, memoize: bool,
                 max_states: int | None, deadline: Deadline, forced_moves: bool = True,
                 beam: int | None = 128, proof_states: int | None = None) -> None:
        self.P = P
        self.proof_states = proof_states
        self.forced_moves = forced_moves
        self.beam = beam
        self.H = H
        self.strategy_selection = strategy_selection
        self.memoize = memoize
        self.max_states = max_states
        self.deadline = deadline
        self.budget = INF
        self.memo: dict[tuple[int, int], tuple] = {}
        self.rpo_memo: dict[tuple[int, int], tuple] = {}
        self.calls = 0
        self.dp_runs = 0
        self.rpo_used = 0
        self.memo_hits = 0
        self.states = 0
        self.gbits: list[int] = []
        self.ctx_masks: list[list[int]] = []
        self.rpo: list[list[int]] = []
        for units in H.groups:
            gb = 0
            for u in units:
                gb |= 1 << u
            self.gbits.append(gb)
            masks: set[int] = set()
            for u in units:
                for _, _, conds in P.steps[u]:
                    for m, _ in conds:
                        out = m & ~gb
                        if out:
                            masks.add(out)
            self.ctx_masks.append(sorted(masks))
            self.rpo.append(P.rpo_units(units))

    def context(self, gi: int, S: int) -> int:
        """Gamma(g, U) as a bitmask: bit k set iff the k-th outside reader set has fully run."""
        key = 0
        for k, m in enumerate(self.ctx_masks[gi]):
            if m & S == m:
                key |= 1 << k
        return key

    def __call__(self, gi: int, S: int, pk: int, lv: int) -> tuple[int, int, list[int]] | None:
        self.calls += 1
        P = self.P
        key = (gi, self.context(gi, S))
        if self.strategy_selection:
            r = self.rpo_memo.get(key)
            if r is None:
                order = self.rpo[gi]
                gpk, glv = run_units(P, order, S, lv)
                r = (order, gpk - lv, glv - lv)
                self.rpo_memo[key] = r
            if lv + r[1] <= pk:  # RPO does not lift the running peak: DP cannot do better here
                self.rpo_used += 1
                return pk, lv + r[2], r[0]
        rel_budget = self.budget - lv
        m = self.memo.get(key) if self.memoize else None
        if m is not None:
            self.memo_hits += 1
            if m[0] == "infeasible":
                if rel_budget <= m[1]:
                    return None
            else:
                _, order, rpk, rlv, proven = m
                if lv + rpk > self.budget and proven:
                    return None
                if proven or lv + rpk <= pk:
                    return max(pk, lv + rpk), lv + rlv, order
        units = self.H.groups[gi]
        stats = DPStats()
        self.dp_runs += 1
        budget = self.budget
        if self.strategy_selection:  # the RPO order is feasible: an upper bound for the DP
            budget = min(budget, lv + self.rpo_memo[key][1])
        res = solve_parts(P, [1 << u for u in units], [P.upred[u] & ~S for u in units], list(units),
                          S0=S, live0=lv, peak0=lv, budget=budget, max_states=self.max_states,
                          deadline=self.deadline, reference=_positions(units, self.rpo[gi]), stats=stats,
                          forced_moves=self.forced_moves, beam=self.beam, floor=pk,
                          proof_states=self.proof_states)
        self.states += stats.states
        proven = not (stats.truncated or stats.timed_out or stats.early)
        if res is None and budget < self.budget:  # the search gave up below the RPO bound
            order, rpk, rlv = self.rpo_memo[key]
            self.memo[key] = ("ok", order, rpk, rlv, proven)
            if lv + rpk > self.budget:
                return None
            return max(pk, lv + rpk), lv + rlv, order
        if res is None:
            if proven:
                self.memo[key] = ("infeasible", rel_budget)
            return None
        order = [units[x] for x in res.vertices]
        rpk, rlv = res.peak - lv, res.live - lv
        self.memo[key] = ("ok", order, rpk, rlv, proven)
        return max(pk, res.peak), res.live, order


def _positions(units: Sequence[int], order: Sequence[int]) -> list[int]:
    pos = {u: k for k, u in enumerate(units)}
    return [pos[u] for u in order]


class HMCOS(MemoryScheduler):
    """HMCOS (DAC'22): hierarchy of sequences and groups + iterative DP scheduling (module docstring).

    ``max_states`` caps the states of each DP run (a beam beyond it), ``proof_states`` the states
    spent proving that a DP's upper bound is optimal, and ``time_budget`` the whole run;
    ``min_group``/``max_group`` bound the cells in sequences.  ``ungroup_users`` (ours, on by
    default) also disassembles the groups of the ops that still have to read a peak value -- a
    value's lifetime ends at its last reader, so running a reader earlier can lower the peak as
    much as defining the value later; with False only the definer's group is disassembled, as in
    the paper's Algorithm 1.  ``forced_moves=False, beam=None`` runs the plain layered DP.
    """

    name = "hmcos"

    def __init__(self, time_budget: float | None = None, hierarchy: str = "complete",
                 soft_budget: bool = True, strategy_selection: bool = True, memoize: bool = True,
                 iterative: bool = True, max_states: int | None = 1_000_000, min_group: int = 3,
                 max_group: int = 96, ungroup_users: bool = True, forced_moves: bool = True,
                 beam: int | None = 128, proof_states: int | None = 50_000, patience: int | None = 3,
                 free_inputs: bool = False, count_weights: bool = True) -> None:
        super().__init__(time_budget=time_budget, free_inputs=free_inputs, count_weights=count_weights)
        self.ungroup_users = ungroup_users
        self.proof_states = proof_states
        self.patience = patience
        self.forced_moves = forced_moves
        self.beam = beam
        if hierarchy not in ("none", "sequence", "cell", "complete"):
            raise ValueError(f"unknown hierarchy level {hierarchy!r}")
        self.hierarchy = hierarchy
        self.soft_budget = soft_budget
        self.strategy_selection = strategy_selection
        self.memoize = memoize
        self.iterative = iterative
        self.max_states = max_states
        self.min_group = min_group
        self.max_group = max_group

    def order(self, g: Graph) -> list[int]:
        deadline = self.deadline(0.7)
        model = MemoryModel.build(g, self.free_inputs, self.count_weights)
        P = UnitProblem(model, range(model.n), sequences=self.hierarchy != "none")
        H = build_hierarchy(P, self.hierarchy, self.min_group, self.max_group)
        gs = _GroupScheduler(P, H, self.strategy_selection, self.memoize, self.max_states, deadline,
                             self.forced_moves, self.beam, self.proof_states)
        active = [True] * len(H.groups)
        sealed = _sealed_groups(P, H)
        ref_units = P.reference_units()
        ref_pos = {u: k for k, u in enumerate(ref_units)}
        best: tuple[int, list[int]] | None = None
        history: list[dict] = []
        budget = INF
        stale = 0
        stats_all = DPStats()
        while True:
            # vertices of the current hierarchical graph
            vbits: list[int] = []
            vpred: list[int] = []
            vunit: list[int] = []
            vgroup: list[int] = []
            for gi, units in enumerate(H.groups):
                if active[gi]:
                    gb = gs.gbits[gi]
                    pm = 0
                    for u in units:
                        pm |= P.upred[u]
                    vbits.append(gb)
                    vpred.append(pm & ~gb)
                    vunit.append(-1)
                    vgroup.append(gi)
            for u in range(P.n_units):
                gi = H.group_of[u]
                if gi < 0 or not active[gi]:
                    vbits.append(1 << u)
                    vpred.append(P.upred[u])
                    vunit.append(u)
                    vgroup.append(-1)
            nv = len(vbits)
            vkey = []
            for x in range(nv):
                m, k = vbits[x], INF
                while m:
                    low = m & -m
                    k = min(k, ref_pos[low.bit_length() - 1])
                    m ^= low
                vkey.append(k)
            reference = _topo_vertices(vbits, vpred, vkey)
            gs.budget = budget

            def group_fn(x: int, S: int, pk: int, lv: int, vgroup: list[int] = vgroup
                         ) -> tuple[int, int, list[int]] | None:
                return gs(vgroup[x], S, pk, lv)

            stats = DPStats()
            res = solve_parts(P, vbits, vpred, vunit, budget=budget, max_states=self.max_states,
                              deadline=deadline, reference=reference, group_fn=group_fn, stats=stats,
                              forced_moves=self.forced_moves, beam=self.beam, proof_states=self.proof_states)
            stats_all.states += stats.states
            stats_all.truncated |= stats.truncated
            stats_all.timed_out |= stats.timed_out
            if res is None:  # nothing under the budget (beam / time limits): keep the best so far
                history.append({"peak": None, "vertices": nv, "states": stats.states})
                break
            unit_order: list[int] = []
            for x, pay in zip(res.vertices, res.payloads, strict=True):
                unit_order.extend(pay if vunit[x] < 0 else [vunit[x]])
            ops = P.emit(unit_order)
            peak, steps = model.simulate(ops)
            history.append({"peak": peak, "vertices": nv, "states": stats.states,
                            "groups": sum(active)})
            if best is None or peak < best[0]:
                best = (peak, ops)
                stale = 0
            else:
                stale += 1
            if not self.iterative or deadline.expired() or (self.patience and stale >= self.patience):
                break
            # disassemble the groups holding values alive at the peak
            freed = set()
            pos = {model.index[v]: k for k, v in enumerate(ops)}
            at_peak = [k for k, b in enumerate(steps) if b == peak]
            for k, live in zip(at_peak, model.live_at_steps(ops, at_peak), strict=True):
                for s in live:
                    holders = [model.producer[s]]  # HMCOS: the value's defining op
                    if self.ungroup_users:  # ours: and the ops still to read it
                        holders += [i for i in model.members[s] if pos[i] > k]
                    for i in holders:
                        u = P.unit_of.get(i) if i >= 0 else None
                        gi = H.group_of[u] if u is not None else -1
                        if gi >= 0 and active[gi] and not sealed[gi]:
                            freed.add(gi)
            if not freed:
                break
            for gi in freed:
                active[gi] = False
            if self.soft_budget:
                budget = best[0]
        candidates: dict[str, list[int]] = {}
        if best is not None:
            candidates["hmcos"] = best[1]
        candidates["traced"] = traced_order(model)
        candidates["rpo"] = rpo_order(model)
        scored = {k: model.simulate(v)[0] for k, v in candidates.items()}
        pick = min(scored, key=lambda k: (scored[k], k != "hmcos"))
        self.info = {
            "iterations": len([h for h in history if h["peak"] is not None]),
            "peaks": ",".join(str(h["peak"]) for h in history),
            "history": history,
            "groups": len(H.groups), "sequences": P.n_units, "ops": model.n,
            "group_dp_runs": gs.dp_runs, "group_rpo": gs.rpo_used, "memo_hits": gs.memo_hits,
            "states": stats_all.states + gs.states, "truncated": stats_all.truncated,
            "timed_out": stats_all.timed_out or deadline.expired(), "picked": pick,
        }
        return candidates[pick]


def _sealed_groups(P: UnitProblem, H: Hierarchy) -> list[bool]:
    """A group is sealed when every unit outside it is an ancestor or a descendant of each of its
    units (it lies between narrow waists, nw = 0): it always runs in the same context, so its
    exact inner schedule is already optimal and disassembling it cannot lower the peak."""
    from ..analysis.narrow_waist import ancestor_bitsets, descendant_bitsets
    from .footprint import bits

    preds = [bits(P.upred[u]) for u in range(P.n_units)]
    anc = ancestor_bitsets(preds)
    des = descendant_bitsets([list(s) for s in P.usucc])
    everything = (1 << P.n_units) - 1
    out = []
    for units in H.groups:
        gb = 0
        for u in units:
            gb |= 1 << u
        out.append(all(not (everything & ~(anc[u] | des[u] | gb)) for u in units))
    return out


def _topo_vertices(vbits: Sequence[int], vpred: Sequence[int], key: Sequence[float]) -> list[int]:
    """A topological order of vertices, smallest key first among the ready ones."""
    import heapq

    nv = len(vbits)
    owner: dict[int, int] = {}
    for x in range(nv):
        m = vbits[x]
        while m:
            low = m & -m
            owner[low.bit_length() - 1] = x
            m ^= low
    preds: list[set[int]] = []
    succs: list[list[int]] = [[] for _ in range(nv)]
    for y in range(nv):
        ps: set[int] = set()
        m = vpred[y]
        while m:
            low = m & -m
            x = owner.get(low.bit_length() - 1)
            m ^= low
            if x is not None and x != y:
                ps.add(x)
        preds.append(ps)
        for x in ps:
            succs[x].append(y)
    indeg = [len(p) for p in preds]
    heap = [(key[x], x) for x in range(nv) if indeg[x] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, x = heapq.heappop(heap)
        out.append(x)
        for y in succs[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(heap, (key[y], y))
    return out
