"""The one memory semantics of MAGIS Studio: storages, their alloc/free events, memory per step and
over time (MAGIS section 3, "Memory Usage").

Every consumer derives from two functions here: :func:`storage_table` (what the storages of a graph
are, independent of any order) and :func:`storage_events` ((graph, order) -> the alloc/free step of
every storage).  ``memory_profile`` (peak, hot-spots, the memory curve), the schedulers'
``footprint.MemoryModel``, codegen's release plan (``codegen.release``) and the delta evaluator of the
search (``search.delta``) all read them; a new node kind is taught here once.

The rules, per node kind:

* OP (recomputed copies included: they are ordinary ops) -- each non-view output is a storage,
  allocated at the op's step.  A view (``TensorMeta.alias``) shares its base's storage.  The members
  of a storage are the ops that read it through any alias, plus the ops that create a view of it; it
  is freed after its last member's step.  Graph outputs are kept to the end.
* PLACEHOLDER -- graph inputs and weights are held by the caller for the whole step (resident).
  ``free_inputs=True`` frees graph inputs after their last use and ``count_weights=False`` leaves
  weights out: the HMCOS model for inference graphs (notes/hmcos.md).
* FISSION (MAGIS 4.2) -- reads its inputs, allocates its full-size outputs (written part by part)
  at its step, and during that step also holds one part's intermediates: a *scratch* storage of the
  sub-graph's peak (its placeholders are slices of the inputs: views), allocated and freed at the
  step.
* STORE / LOAD (MAGIS 5.2) -- the host copy (``device="host"``) takes no device memory; it is
  freed after its last LOAD.  A LOAD allocates its device output at its step.  A STORE is a member
  of the stored storage, but the copy runs asynchronously on the copy stream: with step times
  (``copy_done``, from the simulator) the storage is freed only once the copy has finished, as the
  CUDA caching allocator does with ``record_stream``; without them (the schedulers' view) it is
  freed at the STORE's step.  Likewise a LOAD's output is alive at least until its copy completes.

Active memory during step i is ``M_i = resident + sum |s|`` over storages with ``alloc <= i <=
free``; the peak is ``max_i M_i`` and the hot-spots are the storages alive at a peak step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.graph import Graph, GraphError, NodeKind, TensorKind, TRef

KINDS = [k.value for k in TensorKind]


# ---- the storages of a graph (order-independent) -----------------------------------------------
@dataclass(frozen=True)
class StorageInfo:
    """One storage of a graph, independent of any schedule."""

    root: TRef  # the tensor owning it (for a scratch storage: the fission node's first output)
    nbytes: int
    kind: str  # TensorKind value of the root tensor
    device: str  # "device" or "host"
    producer: int  # node id
    placeholder: bool  # owned by a graph input / weight
    members: tuple[int, ...]  # op ids reading it through any alias or viewing it (producer excluded)
    copies: tuple[int, ...]  # the members that are STORE copies (freed when the copy completes)
    kept: bool  # (an alias of) a graph output: never freed
    scratch: bool = False  # a fission node's per-part intermediates, alive during its step only
    loaded: bool = False  # written by a LOAD copy: alive at least until the copy completes


@dataclass
class StorageTable:
    """The storages of a graph plus, per tensor, the ops that read it directly or view it."""

    storages: list[StorageInfo]
    uses: dict[TRef, tuple[int, ...]]  # tensor -> op ids that read it or create a view of it


def fission_scratch(node) -> int:
    """Bytes one part of a fission node holds beyond its inputs and outputs: the peak of its
    sub-graph (own placeholders excluded -- they are slices of the node's inputs)."""
    f = node.fission
    if f is None:
        return 0
    cached = getattr(f, "_scratch", None)  # a spec's sub-graph does not change once built
    if cached is None:
        sub = f.graph
        order = [nid for nid in sub.topo_order() if sub.nodes[nid].kind != NodeKind.PLACEHOLDER]
        cached = memory_profile(sub, order, count_resident=False, validate=False).peak if order else 0
        f._scratch = cached
    return cached


def storage_table(g: Graph) -> StorageTable:
    """The storages of ``g`` (see the module docstring), in node order: one pass over nodes and edges."""
    uses: dict[TRef, list[int]] = {}
    members: dict[TRef, list[int]] = {}
    copies: dict[TRef, list[int]] = {}
    roots: list[tuple[TRef, int]] = []  # (root, producer)
    scratch: list[tuple[int, int]] = []
    root_of = g.storage_root
    for nid, node in g.nodes.items():
        is_ph = node.kind == NodeKind.PLACEHOLDER
        for j, t in enumerate(node.outputs):
            ref = TRef(nid, j)
            if t.alias is None:
                roots.append((ref, nid))
            elif not is_ph:  # creating a view is a use of the viewed storage
                members.setdefault(root_of(ref), []).append(nid)
                uses.setdefault(t.alias, []).append(nid)
        if is_ph:
            continue
        copy = node.kind == NodeKind.STORE
        for r in node.inputs():
            uses.setdefault(r, []).append(nid)
            root = root_of(r)
            members.setdefault(root, []).append(nid)
            if copy:
                copies.setdefault(root, []).append(nid)
        if node.kind == NodeKind.FISSION:
            scratch.append((nid, fission_scratch(node)))
    kept = {root_of(r) for r in g.outputs.values()}
    out: list[StorageInfo] = []
    for ref, nid in roots:
        t = g.nodes[nid].outputs[ref.index]
        ms = tuple(sorted(set(members.get(ref, ())) - {nid}))
        kind = g.nodes[nid].kind
        out.append(StorageInfo(ref, t.nbytes, t.kind.value, t.device, nid, kind == NodeKind.PLACEHOLDER, ms,
                               tuple(sorted(set(copies.get(ref, ())))), ref in kept,
                               loaded=kind == NodeKind.LOAD))
    for nid, nbytes in scratch:
        if nbytes > 0:
            out.append(StorageInfo(TRef(nid, 0), nbytes, TensorKind.ACTIVATION.value, "device", nid, False,
                                   (), (), False, scratch=True))
    return StorageTable(out, {r: tuple(sorted(set(v))) for r, v in uses.items()})


def counted(s: StorageInfo, free_inputs: bool, count_weights: bool) -> str:
    """How the memory model counts storage ``s``: "resident" (the whole step), "live" (from its
    producer's step -- or step 0 for a freeable graph input -- to its free step) or "none"."""
    if s.device != "device":
        return "none"
    if not s.placeholder:
        return "live"
    if s.kind == TensorKind.INPUT.value:
        if free_inputs and not s.kept:
            return "live" if s.members else "none"
        return "resident"
    return "resident" if count_weights else "none"


# ---- the events of a schedule ------------------------------------------------------------------
@dataclass
class Storage:
    """A storage's lifetime under one schedule: alive during steps ``alloc..free`` (inclusive)."""

    root: TRef
    nbytes: int
    kind: str
    alloc: int  # step index (-1: resident input/weight)
    free: int  # last step it is alive (n-1 for outputs and residents)
    device: str = "device"
    scratch: bool = False


def storage_events(g: Graph, order: Sequence[int], *, free_inputs: bool = False, count_weights: bool = True,
                   copy_done: Callable[[int], int] | None = None, table: StorageTable | None = None,
                   pos: dict[int, int] | None = None) -> list[Storage]:
    """THE memory semantics: the alloc and free step of every counted device storage of ``g`` under
    ``order`` (a list of op ids), plus host storages (``device="host"``, alive between their STORE
    and their last LOAD).  ``copy_done(step)`` gives the last step during which the copy issued at
    ``step`` is still running (default: the copy completes within its step)."""
    table = table or storage_table(g)
    pos = pos if pos is not None else {nid: i for i, nid in enumerate(order)}
    last = len(order) - 1
    out: list[Storage] = []
    for s in table.storages:
        if s.device != "device":  # host copy of a swapped tensor
            a = pos[s.producer]
            f = max((pos[m] for m in s.members), default=a)
            out.append(Storage(s.root, s.nbytes, s.kind, a, last if s.kept else f, "host"))
            continue
        how = counted(s, free_inputs, count_weights)
        if how == "none":
            continue
        if how == "resident":
            out.append(Storage(s.root, s.nbytes, s.kind, -1, last))
            continue
        a = 0 if s.placeholder else pos[s.producer]
        if s.kept:
            f = last
        else:
            f = copy_done(a) if copy_done is not None and s.loaded else a
            for m in s.members:
                p = pos[m]
                if copy_done is not None and m in s.copies:
                    p = copy_done(p)
                if p > f:
                    f = p
        out.append(Storage(s.root, s.nbytes, s.kind, a, f, "device", s.scratch))
    return out


# ---- memory per step -----------------------------------------------------------------------------
@dataclass
class MemoryProfile:
    order: list[int]
    step_bytes: np.ndarray  # M_i, device bytes alive during step i
    by_kind: dict[str, np.ndarray]  # M_i split by tensor kind
    storages: list[Storage]  # device storages
    resident: int
    peak: int
    peak_steps: list[int]
    host_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # swapped-out bytes per step

    def live_at(self, step: int) -> list[Storage]:
        """Storages alive during ``step`` (residents included), largest first."""
        live = [s for s in self.storages if s.alloc <= step <= s.free and s.nbytes > 0]
        return sorted(live, key=lambda s: (-s.nbytes, s.root))

    def hotspots(self) -> list[Storage]:
        """MAGIS memory hot-spots: storages alive at any step where M_i == peak (largest first).

        A storage is alive at some peak step p iff the first peak step >= alloc is <= free; one
        binary search per storage, so a peak held for many steps costs nothing extra."""
        if not self.peak_steps or not self.storages:
            return []
        n = len(self.storages)
        alloc = np.fromiter((s.alloc for s in self.storages), np.int64, n)
        free = np.fromiter((s.free for s in self.storages), np.int64, n)
        nbytes = np.fromiter((s.nbytes for s in self.storages), np.int64, n)
        peaks = np.asarray(self.peak_steps)
        first = np.searchsorted(peaks, alloc, side="left")
        alive = (first < len(peaks)) & (peaks[np.minimum(first, len(peaks) - 1)] <= free) & (nbytes > 0)
        hot = [self.storages[i] for i in np.flatnonzero(alive)]
        return sorted(hot, key=lambda s: (-s.nbytes, s.root))

    @property
    def host_peak(self) -> int:
        return int(self.host_bytes.max()) if len(self.host_bytes) else 0


def check_schedule(g: Graph, order: Sequence[int]) -> None:
    """Raise GraphError unless ``order`` lists every op of ``g`` exactly once in dependency order."""
    ops = {n.id for n in g if n.kind != NodeKind.PLACEHOLDER}
    if len(order) != len(ops) or set(order) != ops:
        missing = sorted(ops - set(order))[:5]
        extra = sorted(set(order) - ops)[:5]
        raise GraphError(f"schedule does not cover the graph's ops exactly once "
                         f"(missing {missing}, unknown {extra}, {len(order)} vs {len(ops)})")
    pos = {nid: i for i, nid in enumerate(order)}
    for nid in order:
        for p in g.preds(nid):
            if g[p].kind != NodeKind.PLACEHOLDER and pos[p] > pos[nid]:
                raise GraphError(f"schedule runs {g[nid].name!r} before its input {g[p].name!r}")


def interval_curve(n: int, lifetimes: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """sum of ``nbytes`` over (alloc, free, nbytes) intervals alive at each of n steps (alloc -1 =
    from the start)."""
    d = np.zeros(n + 1, dtype=np.int64)
    for a, f, b in lifetimes:
        d[max(a, 0)] += b
        d[f + 1] -= b
    return np.cumsum(d)[:n]


def memory_profile(g: Graph, order: Sequence[int], count_resident: bool = True, validate: bool = True,
                   free_inputs: bool = False, count_weights: bool = True,
                   copy_done: Callable[[int], int] | None = None) -> MemoryProfile:
    """Per-step live bytes of schedule ``order`` (a list of op node ids), from ``storage_events``.

    Defaults model a training step run by a caller that holds its inputs and weights for the whole
    step.  ``count_resident=False`` leaves out everything a placeholder owns.
    """
    if validate:
        check_schedule(g, order)
    order = list(order)
    n = len(order)
    events = storage_events(g, order, free_inputs=free_inputs, count_weights=count_weights,
                            copy_done=copy_done)
    device = [s for s in events if s.device == "device"]
    host = [s for s in events if s.device != "device"]
    resident = sum(s.nbytes for s in device if s.alloc < 0)
    by_kind = {k: np.zeros(n + 1, dtype=np.int64) for k in KINDS}
    for s in device:
        if s.alloc < 0 and not count_resident:
            continue
        by_kind[s.kind][max(s.alloc, 0)] += s.nbytes
        by_kind[s.kind][s.free + 1] -= s.nbytes
    by_kind = {k: np.cumsum(v)[:n] for k, v in by_kind.items()}
    total = np.zeros(n, dtype=np.int64)
    for v in by_kind.values():
        total += v
    host_bytes = interval_curve(n, [(s.alloc, s.free, s.nbytes) for s in host])
    if not count_resident:
        resident = 0
    peak = int(total.max()) if n else resident
    peak_steps = [int(i) for i in np.flatnonzero(total == peak)] if n else []
    return MemoryProfile(order, total, by_kind, device, resident, peak, peak_steps, host_bytes)


def memory_over_time(storages: Sequence[Storage], alloc_time: Sequence[float],
                     free_time: Callable[[Storage], float]) -> tuple[np.ndarray, np.ndarray]:
    """Device memory as a step function of time: (times, bytes alive from each time on).  A storage
    is alive from ``alloc_time[alloc step]`` (0 for residents) until ``free_time(storage)``; at equal
    times frees come before allocations (the next op reuses what the last one released)."""
    ev: list[tuple[float, int, int]] = []
    for s in storages:
        t0 = 0.0 if s.alloc < 0 else float(alloc_time[s.alloc])
        ev.append((t0, 1, s.nbytes))
        ev.append((free_time(s), 0, -s.nbytes))
    ev.sort(key=lambda e: (e[0], e[1]))
    times = np.fromiter((e[0] for e in ev), float, len(ev))
    live = np.cumsum(np.fromiter((e[2] for e in ev), np.int64, len(ev)))
    return times, live


# ---- what no activation plan can remove ----------------------------------------------------------
def resident_floor(g: Graph) -> tuple[int, dict[str, int]]:
    """The resident floor of ``g``: ``(bytes, bytes by tensor kind)`` of the device storages that are
    alive at the last step of *every* schedule of ``g`` under the rules above.

    Two kinds of storage qualify: those a placeholder owns (graph inputs and weights, optimizer state
    included: held by the caller for the whole step, counted "resident") and those a graph output
    lives in (the gradients, the loss and any other output: kept to the end).  Each storage counts
    once (an output that is a view of a weight is the weight's storage).  Since ``M_last`` counts
    every storage alive at the last step, ``peak >= M_last >= floor`` for any order.

    Re-ordering, rematerialization and fission change neither the placeholders nor the graph outputs
    of a graph, so no plan built from them goes below the floor: the activations are all such plans
    can save, and ``peak - floor`` bounds what they can gain.  Only moving resident bytes off the
    device (offloading weights, gradients or optimizer state; ``magis`` swaps activations) goes lower.
    """
    by_kind: dict[str, int] = {}
    for s in storage_table(g).storages:
        if s.device != "device" or s.nbytes <= 0:
            continue
        if counted(s, False, True) == "resident" or s.kept:
            by_kind[s.kind] = by_kind.get(s.kind, 0) + s.nbytes
    return sum(by_kind.values()), dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))


def largest_op(g: Graph) -> dict[str, Any] | None:
    """The op whose inputs and outputs together take the most device bytes (distinct storages, the
    placeholders' left out: they are held all step anyway): ``{"name", "op", "bytes"}``; None for a
    graph without ops.  Every plan that runs it whole and keeps the placeholders on the device
    holds at least these bytes beside the placeholders'."""
    best: tuple[int, int] | None = None
    for node in g.ops():
        refs = [*node.inputs(), *(TRef(node.id, j) for j in range(len(node.outputs)))]
        roots = {g.storage_root(r) for r in refs}
        size = sum(g.tensor(r).nbytes for r in roots
                   if g.nodes[r.node].kind != NodeKind.PLACEHOLDER and g.tensor(r).device == "device")
        if best is None or size > best[0]:
            best = (size, node.id)
    if best is None:
        return None
    node = g.nodes[best[1]]
    return {"name": node.name, "op": node.op, "bytes": int(best[0])}


def lower_bound(g: Graph, resident: int) -> dict[str, int]:
    """What no swap-free plan's peak goes below, as two bounds and their larger: the resident floor,
    and the largest op's working set beside the ``resident`` bytes of the placeholders (the eager
    simulation's ``memory.resident``).  ``peak - bound`` is the memory a plan could still remove."""
    floor, _ = resident_floor(g)
    op = largest_op(g)
    largest = int(resident + op["bytes"]) if op is not None else int(resident)
    return {"resident_floor": int(floor), "largest_op": largest, "bound": max(int(floor), largest)}
