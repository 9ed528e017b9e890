"""The M-Optimizer's memory/latency trade-off on the seven paper-size workloads (MAGIS section 7's
headline numbers), against PyTorch's eager order of the same run, on one device profile.

For each workload: ``optimize(..., pareto=True)`` within a fixed search budget (the greedy fission
warm start included), and from its frontier the smallest peak (as a fraction of eager's) at <= 5% and
<= 10% latency overhead, and the least overhead under 80% and 40% memory limits -- next to the
paper's ranges.  The convergence (time to come within 1% of the final best peak) comes from the
search records.  Peers (``core.search.peers``) are added to the same table where they are present.

    python bench/pareto.py [--workloads bert_base,...] [--device rtx3090] [--time-budget 60]
                           [--json bench/results/pareto.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.search.moptimizer import optimize  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]
PAPER_NUMBERS = "paper: <=10% overhead -> 15-60% of PyTorch's peak; <=5% -> 25-70%; 80%/40% limits -> <=5%/<=15% overhead"


def summarise(points: list[tuple[float, float]]) -> dict:
    """(peak ratio, latency ratio) points -> the four headline numbers."""
    def best_peak(over):
        ok = [p for p, t in points if t <= 1 + over]
        return min(ok) if ok else None

    def best_over(limit):
        ok = [t - 1 for p, t in points if p <= limit]
        return max(0.0, min(ok)) if ok else None

    return {"peak_at_5pct": best_peak(0.05), "peak_at_10pct": best_peak(0.10),
            "overhead_at_80pct": best_over(0.8), "overhead_at_40pct": best_over(0.4)}


def run(name: str, device: str, budget: float) -> dict:
    g = load_sample_graph(name)
    t0 = time.perf_counter()
    pf = optimize(g, pareto=True, time_budget=budget, device=device)
    base = pf.points[-1]
    pts = [(p.peak / base.peak, p.latency / base.latency) for p in pf.points]
    final = min(r["best_peak"] for r in pf.records) if pf.records else base.peak
    within = next((r["seconds"] for r in pf.records if r["best_peak"] <= 1.01 * final), None)
    row = {"workload": name, "nodes": len(g), "seconds": round(time.perf_counter() - t0, 1),
           "states": pf.meta["states"], "frontier": [(round(a, 4), round(b, 4)) for a, b in pts],
           "seconds_to_1pct": within, **summarise(pts)}
    return row


def fmt(x, pct=False):
    if x is None:
        return "  -  "
    return f"{100 * x:5.1f}%" if pct else f"{x:5.3f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(PAPER))
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--time-budget", type=float, default=60.0, help="search seconds per workload")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    print(f"M-Optimizer, {a.time_budget:g} s per workload on {a.device}; ratios against eager of the same run")
    print(f"{'workload':14s} {'peak@<=5%':>10s} {'peak@<=10%':>10s} {'ovh@80%':>8s} {'ovh@40%':>8s} "
          f"{'states':>7s} {'to 1%':>6s}")
    for name in a.workloads.split(","):
        r = run(name, a.device, a.time_budget)
        rows.append(r)
        print(f"{name:14s} {fmt(r['peak_at_5pct']):>10s} {fmt(r['peak_at_10pct']):>10s} "
              f"{fmt(r['overhead_at_80pct'], True):>8s} {fmt(r['overhead_at_40pct'], True):>8s} "
              f"{r['states']:7d} {r['seconds_to_1pct'] or 0:5.1f}s", flush=True)
    print(PAPER_NUMBERS)
    if a.json:
        a.json.write_text(json.dumps({"device": a.device, "time_budget": a.time_budget, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
