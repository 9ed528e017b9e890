"""SwapAdvisor's swap planner and its three-stream simulation (Huang et al. 2020, section 4.1).

Given an operator schedule and a memory-pool allocation (``analysis.mempool``), the planner walks
the schedule.  Each tensor (a device storage an op owns: views share it) lives in an object of its
size class while it is on the device.  When a tensor needs an object (it is produced, or it was
swapped out and an op reads it) and its class has none free, the planner evicts from that class the
resident tensor whose next use is furthest (Belady), preferring tensors last used at least as long
ago (in compute time) as their swap-out (and the swap-in that takes their place) takes, so that the
copies could already have run; the
current op's tensors and graph outputs are never evicted.  A tensor that already has a valid host
copy (it was swapped out before: tensors of a dataflow graph are never written again) is dropped
without a copy; otherwise it is copied out.  Edges: last user -> swap-out(victim) -> swap-in(needed)
-> op.  The swap-out is issued right after the victim's last use (known only in hindsight, which is
why it is decided while walking but placed earlier), and the swap-in as early as its memory allows:
once the object it fills is free (the victim's swap-out has ended, or the op that freed it ran), and
at the latest right before the op that reads it.

Each pool tensor on the device is in one *object* of its class: a free one (the one free longest,
the never-used ones first), else the one its victim leaves.  ``plan_swaps(..., stays=True)`` records
these stays (``Stay``: tensor, object, from which op to which, and their times on the three
streams), which is how the app draws which tensor is in which object over the step.

On-demand swapping (ODSwap, the paper's baseline) is the same walk over one byte pool (no size
classes) with least-recently-used eviction, each swap-out issued right before the op that needs the
memory and each swap-in right before the op that reads the tensor.

Three streams (section 4.1, ``simulate.stream_times(duplex=...)``): compute, swap-out and swap-in,
each in program order; a copy started while the other direction is busy runs at half the link's
both-ways bandwidth.  The walk's time is the simulated iteration time of the plan; realised as a
graph (``transform.swap.SwapLate`` applications: one LOAD per swap-in, one STORE per tensor) the
project's simulator gives the same time with ``simulate(..., swap_streams=True)``.

Graph inputs and weights are resident (the project's memory model), and the tensors that are never
evicted (graph outputs such as the weights' gradients, storages the Swap rules cannot move) live next
to the pool in memory of their own size: the pool is the memory limit less both.  With nothing carried from one iteration to the next besides the weights, the
paper's double pass (parameters resident at the start of the second pass) has nothing to carry.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..analysis.lifetimes import counted, storage_table
from ..analysis.mempool import Allocation
from ..cost.devices import duplex_factor
from ..cost.model import CostModel
from ..ir.graph import Graph, NodeKind, TRef
from ..transform.remat import storage_readers
from ..transform.rule import Application
from ..transform.swap import SwapLate, swappable


class InfeasibleLimit(ValueError):
    """A memory limit no plan can meet (one line naming the bound)."""


@dataclass
class SwapProblem:
    """What the planner needs of a graph, by index: ops (schedule positions are over these), their
    compute times and dependencies, and the tensors (device storages ops own)."""

    g: Graph
    ops: list[int]  # op node ids; an op's index is its place here (the traced order)
    time: list[float]
    preds: list[list[int]]  # op index -> op indices it depends on
    t_ref: list[TRef]
    t_bytes: list[int]
    t_prod: list[int]  # op index
    t_users: list[list[int]]  # op indices that read the storage (through views too) or view it
    t_pinned: list[bool]  # never evicted: a graph output, or a storage the Swap rules cannot move
    t_kept: list[bool]
    op_in: list[list[int]]  # tensors an op reads
    op_out: list[list[int]]  # tensors an op produces
    resident: int  # bytes of the inputs and weights (on the device for the whole step)
    copy_time: list[float]  # one-way seconds to copy each tensor
    duplex: float
    async_copies: bool
    op_view: list[bool] = field(default_factory=list)  # an op that only makes views (no bytes of its own)

    @classmethod
    def from_graph(cls, g: Graph, cost: CostModel, order: Sequence[int] | None = None) -> SwapProblem:
        """The problem of ``g`` with its ops in ``order`` (default: the traced order), which is the
        GA's first schedule and the op indices' order."""
        from .baselines import TracedOrder

        order = list(order) if order is not None else TracedOrder().order(g)
        index = {v: i for i, v in enumerate(order)}
        time = [cost.node_time(g, g.nodes[v]) for v in order]
        preds = [[index[p] for p in g.preds(v) if p in index] for v in order]
        table = storage_table(g)
        resident = 0
        t_ref: list[TRef] = []
        t_bytes: list[int] = []
        t_prod: list[int] = []
        t_users: list[list[int]] = []
        t_pinned: list[bool] = []
        t_kept: list[bool] = []
        op_in: list[list[int]] = [[] for _ in order]
        op_out: list[list[int]] = [[] for _ in order]
        copy_time: list[float] = []
        for s in table.storages:
            how = counted(s, False, True)
            if how == "resident":
                resident += s.nbytes
                continue
            if how != "live" or s.nbytes <= 0 or s.scratch or s.placeholder:
                continue
            k = len(t_ref)
            users = sorted({index[m] for m in s.members if m in index})
            ok = swappable(g, s.root) and not s.kept and all(
                g.nodes[m].kind == NodeKind.OP and not g.nodes[m].op.startswith("aten.as_strided")
                for m in s.members)
            t_ref.append(s.root)
            t_bytes.append(int(s.nbytes))
            t_prod.append(index[s.producer])
            t_users.append(users)
            t_pinned.append(not ok)
            t_kept.append(s.kept)
            op_out[index[s.producer]].append(k)
            for u in users:
                op_in[u].append(k)
            copy_time.append(cost.transfer_time(g.tensor(s.root).logical_bytes))
        dev = getattr(cost, "device", None)
        op_view = [bool(g.nodes[v].outputs) and all(t.alias is not None for t in g.nodes[v].outputs) for v in order]
        return cls(g, order, time, preds, t_ref, t_bytes, t_prod, t_users, t_pinned, t_kept, op_in, op_out,
                   resident, copy_time, duplex_factor(dev) if dev is not None else 1.0,
                   getattr(dev, "async_copies", True), op_view)

    @property
    def n(self) -> int:
        return len(self.ops)

    def op_sizes(self) -> list[list[int]]:
        """Per op the sizes of the tensors it must hold at once (reads and writes)."""
        return [[self.t_bytes[t] for t in set(self.op_in[o]) | set(self.op_out[o])] for o in range(self.n)]

    def demand(self, sizes: Sequence[int]) -> np.ndarray:
        """(ops x sizes) per op of the traced order the tensors of each size it must hold at once (reads
        and writes; the pinned ones live outside the pool: :meth:`pinned_bytes`).  Cached per ``sizes``."""
        key = tuple(sizes)
        cached = getattr(self, "_demand", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        index = {b: i for i, b in enumerate(sizes)}
        d = np.zeros((max(self.n, 1), len(sizes)), dtype=np.int32)
        for o in range(self.n):
            for t in set(self.op_in[o]) | set(self.op_out[o]):
                if not self.t_pinned[t]:
                    d[o, index[self.t_bytes[t]]] += 1
        self._demand = (key, d)
        return d

    def class_floor(self, sizes: Sequence[int], cls: Sequence[int]) -> list[int]:
        """Per class the least objects with which the traced order can run: the most tensors of the
        class one op needs at once (:meth:`demand`), at least 1."""
        d = self.demand(sizes)
        k = max(cls) + 1 if len(cls) else 0
        cols = np.zeros((d.shape[0], k), dtype=np.int64)
        np.add.at(cols.T, np.asarray(cls), d.T)
        return [max(1, int(x)) for x in cols.max(axis=0)] if k else []

    def coarsen(self, sizes: Sequence[int], capacity: int) -> list[int] | None:
        """A class map whose least pool fits ``capacity``: from one class per size, merge the two
        neighbouring classes whose merge saves the most floor bytes until it fits (None if one class
        does not fit either)."""
        d = self.demand(sizes).astype(np.int64)
        cols = [d[:, i] for i in range(len(sizes))]
        top = list(sizes)  # object size of each class
        members = [[i] for i in range(len(sizes))]
        floor = [max(1, int(c.max())) for c in cols]
        while sum(f * b for f, b in zip(floor, top, strict=True)) > capacity:
            if len(cols) == 1:
                return None
            best = None
            for c in range(len(cols) - 1):
                merged = max(1, int((cols[c] + cols[c + 1]).max()))
                save = floor[c] * top[c] + floor[c + 1] * top[c + 1] - merged * top[c + 1]
                if best is None or save > best[0]:
                    best = (save, c, merged)
            _, c, merged = best
            cols[c:c + 2] = [cols[c] + cols[c + 1]]
            floor[c:c + 2] = [merged]
            top[c:c + 2] = [top[c + 1]]
            members[c:c + 2] = [members[c] + members[c + 1]]
        out = [0] * len(sizes)
        for k, ms in enumerate(members):
            for i in ms:
                out[i] = k
        return out

    def live_counts(self, sizes: Sequence[int]) -> list[int]:
        """Per size the most tensors of that size alive at once in the traced order (a pool with these
        counts swaps nothing)."""
        index = {b: i for i, b in enumerate(sizes)}
        live = [0] * len(sizes)
        most = [0] * len(sizes)
        die: dict[int, list[int]] = {}
        for o in range(self.n):
            for t in self.op_out[o]:
                if self.t_pinned[t]:
                    continue
                k = index[self.t_bytes[t]]
                live[k] += 1
                most[k] = max(most[k], live[k])
                die.setdefault(self.n if self.t_kept[t] else max([o, *self.t_users[t]]), []).append(k)
            for k in die.pop(o, ()):
                live[k] -= 1
        return most

    def pool_sizes(self) -> tuple[int, ...]:
        """TS: the sorted distinct sizes of the tensors the pool holds (all but the pinned ones)."""
        return tuple(sorted({b for b, pin in zip(self.t_bytes, self.t_pinned, strict=True) if b > 0 and not pin}))

    def pinned_bytes(self) -> int:
        """Bytes of the tensors never evicted (graph outputs, storages the Swap rules cannot move): they
        live next to the pool, each in memory of its own size, and are all alive at the end (outputs)
        or counted as if they were."""
        return sum(b for b, pin in zip(self.t_bytes, self.t_pinned, strict=True) if pin)

    def pool_capacity(self, limit: int) -> int:
        """What a memory limit leaves to the pool: less the residents and the pinned tensors."""
        return int(limit) - self.resident - self.pinned_bytes()

    def pool_floor(self) -> int:
        """The least memory (residents and pinned tensors included) of a pool with one class per
        tensor size in which the traced order can run (coarser classes may need less: :meth:`coarsen`)."""
        sizes = self.pool_sizes()
        cls = list(range(len(sizes)))
        return self.resident + self.pinned_bytes() + sum(
            n * b for n, b in zip(self.class_floor(sizes, cls), sizes, strict=True))

    def working_set(self) -> int:
        """The largest bytes one op must hold at once, plus what is never evicted while it runs
        (resident weights; graph outputs already made): below it no plan exists."""
        best = 0
        pinned_live = 0
        # graph outputs and pinned storages stay from their producer to the end (or their last use)
        ends = [max([self.t_prod[t], *self.t_users[t]]) if not self.t_kept[t] else self.n for t in range(len(self.t_ref))]
        born: list[list[int]] = [[] for _ in range(self.n + 1)]
        die: list[list[int]] = [[] for _ in range(self.n + 1)]
        for t in range(len(self.t_ref)):
            if self.t_pinned[t]:
                born[self.t_prod[t]].append(t)
                die[min(ends[t], self.n)].append(t)
        for o in range(self.n):
            for t in born[o]:
                pinned_live += self.t_bytes[t]
            own = sum(self.t_bytes[t] for t in set(self.op_in[o]) | set(self.op_out[o]) if not self.t_pinned[t])
            best = max(best, own + pinned_live)
            for t in die[o]:
                pinned_live -= self.t_bytes[t]
        return self.resident + best

    def check_limit(self, limit: int) -> None:
        """InfeasibleLimit (one line) if ``limit`` is below :meth:`working_set`."""
        need = self.working_set()
        if limit < need:
            from ..fmt import format_bytes

            raise InfeasibleLimit(f"memory limit {format_bytes(limit)} is below what any plan needs: "
                                  f"{format_bytes(need)} (the largest op's working set, with the weights and "
                                  f"the tensors that cannot be swapped)")


@dataclass(frozen=True)
class Stay:
    """One stay of a pool tensor in one object of its size class (``plan_swaps(..., stays=True)``):
    from the op that makes it (or the swap-in that brings it back) to its last use, its swap-out, or
    its drop.  Times are the plan's three-stream seconds: the object is taken when the op or the
    swap-in starts and free when the last use or the swap-out copy ends."""

    tensor: int  # index into the problem's tensors
    cls: int  # size class
    obj: int  # object of the class (0 .. CNT - 1)
    first: int  # schedule position of the op that makes it, or of the op its swap-in is for
    last: int  # schedule position of the op after which it leaves (its last use before leaving)
    start: float  # seconds
    end: float
    loaded: bool  # brought back by a swap-in (else made on the device)
    until: str  # "dead" (no use left), "out" (copied to host) or "dropped" (its host copy is valid)


@dataclass
class SwapPlan:
    """The planner's decisions and their three-stream simulation."""

    feasible: bool
    time: float
    schedule: list[int]  # op indices
    program: list[tuple[str, int]] = field(default_factory=list)  # ("op", pos) | ("out", store) | ("in", load)
    stores: list[tuple[int, int]] = field(default_factory=list)  # (tensor, after position)
    drops: list[tuple[int, int]] = field(default_factory=list)  # clean evictions: (tensor, after position)
    loads: list[tuple[int, int]] = field(default_factory=list)  # (tensor, consumer position)
    evictions: list[tuple[int, int, int]] = field(default_factory=list)  # (tensor, after position, store or -1)
    waits: list[tuple[int, int]] = field(default_factory=list)  # (program index, store it waits for)
    times: list[tuple[float, float]] = field(default_factory=list)  # (start, end) per program entry
    compute: float = 0.0
    bytes_out: int = 0
    bytes_in: int = 0
    pool_bytes: int = 0  # the pool and the pinned tensors next to it (on demand: the byte pool)
    why: str = ""
    stays: list[Stay] = field(default_factory=list)  # which tensor in which object when (``stays=True``)

    def summary(self) -> dict:
        return {"time": self.time, "compute": self.compute, "swap_outs": len(self.stores),
                "clean_drops": len(self.drops), "swap_ins": len(self.loads), "bytes_out": self.bytes_out,
                "bytes_in": self.bytes_in, "pool_bytes": self.pool_bytes}


def _walk(p: SwapProblem, schedule: Sequence[int]) -> tuple[list[int], list[int], list[float]]:
    """The schedule as a list, each op's position in it, and the compute time before each position
    (``cum[s]``: ops 0 .. s-1; ``cum[n]``: all of them)."""
    sched = list(schedule)
    pos = [0] * len(sched)
    cum = [0.0] * (len(sched) + 1)
    for s, o in enumerate(sched):
        pos[o] = s
        cum[s + 1] = cum[s] + p.time[o]
    return sched, pos, cum


def plan_swaps(p: SwapProblem, schedule: Sequence[int], alloc: Allocation | None = None, *,
               capacity: int | None = None, stays: bool = False) -> SwapPlan:
    """SwapAdvisor's planner on ``schedule`` (op indices) with pool ``alloc``, or (``alloc`` None)
    on-demand LRU swapping over a byte pool of ``capacity`` bytes.  The planner gives every pool
    tensor an object of its class (a free one: the one free longest, else the victim's); with
    ``stays`` the plan records them (``SwapPlan.stays``)."""
    sched, pos, cum = _walk(p, schedule)
    n = len(sched)
    nt = len(p.t_ref)
    is_view = p.op_view or [False] * n
    uses = [sorted(pos[u] for u in p.t_users[t]) for t in range(nt)]
    ruses = [[s for s in u if not is_view[sched[s]]] for u in uses]  # uses that need the bytes on the device
    ptr = [0] * nt
    rptr = [0] * nt
    on_demand = alloc is None
    loc = [0] * nt  # 0 not made, 1 device, 2 host, 3 dead
    has_copy = [False] * nt
    last = [-1] * nt
    stores: list[tuple[int, int]] = []
    drops: list[tuple[int, int]] = []
    loads: list[tuple[int, int, int, int]] = []  # tensor, consumer, prerequisite position, release store
    evictions: list[tuple[int, int, int]] = []
    store_of: dict[int, int] = {}
    out_waits: dict[int, list[int]] = {}  # position -> stores whose memory its outputs take
    plan = SwapPlan(False, math.inf, sched)
    if on_demand:
        free_bytes = int(capacity if capacity is not None else 0)
        lru: OrderedDict[int, None] = OrderedDict()
    else:
        cls_of = [-1 if pin else alloc.class_of(b) for b, pin in zip(p.t_bytes, p.t_pinned, strict=True)]
        # free objects of each class as (release pos, store, object); the first taken is the last.  No
        # class needs more objects than it has tensors (a count can reach capacity / a 4-byte object)
        members = [0] * len(alloc.cnt)
        for c in cls_of:
            if c >= 0:
                members[c] += 1
        free: list[list[tuple[int, int, int]]] = [[(-1, -1, j) for j in reversed(range(min(c, m)))]
                                                  for c, m in zip(alloc.cnt, members, strict=True)]
        residents: list[set[int]] = [set() for _ in alloc.cnt]
    obj_of: dict[int, int] = {}  # pool tensor on the device -> its object
    opened: dict[int, tuple[int, int, tuple[str, int]]] = {}  # tensor -> (object, first position, start entry)
    closed: list[tuple[int, int, int, int, tuple[str, int], tuple[str, int], str]] = []  # see ``_stays``

    def leave(v: int, u: int, end: tuple[str, int], until: str) -> None:
        """Close ``v``'s stay in its object (``stays``): it leaves after position ``u``."""
        if v in opened:
            o, first, begin = opened.pop(v)
            closed.append((v, o, first, u, begin, end, until))

    def evict(v: int, s: int) -> tuple[int, int]:
        """Evict ``v`` (at ``s``): the release of its memory as (position, store or -1)."""
        u = last[v]
        loc[v] = 2
        if has_copy[v]:
            drops.append((v, u))
            evictions.append((v, u, -1))
            if stays:
                leave(v, u, ("op", u), "dropped")
            return u, -1
        has_copy[v] = True
        at = s - 1 if on_demand else u
        stores.append((v, at))
        k = len(stores) - 1
        store_of[v] = k
        evictions.append((v, at, k))
        if stays:
            leave(v, u, ("out", k), "out")
        return at, k

    for s, o in enumerate(sched):
        cur = set(p.op_in[o]) | set(p.op_out[o])
        # a view of a swapped-out tensor needs no bytes: it is made on the next swap-in (``realise``)
        need = [t for t in sorted(set(p.op_in[o])) if loc[t] == 2 and not is_view[o]] + \
            [t for t in p.op_out[o] if loc[t] == 0]
        for t in need:
            size = p.t_bytes[t]
            if on_demand:
                rel = (s - 1, -1)
                while free_bytes < size:
                    victim = next((v for v in lru if v not in cur and not p.t_pinned[v]
                                   and rptr[v] < len(ruses[v])), None)
                    if victim is None:
                        plan.why = f"no tensor to evict at step {s}"
                        return plan
                    del lru[victim]
                    at, k = evict(victim, s)
                    if k >= 0:  # the swap-out stream is FIFO: waiting for the last copy waits for all
                        rel = (s - 1, k)
                    free_bytes += p.t_bytes[victim]
                free_bytes -= size
                lru[t] = None
            elif p.t_pinned[t]:  # next to the pool, never evicted
                rel = (-1, -1)
            else:
                c = cls_of[t]
                if free[c]:
                    rel = free[c].pop()
                else:
                    best = None
                    hide = p.copy_time[t] if loc[t] == 2 else 0.0  # a swap-in to hide behind compute too
                    for v in residents[c]:
                        if v in cur or p.t_pinned[v] or rptr[v] >= len(ruses[v]):
                            continue  # (a tensor only viewed from now on dies at its last view)
                        nu = ruses[v][rptr[v]]
                        ok = cum[s] - cum[last[v] + 1] >= (0.0 if has_copy[v] else p.copy_time[v]) + hide
                        key = (ok, nu, -v)
                        if best is None or key > best[0]:
                            best = (key, v)
                    if best is None:
                        plan.why = f"no object of class {c} to evict at step {s}"
                        return plan
                    v = best[1]
                    residents[c].discard(v)
                    rel = (*evict(v, s), obj_of.pop(v))
                residents[c].add(t)
                obj_of[t] = rel[2]
                if stays:
                    opened[t] = (rel[2], s, ("in", len(loads)) if loc[t] == 2 else ("op", s))
            if loc[t] == 2:
                prereq = max(rel[0], stores[store_of[t]][1]) if t in store_of else rel[0]
                loads.append((t, s, prereq, rel[1]))
            elif rel[1] >= 0:  # an output written where a swapped-out tensor was: the op waits for its copy
                out_waits.setdefault(s, []).append(rel[1])
            loc[t] = 1
        for t in cur:
            while ptr[t] < len(uses[t]) and uses[t][ptr[t]] <= s:
                ptr[t] += 1
            while rptr[t] < len(ruses[t]) and ruses[t][rptr[t]] <= s:
                rptr[t] += 1
            if loc[t] != 1:  # viewed while swapped out
                if ptr[t] >= len(uses[t]) and not p.t_kept[t]:
                    loc[t] = 3
                continue
            last[t] = s
            if on_demand and t in lru:
                lru.move_to_end(t)
            if ptr[t] >= len(uses[t]) and not p.t_kept[t]:
                loc[t] = 3
                if on_demand:
                    free_bytes += p.t_bytes[t]
                    lru.pop(t, None)
                elif not p.t_pinned[t]:
                    residents[cls_of[t]].discard(t)
                    free[cls_of[t]].insert(0, (s, -1, obj_of.pop(t)))
                    if stays:
                        leave(t, s, ("op", s), "dead")
    # ---- the program and its three-stream time --------------------------------------------------
    after: list[list[int]] = [[] for _ in range(n + 1)]
    for k, (_t, at) in enumerate(stores):
        after[at + 1].append(k)  # stores issued right after position ``at``
    order = sorted(range(len(loads)), key=lambda i: (loads[i][1], i))
    ld_time = [0.0] * len(loads)
    st_end = [0.0] * len(stores)
    st_emitted = [False] * len(stores)
    tc = ti = to = 0.0
    dup = p.duplex
    program: list[tuple[str, int]] = []
    waits: list[tuple[int, int]] = []  # (program index, store): the compute stream waits for the copy first
    times: list[tuple[float, float]] = []  # (start, end) of each program entry
    loaded_end: dict[int, float] = {}
    nxt = 0
    for s, o in enumerate(sched):
        for k in after[s]:
            t = stores[k][0]
            dur = p.copy_time[t]
            st = max(to, tc)
            if ti > st:
                dur *= dup
            to = st + dur
            st_end[k] = to
            st_emitted[k] = True
            if not p.async_copies:
                tc = to
            program.append(("out", k))
            times.append((st, to))
        while nxt < len(order):
            i = order[nxt]
            t, cons, prereq, rel = loads[i]
            forced = cons == s
            if not forced and (on_demand or prereq >= s or (rel >= 0 and (not st_emitted[rel] or st_end[rel] > tc))):
                break
            if rel >= 0 and st_end[rel] > tc:  # forced before the memory it fills is free: wait for it
                tc = st_end[rel]
                waits.append((len(program), rel))
            dur = p.copy_time[t]
            st = max(st_end[store_of[t]], ti, tc)
            if to > st:
                dur *= dup
            ti = st + dur
            ld_time[i] = ti
            loaded_end[t] = ti
            if not p.async_copies:
                tc = ti
            program.append(("in", i))
            times.append((st, ti))
            nxt += 1
        for k in out_waits.get(s, ()):
            if st_end[k] > tc:
                tc = st_end[k]
                waits.append((len(program), k))
        # a view waits for nothing: one of a tensor being swapped in is made right before its reader
        dep = 0.0 if is_view[o] else max((loaded_end.get(t, 0.0) for t in p.op_in[o]), default=0.0)
        times.append((max(tc, dep), max(tc, dep) + p.time[o]))
        tc = max(tc, dep) + p.time[o]
        program.append(("op", s))
        if not is_view[o]:
            for t in set(p.op_out[o]) | set(p.op_in[o]):
                loaded_end.pop(t, None)
    for k in after[n]:
        t = stores[k][0]
        dur = p.copy_time[t] * (dup if ti > max(to, tc) else 1.0)
        times.append((max(to, tc), max(to, tc) + dur))
        to = max(to, tc) + dur
        program.append(("out", k))
    plan.feasible = True
    plan.time = max(tc, ti, to)
    plan.program = program
    plan.waits = waits
    plan.times = times
    plan.stores = stores
    plan.drops = drops
    plan.loads = [(t, c) for t, c, _, _ in loads]
    plan.evictions = evictions
    plan.compute = cum[n]
    plan.bytes_out = sum(p.t_bytes[t] for t, _ in stores)
    plan.bytes_in = sum(p.t_bytes[t] for t, _, _, _ in loads)
    plan.pool_bytes = alloc.pool_bytes + p.pinned_bytes() if alloc is not None else int(capacity or 0)
    if stays and alloc is not None:
        for v in list(opened):  # still on the device at the end of the step (none in a dataflow graph)
            leave(v, n - 1, ("op", n - 1), "dead")
        plan.stays = _stays(plan, closed, cls_of)
    return plan


def swap_bound(p: SwapProblem, schedule: Sequence[int], limit: int) -> float:
    """A lower bound on the iteration time of *any* swap plan of ``schedule`` within ``limit`` bytes
    (swapping only: no op runs twice).  After op k the device holds the residents, the never-evicted
    tensors then alive and at most the rest of ``limit`` of the tensors that a later op reads; the
    other bytes E_k of those were copied out before op k ended and are copied in after it, each way
    at the fastest copy rate of the problem's tensors::

        T >= max over k of  max(compute up to k, E_k / B) + max(compute after k, E_k / B)

    With E_k = 0 it is the compute's sum (SwapAdvisor's ideal).  The bound holds for the pool and for
    on-demand swapping alike (a pool only holds less); ``bench/swapadvisor.py`` reports it as the
    ceiling of swapping on a workload."""
    sched, pos, cum = _walk(p, schedule)
    n = len(sched)
    rates = [c / b for c, b in zip(p.copy_time, p.t_bytes, strict=True) if b > 0]
    rate = min(rates, default=0.0)
    # per position the change of the later-read pool bytes and of the never-evicted bytes alive
    d_later = [0] * (n + 1)
    d_pinned = [0] * (n + 1)
    is_view = p.op_view or [False] * n
    for t, b in enumerate(p.t_bytes):
        born = pos[p.t_prod[t]]
        if p.t_pinned[t]:
            end = n if p.t_kept[t] else max([born, *(pos[u] for u in p.t_users[t])])
            d_pinned[born] += b
            d_pinned[min(end, n - 1) + 1] -= b
            continue
        reads = [pos[u] for u in p.t_users[t] if not is_view[u]]
        last = max(reads, default=born)
        if last > born:  # read after op ``born``..``last - 1`` ends
            d_later[born] += b
            d_later[last] -= b
    later = pinned = 0
    best = cum[n]
    for k in range(n):
        later += d_later[k]
        pinned += d_pinned[k]
        e = max(0, later - (int(limit) - p.resident - pinned)) * rate
        best = max(best, max(cum[k + 1], e) + max(cum[n] - cum[k + 1], e))
    return best


def _stays(plan: SwapPlan, closed: Sequence[tuple], cls_of: Sequence[int]) -> list[Stay]:
    """The planner's closed stays -- (tensor, object, first position, last position, start entry, end
    entry, how it left), entries of ``plan.program`` -- timed with the program's times, by class,
    object and start."""
    index = {e: i for i, e in enumerate(plan.program)}
    out = [Stay(t, cls_of[t], o, first, last, plan.times[index[begin]][0], plan.times[index[end]][1],
                begin[0] == "in", until)
           for t, o, first, last, begin, end, until in closed]
    return sorted(out, key=lambda x: (x.cls, x.obj, x.start, x.end, x.tensor))


def host_stays(plan: SwapPlan) -> list[tuple[int, int, float, float]]:
    """(tensor, class, start, end) of each time a pool tensor is away from the device: from the end of
    its swap-out copy (or its drop) to the start of the swap-in that brings it back."""
    by: dict[int, list[Stay]] = {}
    for x in plan.stays:
        by.setdefault(x.tensor, []).append(x)
    out = []
    for t, xs in by.items():
        xs.sort(key=lambda x: (x.start, x.end))
        for a, b in zip(xs, xs[1:], strict=False):
            if a.until != "dead" and b.loaded and b.start > a.end:
                out.append((t, a.cls, a.end, b.start))
    return sorted(out, key=lambda h: (h[1], h[2], h[3], h[0]))


def _late_application(g: Graph, ref: TRef, split: float, pos: dict[int, float]) -> Application:
    """``SwapLate`` of ``ref`` for the readers of its storage after position ``split``: they read one
    LOAD; the views made before ``split`` that they read through are made again on it."""
    readers, views = storage_readers(g, ref)
    late = sorted((r for r in readers if pos[r] > split), key=lambda r: (pos[r], r))
    remade: set[int] = set()
    for b in late:
        for x in g.preds(b):
            while x in views and x not in remade and pos[x] <= split:
                remade.add(x)
                x = views[x]
    return Application(SwapLate.name, (ref.node, ref.index, len(late), *late,
                                       *sorted(remade, key=lambda r: (pos[r], r))))


def realise(p: SwapProblem, plan: SwapPlan
            ) -> tuple[list[Application], Graph, list[int], list[tuple[int, int]]]:
    """The plan as applications of our own rules on the imported graph (``SwapLate``: one STORE per
    swapped tensor, one LOAD per swap-in, the views its readers read through made again on it), the
    transformed graph, and its schedule: the program of the planner, each LOAD's re-made views right
    before the op that first reads the LOAD; and its waits: (node, STORE) pairs, the compute stream
    waiting for the copy before the node (``simulate(waits=...)``)."""
    g = p.g.copy()
    rule = SwapLate()
    pos: dict[int, float] = {p.ops[o]: float(s) for s, o in enumerate(plan.schedule)}
    by_tensor: dict[int, list[tuple[int, int]]] = {}  # tensor -> [(after position, consumer position)]
    loads_of: dict[int, list[int]] = {}
    for i, (t, _c) in enumerate(plan.loads):
        loads_of.setdefault(t, []).append(i)
    load_node: dict[int, int] = {}
    store_node: dict[int, int] = {}
    views_before: dict[int, list[int]] = {}  # op position -> re-made views to run right before it
    later: dict[int, list[int]] = {}  # op position -> views of a swapped-out tensor moved right before it
    moved: set[int] = set()
    apps: list[Application] = []
    for t, at, _k in plan.evictions:
        by_tensor.setdefault(t, []).append((at, _k))
    for t in sorted(by_tensor):
        cur = p.t_ref[t]
        for (at, k), li in zip(by_tensor[t], loads_of.get(t, []), strict=False):
            app = _late_application(g, cur, at, pos)
            before = set(g.nodes)
            rule.apply(g, app)
            apps.append(app)
            new = sorted(set(g.nodes) - before)
            cons = plan.loads[li][1]
            late_views = sorted((v for v in app.params[3:3 + app.params[2]] if pos[v] < cons and v not in moved),
                                key=pos.__getitem__)
            for rank, v in enumerate(late_views):  # views made while it was out: right before the reader
                moved.add(v)
                later.setdefault(cons, []).append(v)
                pos[v] = cons - 0.2 + 1e-6 * rank  # after the load and its re-made views
            for v in new:
                kind = g.nodes[v].kind
                if kind == NodeKind.LOAD:
                    load_node[li] = v
                    pos[v] = cons - 0.5
                    cur = TRef(v, 0)
                elif kind == NodeKind.STORE:
                    store_node[k] = v
                    pos[v] = at + 0.5
                else:
                    pos[v] = cons - 0.25
                    views_before.setdefault(cons, []).append(v)
    order: list[int] = []
    node_at: list[int] = []
    for kind, i in plan.program:
        if kind == "op":
            order.extend(views_before.get(i, ()))
            order.extend(sorted(later.get(i, ()), key=pos.__getitem__))
            v = p.ops[plan.schedule[i]]
            if v not in moved:
                order.append(v)
        elif kind == "out":
            order.append(store_node[i])
        else:
            order.append(load_node[i])
        node_at.append(order[-1])
    waits = [(node_at[i], store_node[k]) for i, k in plan.waits]
    return apps, g, [v for v in order if v in g.nodes], waits  # an early view nothing reads any more is erased


__all__ = ["InfeasibleLimit", "Stay", "SwapPlan", "SwapProblem", "host_stays", "plan_swaps", "realise", "swap_bound"]
