"""Simulator: (graph, schedule) -> per-op times on the compute and copy streams, memory, peak.

Ops run one after another on the compute stream in schedule order.  Store/Load (swap) ops run on a
separate copy stream, asynchronously: a copy starts when its input is ready and the copy stream is
free, and a compute op that needs a loaded tensor waits for the copy to finish (MAGIS section 3:
swaps only cost time when compute must wait for them).  Memory is the step-wise active memory of
``core.analysis.lifetimes`` (bytes of storages; views are free).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .analysis.lifetimes import MemoryProfile, Storage, memory_profile
from .cost.model import AnalyticCost, CostModel
from .ir.graph import Graph, NodeKind, TRef


@dataclass
class SimResult:
    order: list[int]
    start: np.ndarray  # seconds, per step
    end: np.ndarray
    stream: list[str]  # "compute" or "copy" per step
    latency: float
    memory: MemoryProfile

    @property
    def peak(self) -> int:
        return self.memory.peak

    def hotspots(self) -> list[Storage]:
        return self.memory.hotspots()

    def memory_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(time at the start of each step, bytes alive during it)."""
        return self.start, self.memory.step_bytes


def simulate(g: Graph, order: Sequence[int], cost: CostModel | None = None,
             count_resident: bool = True, validate: bool = True) -> SimResult:
    cost = cost or AnalyticCost()
    order = list(order)
    mem = memory_profile(g, order, count_resident=count_resident, validate=validate)
    n = len(order)
    start = np.zeros(n)
    end = np.zeros(n)
    stream = ["compute"] * n
    ready: dict[int, float] = {}
    t_compute = 0.0
    t_copy = 0.0
    for i, nid in enumerate(order):
        node = g.nodes[nid]
        dep = max((ready.get(r.node, 0.0) for r in node.inputs()), default=0.0)
        dur = cost.node_time(g, node)
        if node.kind in (NodeKind.STORE, NodeKind.LOAD):
            s = max(dep, t_copy)
            t_copy = s + dur
            stream[i] = "copy"
        else:
            s = max(dep, t_compute)
            t_compute = s + dur
        start[i], end[i] = s, s + dur
        ready[nid] = s + dur
    latency = float(end.max()) if n else 0.0
    return SimResult(order, start, end, stream, latency, mem)


def op_times(g: Graph, cost: CostModel | None = None) -> dict[int, float]:
    cost = cost or AnalyticCost()
    return {n.id: cost.node_time(g, n) for n in g.ops()}


__all__ = ["SimResult", "simulate", "op_times", "TRef"]
