"""``magis`` command line.

    magis import SPEC -o FILE [--forward] [--sgd LR]   capture a sample or path/to/file.py:factory
    magis info FILE [--device NAME] [--json]           nodes, weights, baseline peak, latency, hot-spots
    magis schedule FILE --method NAME [--json]         peak bytes of a scheduler's order and its run time
    magis export FILE [--schedule NAME] -o script.py   runnable PyTorch script of a graph + schedule
    magis verify SPEC [--schedule NAME]                eager PyTorch vs exported script: errors and peaks
    magis app [FILE] [--sample NAME] [--port N]        the web app (127.0.0.1 by default)

Errors a user can cause print as one line on stderr (exit status 2), never a traceback.

The command line is an entry point of the product, like the web app: it wires core to the samples
and to user files (``app.specs`` resolves what the user names), so it lives here and not in core.
``python -m app.cli`` runs it without the installed ``magis`` script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from core.fmt import format_bytes, terminal_safe
from core.ir import io
from core.ir.graph import GraphError

from .specs import capture_spec, load_graph, verify_spec

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # samples are built from configs, never downloaded
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def cmd_import(a: argparse.Namespace) -> dict[str, Any]:
    """``magis import``: capture a model spec and write its graph file."""
    t0 = time.perf_counter()
    print(f"capturing {a.spec} ({'forward' if a.forward else 'training'}) ...", file=sys.stderr)
    g = capture_spec(a.spec, training=not a.forward, sgd_lr=a.sgd)
    io.save(g, a.output)
    res = {"output": str(a.output), "nodes": len(g), "seconds": round(time.perf_counter() - t0, 2)}
    print(json.dumps(res) if a.json else f"wrote {a.output}: {len(g)} nodes in {res['seconds']} s")
    return res


def cmd_info(a: argparse.Namespace) -> dict[str, Any]:
    """``magis info``: the graph summary (``core.summary``), as text or JSON."""
    from core.summary import graph_info

    g = load_graph(a.file)
    cost = None
    if a.measured:
        from core.cost.measured import MeasuredCost

        print("timing ops on this machine (cached for later runs) ...", file=sys.stderr)
        cost = MeasuredCost()
    info = graph_info(g, device=a.device, top=a.top, cost=cost)
    if cost is not None:
        cost.save()
    if a.json:
        print(json.dumps(info, indent=1))
    else:
        t = terminal_safe  # names come from the file: never raw escape sequences on the terminal
        print(f"{t(info['name'])}: {info['nodes']} ops ({t(info['mode'])}), device {info['device']}")
        print(f"  weights          {format_bytes(info['weight_bytes'])}")
        print(f"  baseline peak    {format_bytes(info['baseline_peak_bytes'])}  (traced order, free after last use)")
        print(f"  est. latency     {info['latency_seconds'] * 1e3:.2f} ms")
        print("  top hot-spots:")
        for h in info["hotspots"]:
            print(f"    {format_bytes(h['bytes']):>12}  {h['kind']:<10} {t(h['name'])}  {h['shape']}  "
                  f"[{t(h['module'])}]")
        if info["ops_without_dim_links"]:
            print(f"  ops without dim links (block fission): {t(', '.join(info['ops_without_dim_links']))}")
    return info


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


def cmd_export(a: argparse.Namespace) -> dict[str, Any]:
    """``magis export``: the runnable PyTorch script of a graph under a schedule."""
    from core.codegen import export_script
    from core.schedule import get_scheduler

    g = load_graph(a.file)
    s = get_scheduler(a.schedule).run(g)
    path = export_script(g, s.order, a.output, schedule_name=a.schedule)
    res = {"output": str(path), "bytes": Path(path).stat().st_size, "ops": len(s.order),
           "simulated_peak_bytes": s.peak}
    print(json.dumps(res) if a.json else f"wrote {path} ({res['bytes']} bytes, {len(s.order)} ops)")
    return res


def cmd_verify(a: argparse.Namespace) -> dict[str, Any]:
    """``magis verify``: eager PyTorch vs the exported script of a model spec."""
    res = verify_spec(a.spec, schedule=a.schedule, seed=a.seed)
    print(json.dumps(res, indent=1))
    return res


def cmd_app(a: argparse.Namespace) -> None:
    """``magis app``: serve the web app (imported here: the other commands never load Dash)."""
    from .main import serve

    serve(graph_file=a.file, sample=a.sample, host=a.host, port=a.port, debug=a.debug)


def build_parser() -> argparse.ArgumentParser:
    """The ``magis`` argument parser; each sub-command sets ``fn`` to its ``cmd_*`` function."""
    p = argparse.ArgumentParser(prog="magis", description="MAGIS Studio: memory optimizer for PyTorch graphs")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("import", help="capture a PyTorch model as a graph file")
    s.add_argument("spec", help="a sample name or path/to/file.py:factory")
    s.add_argument("-o", "--output", required=True, type=Path)
    s.add_argument("--forward", action="store_true", help="forward pass only (default: training step)")
    s.add_argument("--sgd", type=float, default=None, metavar="LR", help="append an SGD update")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_import)

    s = sub.add_parser("info", help="summary of a graph file")
    s.add_argument("file")
    s.add_argument("--device", default="rtx3090")
    s.add_argument("--top", type=int, default=5, help="hot-spots to list")
    s.add_argument("--measured", action="store_true",
                   help="latency from timing each op on this machine (CPU or CUDA), cached on disk")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("schedule", help="run a scheduler on a graph file")
    s.add_argument("file")
    s.add_argument("--method", default="traced")
    s.add_argument("--time-budget", type=float, default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("export", help="write a runnable PyTorch script for a graph + schedule")
    s.add_argument("file")
    s.add_argument("--schedule", default="traced")
    s.add_argument("-o", "--output", required=True, type=Path)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("verify", help="compare eager PyTorch with the exported script")
    s.add_argument("spec")
    s.add_argument("--schedule", default="traced")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=cmd_verify)

    s = sub.add_parser("app", help="launch the web app")
    s.add_argument("file", nargs="?", default=None)
    s.add_argument("--sample", default=None)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8050)
    s.add_argument("--debug", action="store_true")
    s.set_defaults(fn=cmd_app)
    return p


def error_line(e: BaseException, limit: int = 400) -> str:
    """One terminal-safe line for an error a user caused (newlines and escapes written out)."""
    text = terminal_safe(" ".join(str(e).split("\n")))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    """Run ``magis`` with ``argv`` (default: the process arguments); the exit status."""
    for stream in (sys.stdout, sys.stderr):  # whatever the terminal's encoding: never a codec error
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except (GraphError, ValueError, FileNotFoundError, PermissionError) as e:
        print(f"magis: error: {error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("magis: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
