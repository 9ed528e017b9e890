"""Every method by name (``METHODS``): MAGIS's M-Optimizer, the peers (``search.peers``), PyTorch's
eager order, the baselines a user has (micro-batching, activation offloading), and the schedulers
(``schedule.registry``) as methods of one point each.

The one list of methods.  A method describes itself (``peers.base.Method``: label, colour, marker,
family, needs, size caps), and every table of methods -- the app's Pareto legend, ``bench/``'s
tables and figures, the samples' precomputed frontiers -- is read from here.  Adding a method is
its file plus one ``register_method`` line.  ``run_method`` runs one on a graph: a method that
needs what the caller does not have, or refuses the graph, gives a failure that says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..cost.devices import DEFAULT_PROFILE
from ..cost.model import AnalyticCost, CostModel
from ..ir.graph import Graph
from ..registry import Registry
from ..schedule.registry import get_scheduler
from ..simulate import simulate
from .magis_pool import MagisPool
from .peers import DTR, Checkmate, Eager, Microbatch, MicrobatchCkpt, Offload, OffloadCkpt, SqrtN, TorchMinCut
from .peers.base import Method, MethodRun, Progress
from .peers.common import Failure
from .peers.swapadvisor import Ideal, ODSwap, SwapAdvisor
from .plan import Plan


def _check_method(name: str, m: Method) -> None:
    if name != m.name:
        raise ValueError(f"method {m.name!r} registered as {name!r}: a method goes by its own name")
    if not m.label:
        raise ValueError(f"method {m.name!r} needs a label")


METHODS: Registry[Method] = Registry("method", check=_check_method)


def register_method(m: Method) -> Method:
    """Add ``m`` (ValueError if its name is taken or it has no label)."""
    return METHODS.register(m.name, m)


def unregister_method(name: str) -> None:
    METHODS.unregister(name)


def get_method(name: str) -> Method:
    """The method called ``name`` (ValueError listing the known ones for an unknown name)."""
    return METHODS.get(name)


def methods_of(*families: str) -> list[str]:
    """Names of the methods of ``families``, in registry order."""
    return [k for k, m in METHODS.items() if m.family in families]


class Magis(Method):
    """MAGIS's M-Optimizer (``moptimizer.optimize(pareto=True)``): its frontier, warm start included in
    the time budget; ``extra`` holds its records (one per iteration) and its plan file's meta."""

    name = "magis"
    label = "MAGIS"
    colour = "#7c3aed"
    symbol = "circle"
    family = "magis"
    paper = "Chen et al. 2024, MAGIS (ASPLOS)"

    def _run(self, g, cost, *, time_budget, progress, on_record: Callable | None = None, **_):
        from .moptimizer import optimize

        pf = optimize(g, pareto=True, time_budget=time_budget, device=cost.device.name, progress=on_record)
        return pf.points[:-1], [], {"records": pf.records, "meta": pf.meta, "eager": pf.points[-1]}


class Scheduled(Method):
    """A scheduler as a method: the imported graph untransformed, in the scheduler's order -- one
    point (memory-aware re-ordering alone).  ``max_nodes``: the size above which it is not run
    (an exact DP's state space)."""

    family = "scheduler"

    def __init__(self, scheduler: str, label: str, colour: str, symbol: str, paper: str,
                 max_nodes: int | None = None) -> None:
        self.name, self.scheduler, self.label, self.colour, self.symbol, self.paper = (
            scheduler, scheduler, label, colour, symbol, paper)
        self.max_nodes = max_nodes

    def refuse(self, g: Graph, cost: CostModel, **_) -> str | None:
        if self.max_nodes is not None and len(g) > self.max_nodes:
            return f"not run on {len(g)} nodes (> {self.max_nodes}: its search space grows too fast)"
        return None

    def _run(self, g, cost, *, time_budget, progress, **options):
        s = get_scheduler(self.scheduler, **options).run(g, cost)
        sim = simulate(g, s.order, cost)
        return [Plan(self.name, [], list(s.order), sim.metrics(), f"{self.label} order",
                     {"scheduler_seconds": round(s.seconds, 3)})], []


for _m in (Magis(), Eager(), Microbatch(), Offload(), MicrobatchCkpt(), OffloadCkpt(), SqrtN(), DTR(), Checkmate(), TorchMinCut(),
           Scheduled("rpo", "reverse post-order", "#64748b", "triangle-down", "Depth-first reverse post-order"),
           Scheduled("serenity", "Serenity DP", "#0891b2", "hexagon", "Ahn et al. 2020, Serenity (MLSys)",
                     max_nodes=800),
           Scheduled("hmcos", "HMCOS", "#be185d", "pentagon", "Wang et al. 2022, HMCOS (DAC)", max_nodes=5000)):
    register_method(_m)
for _m in (SwapAdvisor(), ODSwap(), Ideal(), MagisPool()):  # SwapAdvisor, its baselines, MAGIS with its planner
    register_method(_m)

PEER_FAMILIES = ("peer", "baseline")


def run_method(name: str, g: Graph, cost: CostModel | None = None, *, time_budget: float = 60.0,
               progress: Progress | None = None, model: Any = None, **options: Any) -> MethodRun:
    """Method ``name`` on ``g``: a ``MethodRun`` whose failures say why where it gives no point --
    it needs the model's code and ``model`` is None (a graph file alone cannot be traced again), or
    it refuses the graph (``Method.refuse``)."""
    m = get_method(name)
    cost = cost or AnalyticCost(DEFAULT_PROFILE)
    if "model" in m.needs:
        if model is None:
            return MethodRun(name, [], [Failure("all", "not run: it traces the model again, and only the graph "
                                                       "is at hand (give the model, e.g. a sample or MODEL.py:fn)")])
        options["model"] = model
    t0 = time.perf_counter()
    why = m.refuse(g, cost, **options)
    if why is not None:
        return MethodRun(name, [], [Failure("all", why)], time.perf_counter() - t0)
    left = max(0.0, time_budget - (time.perf_counter() - t0))  # a size check counts against the budget
    return m.run(g, cost, time_budget=left, progress=progress, **options)


__all__ = ["METHODS", "PEER_FAMILIES", "Magis", "Method", "MethodRun", "Scheduled", "get_method", "methods_of",
           "register_method", "run_method", "unregister_method"]


def label_of(name: str) -> str:
    """The label of method ``name`` (its name where it is not registered: a plan file from elsewhere)."""
    return METHODS.get(name).label if name in METHODS else name


__all__ += ["label_of"]
