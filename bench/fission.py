"""Fission on the seven paper-size workloads: the F-Tree (MAGIS Algorithm 1), how much of the graph
its candidates cover, and the best peak that fission alone reaches -- a greedy pass that enables
F-Tree nodes best score first (``core.search.greedy.greedy_fission``) -- with its latency on the
device profile (RTX 3090 by default), against the traced baseline of the same run.

    python bench/fission.py [--workloads bert_base,...] [--device rtx3090] [--time-budget 60]
                            [--json bench/results/fission.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.analysis.ftree import build_ftree  # noqa: E402
from core.cost.model import AnalyticCost  # noqa: E402
from core.fmt import format_bytes  # noqa: E402
from core.schedule import get_scheduler  # noqa: E402
from core.search.greedy import greedy_fission  # noqa: E402
from core.simulate import simulate  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]


def run(name: str, device: str, budget: float) -> dict:
    g = load_sample_graph(name)
    cost = AnalyticCost(device)
    order = get_scheduler("traced").run(g, cost).order
    base = simulate(g, order, cost, validate=False)
    t0 = time.perf_counter()
    ft = build_ftree(g, order)
    t_tree = time.perf_counter() - t0
    covered = set().union(*(set(f.split.nodes) for f in ft.nodes)) if ft.nodes else set()
    r = greedy_fission(g, order, cost, time_budget=budget)
    return {"workload": name, "ops": len(order), "device": device,
            "ftree_nodes": len(ft.nodes), "ftree_roots": len(ft.roots()), "rejected": ft.rejected,
            "ftree_seconds": t_tree, "covered_ops": len(covered), "covered_fraction": len(covered) / len(order),
            "baseline": {"peak": base.peak, "latency": base.latency},
            "fission": {"peak": r.peak, "latency": r.latency, "enabled": len(r.applications),
                        "evaluated": r.stats["evaluated"], "seconds": r.stats["seconds"],
                        "stopped": r.stats["stopped"],
                        "peak_ratio": r.peak / base.peak, "latency_ratio": r.latency / base.latency}}


def table(rows: list[dict]) -> str:
    head = (f"{'workload':<14}{'ops':>6}{'F-Tree':>8}{'split':>7} | {'baseline peak':>14}{'latency':>11} | "
            f"{'fission peak':>13}{'x':>7}{'lat x':>7}{'on':>4}")
    lines = [head, "-" * len(head)]
    for r in rows:
        b, f = r["baseline"], r["fission"]
        lines.append(f"{r['workload']:<14}{r['ops']:>6}{r['ftree_nodes']:>8}{r['covered_fraction']:>7.0%} | "
                     f"{format_bytes(b['peak']):>14}{b['latency'] * 1e3:>9.1f}ms | "
                     f"{format_bytes(f['peak']):>13}{f['peak_ratio']:>7.3f}{f['latency_ratio']:>7.3f}{f['enabled']:>4}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(PAPER), help="comma-separated sample names")
    p.add_argument("--device", default="rtx3090", help="device profile of the cost model")
    p.add_argument("--time-budget", type=float, default=60.0, help="seconds of the greedy pass per workload")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    a = p.parse_args()
    rows = []
    for name in a.workloads.split(","):
        print(f"{name} ...", file=sys.stderr)
        rows.append(run(name, a.device, a.time_budget))
    print(f"fission alone on {a.device} (F-Tree = candidates of Algorithm 1, L = 4; split = share of ops in "
          f"some candidate; x = ratio to the traced baseline of this run; on = F-Tree nodes enabled)")
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
