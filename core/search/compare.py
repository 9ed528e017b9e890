"""Every method side by side on one graph: the one home of the comparison table that
``bench/pareto.py`` prints for its workloads and ``magis compare`` for any graph.

Per method (``core.search.methods``), from all its points as ratios against PyTorch's eager order of
the same run: the smallest peak at <= 5% and <= 10% latency overhead, the least latency overhead
under 80% and 40% memory limits (``picks``, ``summarise``), the number of points, failures and
seconds; for MAGIS the seconds until its lowest peak came within 1% of its final value.  MAGIS's
points behind the four numbers are replayed from the imported graph and simulated from scratch after
its timed run (``resimulate``); a difference is a failure.  A method that needs the model's code is
given ``model`` (a function that builds it, or None: then it says why it was not run).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.lifetimes import lower_bound
from ..cost.choice import DEFAULT_COST, make_cost
from ..cost.devices import DEFAULT_PROFILE
from ..ir.graph import Graph
from ..simulate import simulate
from .methods import METHODS, PEER_FAMILIES, methods_of, run_method
from .peers import checkmate as _checkmate
from .peers.common import dominated_by_eager
from .plan import Plan, PlanFile
from .wl_hash import graph_hash

# MAGIS (ASPLOS'24) section 7, over its workloads: ranges of the four headline numbers
PAPER_NUMBERS = {"peak_at_5pct": (0.25, 0.70), "peak_at_10pct": (0.15, 0.60),
                 "overhead_at_80pct": (0.0, 0.05), "overhead_at_40pct": (0.0, 0.15)}
PAPER_LINE = ("paper (MAGIS): peak at <=10% overhead 15-60% of PyTorch's; at <=5% 25-70%; "
              "overhead under 80% / 40% limits <=5% / <=15%")


def default_methods() -> list[str]:
    """MAGIS and every peer and baseline, in registry order (the schedulers run when named)."""
    return ["magis", *methods_of(*PEER_FAMILIES)]


@dataclass
class MethodResult:
    """What one method produced on one graph, as ratios against the run's eager plan."""

    method: str
    points: list[dict] = field(default_factory=list)  # label, peak, latency, peak_ratio, latency_ratio, stats
    failures: list[tuple[str, str]] = field(default_factory=list)  # (point label, reason)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # magis: states, stopped, records, seconds_to_1pct, meta
    plans: list[Plan] = field(default_factory=list)  # the points as plans (for a plan file)
    error: str = ""  # the method raised (a bug, not a refusal): its one line; ``failures`` has it too


# ---- the headline numbers -----------------------------------------------------------------------------
def picks(points: list[tuple[float, float]]) -> dict[str, int | None]:
    """(peak ratio, latency ratio) points -> the index of the point behind each headline number:
    the smallest peak ratio with latency ratio <= 1.05 and <= 1.10, and the least latency with peak
    ratio <= 0.8 and <= 0.4; None where no point qualifies."""

    def least(ok: list[int], key: int) -> int | None:
        return min(ok, key=lambda k: points[k][key]) if ok else None

    idx = range(len(points))
    return {"peak_at_5pct": least([k for k in idx if points[k][1] <= 1.05 + 1e-12], 0),
            "peak_at_10pct": least([k for k in idx if points[k][1] <= 1.10 + 1e-12], 0),
            "overhead_at_80pct": least([k for k in idx if points[k][0] <= 0.8 + 1e-12], 1),
            "overhead_at_40pct": least([k for k in idx if points[k][0] <= 0.4 + 1e-12], 1)}


def summarise(points: list[tuple[float, float]]) -> dict:
    """The four headline numbers of ``picks``: peak ratios at <= 5% and <= 10% latency overhead,
    latency overheads (ratio - 1; negative: faster than eager) under 80% and 40% memory limits."""
    return {key: None if k is None else (points[k][0] if key.startswith("peak") else points[k][1] - 1)
            for key, k in picks(points).items()}


def seconds_to_within(records: list[dict], tol: float = 0.01, key: str = "best_peak",
                      clock: str = "wall_seconds") -> float | None:
    """The time (``clock`` of the first record) at which ``key`` first came within ``tol`` of its
    final best (the smallest value over all records); None without records."""
    if not records:
        return None
    final = min(r[key] for r in records)
    return next(r[clock] for r in records if r[key] <= (1 + tol) * final)


# ---- the methods --------------------------------------------------------------------------------------
def point_row(label: str, peak: int, latency: float, eager: dict, stats: dict | None = None) -> dict:
    return {"label": label, "peak": int(peak), "latency": float(latency), "peak_ratio": peak / eager["peak"],
            "latency_ratio": latency / eager["latency"], "stats": stats or {}}


def run_magis(g: Graph, device: str, budget: float, eager: dict, cost: str = DEFAULT_COST) -> MethodResult:
    """``optimize(pareto=True)`` within ``budget`` s under cost model ``cost`` (``core.cost.choice``);
    its frontier points (not its eager point) and its records, each with ``wall_seconds`` since
    ``optimize`` was called (warm start included)."""
    from .moptimizer import optimize

    stamps: list[float] = []
    t0 = time.perf_counter()
    pf = optimize(g, pareto=True, time_budget=budget, device=device, cost=make_cost(cost, device), cost_name=cost,
                  progress=lambda _r: stamps.append(time.perf_counter() - t0))
    dt = time.perf_counter() - t0
    records = [dict(r) for r in pf.records]
    if len(stamps) == len(records):
        for r, s in zip(records, stamps, strict=True):
            r["wall_seconds"] = round(s, 4)
    else:  # not expected: one progress call per record; the search's own clock then
        for r in records:
            r["wall_seconds"] = r["seconds"]
    base = pf.points[-1]
    points = [point_row(p.label, p.peak, p.latency, eager, p.stats) for p in pf.points[:-1]]
    picked = picks([(p["peak_ratio"], p["latency_ratio"]) for p in points]).values()
    failures = resimulate(g, pf.points[:-1], {k for k in picked if k is not None}, device, cost)
    # the warm start's stages as points of the convergence curve too (the search's records start after it)
    curve = [{"wall_seconds": st["end"], "frontier_peak": st["lowest_peak"]} for st in pf.meta.get("stages", [])
             if "lowest_peak" in st] + records
    extra = {"states": pf.meta.get("states"), "stopped": pf.meta.get("stopped"), "records": records,
             "seconds_to_1pct": seconds_to_within(records, key="frontier_peak"),
             "seconds_to_1pct_any": seconds_to_within(sorted(curve, key=lambda r: r["wall_seconds"]),
                                                      key="frontier_peak"),
             "eager_matches": (base.peak, base.latency) == (eager["peak"], eager["latency"]),
             "meta": pf.meta, "plan_records": pf.records}
    return MethodResult("magis", points, failures, dt, extra, list(pf.points[:-1]))


def resimulate(g: Graph, plans: list[Plan], indices: set[int], device: str,
               cost_name: str = DEFAULT_COST) -> list[tuple[str, str]]:
    """The plans of ``indices`` replayed from the imported graph and simulated from scratch (after
    the timed search, with a fresh cost model of kind ``cost_name``): (label, why) for each whose
    peak or latency differs from what the search reported."""
    from ..simulate import simulate
    from .plan import check_order, replay

    cost = make_cost(cost_name, device)
    bad = []
    for k in sorted(indices):
        p = plans[k]
        h = replay(g, p.applications)
        check_order(h, p.order)
        sim = simulate(h, p.order, cost, validate=False)
        if sim.peak != p.peak or abs(sim.latency - p.latency) > 1e-9 * p.latency:
            bad.append((p.label, f"re-simulated peak {sim.peak} latency {sim.latency:.6g} s, the search said "
                                 f"{p.peak} and {p.latency:.6g} s"))
    return bad


def run_peer(method: str, g: Graph, cost, budget: float, eager: dict, *, model: Callable[[], Any] | None = None,
             checkmate_time_limit: float | None = None, checkmate_max_vars: int = _checkmate.MAX_VARS,
             progress: Callable[[str], None] | None = None) -> MethodResult:
    """One method other than MAGIS within ``budget`` s (``run_method``); ``model()`` builds the model
    for a method that traces it again (``Method.needs``).  A method that raises, needs what is not at
    hand or refuses the graph gives a failure row (label "all"), not an exception."""
    say = progress or (lambda _m: None)
    opts: dict[str, Any] = {}
    t0 = time.perf_counter()
    out = MethodResult(method)
    try:
        if method == "checkmate":
            opts.update(time_limit=checkmate_time_limit, max_vars=checkmate_max_vars)
        built = model() if model is not None and "model" in METHODS[method].needs else None
        left = round(max(0.0, budget - (time.perf_counter() - t0)), 1)
        run = run_method(method, g, cost, time_budget=left, progress=say, model=built, **opts)
    except Exception as e:  # noqa: BLE001 -- a method's crash is this graph's failure row
        out.error = f"{type(e).__name__}: {_first_line(e)}"
        out.failures.append(("all", out.error))
        out.seconds = time.perf_counter() - t0
        return out
    kept = [p for p in run.plans
            if method in REFERENCES or not dominated_by_eager(p.peak, p.latency, eager["peak"], eager["latency"])]
    out.points = [point_row(p.label, p.peak, p.latency, eager, small_stats(p.stats)) for p in kept]
    out.plans = kept
    out.failures = [(f.label, f.reason) for f in run.failures]
    if run.plans and not kept:  # every plan dominated by eager: say so, once
        best = min(run.plans, key=lambda p: (p.peak, p.latency))
        out.failures.append(("all", f"no plan better than eager in peak or latency ({len(run.plans)} plans; the "
                                    f"lowest peak {best.peak / eager['peak']:.3f}x at latency "
                                    f"{best.latency / eager['latency']:.3f}x)"))
    out.seconds = time.perf_counter() - t0
    return out


REFERENCES = ("eager", "ideal")  # reference points (PyTorch's own run, SwapAdvisor's unbounded memory), not plans


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else ""


def small_stats(stats: dict) -> dict:
    """A plan's stats without long lists (JSON size)."""
    return {k: v for k, v in stats.items() if not (isinstance(v, list | tuple) and len(v) > 20)}


def compare(g: Graph, *, name: str | None = None, device: str = DEFAULT_PROFILE, methods: list[str] | None = None,
            time_budget: float = 60.0, peer_budget: float | None = None, model: Callable[[], Any] | None = None,
            checkmate_time_limit: float | None = None, checkmate_max_vars: int = _checkmate.MAX_VARS,
            progress: Callable[[str], None] | None = None, cost: str = DEFAULT_COST) -> dict:
    """Every method of ``methods`` (default: ``default_methods()``) on ``g``, MAGIS within
    ``time_budget`` s and each other within ``peer_budget`` (default: the same), every latency under
    cost model ``cost`` (``core.cost.choice``: ``analytic`` eager kernels, ``compiled`` Inductor's
    fusion): {"workload", "nodes", "device", "cost", "eager": {"peak", "latency"}, "bound" (the
    lower bounds of ``analysis.lifetimes.lower_bound``), "budgets" ({"magis": s, "peers": s}), "eager_plan",
    "results": {method: MethodResult}}."""
    say = progress or (lambda _m: None)
    name = name or g.name
    methods = methods or default_methods()
    peer_budget = time_budget if peer_budget is None else peer_budget
    cost_name, cost = cost, make_cost(cost, device, graphs=[g])
    base = METHODS["eager"].run(g, cost).plans[0]
    eager = {"peak": int(base.peak), "latency": float(base.latency)}
    bound = lower_bound(g, simulate(g, base.order, cost).memory.resident)
    results: dict[str, MethodResult] = {}
    for m in methods:
        say(f"{name}: {m} ...")
        if m == "magis":
            try:
                r = run_magis(g, device, time_budget, eager, cost_name)
            except Exception as e:  # noqa: BLE001 -- MAGIS's crash is its failure row; the others still run
                why = f"{type(e).__name__}: {_first_line(e)}"
                r = MethodResult("magis", failures=[("all", why)], error=why,
                                 extra={"records": [], "seconds_to_1pct": None, "seconds_to_1pct_any": None,
                                        "states": 0, "eager_matches": None})
        else:
            r = run_peer(m, g, cost, peer_budget, eager, model=model, checkmate_time_limit=checkmate_time_limit,
                         checkmate_max_vars=checkmate_max_vars, progress=lambda s: say(f"  {s}"))
        results[m] = r
        say(f"{name}: {m} done in {r.seconds:.1f} s, {len(r.points)} points, {len(r.failures)} failed")
    return {"workload": name, "nodes": len(g), "device": device, "cost": cost_name, "eager": eager, "bound": bound,
            "budgets": {"magis": time_budget, "peers": peer_budget}, "eager_plan": base, "results": results}


def failures_of(w: dict) -> list[dict]:
    """The failure rows of a ``compare`` result: workload, method, point label, reason."""
    return [{"workload": w["workload"], "method": m, "label": label, "reason": why}
            for m, r in w["results"].items() for label, why in r.failures]


def plan_file_of(w: dict, g: Graph) -> PlanFile:
    """A ``compare`` result as one plan file, in the layout of the samples' precomputed frontiers:
    every method's points (MAGIS's first, in the order run), PyTorch's eager order last;
    ``meta.peer_failures`` holds each method's failure reasons, ``records`` MAGIS's search."""
    res = w["results"]
    points = [p for m, r in res.items() if m != "eager" for p in r.plans] + [w["eager_plan"]]
    failures = {m: "; ".join(f"{label}: {why}" for label, why in r.failures)[:400]
                for m, r in res.items() if r.failures}
    meta = dict(res["magis"].extra.get("meta", {})) if "magis" in res else {}
    meta.update({"generated_by": "magis compare", "cost": w.get("cost", DEFAULT_COST), "methods": list(res),
                 "peer_failures": failures,
                 "seconds": {m: round(r.seconds, 3) for m, r in res.items()}})
    records = list(res["magis"].extra.get("plan_records", [])) if "magis" in res else []
    return PlanFile(g.name, graph_hash(g), w["device"], points, records, meta)


def reducible_removed(peak_ratio: float | None, w: dict) -> float | None:
    """The share of the reducible memory (eager's peak minus the lower bound ``w["bound"]["bound"]``)
    that a point of peak ratio ``peak_ratio`` removes (above 1 only by moving resident bytes to
    the host); None without a point or without reducible memory."""
    b = w.get("bound")
    if peak_ratio is None or b is None:
        return None
    eager = w["eager"]["peak"]
    room = eager - b["bound"]
    return round((1 - peak_ratio) * eager / room, 4) if room > 0 else None


def rows_of(w: dict) -> list[dict]:
    """One table row per method of a ``compare`` result."""
    rows = []
    for m, r in w["results"].items():
        row = {"workload": w["workload"], "method": m,
               **summarise([(p["peak_ratio"], p["latency_ratio"]) for p in r.points]),
               "points": len(r.points), "failed": len(r.failures), "seconds": round(r.seconds, 2)}
        budget = w.get("budgets", {}).get("magis" if m == "magis" else "peers")
        row["budget_used"] = round(r.seconds / budget, 3) if budget else None
        row["reducible_removed"] = reducible_removed(row["peak_at_10pct"], w)
        if m == "magis":
            recs = r.extra["records"]
            row["seconds_to_1pct"] = r.extra["seconds_to_1pct"]
            row["seconds_to_1pct_any"] = r.extra.get("seconds_to_1pct_any")  # the warm start's stages counted
            row["states"] = r.extra["states"]
            row["records_final_peak"] = min(x["frontier_peak"] for x in recs) / w["eager"]["peak"] if recs else None
            row["frontier_min_peak"] = min((p["peak_ratio"] for p in r.points), default=None)
            row["eager_matches"] = r.extra["eager_matches"]
        rows.append(row)
    return rows


# ---- output ----------------------------------------------------------------------------------------------
def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}%" if pct else f"{100 * x:.1f}%"


HEAD = (f"{'workload':<13} {'method':<13} {'peak@<=5%':>10} {'peak@<=10%':>10} {'reduc@10%':>9} {'ovh@80%':>8} "
        f"{'ovh@40%':>8} {'points':>6} {'failed':>6} {'seconds':>8} {'used':>5} {'to 1%':>7}")


def format_row(r: dict) -> str:
    to1 = "" if r.get("seconds_to_1pct") is None else f"{r['seconds_to_1pct']:.1f}s"
    used = "" if r.get("budget_used") is None else f"{100 * r['budget_used']:.0f}%"
    return (f"{r['workload']:<13} {r['method']:<13} {fmt(r['peak_at_5pct']):>10} {fmt(r['peak_at_10pct']):>10} "
            f"{fmt(r.get('reducible_removed')):>9} {fmt(r['overhead_at_80pct'], True):>8} "
            f"{fmt(r['overhead_at_40pct'], True):>8} {r['points']:>6} {r['failed']:>6} {r['seconds']:>8.1f} "
            f"{used:>5} {to1:>7}")


def format_table(rows: list[dict], failures: list[dict]) -> str:
    lines = [HEAD, "-" * len(HEAD)]
    prev = None
    for r in rows:
        if prev is not None and r["workload"] != prev:
            lines.append("")
        prev = r["workload"]
        lines.append(format_row(r))
    lines.append("")
    lines.append(PAPER_LINE)
    magis = [r for r in rows if r["method"] == "magis"]
    if magis:
        lines.append("MAGIS here: " + "; ".join(f"{k} {_range(magis, k)}" for k in PAPER_NUMBERS))
        lines.append("'to 1%': seconds since optimize() was called until the lowest peak of the frontier came "
                     "within 1% of its final value")
    lines.append("'reduc@10%': share of the reducible memory (eager's peak minus the larger of the resident floor "
                 "and the largest op's working set) removed at <= 10% overhead; 'used': share of the time budget")
    for r in magis:
        if r.get("eager_matches") is False:
            lines.append(f"  {r['workload']}: MAGIS's own eager point differs from the eager peer's (ratios use the peer's)")
        rec, low = r.get("records_final_peak"), r.get("frontier_min_peak")
        if rec is not None and low is not None and rec > 1.01 * low:
            lines.append(f"  {r['workload']}: the records end at a best peak of {fmt(rec)}, the frontier reaches "
                         f"{fmt(low)}")
    if failures:
        lines.append("")
        lines.append("failures (method, workload, point: reason):")
        for f in failures:
            lines.append(f"  {f['method']:<13} {f['workload']:<13} {f['label']}: {f['reason']}")
    return "\n".join(lines)


def _range(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows]
    got = [v for v in vals if v is not None]
    pct = key.startswith("overhead")
    if not got:
        return "-"
    text = fmt(min(got), pct) if len(got) == 1 else f"{fmt(min(got), pct)}..{fmt(max(got), pct)}"
    return text + (f" ({len(vals) - len(got)} without)" if len(got) < len(vals) else "")


__all__ = ["HEAD", "PAPER_LINE", "PAPER_NUMBERS", "MethodResult", "compare", "default_methods", "failures_of",
           "fmt", "format_row", "format_table", "picks", "plan_file_of", "point_row", "resimulate", "rows_of",
           "reducible_removed", "run_magis", "run_peer", "seconds_to_within", "small_stats", "summarise"]
