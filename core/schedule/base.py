"""The one scheduling interface: a Scheduler turns a Graph into a Schedule (a topological order of
its ops).  Strategies live in their own modules; ``registry`` lists them by name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..analysis.lifetimes import check_schedule, memory_profile
from ..ir.graph import Graph, NodeKind


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

    def run(self, g: Graph) -> Schedule:
        t0 = time.perf_counter()
        order = self.order(g)
        dt = time.perf_counter() - t0
        return finish(g, order, self.name, dt)


def finish(g: Graph, order: list[int], name: str, seconds: float, **info) -> Schedule:
    """The Schedule of a checked ``order`` with its peak under the default memory model."""
    check_schedule(g, order)
    return Schedule(list(order), name, memory_profile(g, order, validate=False).peak, seconds, dict(info))


def op_ids(g: Graph) -> list[int]:
    """The op node ids of ``g`` (every node but the placeholders), in node order."""
    return [n.id for n in g if n.kind != NodeKind.PLACEHOLDER]
