"""Rematerialization and swapping on the seven paper-size workloads: peak and latency (simulated,
RTX 3090 profile by default) of the traced baseline, a greedy remat-only pass and a greedy
swap-only pass over the memory hot-spots (``core.search.greedy``), side by side, in one run.

    python bench/remat_swap.py [--workloads bert_base,...] [--device rtx3090] [--steps 200]
                               [--time-budget 60] [--json bench/results/remat_swap.json]

Each pass stops when no application lowers the peak, after ``--steps`` applications or after
``--time-budget`` seconds.  Ratios are against the baseline of the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.cost.model import AnalyticCost  # noqa: E402
from core.fmt import format_bytes  # noqa: E402
from core.schedule import get_scheduler  # noqa: E402
from core.search.greedy import greedy_remat, greedy_swap  # noqa: E402
from core.simulate import simulate  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]


def run(name: str, device: str, steps: int, budget: float) -> dict:
    g = load_sample_graph(name)
    cost = AnalyticCost(device)
    order = get_scheduler("traced").run(g, cost).order
    base = simulate(g, order, cost, validate=False)
    row = {"workload": name, "ops": len(order), "device": device,
           "baseline": {"peak": base.peak, "latency": base.latency}}
    for label, fn in (("remat", greedy_remat), ("swap", greedy_swap)):
        t0 = time.perf_counter()
        r = fn(g, order, cost, max_steps=steps, time_budget=budget)
        sim = simulate(r.graph(g), r.order, cost, validate=False)
        row[label] = {"peak": sim.peak, "latency": sim.latency, "applications": len(r.applications),
                      "evaluated": r.stats["evaluated"], "simulated": r.stats["simulated"], "seconds": time.perf_counter() - t0,
                      "stopped": r.stats["stopped"], "host_peak": sim.memory.host_peak,
                      "compute_wait": sim.compute_wait,
                      "peak_ratio": sim.peak / base.peak, "latency_ratio": sim.latency / base.latency}
        print(f"  {name} {label}: {len(r.applications)} applications, {r.stats['stopped']}", file=sys.stderr)
    return row


def table(rows: list[dict]) -> str:
    head = (f"{'workload':<14}{'ops':>6} | {'baseline peak':>14}{'latency':>10} | "
            f"{'remat peak':>12}{'x':>6}{'lat x':>7}{'#':>4} | {'swap peak':>12}{'x':>6}{'lat x':>7}{'#':>4}"
            f"{'host':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        b, m, s = r["baseline"], r["remat"], r["swap"]
        lines.append(
            f"{r['workload']:<14}{r['ops']:>6} | {format_bytes(b['peak']):>14}{b['latency'] * 1e3:>8.1f}ms | "
            f"{format_bytes(m['peak']):>12}{m['peak_ratio']:>6.3f}{m['latency_ratio']:>7.3f}{m['applications']:>4} | "
            f"{format_bytes(s['peak']):>12}{s['peak_ratio']:>6.3f}{s['latency_ratio']:>7.3f}{s['applications']:>4}"
            f"{format_bytes(s['host_peak']):>11}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(PAPER), help="comma-separated sample names")
    p.add_argument("--device", default="rtx3090", help="device profile of the cost model")
    p.add_argument("--steps", type=int, default=200, help="most applications per pass")
    p.add_argument("--time-budget", type=float, default=60.0, help="seconds per pass and workload")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    a = p.parse_args()
    rows = []
    for name in a.workloads.split(","):
        print(f"{name} ...", file=sys.stderr)
        rows.append(run(name, a.device, a.steps, a.time_budget))
    print(f"peak and latency on {a.device} (x = ratio to the traced baseline of this run; # = rule "
          f"applications; host = swapped-out bytes at most)")
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
