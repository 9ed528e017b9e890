"""MAGIS and its peers on the seven paper-size workloads (MAGIS section 7's headline numbers): the
memory/latency trade-off of every method against PyTorch's eager order of the same run, on one
device profile, each method within a fixed time budget per workload.

Methods: ``magis`` (``core.search.moptimizer.optimize(pareto=True)``, the greedy fission warm start
included in its ``--time-budget``) and the peers of ``core.search.peers`` (``eager``, ``sqrt_n``,
``dtr``, ``checkmate``, ``torch_mincut``), each within ``--peer-budget`` seconds (checked by the
peer between its budget points; Checkmate gets ``--checkmate-time-limit`` per MILP, by default an
equal share of the peer budget per budget point).  All run on the same graph and
``AnalyticCost(device)``; every ratio is against the ``eager`` peer's plan of the same run.

Per (workload, method): from all the method's points, the smallest peak (fraction of eager's) at
<= 5% and <= 10% latency overhead, the least latency overhead under 80% and 40% memory limits
("-": no point of the method meets it), the number of points, the method's seconds; for MAGIS the
seconds until its best peak came within 1% of its final best (from its search records, since
``optimize`` was called).  MAGIS's points behind the four numbers are replayed from the imported
graph and simulated from scratch after its timed run; a difference from what the search reported is
a failure.  Failures (points a method did not produce, and why) are listed under the table.  Figures per workload (``bench/plots.py``): the Pareto figure of all methods and MAGIS's
convergence, as PNG and HTML.

    python bench/pareto.py [--workloads bert_base,...] [--methods magis,dtr,...] [--device rtx3090]
                           [--time-budget 60] [--peer-budget 60] [--plots bench/results/pareto]
                           [--json bench/results/pareto.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost.model import AnalyticCost  # noqa: E402
from core.search.methods import METHODS, PEER_FAMILIES, methods_of, run_method  # noqa: E402
from core.search.peers import checkmate as _checkmate  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]
DEFAULT_METHODS = ["magis", *methods_of(*PEER_FAMILIES)]  # the schedulers run when named (--methods)
# MAGIS (ASPLOS'24) section 7, over its workloads: ranges of the four headline numbers
PAPER_NUMBERS = {"peak_at_5pct": (0.25, 0.70), "peak_at_10pct": (0.15, 0.60),
                 "overhead_at_80pct": (0.0, 0.05), "overhead_at_40pct": (0.0, 0.15)}
PAPER_LINE = ("paper (MAGIS): peak at <=10% overhead 15-60% of PyTorch's; at <=5% 25-70%; "
              "overhead under 80% / 40% limits <=5% / <=15%")


@dataclass
class MethodResult:
    """What one method produced on one workload, as ratios against the run's eager plan."""

    method: str
    points: list[dict] = field(default_factory=list)  # label, peak, latency, peak_ratio, latency_ratio, stats
    failures: list[tuple[str, str]] = field(default_factory=list)  # (point label, reason)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # magis: states, stopped, records, seconds_to_1pct


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
def _point(label: str, peak: int, latency: float, eager: dict, stats: dict | None = None) -> dict:
    return {"label": label, "peak": int(peak), "latency": float(latency), "peak_ratio": peak / eager["peak"],
            "latency_ratio": latency / eager["latency"], "stats": stats or {}}


def run_magis(g, device: str, budget: float, eager: dict) -> MethodResult:
    """``optimize(pareto=True)`` within ``budget`` s; its frontier points (not its eager point) and its
    records, each with ``wall_seconds`` since ``optimize`` was called (warm start included)."""
    from core.search.moptimizer import optimize

    stamps: list[float] = []
    t0 = time.perf_counter()
    pf = optimize(g, pareto=True, time_budget=budget, device=device,
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
    points = [_point(p.label, p.peak, p.latency, eager, p.stats) for p in pf.points[:-1]]
    picked = picks([(p["peak_ratio"], p["latency_ratio"]) for p in points]).values()
    failures = resimulate(g, pf.points[:-1], {k for k in picked if k is not None}, device)
    extra = {"states": pf.meta.get("states"), "stopped": pf.meta.get("stopped"), "records": records,
             "seconds_to_1pct": seconds_to_within(records, key="frontier_peak"),
             "eager_matches": (base.peak, base.latency) == (eager["peak"], eager["latency"])}
    return MethodResult("magis", points, failures, dt, extra)


def resimulate(g, plans, indices: set[int], device: str) -> list[tuple[str, str]]:
    """The plans of ``indices`` replayed from the imported graph and simulated from scratch (after
    the timed search): (label, why) for each whose peak or latency differs from what the search
    reported."""
    from core.search.plan import check_order, replay
    from core.simulate import simulate

    cost = AnalyticCost(device)
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


def model_of(workload: str):
    """The sample's model built under fake tensors (nothing allocated), for the methods that trace it
    again (``Method.needs``); None for a name that is not a sample."""
    import sample_graphs
    from core.frontend.workload import build_fake

    return build_fake(lambda: sample_graphs.build(workload)) if workload in sample_graphs.NAMES else None


def run_peer(method: str, workload: str, g, cost, budget: float, eager: dict, *,
             checkmate_time_limit: float | None = None, checkmate_max_vars: int = _checkmate.MAX_VARS,
             progress=None) -> MethodResult:
    """One peer within ``budget`` s (``core.search.methods.run_method``).  A peer that raises, needs
    what is not at hand or refuses the graph gives a failure row (label "all"), not an exception."""
    say = progress or (lambda _m: None)
    opts: dict[str, Any] = {}
    t0 = time.perf_counter()
    out = MethodResult(method)
    try:
        if method == "checkmate":
            opts.update(time_limit=checkmate_time_limit, max_vars=checkmate_max_vars)
        model = model_of(workload) if "model" in METHODS[method].needs else None
        left = round(max(0.0, budget - (time.perf_counter() - t0)), 1)
        run = run_method(method, g, cost, time_budget=left, progress=say, model=model, **opts)
    except Exception as e:  # noqa: BLE001 -- a peer's crash is this workload's failure row
        out.failures.append(("all", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
        out.seconds = time.perf_counter() - t0
        return out
    out.points = [_point(p.label, p.peak, p.latency, eager, _small(p.stats)) for p in run.plans]
    out.failures = [(f.label, f.reason) for f in run.failures]
    out.seconds = time.perf_counter() - t0
    return out


def _small(stats: dict) -> dict:
    """A plan's stats without long lists (JSON size)."""
    return {k: v for k, v in stats.items() if not (isinstance(v, list | tuple) and len(v) > 20)}


def run_workload(name: str, *, device: str = "rtx3090", methods: list[str] | None = None,
                 time_budget: float = 60.0, peer_budget: float = 60.0, checkmate_time_limit: float | None = None,
                 checkmate_max_vars: int = _checkmate.MAX_VARS, graph=None, progress=None) -> dict:
    """Every method of ``methods`` on workload ``name`` (its committed graph, or ``graph``):
    {"workload", "nodes", "eager": {"peak", "latency"}, "results": {method: MethodResult}}."""
    from sample_graphs.store import load_sample_graph

    say = progress or (lambda _m: None)
    methods = methods or DEFAULT_METHODS
    g = graph if graph is not None else load_sample_graph(name)
    cost = AnalyticCost(device)
    base = METHODS["eager"].run(g, cost).plans[0]
    eager = {"peak": int(base.peak), "latency": float(base.latency)}
    results: dict[str, MethodResult] = {}
    for m in methods:
        say(f"{name}: {m} ...")
        if m == "magis":
            r = run_magis(g, device, time_budget, eager)
        else:
            r = run_peer(m, name, g, cost, peer_budget, eager, checkmate_time_limit=checkmate_time_limit,
                         checkmate_max_vars=checkmate_max_vars, progress=lambda s, m=m: say(f"  {s}"))
        results[m] = r
        say(f"{name}: {m} done in {r.seconds:.1f} s, {len(r.points)} points, {len(r.failures)} failed")
    return {"workload": name, "nodes": len(g), "eager": eager, "results": results}


def rows_of(w: dict) -> list[dict]:
    """One table row per method of a ``run_workload`` result."""
    rows = []
    for m, r in w["results"].items():
        row = {"workload": w["workload"], "method": m,
               **summarise([(p["peak_ratio"], p["latency_ratio"]) for p in r.points]),
               "points": len(r.points), "failed": len(r.failures), "seconds": round(r.seconds, 2)}
        if m == "magis":
            recs = r.extra["records"]
            row["seconds_to_1pct"] = r.extra["seconds_to_1pct"]
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


HEAD = (f"{'workload':<13} {'method':<13} {'peak@<=5%':>10} {'peak@<=10%':>10} {'ovh@80%':>8} {'ovh@40%':>8} "
        f"{'points':>6} {'failed':>6} {'seconds':>8} {'to 1%':>7}")


def format_row(r: dict) -> str:
    to1 = "" if r.get("seconds_to_1pct") is None else f"{r['seconds_to_1pct']:.1f}s"
    return (f"{r['workload']:<13} {r['method']:<13} {fmt(r['peak_at_5pct']):>10} {fmt(r['peak_at_10pct']):>10} "
            f"{fmt(r['overhead_at_80pct'], True):>8} {fmt(r['overhead_at_40pct'], True):>8} "
            f"{r['points']:>6} {r['failed']:>6} {r['seconds']:>8.1f} {to1:>7}")


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


def to_json(w: dict) -> dict:
    return {"workload": w["workload"], "nodes": w["nodes"], "eager": w["eager"],
            "points": {m: r.points for m, r in w["results"].items()},
            "seconds": {m: round(r.seconds, 3) for m, r in w["results"].items()},
            "extra": {m: {k: v for k, v in r.extra.items() if k != "records"} for m, r in w["results"].items()},
            "records": w["results"]["magis"].extra["records"] if "magis" in w["results"] else []}


def plot_workload(out: Path, w: dict, subtitle: str = "") -> list[Path]:
    """The figures of one workload, from its ``to_json`` form."""
    from bench.plots import write_plots

    points = dict(w["points"])
    points.setdefault("eager", [{"label": "traced order", "peak_ratio": 1.0, "latency_ratio": 1.0}])
    within = w["extra"].get("magis", {}).get("seconds_to_1pct")
    return write_plots(out, w["workload"], points, w["records"], w["eager"], within, subtitle)


def replot(path: Path, out: Path) -> None:
    """Table and figures again from a JSON this script wrote (no method is run)."""
    doc = json.loads(path.read_text())
    print(_header(doc))
    print(format_table(doc["rows"], doc["failures"]))
    for w in doc["workloads"]:
        for p in plot_workload(out, w, _subtitle(doc)):
            print(f"wrote {p}")


def _header(d: dict) -> str:
    return (f"{d['device']}; MAGIS {d['time_budget']:g} s, each peer {d['peer_budget']:g} s per workload; "
            f"ratios against PyTorch eager of the same run")


def _subtitle(d: dict) -> str:
    return f"{d['device']}; MAGIS {d['time_budget']:g} s, peers {d['peer_budget']:g} s each"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(PAPER))
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"of {','.join(METHODS)}")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--time-budget", type=float, default=60.0, help="MAGIS search seconds per workload")
    ap.add_argument("--peer-budget", type=float, default=60.0, help="seconds per peer and workload")
    ap.add_argument("--checkmate-time-limit", type=float, default=None,
                    help="seconds per Checkmate MILP (default: the peer budget / its number of budget points)")
    ap.add_argument("--checkmate-max-vars", type=int, default=_checkmate.MAX_VARS,
                    help="larger Checkmate MILPs (R and S variables) are not attempted")
    ap.add_argument("--plots", type=Path, default=ROOT / "bench" / "results" / "pareto")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--replot", type=Path, default=None, metavar="JSON",
                    help="print the table and write the figures of an earlier --json, running nothing")
    a = ap.parse_args(argv)
    if a.replot:
        replot(a.replot, a.plots)
        return 0
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    conf = {"device": a.device, "time_budget": a.time_budget, "peer_budget": a.peer_budget,
            "checkmate_time_limit": a.checkmate_time_limit, "checkmate_max_vars": a.checkmate_max_vars,
            "methods": methods, "paper": PAPER_NUMBERS}
    header = _header(conf)
    print(header, flush=True)
    rows, failures, workloads = [], [], []
    for name in [w for w in a.workloads.split(",") if w]:
        w = run_workload(name, device=a.device, methods=methods, time_budget=a.time_budget,
                         peer_budget=a.peer_budget, checkmate_time_limit=a.checkmate_time_limit,
                         checkmate_max_vars=a.checkmate_max_vars, progress=lambda s: print(s, flush=True))
        workloads.append(w)
        rows += rows_of(w)
        failures += [{"workload": name, "method": m, "label": label, "reason": why}
                     for m, r in w["results"].items() for label, why in r.failures]
        if not a.no_plots:
            for p in plot_workload(a.plots, to_json(w), _subtitle(conf)):
                print(f"wrote {p}", flush=True)
    print()
    print(header)
    print(format_table(rows, failures))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {**conf, "rows": rows, "failures": failures, "workloads": [to_json(w) for w in workloads]}
        tmp = a.json.with_suffix(a.json.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(a.json)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
