"""``magis optimize``: the M-Optimizer's search (or another method at one memory limit), written to a plan file."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from core.fmt import format_bytes, plural

from ..specs import load_graph
from .common import LimitNotReached, _cost_device, _cost_option, _names, optimizer_errors


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis optimize`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE, DEVICES
    from core.search.methods import METHODS

    s = sub.add_parser("optimize", help="search plans that trade memory for latency (the M-Optimizer)",
                       description="MAGIS's best-first search over F-Tree mutations, rematerialization and "
                                   "swapping, each state rescheduled incrementally; writes a plan file "
                                   "(point 0: the answer; the last point: PyTorch's eager order).")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    lim = s.add_mutually_exclusive_group(required=True)
    lim.add_argument("--memory-limit", metavar="SIZE|FRACTION",
                     help="least latency with a peak at most SIZE (with a unit: 8GiB, 512MiB, 4096B) or "
                          "FRACTION (0 < FRACTION <= 1) of the imported peak; a bare number above 1 is "
                          "refused")
    lim.add_argument("--latency-limit", type=float, metavar="FACTOR",
                     help="least memory with a latency at most FACTOR times the imported one (e.g. 1.1)")
    lim.add_argument("--pareto", action="store_true", help="the memory/latency frontier (a sweep of memory limits)")
    s.add_argument("--limit-kind", choices=("live", "reserved"), default="live",
                   help="what --memory-limit bounds: live tensor bytes (default), or the reserved memory predicted "
                        "for PyTorch's CUDA caching allocator (rounding, pools, segments, fragmentation); with "
                        "reserved, the search sweeps the live-bytes frontier and then offers the points whose "
                        "predicted reserved peak is within the limit (a filter at the end of the search)")
    s.add_argument("--time-budget", type=float, default=60.0, metavar="SECONDS",
                   help="search time (default: %(default)s); the best found so far is kept")
    s.add_argument("--device", default=None, metavar="NAME",
                   help=f"device profile for the latency estimate: {_names(DEVICES)} (default: {DEFAULT_PROFILE}; "
                        f"with --cost calibrated or measured, this machine's profile: cpu without a GPU)")
    s.add_argument("--substitutions", action="store_true",
                   help="TASO's substitution rules (merge matmuls / convolutions sharing an input, ...) among "
                        "the search's rules")
    _cost_option(s)
    s.add_argument("--method", dest="optimize_method", default="magis", metavar="NAME",
                   help=f"the method: {_names(METHODS)} (default: magis; another one with --memory-limit, "
                        f"e.g. swapadvisor)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="PLAN",
                   help="plan file to write (.json, or .json.gz to compress)")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_optimize)


def cmd_optimize(a: argparse.Namespace) -> dict[str, Any]:
    """``magis optimize``: the M-Optimizer's search; progress on stderr, Ctrl-C keeps the best found."""
    import signal

    from core.analysis.lifetimes import resident_floor
    from core.cost.choice import make_cost
    from core.search.limits import MemoryLimit
    from core.search.moptimizer import optimize
    from core.search.plan import save_plans
    from core.summary import floor_note

    device = _cost_device(a.cost, a.device)  # an unknown --cost or --device is refused before any work
    memory = None
    if a.memory_limit is not None:
        try:
            memory = MemoryLimit.parse(a.memory_limit)
        except ValueError as e:
            raise ValueError(f"--memory-limit {e}") from None
    reserved = getattr(a, "limit_kind", "live") == "reserved"
    if reserved and memory is None:
        raise ValueError("--limit-kind reserved: give --memory-limit (the limit it applies to)")
    if reserved and getattr(a, "optimize_method", "magis") != "magis":
        raise ValueError(f"--limit-kind reserved works with --method magis only, not {a.optimize_method}")
    g = load_graph(a.file)
    if a.latency_limit is not None and not a.latency_limit >= 1.0:
        raise ValueError(f"--latency-limit {a.latency_limit}: a factor of the imported latency, at least 1")
    if a.time_budget <= 0:
        raise ValueError("--time-budget must be positive")
    cancel = threading.Event()
    last = [0.0]
    started = time.perf_counter()

    def progress(r) -> None:
        now = time.perf_counter() - started
        if now - last[0] >= 1.0:
            last[0] = now
            print(f"  {now:6.1f} s  iteration {r.iteration:5d}  best {format_bytes(r.best_peak)} "
                  f"{r.best_latency * 1e3:.2f} ms  states {r.generated} ({r.deduplicated} duplicates)",
                  file=sys.stderr, flush=True)

    eager_peak: list[int] = []

    def on_stage(st) -> None:
        """One line per stage of the search as it ends: the lowest peak within +10% so far."""
        ratio = f" ({st.peak_at_10pct / eager_peak[0]:.3f}x)" if eager_peak else ""
        print(f"  {time.perf_counter() - started:6.1f} s  {st.name}: lowest peak within +10% latency "
              f"{format_bytes(st.peak_at_10pct)}{ratio}, {st.states} states", file=sys.stderr, flush=True)

    cost = make_cost(a.cost, device, graphs=[g], say=lambda m: print(m, file=sys.stderr, flush=True))
    if getattr(a, "optimize_method", "magis") != "magis":
        return _optimize_with(a, g, cost, device, memory)
    old = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        print(f"optimizing {g.name} ({len(g)} nodes) for {a.time_budget:g} s on {device} ({a.cost} cost) "
              f"(Ctrl-C stops and keeps the best found)", file=sys.stderr, flush=True)
        with optimizer_errors("the M-Optimizer"):
            # a reserved-bytes limit: the frontier is searched on live bytes, then filtered by the
            # predicted reserved peak of each of its points (``_select_reserved``)
            pf = optimize(g, memory_limit=None if reserved else memory, latency_limit=a.latency_limit,
                          pareto=a.pareto or reserved, time_budget=a.time_budget, device=device,
                          progress=progress, cancel=cancel, cost=cost, cost_name=a.cost,
                          substitutions=a.substitutions, on_stage=on_stage,
                          on_start=lambda m: eager_peak.append(max(1, m.root.peak)))
        if hasattr(cost, "save"):
            cost.save()
    finally:
        signal.signal(signal.SIGINT, old)
    if reserved:
        _select_reserved(pf, g, memory)
    save_plans(pf, a.output, graph=g)
    base = pf.points[-1]
    res = _report_points(a, pf, f"({pf.meta['stopped']}, {pf.meta['states']} states)")
    rows = res["points"]
    if not a.json:
        floor, by_kind = resident_floor(g)
        note = floor_note(pf.points[0].peak, floor, by_kind, base.peak)
        if note:
            print(note)
    if memory is not None and reserved:
        limit = pf.meta["limit_bytes"]
        if pf.points[0].reserved_peak > limit:
            raise LimitNotReached(f"no plan reaches the reserved-memory limit {format_bytes(limit)}: the least "
                                  f"predicted reserved peak found is {format_bytes(pf.points[0].reserved_peak)}; "
                                  f"its plan is point 0 of {a.output}")
    elif memory is not None:
        limit = pf.meta["limit_bytes"]
        if pf.points[0].peak > limit:
            raise LimitNotReached(f"no plan reaches the memory limit {format_bytes(limit)}: the best peak "
                                  f"found is {format_bytes(pf.points[0].peak)} ({rows[0]['peak_ratio']:.3f}x); "
                                  f"its plan is point 0 of {a.output}")
    return res


def _select_reserved(pf, g, memory) -> None:
    """``--limit-kind reserved``: the limit applies to each point's predicted reserved peak
    (``core.analysis.allocator``).  The searched points are reordered in place: those within the limit
    first, fastest first, then the rest by reserved peak; PyTorch's eager point stays last."""
    from core.search.plan import fill_reserved_peaks

    fill_reserved_peaks(pf, g)
    eager = pf.points[-1]
    limit = memory.bytes(eager.peak)
    found = sorted(pf.points[:-1], key=lambda p: (p.reserved_peak > limit,
                                                  p.latency if p.reserved_peak <= limit else p.reserved_peak))
    pf.points = found + [eager]
    pf.meta.update({"mode": "memory", "limit": str(memory), "limit_bytes": limit, "limit_kind": "reserved"})


def _report_points(a: argparse.Namespace, pf, note: str = "") -> dict[str, Any]:
    """``magis optimize``'s result: a row per point of the written plan file (ratios against its last
    point, PyTorch's eager order), printed as JSON or as lines."""
    base = pf.points[-1]
    rows = [{"point": k, "method": p.method, "label": p.label, "peak_bytes": p.peak, "latency_seconds": p.latency,
             "peak_ratio": p.peak / base.peak if base.peak else 1.0,
             "latency_ratio": p.latency / base.latency if base.latency else 1.0,
             "reserved_peak_bytes": p.reserved_peak,
             "applications": len(p.applications), "seed": p.stats.get("seed"),
             "seed_steps": p.stats.get("seed_steps")} for k, p in enumerate(pf.points)]
    res = {"output": str(a.output), "points": rows, "meta": pf.meta}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"wrote {a.output}: {len(rows)} point(s){' ' + note if note else ''}")
        for r in rows:
            reserved = "" if r["reserved_peak_bytes"] is None else f" reserved {format_bytes(r['reserved_peak_bytes'])}"
            print(f"  [{r['point']}] {r['method']:6s} peak {format_bytes(r['peak_bytes'])} ({r['peak_ratio']:.3f}x){reserved}  "
                  f"latency {r['latency_seconds'] * 1e3:.2f} ms ({r['latency_ratio']:.3f}x)  "
                  f"{plural(r['applications'], 'rule application')}  {r['label']}"
                  + (f"  (from the seed {r['seed']}, {plural(r['seed_steps'], 'step')} of MAGIS's own after it)"
                     if r["seed"] else ""))
    return res


def _optimize_with(a: argparse.Namespace, g, cost, device: str, memory) -> dict[str, Any]:
    """``magis optimize --method NAME --memory-limit X``: another method (SwapAdvisor, say) at one
    memory limit; the plan file holds its point and PyTorch's eager order (last)."""
    from core.search.methods import get_method, run_method
    from core.search.peers.base import eager_peak
    from core.search.plan import PlanFile, save_plans
    from core.search.wl_hash import graph_hash

    name = a.optimize_method
    m = get_method(name)
    if memory is None:
        raise ValueError(f"--method {name}: give --memory-limit (only MAGIS sweeps --latency-limit and --pareto)")
    limit = memory.bytes(eager_peak(g, cost))
    print(f"optimizing {g.name} ({len(g)} nodes) with {m.label} for {a.time_budget:g} s on {device}, "
          f"memory limit {format_bytes(limit)}", file=sys.stderr, flush=True)
    with optimizer_errors(m.label):
        run = run_method(name, g, cost, time_budget=a.time_budget, memory_limit=limit,
                         progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    if not run.plans:
        raise LimitNotReached("; ".join(f.reason for f in run.failures) or f"{m.label} gave no plan")
    eager = run_method("eager", g, cost).plans
    points = sorted(run.plans, key=lambda p: (p.peak > limit, p.latency)) + eager
    pf = PlanFile(g.name, graph_hash(g), device, points, [], {"method": name, "limit_bytes": limit,
                                                           "seconds": round(run.seconds, 3)})
    save_plans(pf, a.output, graph=g)
    res = _report_points(a, pf)
    if points[0].peak > limit:
        raise LimitNotReached(f"no plan reaches the memory limit {format_bytes(limit)}: the best peak found is "
                              f"{format_bytes(points[0].peak)}; its plan is point 0 of {a.output}")
    return res
