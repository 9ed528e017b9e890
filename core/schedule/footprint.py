"""The memory model of a schedule, compiled for fast scheduling (HMCOS Eq. 2-5, MAGIS section 3).

``core.analysis.lifetimes`` is THE memory semantics (storages, members, what is counted); this
module compiles it (``storage_table`` + ``counted``) into a form the schedulers evaluate
incrementally.  The schedulers see copies as completing within their step (no step times yet):

* a *storage* is the memory of one non-view tensor (views share their base's storage and add no
  bytes), or a fission node's scratch.  It is allocated when its producer runs and freed after the
  last of its *members* has run.  Graph outputs are kept to the end.
* graph inputs are resident for the whole step (default), or -- ``free_inputs=True``, the HMCOS model
  -- alive from step 0 until their last use; weights are resident (``count_weights=True``) or not
  counted at all.
* the footprint of step i is ``M_i = live_{i-1} + alloc(v_i)`` (Eq. 4: the stable footprint), and the
  transient after it ``live_i = M_i - freed(v_i)`` (Eq. 5: values terminally used by v_i, and v_i's
  own dead outputs).  The peak is ``max_i M_i``.

The live bytes after a *set* of ops has run do not depend on the order they ran in -- which is why a
DP over sets of scheduled ops (Serenity) is exact; ``units.UnitProblem`` compiles a sub-problem into
the DP's states and transitions.  Also here: the traced / RPO orders on the compiled model and
:class:`MemoryScheduler`, the base of the memory-aware schedulers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..analysis.lifetimes import counted, storage_table
from ..analysis.order import reverse_post_order
from ..ir.graph import Graph, NodeKind
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
        """Compile ``g``'s storages (``lifetimes.storage_table``, counted by ``lifetimes.counted``:
        the one memory semantics) into op-indexed arrays."""
        ops = [nid for nid in g.topo_order() if g.nodes[nid].kind != NodeKind.PLACEHOLDER]
        index = {nid: i for i, nid in enumerate(ops)}
        n = len(ops)
        preds: list[tuple[int, ...]] = []
        succ_sets: list[list[int]] = [[] for _ in range(n)]
        for i, nid in enumerate(ops):
            ps = tuple(sorted(index[p] for p in g.preds(nid) if p in index))
            preds.append(ps)
            for p in ps:
                succ_sets[p].append(i)
        succs = [tuple(s) for s in succ_sets]

        size: list[int] = []
        producer: list[int] = []
        members: list[tuple[int, ...]] = []
        kept: list[bool] = []
        resident = 0
        for st in storage_table(g).storages:
            how = counted(st, free_inputs, count_weights)
            if how == "none" or st.nbytes <= 0:
                continue
            if how == "resident":
                resident += st.nbytes  # held by the caller for the whole step
                continue
            size.append(st.nbytes)
            producer.append(-1 if st.placeholder else index[st.producer])
            members.append(tuple(sorted(index[m] for m in st.members)))
            kept.append(st.kept)
        return cls.assemble(g, free_inputs, count_weights, ops, index, preds, succs, size, producer, members,
                            kept, resident)

    @classmethod
    def assemble(cls, g: Graph, free_inputs: bool, count_weights: bool, ops: list[int], index: dict[int, int],
                 preds: list[tuple[int, ...]], succs: list[tuple[int, ...]], size: list[int],
                 producer: list[int], members: list[tuple[int, ...]], kept: list[bool],
                 resident: int) -> MemoryModel:
        """A model from its storages (also of a sub-problem: ``search.delta`` builds one per window);
        derives what each op allocates, produces and touches."""
        n = len(ops)
        prod: list[list[int]] = [[] for _ in range(n)]
        tch: list[list[int]] = [[] for _ in range(n)]
        for k in range(len(size)):
            if producer[k] >= 0:
                prod[producer[k]].append(k)
            for i in members[k]:
                tch[i].append(k)
        return cls(g=g, free_inputs=free_inputs, count_weights=count_weights, ops=ops, index=index,
                   preds=preds, succs=succs, size=size, producer=producer, members=members, kept=kept,
                   resident=resident, produces=[tuple(x) for x in prod], touches=[tuple(x) for x in tch],
                   alloc=[sum(size[k] for k in prod[i]) for i in range(n)])

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
    preds = {ops[i]: sorted(ops[p] for p in ps) for i, ps in enumerate(model.preds)}
    return reverse_post_order(preds, roots)


def best_of(model: MemoryModel, candidates: dict[str, list[int]]) -> tuple[str, list[int]]:
    """The candidate order (op node ids) with the lowest peak; ties go to the first one listed."""
    names = list(candidates)
    peaks = {k: model.simulate(candidates[k])[0] for k in names}
    pick = min(names, key=lambda k: (peaks[k], names.index(k)))
    return pick, candidates[pick]


def bits(m: int) -> list[int]:
    """Indices of the set bits of ``m``, ascending."""
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


# ------------------------------------------------------------------------------------------------
class MemoryScheduler(_Scheduler):
    """Base of the memory-aware schedulers: carries the memory model flags and the time budget, and
    reports the peak of the returned order under *that* model (``memory_profile`` with the same
    flags -- ``base.finish`` always uses the default model)."""

    name = "memory"

    def __init__(self, time_budget: float | None = None, free_inputs: bool = False,
                 count_weights: bool = True, cancel=None) -> None:
        self.time_budget = time_budget
        self.cancel = cancel  # a threading.Event: once set, the search returns its best order so far
        self.free_inputs = free_inputs
        self.count_weights = count_weights
        self.info: dict = {}
        self._start: float | None = None

    def deadline(self, fraction: float = 0.75):
        """The time limit for the search itself: ``fraction`` of the time budget, counted from the
        start of ``run`` (the rest is left for building the model and checking the result)."""
        import time

        from .deadline import Deadline

        d = Deadline(None, self.cancel)
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

    def run(self, g: Graph, cost=None):
        """The strategy's order and its peak under this scheduler's memory model; on a graph with
        swaps the copies are then placed (``placement.place_copies``, timed with ``cost``) and, with
        the default model, the peak is the simulator's."""
        import time

        from ..analysis.lifetimes import check_schedule
        from ..simulate import simulate
        from .base import Schedule
        from .placement import has_copies, place_copies

        self.info = {}
        t0 = time.perf_counter()
        self._start = t0
        order = self.order(g)
        copies = has_copies(g)
        if copies:
            order = place_copies(g, order, cost)
        dt = time.perf_counter() - t0
        check_schedule(g, order)
        if copies and not self.free_inputs and self.count_weights:
            peak = simulate(g, order, cost, validate=False).peak
        else:
            peak = self.peak(g, order)
        return Schedule(list(order), self.name, peak, dt, dict(self.info))
