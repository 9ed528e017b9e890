"""The memory model of a schedule, compiled for fast scheduling (HMCOS Eq. 2-5, MAGIS section 3).

``core.analysis.lifetimes.memory_profile`` is THE definition of a schedule's peak; this module is the
same model in a form the schedulers can evaluate incrementally:

* a *storage* is the memory of one non-view tensor (views share their base's storage and add no
  bytes).  It is allocated when its producer runs and freed after the last of its *members* has run:
  every op that reads it through any alias, plus every op that creates a view of it.  Graph outputs
  are kept to the end.
* graph inputs are resident for the whole step (default), or -- ``free_inputs=True``, the HMCOS model
  -- alive from step 0 until their last use; weights are resident (``count_weights=True``) or not
  counted at all.
* the footprint of step i is ``M_i = live_{i-1} + alloc(v_i)`` (Eq. 4: the stable footprint), and the
  transient after it ``live_i = M_i - freed(v_i)`` (Eq. 5: values terminally used by v_i, and v_i's
  own dead outputs).  The peak is ``max_i M_i``.

The live bytes after a *set* of ops has run do not depend on the order they ran in -- which is why a
DP over sets of scheduled ops (Serenity) is exact.  :class:`UnitProblem` turns a sub-problem (a set
X of ops to order after an already-run set D) into *units* -- single ops (Serenity) or HMCOS
sequences -- with precomputed per-step allocations and (conditional) frees over unit bitmasks.

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
from dataclasses import dataclass, field

from ..ir.graph import Graph, NodeKind, TensorKind, TRef
from .base import Scheduler as _Scheduler


@dataclass
class MemoryModel:
    """Storages, members and sizes of a graph under one memory model (see module docstring)."""

    g: Graph
    free_inputs: bool
    count_weights: bool
    ops: list[int]  # op node ids in a topological (traced) order; index = op index
    index: dict[int, int]
    preds: list[tuple[int, ...]]  # op index -> distinct op-index predecessors (sorted)
    succs: list[tuple[int, ...]]
    size: list[int]  # storage -> bytes
    producer: list[int]  # storage -> op index, or -1 for a graph input alive from step 0
    members: list[tuple[int, ...]]  # storage -> op indices reading it / viewing it (producer excluded)
    kept: list[bool]  # storage is (an alias of) a graph output: never freed
    resident: int  # bytes alive during every step (held by the caller)
    produces: list[tuple[int, ...]]  # op index -> storages it allocates
    touches: list[tuple[int, ...]]  # op index -> storages it is a member of
    alloc: list[int] = field(default_factory=list)  # op index -> bytes it allocates

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def build(cls, g: Graph, free_inputs: bool = False, count_weights: bool = True) -> MemoryModel:
        ops = [nid for nid in g.topo_order() if g.nodes[nid].kind != NodeKind.PLACEHOLDER]
        index = {nid: i for i, nid in enumerate(ops)}
        n = len(ops)
        preds: list[tuple[int, ...]] = []
        succ_sets: list[list[int]] = [[] for _ in range(n)]
        for i, nid in enumerate(ops):
            ps = tuple(sorted({index[r.node] for r in g.nodes[nid].inputs() if r.node in index}))
            preds.append(ps)
            for p in ps:
                succ_sets[p].append(i)
        succs = [tuple(s) for s in succ_sets]

        sid_of: dict[TRef, int] = {}
        size: list[int] = []
        producer: list[int] = []
        kind_input: list[bool] = []
        counted: list[bool] = []
        resident = 0
        for nid, node in g.nodes.items():
            for j, t in enumerate(node.outputs):
                if t.alias is not None:
                    continue
                ref = TRef(nid, j)
                sid_of[ref] = len(size)
                is_ph = node.kind == NodeKind.PLACEHOLDER
                ok = t.device == "device" and t.nbytes > 0
                if is_ph and t.kind != TensorKind.INPUT and not count_weights:
                    ok = False
                size.append(int(t.nbytes))
                producer.append(-1 if is_ph else index.get(nid, -1))
                kind_input.append(is_ph and t.kind == TensorKind.INPUT)
                counted.append(ok)
        nst = len(size)
        mem_sets: list[set[int]] = [set() for _ in range(nst)]

        def root_sid(ref: TRef) -> int:
            return sid_of[g.storage_root(ref)]

        for i, nid in enumerate(ops):
            node = g.nodes[nid]
            for r in node.inputs():
                mem_sets[root_sid(r)].add(i)
            for j, t in enumerate(node.outputs):
                if t.alias is not None:
                    mem_sets[root_sid(TRef(nid, j))].add(i)
        kept = [False] * nst
        for r in g.outputs.values():
            kept[root_sid(r)] = True

        keep_sid: list[int] = []
        for s in range(nst):
            if not counted[s]:
                continue
            p = producer[s]
            mem_sets[s].discard(p)
            if p < 0 and kind_input[s] and free_inputs and not kept[s]:
                if mem_sets[s]:
                    keep_sid.append(s)  # a graph input alive from step 0 to its last use
            elif p < 0:
                resident += size[s]  # held by the caller for the whole step
            else:
                keep_sid.append(s)
        m = cls(
            g=g, free_inputs=free_inputs, count_weights=count_weights, ops=ops, index=index,
            preds=preds, succs=succs,
            size=[size[s] for s in keep_sid], producer=[producer[s] for s in keep_sid],
            members=[tuple(sorted(mem_sets[s])) for s in keep_sid], kept=[kept[s] for s in keep_sid],
            resident=resident, produces=[], touches=[],
        )
        prod: list[list[int]] = [[] for _ in range(n)]
        tch: list[list[int]] = [[] for _ in range(n)]
        for k, s in enumerate(keep_sid):
            if producer[s] >= 0:
                prod[producer[s]].append(k)
            for i in m.members[k]:
                tch[i].append(k)
        m.produces = [tuple(x) for x in prod]
        m.touches = [tuple(x) for x in tch]
        m.alloc = [sum(m.size[k] for k in prod[i]) for i in range(n)]
        return m

    # ---- evaluation ----------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.ops)

    def initial_live(self) -> int:
        """Bytes alive before the first op: residents plus freeable graph inputs."""
        return self.resident + sum(self.size[s] for s in range(len(self.size)) if self.producer[s] < 0)

    def live_after(self, done: Iterable[int]) -> int:
        """Live bytes once the op indices ``done`` (a downward-closed set) have run."""
        done = done if isinstance(done, (set, frozenset)) else set(done)
        live = self.resident
        for s, p in enumerate(self.producer):
            if p >= 0 and p not in done:
                continue
            if self.kept[s] or not all(u in done for u in self.members[s]):
                live += self.size[s]
        return live

    def simulate(self, order: Sequence[int], ids: bool = True) -> tuple[int, list[int]]:
        """(peak, step footprints) of ``order`` (op node ids, or op indices with ids=False)."""
        idx = [self.index[v] for v in order] if ids else list(order)
        remaining = [len(m) + (1 if p >= 0 else 0) for m, p in zip(self.members, self.producer, strict=True)]
        size, kept = self.size, self.kept
        live = self.initial_live()
        steps: list[int] = []
        for i in idx:
            live += self.alloc[i]
            steps.append(live)
            for s in self.produces[i]:
                remaining[s] -= 1
                if remaining[s] == 0 and not kept[s]:
                    live -= size[s]
            for s in self.touches[i]:
                remaining[s] -= 1
                if remaining[s] == 0 and not kept[s]:
                    live -= size[s]
        return (max(steps) if steps else live), steps

    def live_storages(self, order: Sequence[int], step: int) -> list[int]:
        """Storages alive during ``step`` of ``order`` (op node ids): HMCOS's X_k."""
        return self.live_at_steps(order, [step])[0]

    def live_at_steps(self, order: Sequence[int], steps: Sequence[int]) -> list[list[int]]:
        """Storages alive during each of ``steps`` of ``order`` (one pass)."""
        want = set(steps)
        snap: dict[int, list[int]] = {}
        remaining = [len(m) + (1 if p >= 0 else 0) for m, p in zip(self.members, self.producer, strict=True)]
        alive = {s for s, p in enumerate(self.producer) if p < 0}
        for k, v in enumerate(order):
            i = self.index[v]
            alive.update(self.produces[i])
            if k in want:
                snap[k] = sorted(alive)
            for s in self.produces[i] + self.touches[i]:
                remaining[s] -= 1
                if remaining[s] == 0 and not self.kept[s]:
                    alive.discard(s)
        return [snap.get(k, sorted(alive)) for k in steps]


def model_for(g: Graph, free_inputs: bool = False, count_weights: bool = True) -> MemoryModel:
    return MemoryModel.build(g, free_inputs=free_inputs, count_weights=count_weights)


# ------------------------------------------------------------------------------------------------
# Sub-problems made of units
# ------------------------------------------------------------------------------------------------
Step = tuple[int, int, tuple[tuple[int, int], ...]]  # (alloc, unconditional free, ((mask, bytes), ...))


class UnitProblem:
    """Order the ops ``X`` (op indices of ``model``) after the already-run, downward-closed set ``D``.

    ``units`` partitions the non-lazy ops of X into atomic, internally ordered units; unit u has bit
    ``1 << u`` in a scheduled-set mask.  ``steps[u]`` lists, per op of the unit, its allocation, the
    bytes it frees unconditionally and conditional frees ``(mask, bytes)`` -- freed iff every unit in
    ``mask`` has already run (the storage's other members).  ``upred[u]`` is the mask of units that
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
            from .hierarchy import join_sequences

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
                    xm = [v for v in rel[s] if v not in lazy]
                    mine = [v for v in xm if unit_of.get(v) == u]
                    if not mine:
                        continue
                    last = max(pos[v] for v in mine)
                    other = 0
                    for v in xm:
                        vu = unit_of[v]
                        if vu != u:
                            other |= 1 << vu
                    if other:
                        conds[last].append((other, sizes[s]))
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
                if m & S == m:
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
        preds = {u: [p for p in _bits(self.upred[u]) if p in sel] for u in sel}
        has_succ = {p for u in sel for p in preds[u]}
        sinks = sorted(u for u in sel if u not in has_succ)
        done: set[int] = set()
        out: list[int] = []
        for root in sinks:
            stack = [(root, 0)]
            while stack:
                v, k = stack.pop()
                if v in done:
                    continue
                ps = preds[v]
                while k < len(ps) and ps[k] in done:
                    k += 1
                if k < len(ps):
                    stack.append((v, k + 1))
                    stack.append((ps[k], 0))
                else:
                    done.add(v)
                    out.append(v)
        return out


def traced_order(model: MemoryModel) -> list[int]:
    """The traced (PyTorch) order: ``baselines.TracedOrder``."""
    return list(model.ops)


def rpo_order(model: MemoryModel) -> list[int]:
    """``baselines.ReversePostOrder`` on the compiled model (same roots and tie-breaks: node ids)."""
    ops, index = model.ops, model.index
    g = model.g
    has_user = [False] * model.n
    for ps in model.preds:
        for p in ps:
            has_user[p] = True
    roots = sorted({r.node for r in g.outputs.values() if r.node in index}
                   | {ops[i] for i in range(model.n) if not has_user[i]})
    preds = [sorted(ops[p] for p in ps) for ps in model.preds]
    done: set[int] = set()
    out: list[int] = []
    for root in roots:
        stack = [(root, 0)]
        while stack:
            nid, k = stack.pop()
            if nid in done:
                continue
            ps = preds[index[nid]]
            while k < len(ps) and ps[k] in done:
                k += 1
            if k < len(ps):
                stack.append((nid, k + 1))
                stack.append((ps[k], 0))
            else:
                done.add(nid)
                out.append(nid)
    return out


def best_of(model: MemoryModel, candidates: dict[str, list[int]]) -> tuple[str, list[int]]:
    """The candidate order (op node ids) with the lowest peak; ties go to the first one listed."""
    names = list(candidates)
    peaks = {k: model.simulate(candidates[k])[0] for k in names}
    pick = min(names, key=lambda k: (peaks[k], names.index(k)))
    return pick, candidates[pick]


def _bits(m: int) -> list[int]:
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


bits = _bits


# ------------------------------------------------------------------------------------------------
class MemoryScheduler(_Scheduler):
    """Base of the memory-aware schedulers: carries the memory model flags and the time budget, and
    reports the peak of the returned order under *that* model (``memory_profile`` with the same
    flags -- ``base.finish`` always uses the default model)."""

    name = "memory"

    def __init__(self, time_budget: float | None = None, free_inputs: bool = False,
                 count_weights: bool = True) -> None:
        self.time_budget = time_budget
        self.free_inputs = free_inputs
        self.count_weights = count_weights
        self.info: dict = {}
        self._start: float | None = None

    def deadline(self, fraction: float = 0.75):
        """The time limit for the search itself: ``fraction`` of the time budget, counted from the
        start of ``run`` (the rest is left for building the model and checking the result)."""
        import time

        from .serenity import Deadline

        d = Deadline(None)
        if self.time_budget is not None:
            start = self._start if self._start is not None else time.perf_counter()
            d.end = start + self.time_budget * fraction
        return d

    def order(self, g: Graph) -> list[int]:
        raise NotImplementedError

    def peak(self, g: Graph, order: Sequence[int]) -> int:
        from ..analysis.lifetimes import memory_profile

        return memory_profile(g, order, validate=False, free_inputs=self.free_inputs,
                              count_weights=self.count_weights).peak

    def run(self, g: Graph):
        import time

        from ..analysis.lifetimes import check_schedule
        from .base import Schedule

        self.info = {}
        t0 = time.perf_counter()
        self._start = t0
        order = self.order(g)
        dt = time.perf_counter() - t0
        check_schedule(g, order)
        return Schedule(list(order), self.name, self.peak(g, order), dt, dict(self.info))
