"""The one scheduling interface: a Scheduler turns a Graph into a Schedule (a topological order of
its ops).  Strategies live in their own modules and register here by name."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..analysis.lifetimes import check_schedule, memory_profile
from ..ir.graph import Graph, NodeKind


@dataclass
class Schedule:
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
    check_schedule(g, order)
    return Schedule(list(order), name, memory_profile(g, order, validate=False).peak, seconds, dict(info))


def op_ids(g: Graph) -> list[int]:
    return [n.id for n in g if n.kind != NodeKind.PLACEHOLDER]


SCHEDULERS: dict[str, Callable[..., Scheduler]] = {}


def register(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        cls.name = name
        SCHEDULERS[name] = cls
        return cls

    return deco


# modules that register strategies; a module that is not present is skipped
STRATEGY_MODULES = ("baselines", "random_topo", "brute_force", "serenity", "hmcos", "incremental")


def get_scheduler(name: str, **kwargs) -> Scheduler:
    import importlib

    for mod in STRATEGY_MODULES:
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{mod}":
                raise
    if name not in SCHEDULERS:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(sorted(SCHEDULERS))}")
    return SCHEDULERS[name](**kwargs)
