"""The one interface of the peer methods: ``Peer.run(g, cost, ...) -> PeerRun`` (its plans and
the points it could not produce), ``Peer.plans(...)`` the plans alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...cost.model import AnalyticCost, CostModel
from ...ir.graph import Graph
from ..plan import Plan
from .common import Failure

Progress = Callable[[str], None]


@dataclass
class PeerRun:
    """What one method produced on one graph."""

    method: str
    plans: list[Plan]
    failures: list[Failure] = field(default_factory=list)  # budgets infeasible, not solved in time, ...
    seconds: float = 0.0


class Peer:
    """A peer method (one file each in this package).  Subclasses implement ``_run`` and say
    what they are (``name``, ``paper``); keyword options are the method's own parameters."""

    name = "peer"
    paper = ""

    def run(self, g: Graph, cost: CostModel | None = None, *, time_budget: float = 60.0,
            progress: Progress | None = None, **options: Any) -> PeerRun:
        t0 = time.perf_counter()
        cost = cost or AnalyticCost("rtx3090")
        say = progress or (lambda _m: None)
        plans, failures = self._run(g, cost, time_budget=time_budget, progress=say, **options)
        dt = time.perf_counter() - t0
        for p in plans:
            p.stats.setdefault("seconds", round(dt / max(len(plans), 1), 3))
        return PeerRun(self.name, plans, failures, dt)

    def plans(self, g: Graph, cost: CostModel | None = None, *, time_budget: float = 60.0,
              progress: Progress | None = None, **options: Any) -> list[Plan]:
        return self.run(g, cost, time_budget=time_budget, progress=progress, **options).plans

    def _run(self, g: Graph, cost: CostModel, *, time_budget: float, progress: Progress,
             **options: Any) -> tuple[list[Plan], list[Failure]]:
        raise NotImplementedError


def eager_peak(g: Graph, cost: CostModel) -> int:
    """The simulated peak of ``g`` in the traced order (what budgets are fractions of)."""
    from ...simulate import simulate
    from .common import traced_order

    return simulate(g, traced_order(g), cost).peak


__all__ = ["Peer", "PeerRun", "Progress", "eager_peak"]
