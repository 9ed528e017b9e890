"""What batch norm costs the M-Optimizer on the U-Nets: U-Net and U-Net++ at the paper's sizes, as the
samples have them (as Ronneberger et al. 2015 and Zhou et al. 2018 wrote them: no batch norm) and
with BatchNorm after every convolution (as many re-implementations add), each searched with
``optimize(pareto=True)`` for the same budget on the same device profile.

Training batch norm reduces over the batch, so no sub-graph that holds one splits along the batch:
F-Trans cannot cover the whole training step, and the backward's last decoder level (a convolution's
concatenated input and its gradient, full size) makes the peak.  Without batch norm the F-Tree's
region over the whole step splits along the batch.  Per (workload, norm): eager's peak, MAGIS's
peak (fraction of eager's) at <= 5% and <= 10% latency overhead, its lowest peak, the fission nodes
of the <= 10% point and the wall time.

    python bench/unet_norm.py [--workloads unet,unetpp] [--time-budget 60] [--device rtx3090]
                              [--json bench/results/unet_norm.json]
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
from core.frontend.workload import build_fake, capture_workload  # noqa: E402
from core.ir.graph import NodeKind  # noqa: E402
from core.search.methods import METHODS  # noqa: E402
from core.search.moptimizer import optimize  # noqa: E402
from core.search.plan import replay  # noqa: E402
from sample_graphs.unet import build_unet  # noqa: E402
from sample_graphs.unetpp import build_unetpp  # noqa: E402

BUILDERS = {"unet": build_unet, "unetpp": build_unetpp}


def run(workload: str, norm: bool, budget: float, device: str) -> dict:
    s = build_fake(lambda: BUILDERS[workload](workload, False, norm=norm))
    g = capture_workload(s, name=workload)
    eager = METHODS["eager"].run(g, AnalyticCost(device)).plans[0]
    t0 = time.perf_counter()
    pf = optimize(g, pareto=True, time_budget=budget, device=device)
    wall = time.perf_counter() - t0
    points = [(p.peak / eager.peak, p.latency / eager.latency, p) for p in pf.points[:-1]]

    def best(slack: float):
        ok = [x for x in points if x[1] <= slack]
        return min(ok, key=lambda x: x[0]) if ok else None

    b5, b10 = best(1.05), best(1.10)
    fission = 0
    if b10 is not None:
        h = replay(g, b10[2].applications)
        fission = sum(n.kind == NodeKind.FISSION for n in h)
    return {"workload": workload, "batch_norm": norm, "ops": len(list(g.ops())), "eager_peak": int(eager.peak),
            "peak_at_5pct": b5 and b5[0], "peak_at_10pct": b10 and b10[0],
            "lowest_peak": min(x[0] for x in points), "fission_nodes_at_10pct": fission,
            "seconds": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="unet,unetpp", help="comma-separated: unet, unetpp")
    ap.add_argument("--time-budget", type=float, default=60.0, help="seconds of search per graph")
    ap.add_argument("--device", default="rtx3090", help="device profile of the cost model")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    names = [w for w in a.workloads.split(",") if w]
    bad = [w for w in names if w not in BUILDERS]
    if bad:
        ap.error(f"unknown workload(s) {', '.join(bad)}; known: {', '.join(BUILDERS)}")
    print(f"{a.device}; MAGIS {a.time_budget:g} s per graph; peaks as fractions of eager's of the same graph")
    rows = []
    for w in names:
        for norm in (True, False):
            print(f"{w} {'with' if norm else 'without'} BatchNorm ...", file=sys.stderr, flush=True)
            rows.append(run(w, norm, a.time_budget, a.device))

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    print(f"{'workload':9s} {'BatchNorm':>9s} {'ops':>5s} {'eager peak':>11s} {'peak@<=5%':>10s} "
          f"{'peak@<=10%':>10s} {'lowest':>8s} {'fission':>8s} {'seconds':>8s}")
    for r in rows:
        print(f"{r['workload']:9s} {'yes' if r['batch_norm'] else 'no':>9s} {r['ops']:5d} "
              f"{format_bytes(r['eager_peak']):>11s} {pct(r['peak_at_5pct']):>10s} {pct(r['peak_at_10pct']):>10s} "
              f"{pct(r['lowest_peak']):>8s} {r['fission_nodes_at_10pct']:8d} {r['seconds']:8.1f}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"device": a.device, "time_budget": a.time_budget, "rows": rows}, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
