"""Children per second of the M-Optimizer with windows bounded by work, against unbounded windows,
side by side in one run.

    python bench/windows.py [--workloads unet unetpp sd_unet bert_base] [--children 60] [--cap 96]

For each workload one ``MOptimizer`` (its F-Tree, fission, remat and swap rules) is built; the
children are a fixed random sample of the applications its search matches on the root state (the
hot-spot tensors), evaluated once with ``window_cap=None`` (before: the whole window between narrow
waists goes to the DP) and once with the cap (after: at most ``--cap`` ops go to the DP, the rest
keep the parent's order).  Reported: children/s of each, their ratio, the mean and largest window
(ops replaced) and the most ops the DP was given, the best child peak of each, and how many of the
capped children differ from a from-scratch evaluation (``simulate`` of the child's full order; must
be 0).  ``sd_unet`` is the SD-1.x-size UNet of ``sample_graphs/sd_unet.py`` (captured once, then
read from ``bench/results/sd_unet.train.json.gz``).  Writes bench/results/windows.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.errors import RuleNotApplicable  # noqa: E402
from core.ir import io  # noqa: E402
from core.search.delta import WINDOW_CAP  # noqa: E402
from core.search.moptimizer import MOptimizer  # noqa: E402
from core.simulate import simulate  # noqa: E402

SD_FILE = ROOT / "bench" / "results" / "sd_unet.train.json.gz"


def load(name: str):
    if name != "sd_unet":
        from sample_graphs.store import load_sample_graph

        return load_sample_graph(name)
    if not SD_FILE.exists():
        from sample_graphs.sd_unet import capture_sd_unet

        SD_FILE.parent.mkdir(parents=True, exist_ok=True)
        io.save(capture_sd_unet(), SD_FILE)
    return io.load(SD_FILE)


def run(mo: MOptimizer, apps, cap: int | None) -> tuple[float, list]:
    """(children/s, children) of ``apps`` from the root with ``window_cap = cap``."""
    ev = mo.ev
    ev.window_cap = cap
    kids = []
    t0 = time.perf_counter()
    for app in apps:
        try:
            kids.append(ev.evaluate(app))
        except RuleNotApplicable:
            pass
    dt = time.perf_counter() - t0
    return len(apps) / dt, kids


def mismatches(mo: MOptimizer, kids) -> int:
    """Children whose peak or latency differs from ``simulate`` of the child's full order."""
    ev = mo.ev
    bad = 0
    for c in kids:
        rule = ev.rules[c.app.rule]
        log = rule.apply(ev.g, c.app)
        try:
            sim = simulate(ev.g, ev.order[:c.lo] + list(c.window) + ev.order[c.hi + 1:], ev.cost)
        finally:
            rule.inverse(ev.g, log)
        if sim.peak != c.peak or not math.isclose(sim.latency, c.latency, rel_tol=1e-9):
            bad += 1
            print(f"  MISMATCH {c.app}: peak {c.peak} vs {sim.peak}")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", nargs="+", default=["unet", "unetpp", "sd_unet", "bert_base"])
    p.add_argument("--children", type=int, default=60, help="applications evaluated per workload")
    p.add_argument("--cap", type=int, default=WINDOW_CAP, help="ops the window's DP is given at most")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rows = []
    print(f"{'workload':<10} {'ops':>5} {'kids':>5} {'before/s':>9} {'after/s':>8} {'ratio':>6} "
          f"{'win mean':>8} {'win max':>7} {'DP max':>6} {'peak before':>12} {'peak after':>11} {'bad':>4}")
    for name in a.workloads:
        g = load(name)
        mo = MOptimizer(g)
        apps = mo._applications()
        apps = random.Random(a.seed).sample(apps, min(a.children, len(apps)))
        run(mo, apps, a.cap)  # untimed: the cost model's per-op caches warm for both runs
        before, kb = run(mo, apps, None)
        after, ka = run(mo, apps, a.cap)
        bad = mismatches(mo, ka)
        wins = [len(c.window) for c in ka] or [0]
        row = {"workload": name, "ops": len(mo.ev.order), "children": len(apps),
               "before_children_per_s": before, "after_children_per_s": after, "ratio": after / before,
               "window_mean": sum(wins) / len(wins), "window_max": max(wins),
               "dp_ops_max": max((c.scheduled for c in ka), default=0), "cap": a.cap,
               "best_peak_before": min((c.peak for c in kb), default=0),
               "best_peak_after": min((c.peak for c in ka), default=0), "mismatches": bad}
        rows.append(row)
        print(f"{name:<10} {row['ops']:>5} {len(apps):>5} {before:>9.1f} {after:>8.1f} {row['ratio']:>5.1f}x "
              f"{row['window_mean']:>8.0f} {row['window_max']:>7} {row['dp_ops_max']:>6} "
              f"{row['best_peak_before'] / 2**30:>10.3f}Gi {row['best_peak_after'] / 2**30:>9.3f}Gi {bad:>4}")
    out = ROOT / "bench" / "results" / "windows.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return 1 if any(r["mismatches"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
