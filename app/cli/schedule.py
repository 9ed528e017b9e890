"""``magis schedule``: one scheduler's peak and run time on a graph file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from core.fmt import format_bytes, terminal_safe

from ..specs import load_graph
from .common import _names, _schedules


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis schedule`` to the sub-commands ``sub``."""
    import inspect

    from core.schedule.registry import SCHEDULERS

    schedules = _schedules()
    timed = [n for n, cls in SCHEDULERS.items() if "time_budget" in inspect.signature(cls).parameters]

    s = sub.add_parser("schedule", help="run a scheduler on a graph file")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--method", default="traced", metavar="NAME",
                   help=f"scheduler: {schedules} (default: %(default)s)")
    s.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help=f"time limit of the schedulers that take one: {_names(timed)}")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_schedule)


def cmd_schedule(a: argparse.Namespace) -> dict[str, Any]:
    """``magis schedule``: one scheduler's peak and run time."""
    from core.schedule import get_scheduler

    g = load_graph(a.file)
    kwargs = {"time_budget": a.time_budget} if a.time_budget is not None else {}
    try:
        sched = get_scheduler(a.method, **kwargs)
    except TypeError:
        sched = get_scheduler(a.method)
    s = sched.run(g)
    res = {"graph": g.name, "method": a.method, "peak_bytes": s.peak, "seconds": round(s.seconds, 4),
           **{k: v for k, v in s.info.items() if isinstance(v, (int, float, str, bool))}}
    print(json.dumps(res) if a.json else
          f"{terminal_safe(a.method)}: peak {format_bytes(s.peak)} ({s.peak} B), scheduled in {s.seconds:.3f} s")
    return res
