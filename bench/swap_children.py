"""Swap children per second: ``simulate`` from scratch against the delta evaluator's simulation from
its caches (``DeltaEvaluator._simulated``: cached op times, the storage index kept per node), side by
side in one run, on the paper-size CNNs.

A graph with STORE/LOAD copies is simulated per child (the copy stream decides when a copy's input
is freed).  From the imported graph one swap is committed (the largest hot-spot's ``SwapLate``), then
every Swap and SwapLate child of up to ``--hot`` hot-spots is evaluated; the same children are then
placed and simulated from scratch with ``simulate`` (what the evaluator did before), and every peak
and latency must agree.  The evaluator's time includes applying and taking back each edit and placing
the copies; the from-scratch time is the ``simulate`` call alone.

    python bench/swap_children.py [--workloads resnet50,unet,unetpp] [--hot 12] | tee bench/results/swap_children.txt
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost.model import AnalyticCost  # noqa: E402
from core.schedule.baselines import TracedOrder  # noqa: E402
from core.search.delta import DeltaEvaluator  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.transform.registry import RULES  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402


def run(name: str, hot: int) -> dict:
    g = load_sample_graph(name)
    cost = AnalyticCost("rtx3090")
    rules = {k: RULES[k] for k in ("swap", "swap_late")}
    ev = DeltaEvaluator(g.copy(), TracedOrder().order(g), cost, rules=rules)
    first = next(a for a in ev.applications() if a.rule == "swap_late")
    ev.advance(first)
    apps = ev.applications(ev.hotspots()[:hot])
    t0 = time.perf_counter()
    kids = [ev.evaluate(a) for a in apps]
    new = time.perf_counter() - t0
    old, bad = 0.0, 0
    for c in kids:  # the same child, simulated from scratch (outside the timed part: the edit)
        log = ev.rules[c.app.rule].apply(ev.g, c.app)
        order = ev.order[:c.lo] + list(c.window) + ev.order[c.hi + 1:]
        t0 = time.perf_counter()
        sim = simulate(ev.g, order, cost, validate=False)
        old += time.perf_counter() - t0
        ev.rules[c.app.rule].inverse(ev.g, log)
        bad += sim.peak != c.peak or not math.isclose(sim.latency, c.latency, rel_tol=1e-9)
    return {"workload": name, "ops": len(ev.order), "children": len(kids), "ms_simulate": 1e3 * old / len(kids),
            "ms_delta": 1e3 * new / len(kids), "differ": bad}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="resnet50,unet,unetpp", help="comma-separated sample names")
    ap.add_argument("--hot", type=int, default=12, help="hot-spot tensors whose swaps are evaluated")
    a = ap.parse_args(argv)
    print(f"{'workload':10s} {'ops':>5s} {'children':>8s} {'simulate ms':>12s} {'evaluator ms':>13s} "
          f"{'speed-up':>9s} {'differ':>6s}")
    differ = 0
    for w in a.workloads.split(","):
        r = run(w, a.hot)
        differ += r["differ"]
        print(f"{w:10s} {r['ops']:5d} {r['children']:8d} {r['ms_simulate']:12.2f} {r['ms_delta']:13.2f} "
              f"{r['ms_simulate'] / r['ms_delta']:8.1f}x {r['differ']:6d}", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
