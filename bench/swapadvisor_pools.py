"""How far SwapAdvisor's memory pool lets it go: per cell where its GA found a plan
(``bench/results/swapadvisor.json``), the best throughput of its planner over every maximal pool
(``search.swapadvisor.pool_ceiling``: every CLS, every CNT at or above the floors that no object
can be added to) on the traced order, next to the GA's own result, on-demand swapping's, and the
ceiling of any swap plan of that order (``swap_planner.swap_bound``).

Where the pool ceiling is below the paper's 53% of ideal, no allocation the GA can choose reaches
it on that order: the GA's schedules are the only lever left (they move these U-Nets and BERT by
0.01-0.03).  Throughput is ideal latency / plan latency; every number is a prediction of the
analytic model (RTX 3090 profile by default); nothing here ran on a GPU.

    python bench/swapadvisor_pools.py [--results bench/results/swapadvisor.json] [--deadline 300]
                                      [--workloads unet,unetpp,...] [--json bench/results/swapadvisor_pools.json]
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
from core.schedule.swap_planner import SwapProblem, plan_swaps, swap_bound  # noqa: E402
from core.search.swapadvisor import pool_ceiling  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "swapadvisor.json"
OUT = ROOT / "bench" / "results" / "swapadvisor_pools.json"
PAPER_LOW = 0.53  # the paper's lowest throughput, as a fraction of ideal


def cells(results: dict, workloads: set[str] | None) -> list[tuple[str, str, int, float]]:
    """(workload, limit label, limit in bytes, SwapAdvisor's throughput) of every cell where the GA
    found a plan."""
    out = []
    for row in results["rows"]:
        sa = row["cells"].get("swapadvisor", {})
        if sa.get("throughput") is None or workloads and row["workload"] not in workloads:
            continue
        out.append((row["workload"], row["fraction"], int(row["limit"]), sa["throughput"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="bench/swapadvisor.py's JSON (its cells)")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds per cell (then: a partial ceiling)")
    ap.add_argument("--workloads", default=None)
    ap.add_argument("--json", type=Path, default=OUT)
    a = ap.parse_args(argv)
    res = json.loads(a.results.read_text())
    cost = AnalyticCost(res["device"])
    want = set(a.workloads.split(",")) if a.workloads else None
    rows = []
    graphs: dict[str, tuple] = {}
    for name, label, limit, sa in cells(res, want):
        if name not in graphs:
            graphs[name] = SwapProblem.from_graph(load_sample_graph(name), cost)
        p = graphs[name]
        ideal = sum(p.time)
        t0 = time.perf_counter()
        c = pool_ceiling(p, limit, deadline=t0 + a.deadline)
        od = plan_swaps(p, list(range(p.n)), None, capacity=limit - p.resident)
        row = {"workload": name, "limit": label, "swap_ceiling": ideal / swap_bound(p, range(p.n), limit),
               "swapadvisor": sa, "pool_ceiling": ideal / c.time if c.allocation else None,
               "pools": c.pools, "complete": c.complete,
               "allocation": c.allocation.to_dict() if c.allocation else None,
               "odswap": ideal / od.time if od.feasible else None, "seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        print(f"{name} {label}: pool ceiling {fmt(row['pool_ceiling'])} over {c.pools} pools"
              f"{'' if c.complete else ' (deadline: partial)'}, {row['seconds']} s", file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"device": res["device"], "results": str(a.results.relative_to(ROOT))
                                  if a.results.is_relative_to(ROOT) else str(a.results),
                                  "rows": rows, "table": text}, indent=1) + "\n")
    return 0


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[dict]) -> str:
    out = ["| workload | limit | swap ceiling | SwapAdvisor (GA) | pool ceiling, traced order | pools | ODSwap "
           f"| pool ceiling >= {PAPER_LOW} |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pc = r["pool_ceiling"]
        verdict = "-" if pc is None else ("yes" if pc >= PAPER_LOW else "no")
        out.append(f"| {r['workload']} | {r['limit']} | {fmt(r['swap_ceiling'])} | {fmt(r['swapadvisor'])} | "
                   f"{fmt(pc)}{'' if r['complete'] else ' (partial)'} | {r['pools']} | {fmt(r['odswap'])} | {verdict} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
