"""Scheduling sub-problems made of *units* (the states and transitions of Serenity's DP).

A :class:`UnitProblem` orders a set X of ops after an already-run, downward-closed set D.  The ops
of X are grouped into atomic, internally ordered units -- single ops (Serenity) or HMCOS sequences
(:func:`join_sequences`) -- and every unit gets precomputed per-step allocations and
(conditional) frees over unit bitmasks, following the storage model of ``footprint.MemoryModel``.

Two lossless reductions shrink the state space (both are exchange arguments -- moving an op later,
to just before its first user, never raises a step footprint):

* *lazy* ops allocate nothing and never free anything (a view of a weight, ``t``/``view``/``expand``
  of an activation that its users read through the view): they leave the DP and are emitted right
  before their first scheduled user;
* *attached* ops have no producer among the ops to schedule, free nothing, allocate memory that only
  their single user reads (``embedding(weight, ids)``, ``ones``...): they run right before that user,
  inside its unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..analysis.order import reverse_post_order
from .footprint import MemoryModel, bits

Step = tuple[int, int, tuple[tuple[int, int], ...]]  # (alloc, unconditional free, ((mask, bytes), ...))


class UnitProblem:
    """Order the ops ``X`` (op indices of ``model``) after the already-run, downward-closed set ``D``.

    ``units`` partitions the non-lazy ops of X into atomic, internally ordered units; unit u has bit
    ``1 << u`` in a scheduled-set mask.  ``steps[u]`` lists, per op of the unit, its allocation, the
    bytes it frees unconditionally and conditional frees ``(mask, bytes)`` -- ``mask`` holds every
    unit with a member of the storage, u included, and the bytes are freed iff every unit in it but
    u has already run: ``(mask & ~S).bit_count() == 1`` (one mask object per storage, so a storage
    read by n units costs O(n) masks' memory once, not n times).  ``upred[u]`` is the mask of units that
    must run before u.  ``live0`` is the live bytes after D.
    """

    def __init__(self, model: MemoryModel, X: Iterable[int], done: Iterable[int] = (),
                 sequences: bool = False, lazy: bool = True) -> None:
        self.model = model
        Xs = sorted(set(X))
        self.X = Xs
        inX = set(Xs)
        D = set(done)
        self.D = D
        for i in Xs:
            for p in model.preds[i]:
                if p not in inX and p not in D:
                    raise ValueError("sub-problem is not closed under predecessors")
        self.inX = inX
        sizes, members, producer, kept = model.size, model.members, model.producer, model.kept

        # storages: freeable within the sub-problem? (no member after X, not kept)
        rel: dict[int, tuple[int, ...]] = {}  # storage -> X-members (producer included if in X)
        never: set[int] = set()
        live0 = model.resident
        stor_ids: set[int] = set()
        for i in Xs:
            stor_ids.update(model.produces[i])
            stor_ids.update(model.touches[i])
        for s in stor_ids:
            p = producer[s]
            xm = [u for u in members[s] if u in inX]
            if p in inX:
                xm.append(p)
            later = any(u not in inX and u not in D for u in members[s])
            if kept[s] or later:
                never.add(s)
            rel[s] = tuple(sorted(xm))
        # live after D
        for s in range(len(sizes)):
            p = producer[s]
            if p >= 0 and p not in D:
                continue
            if kept[s] or any(u not in D for u in members[s]):
                live0 += sizes[s]
        self.live0 = live0

        # lazy (type a) and attached (type b) ops
        users_in_X = {i: [u for u in model.succs[i] if u in inX] for i in Xs}
        lazy_set: set[int] = set()
        attached: dict[int, int] = {}
        if lazy:
            for i in Xs:
                if model.alloc[i] != 0 or not users_in_X[i] or len(users_in_X[i]) != len(model.succs[i]):
                    continue
                us = set(users_in_X[i])
                if all(s in never or any(u in us for u in members[s]) for s in model.touches[i]):
                    lazy_set.add(i)
            for i in Xs:
                if i in lazy_set or model.alloc[i] == 0 or any(p in inX for p in model.preds[i]):
                    continue
                us = users_in_X[i]
                if len(us) != 1 or len(model.succs[i]) != 1 or us[0] in lazy_set:
                    continue
                u = us[0]
                if not all(s in never for s in model.touches[i]):
                    continue
                if not all(u in members[s] for s in model.produces[i]):
                    continue
                attached[i] = u
            # an attached op's user must not itself be attached (keep it one level deep)
            attached = {i: u for i, u in attached.items() if u not in attached}
        self.rel = rel
        self.never = never
        self.lazy = lazy_set
        self.attached = attached
        att_of: dict[int, list[int]] = {}
        for i, u in sorted(attached.items()):
            att_of.setdefault(u, []).append(i)
        self.att_of = att_of

        # effective (non-lazy) predecessors inside X, in one topological sweep (preds come first)
        eff: dict[int, frozenset[int]] = {}
        for i in Xs:
            out: set[int] = set()
            for p in model.preds[i]:
                if p not in inX:
                    continue
                if p in lazy_set:
                    out |= eff[p]
                else:
                    out.add(attached.get(p, p))
            eff[i] = frozenset(out)

        def eff_preds(i: int) -> frozenset[int]:
            return eff[i]

        core = [i for i in Xs if i not in lazy_set and i not in attached]  # topological (index order)
        self.core = core
        epreds = {i: (eff_preds(i) | frozenset(q for a in att_of.get(i, ()) for q in eff_preds(a))) - {i}
                  for i in core}
        esuccs: dict[int, list[int]] = {i: [] for i in core}
        for i in core:
            for p in epreds[i]:
                if p != i:
                    esuccs[p].append(i)
        self.epreds = epreds
        self.esuccs = esuccs

        # units
        if sequences:
            units = join_sequences(self)
        else:
            units = [[i] for i in core]
        self._set_units(units, rel, never)

    # ------------------------------------------------------------------------------------------
    def unit_ops(self, core_ops: list[int]) -> list[int]:
        """The op indices of a unit made of ``core_ops``: each preceded by its attached ops."""
        out: list[int] = []
        for i in core_ops:
            out.extend(self.att_of.get(i, ()))
            out.append(i)
        return out

    def _set_units(self, units: list[list[int]], rel: dict[int, tuple[int, ...]], never: set[int]) -> None:
        model = self.model
        self.units = units  # core op indices per unit
        unit_of: dict[int, int] = {}
        for u, ops in enumerate(units):
            for i in ops:
                unit_of[i] = u
                for a in self.att_of.get(i, ()):
                    unit_of[a] = u
        self.unit_of = unit_of
        nu = len(units)
        upred = [0] * nu
        for u, ops in enumerate(units):
            m = 0
            for i in ops:
                for p in self.epreds[i]:
                    pu = unit_of[p]
                    if pu != u:
                        m |= 1 << pu
            upred[u] = m
        self.upred = upred
        usucc: list[list[int]] = [[] for _ in range(nu)]
        for u in range(nu):
            m = upred[u]
            while m:
                low = m & -m
                usucc[low.bit_length() - 1].append(u)
                m ^= low
        self.usucc = usucc
        sizes = model.size
        lazy = self.lazy
        # per storage, once: its non-lazy X-members grouped by unit, and the mask of those units
        # (a storage with many readers -- a huge fan-out -- is looked at once, not once per reader)
        by_unit: dict[int, dict[int, list[int]]] = {}
        umask: dict[int, int] = {}

        def group(s: int) -> dict[int, list[int]]:
            g = by_unit.get(s)
            if g is None:
                g = {}
                m = 0
                for v in rel[s]:
                    if v not in lazy:
                        vu = unit_of[v]
                        g.setdefault(vu, []).append(v)
                        m |= 1 << vu
                by_unit[s] = g
                umask[s] = m
            return g

        steps: list[tuple[Step, ...]] = []
        for u, ops in enumerate(units):
            full = self.unit_ops(ops)
            pos = {i: k for k, i in enumerate(full)}
            allocs = [model.alloc[i] for i in full]
            ffree = [0] * len(full)
            conds: list[list[tuple[int, int]]] = [[] for _ in full]
            seen: set[int] = set()
            for i in full:
                for s in model.produces[i] + model.touches[i]:
                    if s in seen or s in never:
                        continue
                    seen.add(s)
                    mine = group(s).get(u)
                    if not mine:
                        continue
                    last = max(pos[v] for v in mine)
                    m = umask[s]
                    if m != 1 << u:  # one mask per storage, shared by its units' conditions
                        conds[last].append((m, sizes[s]))
                    else:
                        ffree[last] += sizes[s]
            steps.append(tuple((allocs[k], ffree[k], tuple(conds[k])) for k in range(len(full))))
        self.steps = steps
        # state-independent summary of units without conditional frees: (peak above live, live delta)
        simple: list[tuple[int, int] | None] = []
        for st in steps:
            if any(c for _, _, c in st):
                simple.append(None)
                continue
            live = 0
            pk = 0
            for a, f, _ in st:
                live += a
                if live > pk:
                    pk = live
                live -= f
            simple.append((pk, live))
        self.simple = simple

    # ------------------------------------------------------------------------------------------
    @property
    def n_units(self) -> int:
        return len(self.units)

    def apply(self, u: int, S: int, peak: int, live: int) -> tuple[int, int]:
        """Run unit ``u`` after the units in mask ``S``: (new running peak, live after)."""
        sp = self.simple[u]
        if sp is not None:
            t = live + sp[0]
            return (t if t > peak else peak), live + sp[1]
        for a, f, conds in self.steps[u]:
            live += a
            if live > peak:
                peak = live
            live -= f
            for m, sz in conds:
                if (m & ~S).bit_count() == 1:
                    live -= sz
        return peak, live

    def evaluate(self, unit_order: Sequence[int]) -> tuple[int, int]:
        """(peak, live after) of running the units in this order after D."""
        S = 0
        live = self.live0
        peak = live
        for u in unit_order:
            peak, live = self.apply(u, S, peak, live)
            S |= 1 << u
        return peak, live

    def emit(self, unit_order: Sequence[int]) -> list[int]:
        """Op node ids of a unit order, each lazy op emitted right before its first user."""
        model = self.model
        out: list[int] = []
        emitted: set[int] = set()
        lazy = self.lazy
        inX = self.inX

        def emit_lazy_preds(i: int) -> None:
            stack = [(i, 0)]
            while stack:
                v, k = stack.pop()
                ps = [p for p in model.preds[v] if p in lazy and p in inX]
                while k < len(ps) and ps[k] in emitted:
                    k += 1
                if k < len(ps):
                    stack.append((v, k + 1))
                    stack.append((ps[k], 0))
                elif v != i and v not in emitted:
                    emitted.add(v)
                    out.append(model.ops[v])

        for u in unit_order:
            for i in self.unit_ops(self.units[u]):
                emit_lazy_preds(i)
                emitted.add(i)
                out.append(model.ops[i])
        return out

    def reference_units(self, ref_positions: dict[int, int] | None = None) -> list[int]:
        """A topological unit order following a reference op order (default: op index = traced)."""
        import heapq

        key = [min((ref_positions or {}).get(i, i) for i in ops) for ops in self.units]
        indeg = [self.upred[u].bit_count() for u in range(self.n_units)]
        heap = [(key[u], u) for u in range(self.n_units) if indeg[u] == 0]
        heapq.heapify(heap)
        out: list[int] = []
        while heap:
            _, u = heapq.heappop(heap)
            out.append(u)
            for w in self.usucc[u]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    heapq.heappush(heap, (key[w], w))
        if len(out) != self.n_units:
            raise ValueError("unit graph has a cycle")
        return out

    def rpo_units(self, units: Sequence[int] | None = None) -> list[int]:
        """Reverse post-order of (a convex subset of) the unit graph: a DFS over predecessors from
        the sinks, each unit right after the last of its inputs -- the RPO baseline at unit level."""
        sel = set(range(self.n_units)) if units is None else set(units)
        preds = {u: [p for p in bits(self.upred[u]) if p in sel] for u in sel}
        has_succ = {p for u in sel for p in preds[u]}
        return reverse_post_order(preds, sorted(u for u in sel if u not in has_succ))


def join_sequences(P: UnitProblem) -> list[list[int]]:
    """Greedy sequence join over the core ops of ``P`` (HMCOS 3.1.1, both conditions): the units
    of a problem built with ``sequences=True``.

    A sequence is a chain of ops <v_1..v_n> where every v_i (i >= 2) has v_{i-1} as its only
    predecessor and v_{i-1} has v_i as its only successor, whose *chain-local* footprints satisfy

        Condition 1: mu^s_1 >= mu^s_i for all i  (no step is above the first one), and
        Condition 2: mu^t_i >= mu^t_j for i < j  (transients never increase).

    Chain-local footprints count the storages the chain allocates, minus those it has freed, minus the
    storages allocated before it that only the chain reads once their last reader has run (those are
    freed by the chain in every schedule); a storage someone outside also reads is never freed there.
    This is HMCOS's release rule (an op frees its inputs) made exact for shared inputs.

    Chains are joined greedily in topological order.  The join is lossless: in any schedule, moving
    v_2..v_n to right after v_1 never raises a footprint (the ops that ran in between now see a chain
    contribution mu^t_n <= mu^t_i, and each moved step is at most v_1's), so the optimum over
    sequence-atomic schedules equals the flat optimum (tested against brute force).
    """
    model = P.model
    rel, never, lazy = P.rel, P.never, P.lazy
    seqs: list[list[int]] = []
    seq_of: dict[int, int] = {}
    # per sequence: (peak of first unit, current chain transient, pending counts of chain storages)
    state: list[tuple[int, int, dict[int, int]]] = []

    # per storage: its non-lazy X-members, and whether its producer is one of them (counted once
    # per storage, not once per reader: linear on huge fan-outs)
    counts: dict[int, tuple[int, bool]] = {}

    def members_left(s: int, x: int) -> int:
        """Members of storage ``s`` a chain first seeing it at op ``x`` waits for (the producer
        counts only when it is ``x``)."""
        cp = counts.get(s)
        if cp is None:
            prod = model.producer[s]
            n = prod_in = 0
            for v in rel[s]:
                if v not in lazy:
                    n += 1
                    prod_in |= v == prod
            cp = counts[s] = (n, bool(prod_in))
        n, prod_in = cp
        return n - (1 if prod_in and model.producer[s] != x else 0)

    def run_unit(ops: list[int], ct: int, pending: dict[int, int]) -> tuple[int, int, dict[int, int]]:
        """Chain-local footprint of appending ``ops``: (max sub-step, transient after, pending')."""
        pend = dict(pending)
        top = -(1 << 62)
        for x in ops:
            ct += model.alloc[x]
            if ct > top:
                top = ct
            for s in model.produces[x] + model.touches[x]:
                c = pend.get(s)
                if c is None:  # first seen: allocated here, or read by the chain (producer outside)
                    c = members_left(s, x)
                c -= 1
                pend[s] = c
                if c == 0:
                    del pend[s]
                    if s not in never:
                        ct -= model.size[s]
        return top, ct, pend

    for i in P.core:
        ops = P.unit_ops([i])
        ps = P.epreds[i]
        if len(ps) == 1:
            (w,) = ps
            k = seq_of.get(w)
            if k is not None and P.esuccs[w] == [i] and seqs[k][-1] == w:
                first, ct, pend = state[k]
                top, ct2, pend2 = run_unit(ops, ct, pend)
                if top <= first and ct2 <= ct:  # Condition 1 and Condition 2
                    seqs[k].append(i)
                    seq_of[i] = k
                    state[k] = (first, ct2, pend2)
                    continue
        top, ct, pend = run_unit(ops, 0, {})
        seq_of[i] = len(seqs)
        seqs.append([i])
        state.append((top, ct, pend))
    return seqs
