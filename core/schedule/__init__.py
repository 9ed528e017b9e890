"""Schedulers: one interface (``Scheduler.run(graph) -> Schedule``), many strategies."""

from .base import SCHEDULERS, Schedule, Scheduler, finish, get_scheduler

__all__ = ["SCHEDULERS", "Schedule", "Scheduler", "finish", "get_scheduler"]
