"""``magis sweep``: the M-Optimizer over workloads x memory limits x devices, in parallel."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from core.fmt import format_bytes, terminal_safe

from ..specs import sweep_workload
from .common import LimitNotReached, _cost_device, _cost_option, _names, _split, error_line


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis sweep`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE, DEVICES

    s = sub.add_parser("sweep", help="optimize many workloads x memory limits x devices in parallel",
                       description="One `magis optimize` run per workload, memory limit and device, each in "
                                   "its own process (or a task on a Ray cluster). Writes one plan file per job "
                                   "(DIR/WORKLOAD.DEVICE.LIMIT.plan.json.gz) and DIR/sweep.json (the parameters "
                                   "and a row per finished job); progress goes to stderr, a table to stdout. "
                                   "Ctrl-C stops submitting jobs and keeps the finished rows.")
    s.add_argument("workloads", nargs="+", metavar="WORKLOAD[,WORKLOAD...]",
                   help="graph files or sample names (their committed graphs), comma-separated or as "
                        "separate arguments")
    s.add_argument("--memory-limits", action="append", metavar="LIMIT[,LIMIT...]",
                   help="memory limits: a SIZE with a unit (8GiB, 512MiB, 4096B) or a FRACTION "
                        "(0 < FRACTION <= 1) of each graph's own eager peak, or `pareto` for a frontier run "
                        "(repeatable)")
    s.add_argument("--pareto", action="store_true", help="also a frontier run per workload and device")
    s.add_argument("--devices", action="append", metavar="NAME[,NAME...]",
                   help=f"device profiles for the latency estimate: {_names(DEVICES)} (default: {DEFAULT_PROFILE})")
    _cost_option(s)
    s.add_argument("--time-budget", type=float, default=60.0, metavar="SECONDS",
                   help="search time of each job (default: %(default)s)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--processes", type=int, default=None, metavar="N",
                       help=f"jobs at a time on this machine (default: one per CPU, {os.cpu_count()} here)")
    where.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="run the jobs on the Ray cluster at ADDRESS (auto, HOST:PORT or ray://HOST:10001; "
                            "`local` starts a local instance); needs pip install 'magis-studio[ray]' here and "
                            "magis-studio on the cluster")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="DIR",
                   help="directory for the plan files and sweep.json")
    s.add_argument("--json", action="store_true", help="print sweep.json's content instead of the table")
    s.set_defaults(fn=cmd_sweep)


def _sweep_cells(r: dict[str, Any]) -> list[str]:
    """A sweep row as the table's cells (workload, device, limit, peak, ratio, latency, ratio,
    reached, states, seconds)."""
    head = [terminal_safe(r["workload"]), r["device"], terminal_safe(r["limit"])]
    if r["error"]:
        return [*head, "error", "", "", "", "", "", f"{r['seconds']:.1f}"]
    reached = "-" if r["reached"] is None else "yes" if r["reached"] else "no"
    if r["stopped"] == "cancelled":
        reached += " (cancelled)"
    return [*head, format_bytes(r["peak_bytes"]), f"{r['peak_ratio']:.3f}x", f"{r['latency_seconds'] * 1e3:.3f} ms",
            f"{r['latency_ratio']:.3f}x", reached, str(r["states"]), f"{r['seconds']:.1f}"]


SWEEP_COLUMNS = ["workload", "device", "limit", "peak", "x eager", "latency", "x eager", "reached", "states", "s"]


def cmd_sweep(a: argparse.Namespace) -> dict[str, Any]:
    """``magis sweep``: the M-Optimizer over workloads x memory limits x devices, each run in its own
    process (or Ray task); one progress line per finished job on stderr, a table at the end; Ctrl-C
    stops submitting and keeps the finished rows."""
    import signal

    from core.cost.devices import DEFAULT_PROFILE, get_device
    from core.search.sweep import PARETO, LocalRunner, RayRunner, SweepError, parse_limit, run_sweep

    texts = list(dict.fromkeys(_split(a.memory_limits) + ([PARETO] if a.pareto else [])))
    if not texts:
        raise ValueError("give --memory-limits, --pareto or both")
    try:
        limits = [parse_limit(t) for t in texts]
    except SweepError as e:
        raise ValueError(f"--memory-limits {e}") from None
    _cost_device(a.cost, None)
    try:
        devices = [get_device(d).name for d in _split(a.devices or [DEFAULT_PROFILE if a.cost in ("analytic", "compiled")
                                                                    else _cost_device(a.cost, None)])]
        devices = [_cost_device(a.cost, d) for d in devices]
    except ValueError as e:
        raise ValueError(f"--devices: {str(e).removeprefix('--device: ')}") from None
    if not devices:
        raise ValueError("--devices: give at least one device")
    if a.time_budget <= 0:
        raise ValueError("--time-budget must be positive")
    names = list(dict.fromkeys(_split(a.workloads)))
    if not names:
        raise ValueError("give at least one workload")
    workloads = [sweep_workload(n) for n in names]
    runner = RayRunner(a.ray) if a.ray is not None else LocalRunner(a.processes)
    cancel = threading.Event()

    def interrupt(*_: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("stopping: no new jobs; the running ones keep their best so far (Ctrl-C again quits now)",
              file=sys.stderr, flush=True)

    def progress(r: dict[str, Any], done: int, total: int) -> None:
        cells = _sweep_cells(r)
        frontier = r["limit"] == PARETO
        if r["error"]:
            what = f"error: {error_line(r['error'])}"
        else:
            what = (f"{'frontier of ' + str(r['points']) + ' point(s), lowest peak' if frontier else 'peak'} "
                    f"{cells[3]} ({cells[4]})  latency {cells[5]} ({cells[6]})  "
                    f"{'' if frontier else 'reached ' + cells[7] + '  '}{r['states']} states")
        print(f"[{done:>{len(str(total))}}/{total}] {cells[0]} {cells[1]} {cells[2]}: {what}  {r['seconds']:.1f} s",
              file=sys.stderr, flush=True)

    jobs = len(workloads) * len(devices) * len(limits)
    print(f"sweeping {len(workloads)} workload(s) x {len(limits)} limit(s) x {len(devices)} device(s) = {jobs} "
          f"job(s), {a.time_budget:g} s each, {runner.describe()} (Ctrl-C stops and keeps the finished rows)",
          file=sys.stderr, flush=True)
    old = signal.signal(signal.SIGINT, interrupt)
    try:
        res = run_sweep(workloads, limits, devices, a.output, time_budget=a.time_budget, runner=runner,
                        progress=progress, cancel=cancel, cost=a.cost)
    finally:
        signal.signal(signal.SIGINT, old)
    doc = res.to_dict()
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        table = [SWEEP_COLUMNS] + [_sweep_cells(r) for r in res.rows]
        widths = [max(len(row[c]) for row in table) for c in range(len(SWEEP_COLUMNS))]
        for row in table:
            print("  ".join(cell.ljust(w) if c < 3 else cell.rjust(w)
                            for c, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        print(f"wrote {res.path} ({len(res.rows)} of {res.jobs} jobs) and the plan files next to it")
    if res.interrupted:
        raise KeyboardInterrupt
    if res.errors:
        first = res.errors[0]
        raise ValueError(f"{len(res.errors)} of {res.jobs} jobs failed ({first['workload']} {first['device']} "
                         f"{first['limit']}: {first['error']}); the rows are in {res.path}")
    short = [r for r in res.rows if r.get("reached") is False]
    if short:
        first = short[0]
        raise LimitNotReached(f"{len(short)} of {res.jobs} memory limits not reached ({first['workload']} "
                              f"{first['device']} {first['limit']}; the reached column says which); the rows "
                              f"and plan files are in {res.path}")
    return doc
