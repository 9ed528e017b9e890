"""SwapAdvisor against on-demand swapping, MAGIS and DTR far below the eager peak (issue 30): the seven
paper-size training steps at memory limits of 1/2, 1/4, 1/8 and 1/12 of PyTorch's eager peak, on one
device profile (RTX 3090 by default), throughput as a fraction of the ideal (unbounded memory, no
swapping: every op back to back).

Per (workload, limit) and method: the fraction ideal latency / latency of the method's plan when its
simulated peak is within the limit ("-" and the reason below the table when there is none), and the
search time.  SwapAdvisor (``--budget`` seconds per limit, its GA stops earlier after 40 generations
without a better chromosome) and ODSwap (LRU, on demand) are timed on three streams; MAGIS
(``moptimizer.optimize`` with the limit, ``--magis-budget`` seconds, all its rules) and DTR (one
budget equal to the limit) on the project's simulator as they report.  MAGIS + planner
(``search.magis_pool``: MAGIS's frontier states swapped by SwapAdvisor's planner and GA) runs once
per workload for every limit, with ``--magis-budget`` seconds per limit.  Also per cell: SwapAdvisor's
pool (residents and pinned tensors included), the host memory its swapped tensors need, and its
lower bound max(compute, swap bytes / bandwidth) as a fraction of ideal throughput; per row the
ceiling of swapping alone in the traced order (``swap_planner.swap_bound``: bytes that must be off
the device after an op are copied out before it ends and back in after).  Every number is a prediction of the analytic cost
model; nothing here ran on a GPU.

    python bench/swapadvisor.py [--workloads bert_base,...] [--fractions 2,4,8,12] [--device rtx3090]
                                [--budget 30] [--magis-budget 30] [--json bench/results/swapadvisor.json]
    python bench/swapadvisor.py --merge A.json B.json [--json ...]   (subsets run side by side: one table)
    --skip WORKLOAD:METHOD:1/D:WHY   a cell not run (its reason in the notes)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost.model import AnalyticCost  # noqa: E402
from core.fmt import format_bytes  # noqa: E402
from core.schedule.swap_planner import SwapProblem, swap_bound  # noqa: E402
from core.search.methods import run_method  # noqa: E402
from core.search.peers.base import eager_peak  # noqa: E402
from core.search.peers.dtr import DTRSim  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]
METHODS = ["swapadvisor", "odswap", "magis", "magis_pool", "dtr"]
GIB = 1 << 30


def cell(name: str, method: str, g, cost, limit: int, ideal: float, budget: float, say) -> dict:
    """One method at one limit: its best plan within the limit (or why none)."""
    t0 = time.perf_counter()
    out: dict = {"method": method}
    try:
        if method == "magis":
            from core.search.moptimizer import optimize

            pf = optimize(g, memory_limit=f"{limit}B", time_budget=budget, device=cost.device.name)
            plans = pf.points[:-1]
        elif method == "dtr":
            _, free = DTRSim(g, cost, None).run()
            run = run_method("dtr", g, cost, time_budget=budget, budgets=[limit / free["dtr_peak"]])
            plans, out["failures"] = run.plans, [f.reason for f in run.failures]
        else:
            run = run_method(method, g, cost, time_budget=budget, memory_limit=limit, progress=None)
            plans, out["failures"] = run.plans, [f.reason for f in run.failures]
    except Exception as e:  # noqa: BLE001 -- a method that fails is a row with its reason
        plans, out["failures"] = [], [f"{type(e).__name__}: {e}"]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    within = [p for p in plans if p.peak <= limit]
    if within:
        best = min(within, key=lambda p: p.latency)
        out.update({"peak": best.peak, "latency": best.latency, "throughput": ideal / best.latency,
                    "label": best.label})
        if method == "swapadvisor":
            s = best.stats
            out.update({"pool_bytes": int(best.metrics.get("pool_bytes", 0)), "bytes_in": s["bytes_in"],
                        "bytes_out": s["bytes_out"], "search_seconds": s["search_seconds"],
                        "generations": s["generations"], "evaluations": s["evaluations"],
                        "host_bytes": int(best.metrics.get("host_bytes", 0)),
                        "bound": ideal / max(ideal, s["bytes_in"] / cost.device.host_bandwidth,
                                             s["bytes_out"] / cost.device.host_bandwidth)})
    elif plans:
        out.setdefault("failures", []).append(f"best peak {format_bytes(min(p.peak for p in plans))} is over the limit")
    say(f"  {name} {method:12s} {format_bytes(limit):>10s}: "
        + (f"{out['throughput']:.3f} of ideal" if "throughput" in out else "no plan within the limit")
        + f" ({out['seconds']:.1f} s)")
    return out


def ceilings(g, cost, peak: int, fractions: list[float], ideal: float) -> dict[str, float]:
    """Per fraction ("1/d") the ceiling of swapping alone in the traced order: ideal over
    ``swap_bound`` (no swap plan of that order within the limit is faster)."""
    p = SwapProblem.from_graph(g, cost)
    return {f"1/{d:g}": ideal / swap_bound(p, range(p.n), int(peak / d)) for d in fractions}


def pool_cells(name: str, g, cost, peak: int, fractions: list[float], ideal: float, budget: float, say) -> dict:
    """MAGIS with SwapAdvisor's planner: one run for every limit (its Pareto sweep is shared), with the
    budget of one MAGIS run per limit; per fraction its cell."""
    t0 = time.perf_counter()
    run = run_method("magis_pool", g, cost, time_budget=budget * len(fractions), fractions=fractions)
    seconds = round((time.perf_counter() - t0) / len(fractions), 2)
    by_label = {p.label: p for p in run.plans}
    why = {f.label: f.reason for f in run.failures}
    out = {}
    for d in fractions:
        label, limit = f"limit 1/{d:g} of eager", int(peak / d)
        c: dict = {"method": "magis_pool", "seconds": seconds}
        p = by_label.get(label)
        if p is not None and p.peak <= limit:
            c.update({"peak": p.peak, "latency": p.latency, "throughput": ideal / p.latency, "label": p.label,
                      "base": p.stats.get("base_label"), "planner": p.stats.get("planner"),
                      "swap_ins": p.stats.get("swap_ins", 0)})
        else:
            c["failures"] = [why.get(label, "no plan")]
        say(f"  {name} magis_pool   {format_bytes(limit):>10s}: "
            + (f"{c['throughput']:.3f} of ideal" if "throughput" in c else "no plan within the limit"))
        out[d] = c
    return out


def run(workloads: list[str], fractions: list[float], device: str, budget: float, magis_budget: float,
        say=print, save=None, skip: dict[tuple[str, str, str], str] | None = None,
        methods: list[str] | None = None) -> dict:
    """Every method at every limit of every workload; ``save(result)`` after each workload; ``skip``:
    (workload, method, "1/d") -> why that cell is not run."""
    cost = AnalyticCost(device)
    methods = methods or METHODS
    rows = []
    for name in workloads:
        g = load_sample_graph(name)
        peak = eager_peak(g, cost)
        ideal = run_method("ideal", g, cost).plans[0].latency
        say(f"{name}: {len(g)} nodes, eager peak {format_bytes(peak)}, ideal {ideal * 1e3:.2f} ms")
        ceiling = ceilings(g, cost, peak, fractions, ideal)
        pooled = pool_cells(name, g, cost, peak, fractions, ideal, magis_budget, say) if "magis_pool" in methods else {}
        for d in fractions:
            limit = int(peak / d)
            why = {m: (skip or {}).get((name, m, f"1/{d:g}")) or (None if m in methods else "not asked for (--methods)")
                   for m in METHODS}
            cells = {m: {"method": m, "failures": [f"not run: {why[m]}"], "seconds": 0.0} if why[m] else
                     pooled[d] if m == "magis_pool" else
                     cell(name, m, g, cost, limit, ideal, magis_budget if m == "magis" else budget, say)
                     for m in METHODS}
            rows.append({"workload": name, "fraction": f"1/{d:g}", "limit": limit, "eager_peak": peak,
                         "ideal_latency": ideal, "swap_ceiling": ceiling[f"1/{d:g}"], "cells": cells})
        if save is not None:
            save({"device": device, "budget": budget, "magis_budget": magis_budget, "rows": rows})
    return {"device": device, "budget": budget, "magis_budget": magis_budget, "rows": rows}


def fmt(c: dict) -> str:
    return f"{c['throughput']:.2f}" if "throughput" in c else "-"


def table(res: dict) -> str:
    head = ("| workload | limit | swap ceiling | SwapAdvisor | ODSwap | MAGIS | MAGIS + planner | DTR | SA / ODSwap | "
            "SA bound | SA pool | SA host | SA search s |")
    lines = [head, "|" + "---|" * 13]
    for r in res["rows"]:
        c = r["cells"]
        sa, od = c["swapadvisor"], c["odswap"]
        ratio = f"{sa['throughput'] / od['throughput']:.2f}x" if "throughput" in sa and "throughput" in od else "-"
        bound = f"{sa['bound']:.2f}" if "bound" in sa else "-"
        pool = format_bytes(sa["pool_bytes"]) if "pool_bytes" in sa else "-"
        host = format_bytes(sa["host_bytes"]) if "host_bytes" in sa else "-"
        ceil = f"{r['swap_ceiling']:.2f}" if "swap_ceiling" in r else "-"
        lines.append(f"| {r['workload']} | {r['fraction']} ({format_bytes(r['limit'])}) | {ceil} | {fmt(sa)} | {fmt(od)} | "
                     f"{fmt(c['magis'])} | {fmt(c.get('magis_pool', {}))} | {fmt(c['dtr'])} | {ratio} | {bound} | {pool} | {host} | "
                     f"{sa.get('search_seconds', sa['seconds'])} |")
    return "\n".join(lines)


def notes(res: dict) -> list[str]:
    out = []
    for r in res["rows"]:
        for m, c in r["cells"].items():
            if "throughput" not in c and c.get("failures"):
                out.append(f"{r['workload']} {r['fraction']} {m}: {c['failures'][0][:200]}")
    btlm = [r for r in res["rows"] if r["workload"] == "btlm_3b"]
    # what the device must hold: the simulated peak, and for SwapAdvisor its pool when larger
    fits = [(max(c["peak"], c.get("pool_bytes", 0)), m, r["fraction"], c["throughput"]) for r in btlm
            for m, c in r["cells"].items() if "peak" in c and max(c["peak"], c.get("pool_bytes", 0)) <= 24 * GIB]
    if btlm:
        if fits:
            best = max(fits, key=lambda x: x[3])
            out.append(f"btlm_3b on 24 GiB: best {best[1]} at {best[2]} of the eager peak, holding "
                       f"{format_bytes(best[0])}, {best[3]:.2f} of ideal throughput")
        else:
            out.append("btlm_3b on 24 GiB: no plan of any method")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(PAPER))
    ap.add_argument("--fractions", default="2,4,8,12", help="memory limits as 1/d of the eager peak")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--budget", type=float, default=30.0, help="SwapAdvisor's (and DTR's) seconds per limit")
    ap.add_argument("--magis-budget", type=float, default=30.0, help="MAGIS's seconds per limit")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "swapadvisor.json")
    ap.add_argument("--methods", default=",".join(METHODS), help="a subset of the five methods")
    ap.add_argument("--skip", action="append", default=[], metavar="WORKLOAD:METHOD:1/D:WHY",
                    help="a cell not to run, and why (repeatable)")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="JSON",
                    help="no run: the table of the results in these files (workload subsets run side by side "
                         "with the same settings), written to --json")
    a = ap.parse_args(argv)

    def save(res: dict) -> None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({**res, "table": table(res), "notes": notes(res)}, indent=1))

    if a.merge:
        parts = [json.loads(f.read_text()) for f in a.merge]
        order = {w: i for i, w in enumerate(PAPER)}
        rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: (order.get(r["workload"], 99),
                                                                                 r["limit"] * -1))
        res = {**{k: parts[0][k] for k in ("device", "budget", "magis_budget")}, "rows": rows,
               "merged_from": [str(f) for f in a.merge]}
        cost = AnalyticCost(res["device"])
        for name in {r["workload"] for r in rows if "swap_ceiling" not in r}:  # runs made before the column
            g = load_sample_graph(name)
            mine = [r for r in rows if r["workload"] == name]
            ceiling = ceilings(g, cost, mine[0]["eager_peak"], [float(r["fraction"][2:]) for r in mine],
                               mine[0]["ideal_latency"])
            for r in mine:
                r["swap_ceiling"] = ceiling[r["fraction"]]
    else:
        res = run([w for w in a.workloads.split(",") if w], [float(x) for x in a.fractions.split(",")], a.device,
                  a.budget, a.magis_budget, say=lambda m: print(m, file=sys.stderr, flush=True), save=save,
                  skip={tuple(x.split(":", 3)[:3]): x.split(":", 3)[3] for x in a.skip},
                  methods=[m for m in a.methods.split(",") if m])
    print(f"SwapAdvisor on {res['device']}: throughput as a fraction of ideal (budget {res['budget']:g} s per limit, "
          f"MAGIS {res['magis_budget']:g} s)\n")
    print(table(res))
    for line in notes(res):
        print(f"- {line}")
    save(res)
    print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
