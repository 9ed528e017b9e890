"""A model of PyTorch's CUDA caching allocator: the *reserved* memory of a plan beside its live bytes.

``lifetimes.memory_profile`` counts live tensor bytes; a CUDA job fails when the caching allocator
cannot reserve another segment, and what it has reserved is more than what is live: blocks are
rounded up, small and large requests live in separate pools, a segment is split among blocks and is
never compacted, and cached free blocks that are too small for a request force a new segment.
This module replays a sequence of alloc/free events through a model of
``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator`` of torch 2.x, default settings)
and turns a (graph, schedule) into the event sequence its exported script performs.

Modelled, as torch does it (the names are the C++ ones):

* ``round_size``: a request is rounded up to a multiple of 512 B (``kMinBlockSize``); below 512 B
  it is 512 B.  A 0-byte request never reaches the allocator (``allocate`` skips ``malloc`` for
  size 0: no block, no event).
* ``get_pool``: a rounded size <= 1 MiB (``kSmallSize``) is served from the small pool, larger ones
  from the large pool; the pools never lend each other blocks.
* ``get_allocation_size``: a new segment (one ``cudaMalloc``) is 2 MiB for the small pool; for the
  large pool 20 MiB (``kLargeBuffer``) when the rounded size is < 10 MiB (``kMinLargeAlloc``), else
  the rounded size rounded up to 2 MiB (``kRoundLarge``).  The rules apply to the *rounded* size:
  10 MiB - 1 B rounds to 10 MiB and gets a segment of its own.
* ``get_free_block``: best fit among the cached free blocks of the pool, ordered by (size,
  address) -- the smallest block that fits, the lowest address among equals.
* ``should_split`` / ``alloc_found_block``: the block is split when the remainder is >= 512 B
  (small pool) or > 1 MiB (large pool); the request takes the low end, the remainder stays cached.
  An unsplit block is handed out whole: ``memory_allocated`` counts block sizes, so it can exceed
  the rounded request (by at most 1 MiB per large block).
* ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours in its
  segment; segments are never compacted and never returned while any block of them is in use.
* ``alloc_block`` / ``release_cached_blocks``: segments are kept until a ``cudaMalloc`` fails
  (here: ``reserved + segment > capacity``, as with ``set_per_process_memory_fraction``); then
  every cached segment with no block in use is released (both pools) and the ``cudaMalloc`` is
  tried once more (an *OOM retry*, ``num_alloc_retries``); if that fails too, it is torch's
  "CUDA out of memory" error.

Not modelled: per-stream pools (a block freed on one stream is only reused by that stream; the
exported script allocates a swap's Load on its copy stream, which the model puts in the one pool),
``record_stream`` delays (a block used on another stream is cached only once that stream's event
has completed; the events here free a stored tensor when the simulator's copy completes instead),
CUDA-graph private pools, expandable segments, ``max_split_size_mb`` (oversize blocks and
``release_available_cached_blocks``), ``roundup_power2_divisions``,
``garbage_collection_threshold``, free-memory callbacks, and memory outside the allocator
(the CUDA context, cuBLAS/cuDNN workspaces).  Segment addresses are consecutive in the order the
segments are made (``cudaMalloc``'s addresses decide only ties between equal-size free blocks).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..fmt import format_bytes
from ..ir.graph import Graph, NodeKind
from .lifetimes import MemoryProfile, Storage, storage_events, storage_table

MIN_BLOCK = 512  # kMinBlockSize: every size is rounded up to a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: the largest request of the small pool (1 MiB)
SMALL_BUFFER = 2 << 20  # kSmallBuffer: a small-pool segment (2 MiB)
LARGE_BUFFER = 20 << 20  # kLargeBuffer: the segment of a large request below MIN_LARGE_ALLOC (20 MiB)
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from here on a request gets a segment of its own size
ROUND_LARGE = 2 << 20  # kRoundLarge: such a segment is rounded up to 2 MiB


def round_size(nbytes: int) -> int:
    """The block size of a request (``round_size``): a multiple of 512 B, at least 512 B."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def is_small(size: int) -> bool:
    """Whether a rounded size is served from the small pool (``get_pool``)."""
    return size <= SMALL_SIZE


def segment_size(size: int) -> int:
    """The bytes of the segment a rounded ``size`` makes when no cached block fits
    (``get_allocation_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


class AllocatorOOM(RuntimeError):
    """A request the model cannot serve within its capacity, even after releasing cached segments."""


@dataclass(eq=False)
class Block:
    """A piece of a segment: allocated or cached free; neighbours in its segment by address."""

    addr: int
    size: int
    small: bool
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None

    @property
    def whole_segment(self) -> bool:
        return self.prev is None and self.next is None


@dataclass(frozen=True)
class MemEvent:
    """One allocator call: ``alloc`` (``key`` takes ``nbytes``) or free (``key`` gives back its block;
    ``nbytes`` repeats the size it was allocated with)."""

    alloc: bool
    key: Hashable
    nbytes: int


def alloc(key: Hashable, nbytes: int) -> MemEvent:
    return MemEvent(True, key, int(nbytes))


def free(key: Hashable, nbytes: int = 0) -> MemEvent:
    return MemEvent(False, key, int(nbytes))


class CachingAllocator:
    """The allocator state: segments split into blocks, the two pools of cached free blocks, the
    statistics torch reports (``memory_allocated``, ``memory_reserved``, segment count, retries).

    ``capacity``: bytes the allocator may reserve in all (None: unlimited)."""

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be a byte count >= 0, got {capacity}")
        self.capacity = capacity
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # pool -> sorted (size, addr)
        self._by_addr: dict[int, Block] = {}  # cached free blocks by address
        self._live: dict[Hashable, tuple[Block | None, int]] = {}  # key -> (block, requested bytes)
        self._next_addr = 0
        self.allocated = 0  # bytes of blocks in use (torch.cuda.memory_allocated)
        self.requested = 0  # bytes requested by the live allocations (before rounding)
        self.reserved = 0  # bytes of all segments (torch.cuda.memory_reserved)
        self.segments = 0
        self.oom_retries = 0  # cudaMalloc retried after releasing the cached segments
        self.released_segments = 0

    # -- the pools ---------------------------------------------------------------------------------
    def _cache(self, b: Block) -> None:
        bisect.insort(self._free[b.small], (b.size, b.addr))
        self._by_addr[b.addr] = b

    def _uncache(self, b: Block) -> None:
        lst = self._free[b.small]
        i = bisect.bisect_left(lst, (b.size, b.addr))
        del lst[i]
        del self._by_addr[b.addr]

    def _best_fit(self, small: bool, size: int) -> Block | None:
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1))
        if i == len(lst):
            return None
        b = self._by_addr[lst[i][1]]
        self._uncache(b)
        return b

    def _new_segment(self, nbytes: int, small: bool) -> Block | None:
        if self.capacity is not None and self.reserved + nbytes > self.capacity:
            return None
        b = Block(self._next_addr, nbytes, small)
        self._next_addr += nbytes
        self.reserved += nbytes
        self.segments += 1
        return b

    def release_cached(self) -> int:
        """Release every cached segment with no block in use (``release_cached_blocks``, also
        ``torch.cuda.empty_cache``); returns the bytes released."""
        out = 0
        for small in (False, True):
            for _size, addr in list(self._free[small]):
                b = self._by_addr[addr]
                if b.whole_segment:
                    self._uncache(b)
                    out += b.size
                    self.reserved -= b.size
                    self.segments -= 1
                    self.released_segments += 1
        return out

    # -- the calls ---------------------------------------------------------------------------------
    def malloc(self, key: Hashable, nbytes: int) -> Block | None:
        """Allocate ``nbytes`` for ``key`` (None for 0 bytes: no block); AllocatorOOM when the
        capacity is exhausted after an OOM retry, with the state unchanged."""
        if key in self._live:
            raise ValueError(f"allocation {key!r} is already live")
        if nbytes < 0:
            raise ValueError(f"allocation {key!r}: a size must be >= 0 bytes, got {nbytes}")
        if nbytes == 0:
            self._live[key] = (None, 0)
            return None
        size = round_size(nbytes)
        small = is_small(size)
        b = self._best_fit(small, size)
        if b is None:
            seg = segment_size(size)
            b = self._new_segment(seg, small)
            if b is None:
                self.release_cached()
                self.oom_retries += 1
                b = self._new_segment(seg, small)
            if b is None:
                raise AllocatorOOM(
                    f"out of memory: tried to allocate {format_bytes(size)} (a new {format_bytes(seg)} segment) "
                    f"with {format_bytes(self.reserved)} of {format_bytes(self.capacity or 0)} reserved, "
                    f"{format_bytes(self.allocated)} of it allocated")
        rest = b.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            head = Block(b.addr, size, small, prev=b.prev, next=b)
            if b.prev is not None:
                b.prev.next = head
            b.prev = head
            b.addr += size
            b.size = rest
            self._cache(b)
            b = head
        b.allocated = True
        self.allocated += b.size
        self.requested += nbytes
        self._live[key] = (b, nbytes)
        return b

    def free(self, key: Hashable) -> None:
        """Give back ``key``'s block; it merges with its free neighbours and stays cached."""
        if key not in self._live:
            raise ValueError(f"free of {key!r}, which is not allocated")
        b, nbytes = self._live.pop(key)
        self.requested -= nbytes
        if b is None:
            return
        b.allocated = False
        self.allocated -= b.size
        for nb in (b.prev, b.next):
            if nb is None or nb.allocated:
                continue
            self._uncache(nb)
            if nb is b.prev:
                b.addr = nb.addr
                b.prev = nb.prev
                if b.prev is not None:
                    b.prev.next = b
            else:
                b.next = nb.next
                if b.next is not None:
                    b.next.prev = b
            b.size += nb.size
        self._cache(b)

    # -- inspection ----------------------------------------------------------------------------------
    def live_blocks(self) -> list[Block]:
        return [b for b, _ in self._live.values() if b is not None]

    def free_blocks(self) -> list[Block]:
        return sorted(self._by_addr.values(), key=lambda b: b.addr)

    def largest_free(self) -> int:
        return max((b.size for b in self._by_addr.values()), default=0)


@dataclass
class AllocatorReplay:
    """What a replay of events gives: peaks, per-event curves (the state after each event), the
    segments, the fragmentation at the reserved peak, and an OOM if the capacity ran out."""

    allocated_peak: int  # max of allocated block bytes (torch.cuda.max_memory_allocated)
    reserved_peak: int  # max of reserved segment bytes (torch.cuda.max_memory_reserved)
    live_peak: int  # max of the requested bytes (the live-bytes peak, before rounding)
    allocated: np.ndarray  # per event
    reserved: np.ndarray  # per event
    segments: int  # at the end (or at the failure)
    segments_peak: int
    peak_event: int  # the first event at which reserved reached its peak (-1: no event)
    fragmentation_bytes: int  # reserved - allocated at peak_event
    largest_free_at_peak: int  # the largest cached free block then
    oom_retries: int = 0
    retry_events: list[int] = field(default_factory=list)  # events that released cached segments
    failed_event: int | None = None  # the event that ran out of memory (the curves stop before it)
    failure: str = ""

    @property
    def fragmentation(self) -> float:
        """The share of the reserved peak not allocated to any block then."""
        return self.fragmentation_bytes / self.reserved_peak if self.reserved_peak else 0.0

    @property
    def ok(self) -> bool:
        return self.failed_event is None


def replay(events: Iterable[MemEvent], capacity: int | None = None) -> AllocatorReplay:
    """Run ``events`` through a fresh :class:`CachingAllocator` (``capacity``: as there).  An
    allocation that fails even after the OOM retry stops the replay (``failed_event``,
    ``failure``: the error torch would raise)."""
    a = CachingAllocator(capacity)
    alloc_curve: list[int] = []
    res_curve: list[int] = []
    live_peak = seg_peak = 0
    peak_event, frag, largest = -1, 0, 0
    retries: list[int] = []
    failed, failure = None, ""
    for i, e in enumerate(events):
        if e.alloc:
            before = a.oom_retries
            try:
                a.malloc(e.key, e.nbytes)
            except AllocatorOOM as err:
                failed, failure = i, str(err)
                if a.oom_retries > before:
                    retries.append(i)
                break
            if a.oom_retries > before:
                retries.append(i)
        else:
            a.free(e.key)
        alloc_curve.append(a.allocated)
        res_curve.append(a.reserved)
        live_peak = max(live_peak, a.requested)
        seg_peak = max(seg_peak, a.segments)
        if peak_event < 0 or a.reserved > res_curve[peak_event]:
            peak_event, frag, largest = i, a.reserved - a.allocated, a.largest_free()
    allocated = np.asarray(alloc_curve, dtype=np.int64)
    reserved = np.asarray(res_curve, dtype=np.int64)
    return AllocatorReplay(int(allocated.max()) if len(allocated) else 0,
                           int(reserved.max()) if len(reserved) else 0, live_peak, allocated, reserved,
                           a.segments, seg_peak, peak_event, frag, largest, a.oom_retries, retries, failed, failure)


# ---- the events of a plan ------------------------------------------------------------------------
def _resident_order(g: Graph) -> dict[int, int]:
    """Placeholder node id -> its place in the order the exported script puts the inputs on the
    device: the caller's inputs and weights in graph order (``main``'s ``place_inputs``), then the
    script's constants (``run``'s ``place_inputs``)."""
    phs = g.placeholders()
    const = [n.id for n in phs if n.target.startswith("const:")]
    given = [n.id for n in phs if not n.target.startswith("const:")]
    return {nid: i for i, nid in enumerate(given + const)}


def plan_events(g: Graph, order: Sequence[int], copy_done: Mapping[int, int] | None = None,
                residents: bool = True) -> list[MemEvent]:
    """The alloc/free calls the exported script of ``(g, order)`` makes, in order
    (``core.codegen.emit``).

    First the resident storages (inputs and weights, then constants) when ``residents``; then per
    step the outputs of its op (in output order) and the frees of the storages whose last use it is
    (``lifetimes.storage_events``, with the simulator's ``copy_done`` for swaps: a STORE's input and
    a LOAD's output live until the copy completes, as the script's release plan holds them).  A
    fission node allocates its full-size outputs, then runs its sub-graph once per part -- that
    sub-graph's own events (its placeholders are slices: no memory), its outputs freed at the end
    of the part -- in place of the simulator's one *scratch* storage of the sub-graph's peak.  Graph
    outputs and residents are never freed; 0-byte storages make no event (torch allocates nothing).
    Keys are ``(prefix..., node id, output index)`` tuples."""
    order = list(order)
    table = storage_table(g)
    done = dict(copy_done or {})
    evs = storage_events(g, order, copy_done=(lambda i: done.get(i, i)) if done else None, table=table)
    return _events(g, order, evs, {s.root for s in table.storages if s.kept}, residents, ())


def profile_events(g: Graph, mem: MemoryProfile) -> list[MemEvent]:
    """:func:`plan_events` of a memory profile that already holds its storages' lifetimes (a
    simulation's ``memory``: swaps' release points included)."""
    kept = {s.root for s in storage_table(g).storages if s.kept}
    return _events(g, list(mem.order), mem.storages, kept, True, ())


def _key(prefix: tuple, s: Storage) -> tuple:
    return (*prefix, s.root.node, s.root.index)


def _events(g: Graph, order: list[int], storages: Iterable[Storage], kept: set, residents: bool,
            prefix: tuple) -> list[MemEvent]:
    allocs: dict[int, list[Storage]] = {}
    frees: dict[int, list[Storage]] = {}
    first: list[Storage] = []
    for s in storages:
        if s.device != "device" or s.scratch or s.nbytes <= 0:
            continue
        if s.alloc < 0:
            if residents:
                first.append(s)
            continue
        allocs.setdefault(s.alloc, []).append(s)
        if s.root not in kept:
            frees.setdefault(s.free, []).append(s)
    out: list[MemEvent] = []
    rank = _resident_order(g)
    for s in sorted(first, key=lambda s: (rank.get(s.root.node, len(rank)), s.root)):
        out.append(alloc(_key(prefix, s), s.nbytes))
    for i, nid in enumerate(order):
        for s in sorted(allocs.get(i, ()), key=lambda s: s.root):
            out.append(alloc(_key(prefix, s), s.nbytes))
        node = g.nodes[nid]
        if node.kind == NodeKind.FISSION and node.fission is not None:
            out.extend(_fission_parts(node, (*prefix, nid)))
        for s in sorted(frees.get(i, ()), key=lambda s: s.root):
            out.append(free(_key(prefix, s), s.nbytes))
    return out


def _fission_parts(node, prefix: tuple) -> list[MemEvent]:
    """The events of a fission node's loop: each part runs the sub-graph in topological order
    (as ``emit_fission`` writes it), then its outputs are deleted."""
    f = node.fission
    sub = f.graph
    sub_order = [v for v in sub.topo_order() if sub.nodes[v].kind != NodeKind.PLACEHOLDER]
    table = storage_table(sub)
    evs = storage_events(sub, sub_order, table=table)
    kept_roots = {s.root for s in table.storages if s.kept}
    kept = [s for s in sorted(evs, key=lambda s: s.root)
            if s.root in kept_roots and s.alloc >= 0 and s.device == "device" and not s.scratch and s.nbytes > 0]
    out: list[MemEvent] = []
    for k in range(f.n):
        p = (*prefix, k)
        out.extend(_events(sub, sub_order, evs, kept_roots, False, p))
        out.extend(free(_key(p, s), s.nbytes) for s in kept)
    return out


def canonical(events: Iterable[MemEvent]) -> list[tuple]:
    """A key-free form of an event sequence: ``("alloc", nbytes)`` per allocation and, between two
    allocations, one ``("free", sorted sizes)`` for the frees there (their order among themselves
    changes no allocator decision: frees only merge blocks, and the merged result is the same in
    any order).  0-byte events are left out (torch makes no call for them)."""
    out: list[tuple] = []
    pending: list[int] = []
    for e in events:
        if e.nbytes <= 0:
            continue
        if e.alloc:
            if pending:
                out.append(("free", tuple(sorted(pending))))
                pending = []
            out.append(("alloc", e.nbytes))
        else:
            pending.append(e.nbytes)
    if pending:
        out.append(("free", tuple(sorted(pending))))
    return out


__all__ = ["AllocatorOOM", "AllocatorReplay", "Block", "CachingAllocator", "MemEvent",
           "alloc", "canonical", "free", "is_small", "plan_events", "profile_events", "replay", "round_size",
           "segment_size"]
