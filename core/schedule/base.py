"""The one scheduling interface: a Scheduler turns a Graph into a Schedule (a topological order of
its ops).  Strategies live in their own modules; ``registry`` lists them by name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..analysis.lifetimes import check_schedule, memory_profile
from ..cost.model import CostModel
from ..ir.graph import Graph, NodeKind
from ..simulate import simulate
from .placement import has_copies, place_copies


@dataclass
class Schedule:
    """A scheduler's result: the order of op node ids, its peak and how long it took to find."""

    order: list[int]
    name: str
    peak: int = 0  # bytes, recomputed by ``finish``
    seconds: float = 0.0  # time the scheduler took
    info: dict = field(default_factory=dict)


class Scheduler:
    """Base class: subclasses implement ``order(g)``; ``run`` times it and computes the peak."""

    name = "base"

    def order(self, g: Graph) -> list[int]:
        raise NotImplementedError

    def run(self, g: Graph, cost: CostModel | None = None) -> Schedule:
        """The strategy's order; on a graph with swaps, its copies are then placed on the copy
        stream (``placement.place_copies``, timed with ``cost``, default the analytic model)."""
        t0 = time.perf_counter()
        order = self.order(g)
        if has_copies(g):
            order = place_copies(g, order, cost)
        dt = time.perf_counter() - t0
        return finish(g, order, self.name, dt, cost=cost)


def finish(g: Graph, order: list[int], name: str, seconds: float, cost: CostModel | None = None,
           **info) -> Schedule:
    """The Schedule of a checked ``order`` with its peak: the default memory model's, or on a graph
    with swaps the simulator's (copies free their input when they complete)."""
    check_schedule(g, order)
    if has_copies(g):
        peak = simulate(g, order, cost, validate=False).peak
    else:
        peak = memory_profile(g, order, validate=False).peak
    return Schedule(list(order), name, peak, seconds, dict(info))


def op_ids(g: Graph) -> list[int]:
    """The op node ids of ``g`` (every node but the placeholders), in node order."""
    return [n.id for n in g if n.kind != NodeKind.PLACEHOLDER]
