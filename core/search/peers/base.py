"""The one interface of every method that produces plans (MAGIS's M-Optimizer, the peers, the
baselines, the schedulers): ``Method.run(g, cost, ...) -> MethodRun`` (its plans and the points it
could not produce).

A method describes itself -- ``name`` (in plan files), ``label``, ``colour`` and ``symbol`` (the
Pareto figure's legend and markers, the tables), ``family``, ``paper``, what it ``needs`` beyond the
graph (``"model"``: the model's code, to trace again) and ``refuse`` (why it does not run on a graph,
e.g. a size cap) -- and the registry (``search.methods``) is the one list of them: every table of
methods in the app, the CLI, ``bench/`` and ``sample_graphs/`` is derived from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...cost.devices import DEFAULT_PROFILE
from ...cost.model import AnalyticCost, CostModel
from ...ir.graph import Graph
from ..plan import Plan
from .common import Failure

# Whether a grid peer (DTR, sqrt(n), offloading, the checkpointed variants) refines its grid while
# its time budget lasts when its caller does not say (``refine=``).  On: every peer spends the
# budget it is given.  The test suite turns it off for its own process (``tests/conftest.py``): the
# tests of the refinement ask for it by name, and the commands it runs as subprocesses (``magis
# compare``, the corpus) keep it on.
REFINE_BY_DEFAULT = True


def refining(refine: bool | None) -> bool:
    """``refine`` as given, else ``REFINE_BY_DEFAULT``."""
    return REFINE_BY_DEFAULT if refine is None else refine

Progress = Callable[[str], None]


@dataclass
class MethodRun:
    """What one method produced on one graph."""

    method: str
    plans: list[Plan]
    failures: list[Failure] = field(default_factory=list)  # budgets infeasible, not solved in time, ...
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # a search's records and meta (MAGIS)


class Method:
    """A method (one file each).  Subclasses implement ``_run`` and say what they are; keyword
    options are the method's own parameters."""

    name = "method"
    label = ""  # legend and table name
    colour = "#6b7280"
    symbol = "circle"  # plotly marker symbol (``bench/plots`` maps it for matplotlib)
    family = "peer"  # "magis" | "peer" | "baseline" | "scheduler"
    paper = ""
    needs: tuple[str, ...] = ()  # "model": the model's code (``model=`` a workload built under fake tensors)

    def refuse(self, g: Graph, cost: CostModel, **options: Any) -> str | None:
        """Why the method is not run on ``g`` (a size cap, say), or None."""
        return None

    def run(self, g: Graph, cost: CostModel | None = None, *, time_budget: float = 60.0,
            progress: Progress | None = None, **options: Any) -> MethodRun:
        t0 = time.perf_counter()
        cost = cost or AnalyticCost(DEFAULT_PROFILE)
        say = progress or (lambda _m: None)
        out = self._run(g, cost, time_budget=time_budget, progress=say, **options)
        plans, failures, extra = out if len(out) == 3 else (*out, {})
        dt = time.perf_counter() - t0
        for p in plans:
            p.stats.setdefault("seconds", round(dt / max(len(plans), 1), 3))
        return MethodRun(self.name, plans, failures, dt, extra)

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


__all__ = ["Method", "MethodRun", "Progress", "eager_peak"]
