"""``magis transform``: apply rules by hand to a graph file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from core.fmt import format_bytes, plural
from core.ir import io

from ..specs import load_graph


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis transform`` to the sub-commands ``sub``."""
    s = sub.add_parser("transform", help="apply rules by hand (fission, rematerialization, swapping) to a graph file",
                       description="Apply rule applications in command-line order and write the new graph. "
                                   "TENSOR is a node name (NAME#J for output J of a multi-output op), USER a "
                                   "node reading it; node names as `magis info` and the app show them.")
    s.add_argument("file", help="graph file or sample name")
    for flag, rule in transform_options().items():
        s.add_argument(flag, action=_Step, dest="steps", metavar=rule.option.metavar, default=[],
                       help=f"{rule.option.help} (repeatable)")
    s.add_argument("-o", "--output", required=True, type=Path, help="the transformed graph file")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(fn=cmd_transform)


def transform_options() -> dict[str, Any]:
    """``magis transform``'s options: option flag -> the rule that declares it (``Rule.option``)."""
    from core.transform.registry import RULES

    return {r.option.flag: r for r in RULES.values() if r.option is not None}


class _Step(argparse.Action):
    """Collects rule options in command-line order (``--remat a:b --swap c:d`` applies remat first)."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = list(getattr(namespace, "steps", None) or [])
        steps.append((transform_options()[option_string].name, values))
        namespace.steps = steps


def cmd_transform(a: argparse.Namespace) -> dict[str, Any]:
    """``magis transform``: apply rules by hand (node names from ``magis info`` / the app) and write
    the transformed graph; peak and latency before and after, traced order with placed copies."""
    from core.schedule import get_scheduler
    from core.simulate import simulate
    from core.transform.manual import apply_by_names
    from core.transform.registry import get_rule

    if not a.steps:
        raise ValueError(f"nothing to apply: give {', '.join(transform_options())}")
    g = load_graph(a.file)
    before = simulate(g, get_scheduler("traced").run(g).order)
    ftree = None
    if any(get_rule(rule).needs_ftree for rule, _ in a.steps):
        from core.analysis.ftree import build_ftree

        ftree = build_ftree(g)  # node ids refer to the F-Tree of the input graph (`magis ftree`)
    done = []
    for rule, value in a.steps:
        where = None
        if get_rule(rule).needs_schedule:  # e.g. the readers after the peak of the traced order as it stands
            from core.transform.rule import Where

            order = get_scheduler("traced").run(g).order
            where = Where({v: i for i, v in enumerate(order)}, tuple(simulate(g, order).memory.peak_steps))
        app, desc = apply_by_names(g, rule, value, ftree, where)
        done.append({"rule": rule, "spec": value, "application": str(app), "change": desc})
        if not a.json:
            print(f"{rule} {value}: {desc}", file=sys.stderr)
    g.lint()
    g.meta["transforms"] = list(g.meta.get("transforms", [])) + [f"{d['rule']} {d['spec']}" for d in done]
    after = simulate(g, get_scheduler("traced").run(g).order)
    io.save(g, a.output)
    res = {"output": str(a.output), "applied": done, "nodes": len(g),
           "peak_bytes": [before.peak, after.peak], "latency_seconds": [before.latency, after.latency],
           "host_peak_bytes": after.memory.host_peak, "compute_wait_seconds": after.compute_wait}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"wrote {a.output}: {plural(len(done), 'rule application')}, {len(g)} nodes")
        print(f"  peak     {format_bytes(before.peak)} -> {format_bytes(after.peak)}  (traced order)")
        print(f"  latency  {before.latency * 1e3:.3f} ms -> {after.latency * 1e3:.3f} ms"
              f"  (compute waits {after.compute_wait * 1e3:.3f} ms for loads)")
        if after.memory.host_peak:
            print(f"  host     {format_bytes(after.memory.host_peak)} swapped out at most")
    return res
