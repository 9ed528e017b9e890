"""Every scheduling strategy by name: ``get_scheduler(name, **options)`` builds one.

The list is explicit -- importing a strategy module registers nothing -- and it is the only module
that imports all of them (none of them imports it back).
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry
from .base import Scheduler
from .baselines import ReversePostOrder, TracedOrder
from .brute_force import BruteForce
from .hmcos import HMCOS
from .incremental import IncrementalFull
from .random_topo import RandomTopological
from .serenity import Serenity

SCHEDULERS: Registry[type[Scheduler]] = Registry("schedule", sort_known=True)  # name -> the strategy's class
for _cls in (TracedOrder, ReversePostOrder, RandomTopological, BruteForce, Serenity, HMCOS, IncrementalFull):
    SCHEDULERS.register(_cls.name, _cls)


def get_scheduler(name: str, **kwargs: Any) -> Scheduler:
    """A new scheduler of strategy ``name`` with ``kwargs`` as its options (ValueError for an
    unknown name)."""
    return SCHEDULERS.get(name)(**kwargs)


__all__ = ["SCHEDULERS", "get_scheduler"]
