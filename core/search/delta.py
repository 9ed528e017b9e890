"""Delta evaluation of M-States: a child state costs time proportional to the change it makes.

One :class:`DeltaEvaluator` owns a working graph, its schedule and everything derived from them --
the storages (``lifetimes.storage_table``, kept per node), each storage's alive interval in the
schedule, the memory curve ``M_i``, per-op times, narrow-waist values and the WL graph hash.  To
evaluate a child it applies one rule application to the working graph through the graph's
primitives, then:

1. reschedules a window of the old schedule around the changed nodes (MAGIS Algorithm 2: the
   interval from ``get_reschedule_interval``, GraphPartition + Serenity's DP per part), on a memory
   model of the window alone: the storages the window touches, and the bytes alive across it as a
   constant (``base``).  The window is bounded by work, not by waists: on a graph without narrow
   waists (long skip connections) or for a change spread far apart, the window's ops keep the
   parent's order (added ops before their first reader) and the DP gets only ``window_cap`` of them,
   around the step where that order peaks (``_bounded_window``, ``bounded_segment``); the curve is
   then spliced from the storages the change and that segment touch (``_spliced``);
2. updates the memory curve: the intervals of the storages the change or the window touches are
   taken out of the parent's curve (what remains is constant inside the window), the window is
   re-sized, and the new intervals are added back -- a few vector operations on one array, no walk
   over the graph;
3. updates the latency by the times of the ops added, removed or re-wired (op times are cached per
   node; the cost model caches them per op signature), and the WL hash from the changed nodes;
4. takes the application back (the journal run backwards).

A state's memory is its parent, the application and the re-ordered window (``mstate.MState``).
``goto`` moves the working state to any state by undoing and replaying applications along the tree.
The narrow-waist values that pick the window are those of the imported graph (a node that a rule
added takes its origin's value): they only choose where a window ends, so they are not recomputed
per state.  Its rules default to the remat family (``transform.registry.rules_of(REMAT_FAMILY)``).  A graph with
STORE/LOAD copies is simulated in full per child, since copy timing moves frees past the window (the
cached op times and the storage index with ``simulate``'s timing, ``bench/swap_children.py``), and a
swap is placed rather than rescheduled (``_swap_window``: its STORE right after the tensor's
producer, its LOAD just in time for its reader).  Every child is evaluated exactly as ``simulate``
would, which the tests and ``bench/states.py`` check.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..analysis.lifetimes import counted, fission_scratch
from ..analysis.narrow_waist import narrow_waist
from ..cost.model import AnalyticCost, CostModel
from ..ir.graph import EditLog, Graph, GraphError, NodeKind, TensorKind, TRef
from ..metrics import HasMetrics, metrics
from ..schedule.footprint import MemoryModel
from ..schedule.incremental import MARGIN, SEARCH, get_reschedule_interval, schedule_parts
from ..schedule.placement import hoist_loads, load_slot
from ..schedule.units import UnitProblem
from ..simulate import COPY_KINDS, async_copies, copies_done, simulate, stream_times
from ..transform.registry import REMAT_FAMILY, rules_of
from ..transform.rule import Application, Rule, RuleNotApplicable, Where
from ..transform.swap import Reissue
from .mstate import MState
from .wl_hash import WLHash

NW_NEW = 0  # narrow-waist value of a node the imported graph did not have (an ideal window edge)
REISSUE_ROUNDS = 4  # Reissue's hoists: each moves a LOAD whose reader still waited earlier by the wait
WINDOW_CAP = 96  # ops a child's window DP schedules at most: a few milliseconds (bench/windows.py)


class _Storage:
    """One storage of the working graph (the fields ``lifetimes.counted`` reads, kept up to date)."""

    __slots__ = ("root", "nbytes", "kind", "device", "producer", "placeholder", "members", "copies",
                 "kept", "scratch")

    def __init__(self, root: TRef, nbytes: int, kind: str, device: str, producer: int, placeholder: bool,
                 scratch: bool = False) -> None:
        self.root, self.nbytes, self.kind, self.device = root, nbytes, kind, device
        self.producer, self.placeholder, self.scratch = producer, placeholder, scratch
        self.members: set[int] = set()
        self.copies: set[int] = set()
        self.kept = False


class StorageIndex:
    """``lifetimes.storage_table`` maintained per node: each node's owned storages and the storages
    it is a member of, so an edit updates only the storages of the nodes it touched."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.st: dict[TRef, _Storage] = {}
        self.owns: dict[int, tuple[TRef, ...]] = {}
        self.member_of: dict[int, tuple[TRef, ...]] = {}
        self.kind_of: dict[int, NodeKind] = {}
        self.copy_nodes = 0
        for nid in g.nodes:
            self._own(nid)
        for nid in g.nodes:
            self._join(nid)
        self.kept_roots: set[TRef] = set()
        self.refresh_outputs()

    def _own(self, nid: int) -> None:
        node = self.g.nodes[nid]
        is_ph = node.kind == NodeKind.PLACEHOLDER
        owns: list[TRef] = []
        for j, t in enumerate(node.outputs):
            if t.alias is None:
                ref = TRef(nid, j)
                self.st[ref] = _Storage(ref, t.nbytes, t.kind.value, t.device, nid, is_ph)
                owns.append(ref)
        if node.kind == NodeKind.FISSION:
            key = TRef(nid, -1)
            self.st[key] = _Storage(TRef(nid, 0), fission_scratch(node), TensorKind.ACTIVATION.value, "device",
                                    nid, False, scratch=True)
            owns.append(key)
        self.owns[nid] = tuple(owns)
        self.kind_of[nid] = node.kind
        self.copy_nodes += node.kind in COPY_KINDS

    def _join(self, nid: int) -> None:
        g = self.g
        node = g.nodes[nid]
        mem: set[TRef] = set()
        if node.kind != NodeKind.PLACEHOLDER:
            for j, t in enumerate(node.outputs):
                if t.alias is not None:
                    mem.add(g.storage_root(TRef(nid, j)))
            mem.update(g.storage_root(r) for r in node.inputs())
        copy = node.kind == NodeKind.STORE
        for root in mem:
            s = self.st[root]
            s.members.add(nid)
            if copy:
                s.copies.add(nid)
        self.member_of[nid] = tuple(mem)

    def _leave(self, nid: int) -> tuple[TRef, ...]:
        mem = self.member_of.pop(nid, ())
        for root in mem:
            s = self.st.get(root)
            if s is not None:
                s.members.discard(nid)
                s.copies.discard(nid)
        return mem

    def _disown(self, nid: int) -> tuple[TRef, ...]:
        owns = self.owns.pop(nid, ())
        for key in owns:
            del self.st[key]
        self.copy_nodes -= self.kind_of.pop(nid) in COPY_KINDS
        return owns

    def refresh(self, log: EditLog) -> set[TRef]:
        """Bring the index up to date after the edits of ``log`` (applied or undone): a node's
        outputs never change, so only memberships move, and storages come and go with their
        nodes.  Returns the storages whose membership or existence changed."""
        changed: set[TRef] = set()
        g = self.g
        touched = sorted(log.touched() | self._through_views(log))
        for nid in touched:
            changed.update(self._leave(nid))
            if nid not in g.nodes and nid in self.owns:
                changed.update(self._disown(nid))
        present = [nid for nid in touched if nid in g.nodes]
        for nid in present:
            if nid not in self.owns:
                self._own(nid)
                changed.update(self.owns[nid])
        for nid in present:
            self._join(nid)
            changed.update(self.member_of[nid])
        keys = {e.old[0] for e in log.edits if e.kind == "output"}
        if any(e.kind == "alias" for e in log.edits):  # outputs read through a re-pointed view move too
            moved = set(touched)
            keys.update(k for k, r in g.outputs.items() if r.node in moved)
        if keys:
            changed |= self.refresh_outputs(keys)
        return changed

    def _through_views(self, log: EditLog) -> set[int]:
        """Readers whose storage changed without an edit of their own: a view that was re-pointed
        (``alias`` edit) moves the readers of it, and of views of it, to another storage."""
        g = self.g
        out: set[int] = set()
        stack = [e.nid for e in log.edits if e.kind == "alias" and e.nid in g.nodes]
        while stack:
            v = stack.pop()
            for u in g.users(v):
                if u not in out:
                    out.add(u)
                    if any(t.alias is not None for t in g.nodes[u].outputs):
                        stack.append(u)
        return out

    def refresh_outputs(self, keys: Iterable[str] | None = None) -> set[TRef]:
        """Mark the storages the graph's outputs keep (``keys``: only those outputs were edited;
        None: all of them, from scratch).  Returns the storages whose mark flipped."""
        g = self.g
        if keys is None:
            self.out_root = {k: g.storage_root(r) for k, r in g.outputs.items()}
            self.root_count: dict[TRef, int] = {}
            for root in self.out_root.values():
                self.root_count[root] = self.root_count.get(root, 0) + 1
            new = set(self.root_count)
            flipped = new ^ self.kept_roots
            self.kept_roots = new
        else:
            count = self.root_count
            was: dict[TRef, bool] = {}
            for k in keys:
                old = self.out_root.pop(k, None)
                if old is not None:
                    was.setdefault(old, True)
                    count[old] -= 1
                    if not count[old]:
                        del count[old]
                r = g.outputs.get(k)
                if r is not None:
                    root = self.out_root[k] = g.storage_root(r)
                    was.setdefault(root, root in count)
                    count[root] = count.get(root, 0) + 1
            flipped = {root for root, before in was.items() if (root in count) != before}
            for root in flipped:
                if root in count:
                    self.kept_roots.add(root)
                else:
                    self.kept_roots.discard(root)
        for root in flipped:
            if root in self.st:
                self.st[root].kept = root in self.kept_roots
        return flipped

    def roots_of(self, nodes: Iterable[int]) -> set[TRef]:
        out: set[TRef] = set()
        for nid in nodes:
            out.update(self.owns.get(nid, ()))
            out.update(self.member_of.get(nid, ()))
        return out


@dataclass
class Child(HasMetrics):
    """The result of evaluating one application from the working state."""

    app: Application
    lo: int
    hi: int
    window: tuple[int, ...]
    metrics: dict[str, float]  # named metrics (``core.metrics``)
    hash: int
    exact_window: bool = True  # the window's DP finished (no state cap or time limit hit)
    scheduled: int = 0  # ops the window's DP was given (at most the evaluator's ``window_cap``)
    focus_peak: int | None = None  # under ``DeltaEvaluator.focused``: the curve's most over the spike's ops


class DeltaEvaluator:
    """The working state of a search and delta evaluation of its children (module docstring)."""

    def __init__(self, g: Graph, order: Sequence[int], cost: CostModel | None = None,
                 rules: dict[str, Rule] | None = None, free_inputs: bool = False, count_weights: bool = True,
                 max_states: int = 20_000, window_cap: int | None = WINDOW_CAP) -> None:
        self.g = g
        self.cost = cost or AnalyticCost()
        self.rules = dict(rules or rules_of(REMAT_FAMILY))
        self.flags = (free_inputs, count_weights)
        self.max_states = max_states
        self.window_cap = window_cap  # the most ops one child's DP reschedules (None: no bound)
        self._last_times: tuple | None = None  # (start, end, stream) of the last `_simulated` order
        self.order = list(order)
        self.pos = {v: i for i, v in enumerate(self.order)}
        self.storages = StorageIndex(g)
        self.times = {n.id: self.cost.node_time(g, n) for n in g.ops()}
        self.nw_root = narrow_waist(g)
        self.nw = [self.nw_root.get(v, NW_NEW) for v in self.order]
        self.wl = WLHash(g)
        self.intervals: dict[TRef, tuple[int, int, int]] = {}
        self.curve = self._full_curve()
        self._freed: np.ndarray | None = None  # ``_frees`` of the working state
        self._at_end: list[TRef] = []
        self.latency = self._full_latency()
        peak, host = self.peak, 0
        if self.storages.copy_nodes:  # copies free their inputs when they complete: the timed peak
            sim = simulate(g, self.order, self.cost, validate=False)
            peak, host = sim.peak, sim.memory.host_peak
        self.root = MState(None, None, 0, -1, (), metrics(peak, self.latency, host_bytes=host), self.wl.value())
        self.state = self.root
        self._stack: list[tuple[MState, EditLog, tuple[int, ...], set[TRef], dict]] = []
        self._focus: tuple[int, frozenset[int]] | None = None  # (the spike's op, the ops around it)

    # ---- from scratch ----------------------------------------------------------------------------
    def _interval(self, s: _Storage, pos, last: int, done: dict[int, int] | None = None) -> tuple[int, int, int] | None:
        """(alloc, free, bytes) of storage ``s`` as ``lifetimes.storage_events`` has it (``done``: a
        copy step -> the last step issued before the copy finishes, from ``simulate.copies_done``)."""
        how = counted(s, *self.flags)
        if how == "none":
            return None
        if how == "resident":
            return (-1, last, s.nbytes)
        a = 0 if s.placeholder else pos(s.producer)
        if s.kept:
            return (a, last, s.nbytes)
        f = done[a] if done and self.storages.kind_of[s.producer] == NodeKind.LOAD else a
        for m in s.members:
            p = pos(m)
            if done and m in s.copies:
                p = done[p]
            if p > f:
                f = p
        return (a, f, s.nbytes)

    def _full_curve(self) -> np.ndarray:
        n = len(self.order)
        d = np.zeros(n + 1, dtype=np.int64)
        self.intervals = {}
        pos = self.pos.__getitem__
        for key, s in self.storages.st.items():
            iv = self._interval(s, pos, n - 1)
            if iv is not None:
                self.intervals[key] = iv
                d[max(iv[0], 0)] += iv[2]
                d[iv[1] + 1] -= iv[2]
        return np.cumsum(d)[:n]

    def _full_latency(self) -> float:
        if self.storages.copy_nodes:
            return simulate(self.g, self.order, self.cost, validate=False).latency
        return float(sum(self.times[v] for v in self.order))

    @property
    def peak(self) -> int:
        return int(self.curve.max()) if len(self.curve) else 0

    def hotspots(self) -> list[TRef]:
        """Storages alive at a peak step of the working schedule (largest first): MAGIS's H."""
        if not len(self.curve):
            return []
        return self.hotspots_at(np.flatnonzero(self.curve == self.curve.max()))

    def hotspots_at(self, steps: int | Sequence[int]) -> list[TRef]:
        """Storages alive at any of ``steps`` (positions of the working schedule), largest first."""
        peaks = np.unique(np.atleast_1d(np.asarray(steps, dtype=np.int64)))
        if not len(peaks):
            return []
        keys = list(self.intervals)
        iv = np.array([self.intervals[k] for k in keys], dtype=np.int64).reshape(-1, 3)
        first = np.searchsorted(peaks, iv[:, 0], side="left")
        alive = (first < len(peaks)) & (peaks[np.minimum(first, len(peaks) - 1)] <= iv[:, 1]) & (iv[:, 2] > 0)
        hot = [(int(iv[i, 2]), keys[i]) for i in np.flatnonzero(alive)]
        return [k for _, k in sorted(hot, key=lambda x: (-x[0], x[1]))]

    def where(self) -> Where:
        """The working schedule as rules that match by liveness see it (positions, peak steps);
        under ``focused``, the spike's step is the one peak."""
        if self._focus is not None:
            return Where(self.pos, (self.pos[self._focus[0]],))
        peaks = np.flatnonzero(self.curve == self.curve.max()) if len(self.curve) else ()
        return Where(self.pos, tuple(int(p) for p in peaks))

    @contextmanager
    def focused(self, step: int, width: int):
        """Evaluate children against one spike of the working curve -- step ``step``, a local
        maximum that need not be the peak: rules match and swaps place their LOADs as if it were
        the one peak step, and each child's ``focus_peak`` is the most its curve holds at the ops of
        positions ``step - width .. step + width`` (wherever the child's schedule puts them).  The
        working state must not change inside the block."""
        if self._focus is not None:
            raise RuntimeError("already focused")
        lo, hi = max(0, step - width), min(len(self.order), step + width + 1)
        self._focus = (self.order[step], frozenset(self.order[lo:hi]))
        try:
            yield
        finally:
            self._focus = None

    def _focus_peak(self, order: Sequence[int], curve: np.ndarray) -> int | None:
        """The most ``curve`` (over ``order``) holds at the focused ops, or None when not focused."""
        if self._focus is None:
            return None
        ops = self._focus[1]
        at = [i for i, v in enumerate(order) if v in ops]
        return int(curve[at].max()) if at else 0

    def applications(self, hot: Iterable[TRef] | None = None) -> list[Application]:
        """Every rule's applications on the working graph (tensor rules on the hot-spots)."""
        hot = [k for k in (self.hotspots() if hot is None else hot) if k.index >= 0]
        where = self.where()
        return [a for r in self.rules.values() for a in r.match(self.g, hot, where)]

    # ---- one transition --------------------------------------------------------------------------
    def _apply(self, app: Application) -> tuple[EditLog, set[TRef], dict]:
        log = self.rules[app.rule].apply(self.g, app)
        changed = self.storages.refresh(log)
        try:
            saved = self.wl.update(log.touched())
        except GraphError as e:  # the edit made a cycle: the rewrite does not apply (OCGGS section 2)
            self.rules[app.rule].inverse(self.g, log)
            self.storages.refresh(log)
            raise RuleNotApplicable(f"{app}: {e}") from None
        return log, changed, saved

    def _undo(self, app: Application, log: EditLog, saved: dict) -> None:
        self.rules[app.rule].inverse(self.g, log)
        self.storages.refresh(log)
        self.wl.restore(saved)

    def _region(self, log: EditLog) -> tuple[int, int, list[int]]:
        """(lo, hi): positions in the working schedule of the nodes the change touched (removed or
        re-wired) and of the readers of the ops it added; and the added ops.  Inputs of added ops
        only have to run before the window, which ``_window`` checks."""
        g, pos = self.g, self.pos
        near: set[int] = set()
        added: list[int] = []
        for v in log.touched():
            if v in pos:
                near.add(v)
            elif v in g.nodes and g.nodes[v].kind != NodeKind.PLACEHOLDER:
                added.append(v)
                near.update(g.users(v))
        ps = [pos[v] for v in near if v in pos]
        if not ps:
            return 0, 0, sorted(added)
        return min(ps), max(ps), sorted(added)

    def _swap_window(self, lo: int, hi: int, added: list[int]) -> tuple[int, int, list[int]] | None:
        """A swap placed in the schedule as it stands (no rescheduling between): each added STORE
        right after the tensor's producer; each added LOAD just in time (``placement.load_slot``) --
        the latest position before its first reader whose compute time until the reader covers the
        transfer, but not before the last peak step ahead of the reader (the tensor is off the
        device there) or its STORE.  A rescheduled window around the reader would put the STORE
        next to the LOAD, which keeps the tensor on the device across the peak and stalls compute
        for both copies."""
        g, pos, order = self.g, self.pos, self.order
        peaks = self.where().peaks  # ascending
        L, R = lo, hi

        place: dict[int, float] = {}
        stored: dict[int, int] = {}  # an added STORE -> the position of its producer
        for v in added:
            node = g.nodes[v]
            if node.kind == NodeKind.STORE:
                p = node.inputs()[0].node
                if p in pos:
                    stored[v] = pos[p]
                    place[v] = pos[p] + 0.25
                    L = min(L, pos[p])
        for v in added:
            node = g.nodes[v]
            if node.kind != NodeKind.LOAD:
                continue
            at = [pos[u] for u in g.users(v) if u in pos]
            b = min(at) if at else len(order)  # a LOAD of a graph output: for the end of the step
            src = node.inputs()[0].node
            floor = stored.get(src, pos.get(src, -1)) + 1
            k = bisect.bisect_left(peaks, b) - 1
            if k >= 0:
                floor = max(floor, peaks[k] + 1)
            q = load_slot(b, self.cost.transfer_time(node.outputs[0].nbytes), floor, step_time=self._step_time)
            place[v] = q - 0.5
            L, R = min(L, q), max(R, min(q, len(order) - 1))
        return self._window(L, R, added, place) if place else None

    def _window(self, L: int, R: int, added: list[int],
                place: dict[int, float] | None = None) -> tuple[int, int, list[int]] | None:
        """The new graph's ops for old positions L..R plus the added ops, in a topological order
        that follows the old schedule (an added op right before its first reader in the window, or
        at ``place``: a position key); None if ops outside depend on the window the wrong way."""
        g, pos, order = self.g, self.pos, self.order
        ops = [v for v in order[L:R + 1] if v in g.nodes] + added
        inside = set(ops)
        key: dict[int, float] = {}
        for v in ops:
            if v in pos:
                key[v] = pos[v]
        fresh = set(added)
        for v in reversed(added):  # right before the first window op that reads it (through copies)
            us = [key[u] if u in fresh else key[u] - 0.5 for u in g.users(v) if u in key]
            key[v] = min(us) if us else R - 0.5
        key.update(place or {})
        indeg: dict[int, int] = {}
        for v in ops:
            k = 0
            for p in g.preds(v):
                if p in inside:
                    k += 1
                elif g.nodes[p].kind != NodeKind.PLACEHOLDER and not (p in pos and pos[p] < L):
                    return None  # reads something scheduled after the window
            indeg[v] = k
        heap = [(key[v], v) for v in ops if indeg[v] == 0]
        heapq.heapify(heap)
        out: list[int] = []
        while heap:
            _, v = heapq.heappop(heap)
            out.append(v)
            for u in g.users(v):
                if u in inside:
                    indeg[u] -= 1
                    if indeg[u] == 0:
                        heapq.heappush(heap, (key[u], u))
        return (L, R, out) if len(out) == len(ops) else None

    def _schedule_window(self, L: int, R: int, ops: list[int], affected: set[TRef],
                         bg: np.ndarray, pos: dict[int, int] | None = None) -> tuple[list[int], bool]:
        """Serenity's DP (via GraphPartition) on the window, with a memory model of the window
        alone: storages it touches, plus the bytes alive across it (constant ``bg[L]``).  ``pos``:
        the positions of the schedule the window is part of (default: the working schedule's)."""
        n = len(bg)
        base = int(bg[L]) if L < n else 0
        index = {v: i for i, v in enumerate(ops)}
        g = self.g
        pos = self.pos if pos is None else pos
        preds = [tuple(sorted(index[p] for p in g.preds(v) if p in index)) for v in ops]
        succs: list[list[int]] = [[] for _ in ops]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        size: list[int] = []
        producer: list[int] = []
        members: list[tuple[int, ...]] = []
        kept: list[bool] = []
        st = self.storages.st
        for key in affected:
            s = st.get(key)
            if s is None or s.nbytes <= 0 or counted(s, *self.flags) != "live":
                continue
            if s.producer in index:
                p = index[s.producer]
            elif s.placeholder or pos.get(s.producer, n) < L:
                p = -1
            else:
                continue
            ms = tuple(sorted(index[m] for m in s.members if m in index))
            if p < 0 and not ms:
                continue
            later = s.kept or any(m not in index and pos.get(m, -1) > R for m in s.members)
            size.append(s.nbytes)
            producer.append(p)
            members.append(ms)
            kept.append(later)
        m = MemoryModel.assemble(g, *self.flags, ops, index, preds, [tuple(x) for x in succs], size, producer,
                                 members, kept, base)
        outside = np.concatenate([bg[:L], bg[R + 1:]])
        floor = int(outside.max()) if len(outside) else -1
        P = UnitProblem(m, range(len(ops)))
        units, _, _, stats = schedule_parts(P, range(P.n_units), 0, P.live0, max_states=self.max_states,
                                            floor=floor)
        return P.emit(units), not (stats.truncated or stats.timed_out)

    def _bounded_window(self, L: int, R: int, ops: list[int], changed: set[TRef]
                        ) -> tuple[list[int], bool, np.ndarray]:
        """The window's order when it has more than ``window_cap`` ops (a graph without narrow
        waists, or a change spread far apart): the window's ops keep the order ``_window`` gave
        them (the parent's order, added ops before their first reader), and only a segment of
        ``window_cap`` of them is rescheduled by the DP -- around the step where that order peaks,
        its ends at ops of small narrow-waist value (``bounded_segment``).  The segment's memory
        model is taken from that intermediate order's curve, so the DP sees what is alive across
        it; whatever it returns is a topological order of the segment's ops, and the child's
        curve is computed from the final order, so the result is exact.  The curves come from
        ``_spliced`` (work in the storages the change or the segment touch), or where it does
        not apply from ``_transition`` over every storage of the window.  Returns (window, the DP
        finished, the child's curve)."""
        st, g = self.storages.st, self.g
        first = self._spliced(L, R, ops, changed)
        if first is None:
            affected = changed | self.storages.roots_of(ops) | self.storages.roots_of(self.order[L:R + 1])
            bg = self._background(affected)

            def splice(window: list[int], _keys: set[TRef], _seg: Iterable[int]):
                return self._transition(L, R, window, affected, bg)[::2]

            first = splice(ops, changed, ())
        else:
            def splice(window: list[int], keys: set[TRef], seg: Iterable[int]):
                return self._spliced(L, R, window, keys, seg)

        curve, newpos = first
        w, new_n = len(ops), len(first[0])
        nw_root = self.nw_root
        nws = [nw_root.get(v, nw_root.get(g.nodes[v].recompute_of or -1, NW_NEW)) for v in ops]
        i, j = bounded_segment(curve[L:L + w], nws, self.window_cap)
        seg = ops[i:j + 1]
        seg_aff = self.storages.roots_of(seg)
        d = np.zeros(new_n + 1, dtype=np.int64)
        for key in seg_aff:  # the segment's storages taken out of the intermediate curve
            s = st.get(key)
            iv = self._interval(s, newpos, new_n - 1) if s is not None else None
            if iv is not None and iv[0] >= 0:
                d[iv[0]] -= iv[2]
                d[iv[1] + 1] += iv[2]
        bg2 = curve + np.cumsum(d)[:new_n]
        here = {}
        for v in self.storages_nodes(seg_aff):
            if v in self.pos or v in g.nodes and g.nodes[v].kind != NodeKind.PLACEHOLDER:
                here[v] = newpos(v)
        new_seg, exact = self._schedule_window(L + i, L + j, seg, seg_aff, bg2, here)
        window = ops[:i] + new_seg + ops[j + 1:]
        final = splice(window, changed | seg_aff, seg)
        assert final is not None, "the segment's reordering moved an op outside it"
        return window, exact, final[0]

    def storages_nodes(self, keys: Iterable[TRef]) -> set[int]:
        """The producers and members of the storages ``keys``."""
        st = self.storages.st
        out: set[int] = set()
        for key in keys:
            s = st.get(key)
            if s is not None:
                out.add(s.producer)
                out.update(s.members)
        return out

    def _frees(self) -> np.ndarray:
        """Bytes of the working schedule's storages last alive at each step before the last one
        (residents never freed); the storages alive at the last step are listed apart, since a kept
        output is too.  From the working state's intervals only, so a child's edits leave it valid;
        computed once per working state."""
        if self._freed is None:
            n = len(self.order)
            d = np.zeros(n + 1, dtype=np.int64)
            last: list[TRef] = []
            for key, (a, f, b) in self.intervals.items():
                if a < 0:
                    continue
                if f < n - 1:
                    d[f] += b
                else:
                    last.append(key)
            self._freed, self._at_end = d, last
        return self._freed

    def _spliced(self, L: int, R: int, window: Sequence[int], keys: set[TRef], reordered: Iterable[int] = ()
                 ) -> tuple[np.ndarray, Callable[[int], int]] | None:
        """(curve, new position function) after replacing positions L..R by ``window`` when only
        the storages ``keys`` are touched by the change or by the ops ``reordered``, and the
        window's other old ops keep their old relative order.  Every other storage's interval ends
        are ops that keep that order, so its part of the curve moves with them: at an old op's new
        step it is the old step's; at a step of an added or reordered op, what was alive across
        the gap after the old op before it (``_frees``).  Work: the window's length plus the
        intervals of ``keys``.  None where this does not hold (the window reorders old ops outside
        ``reordered``, or starts the schedule)."""
        n, pos, order = len(self.order), self.pos, self.order
        if L <= 0:
            return None
        skip = set(reordered)
        w = len(window)
        src = np.empty(w, dtype=np.int64)
        old = np.zeros(w, dtype=bool)
        last = L - 1
        for k, v in enumerate(window):
            p = pos.get(v)
            if p is not None and v not in skip and order[p] == v:
                if p <= last or p > R:
                    return None
                last = p
                old[k] = True
            src[k] = last
        bg = self._background(keys)
        freed = self._frees().copy()
        intervals, st = self.intervals, self.storages.st
        for key in keys:  # the frees of the storages in ``keys`` taken out, as ``bg`` has them out
            iv = intervals.get(key)
            if iv is not None and iv[0] >= 0 and iv[1] < n - 1:
                freed[iv[1]] -= iv[2]
        if R == n - 1:  # an op may follow the old last one: what it frees, kept outputs staying
            freed[n - 1] = sum(intervals[k][2] for k in self._at_end
                               if k not in keys and k in st and not st[k].kept)
        mid = np.where(old, bg[src], bg[src] - freed[src])
        delta = w - (R - L + 1)
        new_n = n + delta
        newpos = self._newpos(L, R, window)
        d = np.zeros(new_n + 1, dtype=np.int64)
        st = self.storages.st
        for key in keys:
            s = st.get(key)
            iv = self._interval(s, newpos, new_n - 1) if s is not None else None
            if iv is not None and iv[0] >= 0:
                d[iv[0]] += iv[2]
                d[iv[1] + 1] -= iv[2]
        return np.concatenate([bg[:L], mid, bg[R + 1:]]) + np.cumsum(d)[:new_n], newpos

    def _newpos(self, L: int, R: int, window: Sequence[int]) -> Callable[[int], int]:
        """Where an op of the working schedule (or of ``window``) is once positions L..R are
        replaced by ``window``."""
        pos = self.pos
        delta = len(window) - (R - L + 1)
        wpos = {v: L + k for k, v in enumerate(window)}

        def newpos(v: int) -> int:
            p = wpos.get(v)
            if p is not None:
                return p
            p = pos[v]
            return p if p < L else p + delta

        return newpos

    def _background(self, affected: set[TRef]) -> np.ndarray:
        """The working curve without the storages in ``affected``."""
        n = len(self.order)
        d = np.zeros(n + 1, dtype=np.int64)
        for key in affected:
            iv = self.intervals.get(key)
            if iv is not None and iv[0] >= 0:
                d[iv[0]] -= iv[2]
                d[iv[1] + 1] += iv[2]
        return self.curve + np.cumsum(d)[:n]

    def _transition(self, L: int, R: int, window: Sequence[int], affected: set[TRef],
                    bg: np.ndarray | None = None
                    ) -> tuple[np.ndarray, dict[TRef, tuple[int, int, int] | None], Callable[[int], int]]:
        """The curve after replacing positions L..R by ``window`` (the storages in ``affected``
        changed; the index already reflects the new graph), the new intervals of those storages and
        the new position function."""
        n = len(self.order)
        if bg is None:
            bg = self._background(affected)
        w = len(window)
        delta = w - (R - L + 1)
        new_n = n + delta
        newpos = self._newpos(L, R, window)
        mid = np.full(w, bg[L] if L < n else 0, dtype=np.int64)
        new_bg = np.concatenate([bg[:L], mid, bg[R + 1:]])
        d2 = np.zeros(new_n + 1, dtype=np.int64)
        new_iv: dict[TRef, tuple[int, int, int] | None] = {}
        st = self.storages.st
        for key in affected:
            s = st.get(key)
            iv = self._interval(s, newpos, new_n - 1) if s is not None else None
            new_iv[key] = iv
            if iv is not None and iv[0] >= 0:
                d2[iv[0]] += iv[2]
                d2[iv[1] + 1] -= iv[2]
        return new_bg + np.cumsum(d2)[:new_n], new_iv, newpos

    # ---- children --------------------------------------------------------------------------------
    def evaluate(self, app: Application) -> Child:
        """Evaluate the child made by ``app`` from the working state (which is left unchanged)."""
        log, changed, saved = self._apply(app)
        try:
            return self._evaluate(app, log, changed)
        finally:
            self._undo(app, log, saved)

    def _widened_window(self, L: int, R: int, added: list[int]) -> tuple[int, int, list[int]]:
        """``_window`` of positions L..R, widened (by ``SEARCH`` either side, three times, then to
        the whole schedule) until the ops outside it depend on it the right way."""
        n = len(self.order)
        win = self._window(L, R, added)
        for _ in range(3):
            if win is not None:
                return win
            L, R = max(0, L - SEARCH), min(n - 1, R + SEARCH)
            win = self._window(L, R, added)
        if win is None:
            win = self._window(0, n - 1, added)
            assert win is not None, "the working graph is not acyclic"
        return win

    def _evaluate(self, app: Application, log: EditLog, changed: set[TRef]) -> Child:
        if app.rule == Reissue.name:
            return self._reissued(app)
        lo, hi, added = self._region(log)
        n = len(self.order)
        swap = self._swap_window(lo, hi, added) if self.storages.copy_nodes else None
        if swap is not None:
            return self._placed(app, *swap, self.cost.affected(self.g, log))
        L, R = get_reschedule_interval(self.nw, lo, hi) if n else (0, -1)
        L, R, ops = self._widened_window(L, R, added)
        if self.window_cap is None or len(ops) <= self.window_cap:
            affected = changed | self.storages.roots_of(ops) | self.storages.roots_of(self.order[L:R + 1])
            # the background curve (affected storages taken out) decides the window's constant part
            bg = self._background(affected)
            window, exact = self._schedule_window(L, R, ops, affected, bg)
            curve, _, _ = self._transition(L, R, window, affected, bg)
            scheduled = len(ops)
        else:
            window, exact, curve = self._bounded_window(L, R, ops, changed)
            scheduled = self.window_cap
        peak = int(curve.max()) if len(curve) else 0
        uncopied = any(e.kind == "erase" and e.node is not None and e.node.kind in COPY_KINDS for e in log.edits)
        host = 0  # a graph without copies holds nothing on the host
        simulated = self.storages.copy_nodes or uncopied  # the working latency is a simulated one: no delta
        order = self.order[:L] + window + self.order[R + 1:] if simulated or self._focus is not None else ()
        if simulated:
            curve, latency, host = self._simulated(order, self.cost.affected(self.g, log))
            peak = int(curve.max()) if len(curve) else 0
        else:
            latency = self.latency + self._latency_delta(log)
        return Child(app, L, R, tuple(window), metrics(peak, latency, host_bytes=host), self.wl.value(), exact,
                     scheduled, self._focus_peak(order, curve))

    def _step_time(self, q: int) -> float:
        """The working schedule's compute time at step q (0 for a copy)."""
        v = self.order[q]
        return 0.0 if self.g.nodes[v].kind in COPY_KINDS else self.times.get(v, 0.0)

    def _load_spec(self, v: int) -> tuple[int, int, int, int, float, int] | None:
        """(LOAD v, its position, its floor -- one past its STORE --, its first reader's position
        (the end of the schedule for a graph output), its transfer seconds, its bytes) in the
        working schedule; None if v is not in it."""
        g, pos = self.g, self.pos
        if v not in pos:
            return None
        at = [pos[u] for u in g.users(v) if u in pos]
        node = g.nodes[v]
        nbytes = node.outputs[0].nbytes
        b = min(at) if at else len(self.order)  # a LOAD of a graph output: the end of the step
        return v, pos[v], pos.get(node.inputs()[0].node, -1) + 1, b, self.cost.transfer_time(nbytes), nbytes

    def loads(self) -> list[int]:
        """The LOADs of the working schedule, in its order (what ``Reissue`` may move)."""
        return [v for v in self.order if self.g.nodes[v].kind == NodeKind.LOAD]

    def _reissued(self, app: Application) -> Child:
        """The child that issues the LOADs of ``app`` (``Reissue``) as early as their transfers need
        and the working peak allows (``placement.hoist_loads`` on the working schedule's simulated
        curve, where a STORE's input lives until its copy is done), simulated in full.  Copies queue on
        one stream, so a LOAD hoisted by its own transfer time can still be late: over
        ``REISSUE_ROUNDS`` rounds, each LOAD whose reader waited in the last simulation asks for
        that much more time, and the round of least latency within the working peak is the child
        (the least peak if none is within it).  Its window runs from the earliest new slot to the
        latest old position.  RuleNotApplicable if no LOAD moves."""
        specs = [spec for v in app.params if (spec := self._load_spec(v)) is not None]
        here, _, _ = self._simulated(self.order, set())  # a copy's input is freed when the copy is done
        cap = int(here.max()) if len(here) else 0
        wait = dict.fromkeys((spec[0] for spec in specs), 0.0)
        best = None
        for k in range(REISSUE_ROUNDS):
            order, slot = hoist_loads(self.order, here, cap, [(*x[:4], x[4] + wait[x[0]], x[5]) for x in specs],
                                      self._step_time)
            if not slot and k:  # nothing moves any more
                break
            if slot:
                curve, latency, host = self._simulated(order, set())
                peak = int(curve.max()) if len(curve) else 0
                key = (0, latency) if peak <= cap else (1, peak)
                if best is None or key < best[0]:
                    best = (key, order, slot, peak, latency, host, curve)
            # the waits of this round's simulation (with nothing moved: the working schedule's)
            late = self._waits(order, wait)
            if not late:
                break
            for v, t in late.items():
                wait[v] += t
        if best is None:
            raise RuleNotApplicable(f"{app}: no LOAD can go earlier under the peak")
        _, order, slot, peak, latency, host, curve = best
        L, R = min(slot.values()), max(self.pos[v] for v in slot)
        return Child(app, L, R, tuple(order[L:R + 1]), metrics(peak, latency, host_bytes=host), self.wl.value(),
                     True, focus_peak=self._focus_peak(order, curve))

    def _waits(self, order: list[int], loads: Iterable[int]) -> dict[int, float]:
        """{LOAD: seconds its first reader waited for it} in the last simulation (of ``order``), for
        ``loads`` whose reader did wait: the copy ended after the compute stream was free for it."""
        start, end, stream = self._last_times
        g = self.g
        pos = {v: i for i, v in enumerate(order)}
        free = np.zeros(len(order))  # when the compute stream finished what came before each step
        t = 0.0
        for i, kind in enumerate(stream):
            free[i] = t
            if kind == "compute":
                t = float(end[i])
        out = {}
        for v in loads:
            at = [pos[u] for u in g.users(v) if u in pos]
            if v in pos and at:
                late = float(end[pos[v]] - free[min(at)])
                if late > 1e-12:
                    out[v] = late
        return out

    def _placed(self, app: Application, L: int, R: int, window: list[int], touched: set[int]) -> Child:
        """The child whose window is ``window`` as placed (a swap), simulated in full."""
        order = self.order[:L] + window + self.order[R + 1:]
        curve, latency, host = self._simulated(order, touched)
        peak = int(curve.max()) if len(curve) else 0
        return Child(app, L, R, tuple(window), metrics(peak, latency, host_bytes=host), self.wl.value(), True,
                     focus_peak=self._focus_peak(order, curve))

    def _simulated(self, order: list[int], touched: set[int]) -> tuple[np.ndarray, float, int]:
        """(memory curve, latency, host peak) of the working graph under ``order``, as ``simulate`` computes
        them (the copy stream's timing, a copy's input freed when the copy completes; a host copy
        alive from its STORE to its last LOAD, as ``lifetimes.storage_events`` has it), from the
        cached op times (those of ``touched`` taken afresh) and the storage index rather than from
        scratch."""
        g, times, cost = self.g, self.times, self.cost
        n = len(order)
        if not n:
            return np.zeros(0, dtype=np.int64), 0.0, 0

        def duration(node) -> float:
            v = node.id
            return cost.node_time(g, node) if v in touched or v not in times else times[v]

        start, end, issue, stream = stream_times(g, order, duration, async_copies(cost))
        self._last_times = (start, end, stream)
        done = copies_done(end, issue, stream)
        pos = {v: i for i, v in enumerate(order)}.__getitem__
        d = np.zeros(n + 1, dtype=np.int64)
        h = np.zeros(n + 1, dtype=np.int64)
        for s in self.storages.st.values():
            if s.device != "device":
                a = pos(s.producer)
                f = n - 1 if s.kept else max((pos(m) for m in s.members), default=a)
                h[a] += s.nbytes
                h[f + 1] -= s.nbytes
                continue
            iv = self._interval(s, pos, n - 1, done)
            if iv is not None:
                d[max(iv[0], 0)] += iv[2]
                d[iv[1] + 1] -= iv[2]
        return np.cumsum(d)[:n], float(end.max()), int(np.cumsum(h)[:n].max())

    def _latency_delta(self, log: EditLog) -> float:
        g, times = self.g, self.times
        dt = 0.0
        for v in self.cost.affected(g, log):
            old = times.get(v, 0.0)
            node = g.nodes.get(v)
            new = self.cost.node_time(g, node) if node is not None and node.kind != NodeKind.PLACEHOLDER else 0.0
            dt += new - old
        return dt

    # ---- moving the working state ----------------------------------------------------------------
    def child_state(self, c: Child) -> MState:
        """The M-State of an evaluated child of the working state."""
        return MState(self.state, c.app, c.lo, c.hi, c.window, c.metrics, c.hash, self.state.depth + 1)

    def commit(self, s: MState) -> None:
        """Make ``s`` -- a child of the working state -- the working state (no rescheduling: its
        window is replayed)."""
        if s.parent is not self.state or s.app is None:
            raise ValueError("commit needs a child of the working state")
        self._enter(s, *self._apply(s.app))

    def advance(self, app: Application) -> MState:
        """Evaluate ``app`` from the working state and make its child the working state: what
        ``evaluate`` then ``commit`` do, with the rule applied once instead of three times (a
        fission over a whole training step takes seconds to apply)."""
        log, changed, saved = self._apply(app)
        try:
            s = self.child_state(self._evaluate(app, log, changed))
        except BaseException:
            self._undo(app, log, saved)
            raise
        self._enter(s, log, changed, saved)
        return s

    def place(self, apps: Sequence[Application], order: Sequence[int]) -> MState:
        """Apply ``apps`` and make the last one's child -- their graph, scheduled by ``order`` (its
        ops, each once) -- the working state, evaluating nothing in between: how another method's
        plan becomes a chain of states (``MOptimizer.adopt``).  The chain's inner states are steps
        of the plan, not states of their own (``MState.inner``): each keeps the schedule as it
        stands (an empty window; the ops they add are scheduled by the last state's window, the
        whole of ``order``) and carries the last state's metrics.  The last state's curve is
        computed from scratch, its latency simulated where the graph has copies; leaving it goes
        back over the whole chain at once (``back``).  ValueError (nothing changed) if ``order``
        does not run every op of the graph once."""
        if not apps:
            raise ValueError("a plan without applications is the state it starts from")
        chain: list[MState] = []
        try:
            for app in apps[:-1]:
                log, changed, saved = self._apply(app)
                s = MState(self.state, app, 0, -1, (), self.state.metrics, 0, self.state.depth + 1,
                           inner=True)
                self._enter(s, log, changed, saved)
                chain.append(s)
            log, changed, saved = self._apply(apps[-1])
            window = list(order)
            if len(set(window)) != len(window) or set(window) != {n.id for n in self.g.ops()}:
                self._undo(apps[-1], log, saved)
                raise ValueError(f"{apps[-1]}: the order given does not run every op of the plan's graph once")
        except BaseException:
            if chain:  # one step back from an inner step leaves the whole chain
                self.back()
            raise
        last = MState(self.state, apps[-1], 0, len(self.order) - 1, tuple(window), self.state.metrics,
                      self.wl.value(), self.state.depth + 1)
        self._enter(last, log, changed, saved)
        host = 0
        if self.storages.copy_nodes:
            curve, latency, host = self._simulated(self.order, set())
            peak = int(curve.max()) if len(curve) else 0
        else:
            latency = self._full_latency()
            peak = self.peak
        last.metrics = metrics(peak, latency, host_bytes=host)
        for s in chain:
            s.metrics = last.metrics
        self.latency = latency
        return last

    def _enter(self, s: MState, log: EditLog, changed: set[TRef], saved: dict) -> None:
        """Make ``s`` the working state, its application just applied (``log``)."""
        L, R, window = s.lo, s.hi, list(s.window)
        affected = changed | self.storages.roots_of(window) | self.storages.roots_of(self.order[L:R + 1])
        old_window = tuple(self.order[L:R + 1])
        old_times = {v: self.times.get(v) for v in self.cost.affected(self.g, log)}
        self._move(L, R, window, affected, log)
        self._stack.append((s, log, old_window, affected, {"saved": saved, "times": old_times,
                                                           "latency": self.latency}))
        self.latency = s.latency
        self.state = s

    def _move(self, L: int, R: int, window: list[int], affected: set[TRef], log: EditLog) -> None:
        if R < L and not window:  # an inner step of an adopted plan: the schedule stays as it is
            self._retime(log)
            return
        if L == 0 and R == len(self.order) - 1:  # the whole schedule (an adopted plan): from scratch
            self.order = list(window)
            self.pos = {v: i for i, v in enumerate(self.order)}
            self.curve = self._full_curve()
            self._freed = None
            self._retime(log)
            self._renw()
            return
        curve, new_iv, newpos = self._transition(L, R, window, affected)
        delta = len(window) - (R - L + 1)
        if delta:  # positions after the window shift; residents (alloc -1) span the whole schedule
            self.intervals = {k: (a if a < L else a + delta, f if f < L else f + delta, b)
                              for k, (a, f, b) in self.intervals.items()}
        for k, iv in new_iv.items():
            if iv is None:
                self.intervals.pop(k, None)
            else:
                self.intervals[k] = iv
        self.order = self.order[:L] + window + self.order[R + 1:]
        self.pos = {v: i for i, v in enumerate(self.order)}
        self.curve = curve
        self._freed = None
        self._retime(log)
        self._renw()

    def _retime(self, log: EditLog) -> None:
        """The cached op times of the ops ``log`` touched."""
        g = self.g
        for v in self.cost.affected(g, log):
            node = g.nodes.get(v)
            if node is None or node.kind == NodeKind.PLACEHOLDER:
                self.times.pop(v, None)
            else:
                self.times[v] = self.cost.node_time(g, node)

    def _renw(self) -> None:
        """The narrow-waist values of the schedule, after a move."""
        g, nw = self.g, self.nw_root
        self.nw = [nw.get(v, nw.get(g.nodes[v].recompute_of or -1, NW_NEW)) for v in self.order]

    @property
    def journal(self) -> EditLog:
        """The edits of the working state's own application (the last ``commit``)."""
        if not self._stack:
            raise ValueError("the working state is the root: no application")
        return self._stack[-1][1]

    def back(self) -> None:
        """Return the working state to its parent -- from the last state of an adopted plan
        (``place``), to the state the plan started from."""
        s, log, old_window, affected, extra = self._stack.pop()
        L = s.lo
        R = L + len(s.window) - 1
        self._undo(s.app, log, extra["saved"])
        undone = [extra]
        while s.parent is not None and s.parent.inner:  # the plan's inner steps go too, before the move
            s, inner_log, _, _, x = self._stack.pop()
            self._undo(s.app, inner_log, x["saved"])
            undone.append(x)
        self._move(L, R, list(old_window), affected, log)
        for x in undone:
            for v, t in x["times"].items():
                if t is None:
                    self.times.pop(v, None)
                else:
                    self.times[v] = t
        self.latency = undone[-1]["latency"]
        self.state = s.parent

    def goto(self, target: MState) -> None:
        """Make ``target`` (any state of this evaluator's tree but an adopted plan's inner step)
        the working state."""
        if target.inner:
            raise ValueError("an adopted plan's inner step has no schedule of its own")
        path = target.path()
        here = self.state.path()
        k = 0
        while k < min(len(path), len(here)) and path[k] is here[k]:
            k += 1
        while self.state.depth > k:  # (one step back leaves a whole adopted plan)
            self.back()
        for s in path[k:]:
            self.commit(s)

    def materialize(self, target: MState | None = None) -> tuple[Graph, list[int]]:
        """A copy of the graph and the schedule of ``target`` (default: the working state)."""
        if target is not None:
            self.goto(target)
        return self.g.copy(), list(self.order)


def bounded_segment(curve: np.ndarray, nw: Sequence[int], cap: int, margin: int = MARGIN) -> tuple[int, int]:
    """[i, j]: ``cap`` consecutive positions of a window of ``len(curve)`` steps (all of them when
    it has no more) to reschedule.  They contain the window's peak step (the first), with at least
    ``margin`` steps either side where the window allows; among such segments, the one whose
    neighbours just outside have the smallest narrow-waist values ``nw`` (the ops beyond interact
    least with it; ties: the most centred on the peak)."""
    w = len(curve)
    if w <= cap:
        return 0, w - 1
    p = int(np.argmax(curve))
    first, last = max(0, p - cap + 1), min(p, w - cap)  # every segment holding p
    a0, a1 = max(first, p - cap + 1 + margin), min(last, p - margin)
    if a0 <= a1:
        first, last = a0, a1

    def score(a: int) -> tuple[int, int]:
        left = nw[a - 1] if a > 0 else 0
        right = nw[a + cap] if a + cap < w else 0
        return left + right, abs(2 * a + cap - 1 - 2 * p)

    a = min(range(first, last + 1), key=score)
    return a, a + cap - 1


__all__ = ["Child", "DeltaEvaluator", "StorageIndex", "WINDOW_CAP", "bounded_segment"]
