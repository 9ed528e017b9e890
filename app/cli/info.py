"""``magis info``: the summary of a graph file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.fmt import format_bytes, plural, terminal_safe

from ..specs import load_graph
from .common import _devices_help


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis info`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE

    devices = _devices_help()

    s = sub.add_parser("info", help="summary of a graph file")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("--top", type=int, default=5, metavar="N", help="hot-spots to list (default: %(default)s)")
    s.add_argument("--measured", action="store_true",
                   help="latency from timing each op on this machine (CPU or CUDA), cached on disk")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(fn=cmd_info)


def cmd_info(a: argparse.Namespace) -> dict[str, Any]:
    """``magis info``: the graph summary (``core.summary``), as text or JSON."""
    from core.summary import floor_line, graph_info

    g = load_graph(a.file)
    cost = None
    if a.measured:
        from core.cost.measured import MeasuredCost

        print("timing ops on this machine (cached for later runs) ...", file=sys.stderr)
        cost = MeasuredCost()
    info = graph_info(g, device=a.device, top=a.top, cost=cost)
    if cost is not None:
        cost.save()
    from core.cost import AnalyticCost
    from core.schedule.baselines import TracedOrder
    from core.simulate import predict_reserved

    pr = predict_reserved(g, TracedOrder().order(g), cost or AnalyticCost(a.device)).replay
    from core.codegen.target import attention_kernels

    info["attention_kernels"] = attention_kernels(g)
    info.update({"baseline_reserved_peak_bytes": pr.reserved_peak, "baseline_allocated_peak_bytes": pr.allocated_peak,
                 "reserved_segments": pr.segments_peak, "reserved_fragmentation": round(pr.fragmentation, 4)})
    if a.json:
        print(json.dumps(info, indent=1))
    else:
        t = terminal_safe  # names come from the file: never raw escape sequences on the terminal
        print(f"{t(info['name'])}: {info['nodes']} ops ({t(info['mode'])}), device {info['device']}")
        print(f"  weights          {format_bytes(info['weight_bytes'])}")
        print(f"  baseline peak    {format_bytes(info['baseline_peak_bytes'])}  (traced order, free after last use)")
        print(f"  reserved peak    {format_bytes(info['baseline_reserved_peak_bytes'])}  (predicted for PyTorch's CUDA "
              f"caching allocator: {plural(info['reserved_segments'], 'segment')}, "
              f"{info['reserved_fragmentation']:.1%} of it unallocated at its peak)")
        print(f"  {floor_line(info['resident_floor_bytes'], info['resident_floor_by_kind'], info['baseline_peak_bytes'])}")
        print(f"  est. latency     {info['latency_seconds'] * 1e3:.2f} ms")
        print("  top hot-spots:")
        for h in info["hotspots"]:
            print(f"    {format_bytes(h['bytes']):>12}  {h['kind']:<10} {t(h['name'])}  {h['shape']}  "
                  f"[{t(h['module'])}]")
        if info["ops_without_dim_links"]:
            print(f"  ops without dim links (block fission): {t(', '.join(info['ops_without_dim_links']))}")
        if info["attention_kernels"]:
            print("  attention        " + ", ".join(f"{k} {n}" for k, n in info["attention_kernels"].items())
                  + f"  (target {g.meta.get('target', 'cpu')})")
    return info
