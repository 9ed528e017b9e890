"""Schedulers: one interface (``Scheduler.run(graph) -> Schedule``), many strategies."""

from .base import Schedule, Scheduler, finish
from .registry import SCHEDULERS, get_scheduler

__all__ = ["SCHEDULERS", "Schedule", "Scheduler", "finish", "get_scheduler"]
