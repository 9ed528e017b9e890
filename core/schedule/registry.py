"""Every scheduling strategy by name: ``get_scheduler(name, **options)`` builds one.

The list is explicit -- importing a strategy module registers nothing -- and it is the only module
that imports all of them (none of them imports it back).
"""

from __future__ import annotations

from typing import Any

from .base import Scheduler
from .baselines import ReversePostOrder, TracedOrder
from .brute_force import BruteForce
from .hmcos import HMCOS
from .incremental import IncrementalFull
from .random_topo import RandomTopological
from .serenity import Serenity

SCHEDULERS: dict[str, type[Scheduler]] = {
    "traced": TracedOrder,
    "rpo": ReversePostOrder,
    "random": RandomTopological,
    "brute": BruteForce,
    "serenity": Serenity,
    "hmcos": HMCOS,
    "incremental": IncrementalFull,
}


def get_scheduler(name: str, **kwargs: Any) -> Scheduler:
    """A new scheduler of strategy ``name`` with ``kwargs`` as its options (ValueError for an
    unknown name)."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(sorted(SCHEDULERS))}")
    return SCHEDULERS[name](**kwargs)


__all__ = ["SCHEDULERS", "get_scheduler"]
