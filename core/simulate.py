"""Simulator: (graph, schedule) -> per-op times on the compute and copy streams, memory, peak.

Ops run one after another on the compute stream in schedule order.  Store/Load (swap) ops run on a
separate copy stream, asynchronously: a copy starts once it is issued (the compute stream has reached
its place in the schedule), its input is ready and the copy stream is free, and a compute op that needs a loaded tensor waits for the copy to finish (MAGIS section 3:
swaps only cost time when compute must wait for them).  Memory is ``core.analysis.lifetimes`` with
the copy times: a stored tensor's device storage is freed once its STORE copy has finished (as with
``record_stream``), so it may stay alive for a few steps after the STORE is issued.  Memory is
available per step and over time (seconds); the peak is the same on both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .analysis.allocator import AllocatorReplay, MemEvent, plan_events, replay
from .analysis.lifetimes import MemoryProfile, Storage, memory_over_time, memory_profile, storage_table
from .cost.devices import duplex_factor
from .cost.model import AnalyticCost, CostModel
from .ir.graph import Graph, Node, NodeKind, TRef
from .metrics import metrics

COPY_KINDS = (NodeKind.STORE, NodeKind.LOAD)


@dataclass
class SimResult:
    order: list[int]
    start: np.ndarray  # seconds, per step
    end: np.ndarray
    stream: list[str]  # "compute" or "copy" per step
    latency: float
    memory: MemoryProfile
    issue: np.ndarray = field(default_factory=lambda: np.zeros(0))  # compute-stream time a step is issued at
    graph: Graph | None = field(default=None, repr=False)
    copy_done: dict[int, int] = field(default_factory=dict)  # copy step -> last step issued before it ends

    @property
    def peak(self) -> int:
        return self.memory.peak

    def metrics(self) -> dict[str, float]:
        """The named metrics of this simulation (``core.metrics``)."""
        return metrics(self.peak, self.latency, host_bytes=self.memory.host_peak)

    @property
    def compute_wait(self) -> float:
        """Seconds the compute stream waited for copies (the latency cost of swapping)."""
        busy = float(sum(e - s for e, s, k in zip(self.end, self.start, self.stream, strict=True) if k == "compute"))
        last = float(max((e for e, k in zip(self.end, self.stream, strict=True) if k == "compute"), default=0.0))
        return last - busy

    def hotspots(self) -> list[Storage]:
        return self.memory.hotspots()

    def memory_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(time at the start of each step, bytes alive during it)."""
        return self.start, self.memory.step_bytes

    def memory_over_time(self) -> tuple[np.ndarray, np.ndarray]:
        """Device bytes alive as a step function of time (seconds): each storage from the issue time
        of its producer to the end of its last member (the end of the copy for a STORE member)."""
        if self.graph is None:
            raise ValueError("this result was made without its graph")
        g = self.graph
        pos = {nid: i for i, nid in enumerate(self.order)}
        info = {(s.root, s.scratch): s for s in storage_table(g).storages}
        end, latency = self.end, self.latency

        def free_time(st: Storage) -> float:
            s = info[(st.root, st.scratch)]
            if st.alloc < 0 or s.kept:
                return latency
            t = float(end[pos[s.producer]]) if not s.placeholder else 0.0
            return max([t] + [float(end[pos[m]]) for m in s.members])

        return memory_over_time(self.memory.storages, self.issue, free_time)


def async_copies(cost: CostModel) -> bool:
    """Whether ``cost``'s device overlaps copies with compute (``DeviceProfile.async_copies``; a
    cost model without a device profile: yes)."""
    return getattr(getattr(cost, "device", None), "async_copies", True)


def stream_times(g: Graph, order: Sequence[int], duration: Callable[[Node], float],
                 async_copies: bool = True, duplex: float | None = None,
                 waits: Mapping[int, Sequence[int]] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """THE timing semantics: (start, end, issue time, stream) of each step of ``order``.  Compute ops
    run one after another on the compute stream once their inputs are ready; a STORE/LOAD is issued
    in program order (at the compute stream's time) and queued on the copy stream.  Without
    ``async_copies`` (a device with no copy engine: the CPU, where the exported script copies in
    line) a copy also holds the compute stream until it ends.

    ``duplex`` (SwapAdvisor's three streams, section 4.1): STOREs queue on a swap-out stream and
    LOADs on a swap-in stream (labels ``"swap_out"``/``"swap_in"``), each in program order; a copy
    that starts while the other direction is busy takes ``duplex`` times as long (the link's
    both-ways bandwidth shared, ``cost.devices.duplex_factor``).  ``waits``: step -> earlier copy
    steps the compute stream waits for before issuing it (the memory it takes is that of a tensor
    being swapped out: SwapAdvisor's edge swap-out -> op)."""
    n = len(order)
    start = np.zeros(n)
    end = np.zeros(n)
    issue = np.zeros(n)
    stream = ["compute"] * n
    ready: dict[int, float] = {}
    t_compute = 0.0
    t_copy = t_in = t_out = 0.0
    nodes = g.nodes
    for i, nid in enumerate(order):
        node = nodes[nid]
        dep = max((ready.get(p, 0.0) for p in g.preds(nid)), default=0.0)
        dur = duration(node)
        if waits and i in waits:
            t_compute = max([t_compute, *(end[j] for j in waits[i])])
        issue[i] = t_compute
        if node.kind in COPY_KINDS and duplex is not None:  # three streams: one per direction
            out = node.kind == NodeKind.STORE
            s = max(dep, t_out if out else t_in, t_compute)
            if (t_in if out else t_out) > s:
                dur *= duplex
            if out:
                t_out = s + dur
            else:
                t_in = s + dur
            stream[i] = "swap_out" if out else "swap_in"
            if not async_copies:
                t_compute = s + dur
        elif node.kind in COPY_KINDS:  # issued in program order, then queued on the copy stream
            s = max(dep, t_copy, t_compute)
            t_copy = s + dur
            stream[i] = "copy"
            if not async_copies:
                t_compute = t_copy
        else:
            s = max(dep, t_compute)
            t_compute = s + dur
            issue[i] = s
        start[i], end[i] = s, s + dur
        ready[nid] = s + dur
    return start, end, issue, stream


def copies_done(end: np.ndarray, issue: np.ndarray, stream: Sequence[str]) -> dict[int, int]:
    """Each copy step -> the last step issued before the copy finishes (its input, or its output's
    readiness, is held until then)."""
    return {i: max(i, int(np.searchsorted(issue, end[i], side="left")) - 1)
            for i, k in enumerate(stream) if k != "compute"}


def simulate(g: Graph, order: Sequence[int], cost: CostModel | None = None,
             count_resident: bool = True, validate: bool = True, swap_streams: bool = False,
             waits: Sequence[tuple[int, int]] = ()) -> SimResult:
    """``swap_streams``: SwapAdvisor's three streams (compute, swap-in, swap-out; ``stream_times``);
    ``waits``: (node, STORE node) pairs, the compute stream waiting for the copy before the node."""
    cost = cost or AnalyticCost()
    order = list(order)
    n = len(order)
    duplex = duplex_factor(cost.device) if swap_streams and getattr(cost, "device", None) is not None else (
        1.0 if swap_streams else None)
    step = {v: i for i, v in enumerate(order)} if waits else {}
    wait_at: dict[int, list[int]] = {}
    for v, st in waits:
        wait_at.setdefault(step[v], []).append(step[st])
    start, end, issue, stream = stream_times(g, order, lambda node: cost.node_time(g, node),
                                             async_copies(cost), duplex, wait_at)
    done = copies_done(end, issue, stream)
    mem = memory_profile(g, order, count_resident=count_resident, validate=validate,
                         copy_done=done.__getitem__ if done else None)
    latency = float(end.max()) if n else 0.0
    return SimResult(order, start, end, stream, latency, mem, issue, g, done)


__all__ = ["ReservedPrediction", "SimResult", "async_copies", "copies_done", "predict_reserved", "simulate", "stream_times", "TRef"]


# ---- the caching allocator's reserved bytes of a plan (core.analysis.allocator) -------------------
@dataclass
class ReservedPrediction:
    """A plan's predicted caching-allocator behaviour next to its live-bytes peak."""

    live_peak: int  # the simulator's peak (live storage bytes)
    replay: AllocatorReplay
    events: list[MemEvent]

    @property
    def reserved_peak(self) -> int:
        return self.replay.reserved_peak


def predict_reserved(g: Graph, order: Sequence[int], cost=None, capacity: int | None = None,
                     swap_streams: bool = False, waits: Sequence[tuple[int, int]] = (),
                     sim=None) -> ReservedPrediction:
    """Simulate ``(g, order)`` (or take ``sim``), turn it into the exported script's events and
    replay them: the predicted ``max_memory_reserved`` of running the plan on a GPU."""
    if sim is None:
        sim = simulate(g, order, cost, swap_streams=swap_streams, waits=waits)
    events = plan_events(g, order, sim.copy_done)
    return ReservedPrediction(int(sim.peak), replay(events, capacity), events)
