"""Tensor lifetimes and memory over a schedule (MAGIS section 3, "Memory Usage").

Given a schedule s = (v_1, ..., v_n) of the graph's ops, the storage produced by v_i is allocated at
step i and freed after step F = the last step that uses it or any of its views (graph outputs are
kept to the end).  Active memory during step i is

    M_i = resident + sum |u| over storages u with alloc(u) <= i <= free(u)

where ``resident`` is the graph inputs and weights (held by the caller for the whole step).  The
peak is max_i M_i, and the memory hot-spots H are the storages alive at any step where M_i is the
peak (section 2.1).  Counting is in bytes of storages: views add nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph, GraphError, NodeKind, TensorKind, TRef

KINDS = [k.value for k in TensorKind]


@dataclass
class Storage:
    root: TRef  # the tensor owning the storage
    nbytes: int
    kind: str
    alloc: int  # step index (-1: resident input/weight)
    free: int  # last step it is alive (n-1 for outputs and residents)


@dataclass
class MemoryProfile:
    order: list[int]
    step_bytes: np.ndarray  # M_i, bytes alive during step i
    by_kind: dict[str, np.ndarray]  # M_i split by tensor kind
    storages: list[Storage]
    resident: int
    peak: int
    peak_steps: list[int]
    _live_cache: dict[int, list[int]] = field(default_factory=dict, repr=False)

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


def memory_profile(g: Graph, order: Sequence[int], count_resident: bool = True,
                   validate: bool = True, free_inputs: bool = False,
                   count_weights: bool = True) -> MemoryProfile:
    """Per-step live bytes of schedule ``order`` (a list of op node ids).

    Defaults model a training step run by a caller that holds its inputs and weights for the whole
    step.  ``free_inputs=True`` frees graph inputs after their last use and ``count_weights=False``
    leaves weights out -- the memory model of HMCOS (notes/hmcos.md) for inference graphs.
    ``count_resident=False`` leaves out everything a placeholder owns.
    """
    if validate:
        check_schedule(g, order)
    order = list(order)
    n = len(order)
    pos = {nid: i for i, nid in enumerate(order)}
    last = n - 1
    # last use of each storage root over all its aliases
    free: dict[TRef, int] = {}
    alloc: dict[TRef, int] = {}
    for nid, node in g.nodes.items():
        step = pos.get(nid, -1)
        for j, t in enumerate(node.outputs):
            ref = TRef(nid, j)
            root = g.storage_root(ref)
            if t.alias is None:
                alloc[ref] = step
                free.setdefault(ref, step)
            if node.kind != NodeKind.PLACEHOLDER:
                free[root] = max(free.get(root, step), step)
    for nid in order:
        i = pos[nid]
        for r in g.nodes[nid].inputs():
            root = g.storage_root(r)
            if free.get(root, -1) < i:
                free[root] = i
    for r in g.outputs.values():
        free[g.storage_root(r)] = last
    for ref in alloc:  # placeholders: last use over their views, for free_inputs
        if alloc[ref] < 0:
            free[ref] = max([free.get(ref, -1)] + [pos[u] for u in g.users(ref.node)])
    storages: list[Storage] = []
    resident = 0
    for ref, a in alloc.items():
        t = g.tensor(ref)
        if t.device != "device":
            continue
        if a < 0:  # placeholder: resident for the whole step
            if t.kind == TensorKind.INPUT and free_inputs:
                storages.append(Storage(ref, t.nbytes, t.kind.value, 0, free.get(ref, -1)))
                continue
            if t.kind != TensorKind.INPUT and not count_weights:
                continue
            storages.append(Storage(ref, t.nbytes, t.kind.value, -1, last))
            resident += t.nbytes
        else:
            storages.append(Storage(ref, t.nbytes, t.kind.value, a, free[ref]))
    by_kind = {k: np.zeros(n + 1, dtype=np.int64) for k in KINDS}
    for s in storages:
        if s.alloc < 0:
            if count_resident:
                by_kind[s.kind][0] += s.nbytes
                by_kind[s.kind][n] -= s.nbytes
            continue
        by_kind[s.kind][s.alloc] += s.nbytes
        by_kind[s.kind][s.free + 1] -= s.nbytes
    by_kind = {k: np.cumsum(v)[:n] for k, v in by_kind.items()}
    total = np.zeros(n, dtype=np.int64)
    for v in by_kind.values():
        total += v
    peak = int(total.max()) if n else (resident if count_resident else 0)
    peak_steps = [int(i) for i in np.flatnonzero(total == peak)] if n else []
    return MemoryProfile(order, total, by_kind, storages, resident if count_resident else 0, peak,
                         peak_steps)


def peak_bytes(g: Graph, order: Sequence[int], **kwargs) -> int:
    return memory_profile(g, order, **kwargs).peak
