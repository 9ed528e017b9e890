"""MAGIS with and without TASO's substitution rules on the seven paper workloads (MAGIS sections 3
and 7.1): the training step's graph as imported, searched by the M-Optimizer's usual rules, against
the graph after OCGGS Sampling's substitution pre-pass (K = 10) searched with the substitution rules
among the M-Rules (``optimize(substitutions=True)``).  Both against the imported graph's eager order
(peak and latency ratios of the same run): the smallest peak at <= 10% latency overhead and the
least overhead under an 80% memory limit, each MAGIS run within the same ``--time-budget``.
Latencies are the analytic model's predictions (RTX 3090 profile).

    python bench/magis_substitutions.py [--workloads bert_base,...] [--time-budget 45]
                                        [--prepass-budget 30] [--json bench/results/magis_substitutions.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost.model import AnalyticCost  # noqa: E402
from core.schedule import get_scheduler  # noqa: E402
from core.search.moptimizer import optimize  # noqa: E402
from core.search.ocggs import substitute  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.transform.substitution import SUBSTITUTIONS  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402

SUBSTITUTION_NAMES = {s.name for s in SUBSTITUTIONS}

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]


def summary(points, peak0: float, lat0: float) -> dict:
    pts = [(p.peak / peak0, p.latency / lat0) for p in points]
    at10 = [m for m, t in pts if t <= 1.10]
    under80 = [t for m, t in pts if m <= 0.80]
    return {"peak_at_10pct": min(at10) if at10 else None, "overhead_at_80pct": min(under80) - 1 if under80 else None,
            "points": len(pts)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(PAPER))
    ap.add_argument("--time-budget", type=float, default=45.0)
    ap.add_argument("--prepass-budget", type=float, default=30.0)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    cost = AnalyticCost("rtx3090")
    rows = []
    for name in a.workloads.split(","):
        g = load_sample_graph(name)
        eager = simulate(g, get_scheduler("traced").run(g).order, cost)
        t0 = time.perf_counter()
        res, h = substitute(g, "sampling", max_steps=10, time_budget=a.prepass_budget, cost=cost)
        pre_s = time.perf_counter() - t0
        plain = optimize(g, pareto=True, time_budget=a.time_budget, device="rtx3090")
        subst = optimize(h, pareto=True, time_budget=a.time_budget, device="rtx3090", substitutions=True)
        used = sorted({x.rule for p in subst.points for x in p.applications if x.rule in SUBSTITUTION_NAMES})
        row = {"workload": name, "nodes": len(g), "prepass_steps": [s["rule"] for s in res.trace],
               "prepass_latency_ratio": res.cost_after / res.cost_before, "prepass_seconds": pre_s,
               "without": summary(plain.points[:-1], eager.peak, eager.latency),
               "with": summary(subst.points[:-1], eager.peak, eager.latency), "substitutions_in_plans": used}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del plain, subst, h
        gc.collect()

    def f(x, pct=False):
        return "-" if x is None else (f"{x * 100:+.1f}%" if pct else f"{x:.3f}")

    print(f"\nMAGIS with and without substitution rules (RTX 3090 profile, {a.time_budget:g} s each; "
          "ratios against the imported graph's eager order; predicted latencies)")
    print(f"{'workload':<14}{'pre-pass':>10}{'peak<=10% w/o':>15}{'with':>8}{'ovh@80% w/o':>13}{'with':>8}  steps")
    for r in rows:
        print(f"{r['workload']:<14}{r['prepass_latency_ratio']:>10.4f}{f(r['without']['peak_at_10pct']):>15}"
              f"{f(r['with']['peak_at_10pct']):>8}{f(r['without']['overhead_at_80pct'], True):>13}"
              f"{f(r['with']['overhead_at_80pct'], True):>8}  {','.join(r['prepass_steps']) or '-'}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"time_budget": a.time_budget, "prepass_budget": a.prepass_budget,
                                      "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
