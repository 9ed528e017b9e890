"""``magis export``: the runnable PyTorch script of a graph under a schedule, or of a plan."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..specs import load_graph
from .common import _cost, _plan_graph, _plan_options, _schedules


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis export`` to the sub-commands ``sub``."""
    schedules = _schedules()

    s = sub.add_parser("export", help="write a runnable PyTorch script for a graph + schedule")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--schedule", default="traced", metavar="NAME",
                   help=f"order of the ops in the script: {schedules} (default: %(default)s)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="SCRIPT", help="the .py file to write")
    _plan_options(s, "export a plan (from `magis optimize`) of FILE instead of a schedule")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_export)


def cmd_export(a: argparse.Namespace) -> dict[str, Any]:
    """``magis export``: the runnable PyTorch script of a graph under a schedule, or of a plan."""
    from core.codegen import export_script
    from core.schedule import get_scheduler
    from core.simulate import simulate

    if a.device is not None:
        _cost(a)  # an unknown --device is refused before any work
    from core.search.plan import sim_options

    g = load_graph(a.file)
    plan_device = None
    opts: dict[str, Any] = {}
    if a.plan is not None:
        g, plan, plan_device = _plan_graph(g, a.plan, a.point)
        order, name = plan.order, f"plan {plan.method} {plan.label}".strip()
        opts = sim_options(plan)  # SwapAdvisor's three streams and waits
    else:
        order, name = get_scheduler(a.schedule).run(g).order, a.schedule
    cost = _cost(a, plan_device)
    sim = simulate(g, order, cost, **opts)  # the script's release points and its header's numbers
    path = export_script(g, order, a.output, schedule_name=name, cost=cost, sim=sim, **opts)
    res = {"output": str(path), "bytes": Path(path).stat().st_size, "ops": len(order),
           "device": cost.device.name, "simulated_peak_bytes": sim.peak,
           "simulated_latency_seconds": sim.latency}
    print(json.dumps(res) if a.json else f"wrote {path} ({res['bytes']} bytes, {len(order)} ops)")
    return res
