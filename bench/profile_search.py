"""Where MAGIS's search spends a user's wait: per stage of one ``optimize(pareto=True)`` run (the
F-Tree and evaluator built, the warm start's seeds, greedy fission, Remat / Swap / spike steps, the
Pareto sweep of Algorithm 3), its seconds, the states it added and the lowest peak within +5% and
+10% latency after it (x eager's), then the functions that take the time (cProfile, grouped by the
part of the search they belong to).

    python bench/profile_search.py [--models mixtral,sd_unet,gemma2] [--budgets 10,30] [--device rtx3090]
                                   [--no-functions] [--tiny] [--json bench/results/profile_search.json]

The default models are zoo models of 2.5k, 5.3k and 9.3k ops (captured and cached as ``bench/zoo.py``
does).  Latencies are the analytic model's predictions; seconds are this machine's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.zoo import import_graph  # noqa: E402
from core.search.moptimizer import optimize  # noqa: E402

# (group, path fragments of the functions whose own time counts to it), first match wins
GROUPS = (
    ("DTR (seeds)", ("peers/dtr.py",)),
    ("placement of swaps", ("schedule/placement.py", "schedule/swap_planner.py")),
    ("full simulation", ("core/simulate.py", "analysis/lifetimes.py")),
    ("cost model", ("core/cost/",)),
    ("delta evaluation (window, splice)", ("search/delta.py",)),
    ("rescheduling (Algorithm 2)", ("core/schedule/",)),
    ("rule matching and application", ("core/transform/",)),
    ("hashing", ("search/wl_hash.py",)),
    ("graph copies and IR", ("core/ir/",)),
    ("dominators and F-Tree", ("analysis/dgraph.py", "analysis/ftree.py", "analysis/dominators.py")),
    ("search bookkeeping", ("core/search/",)),
)


def grouped(stats: pstats.Stats) -> dict[str, float]:
    """Own (exclusive) seconds per group of ``GROUPS``; the rest is "other"."""
    out: dict[str, float] = {}
    for (path, _line, _fn), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        path = path.replace("\\", "/")
        name = next((g for g, frags in GROUPS if any(f in path for f in frags)), "other (torch, numpy, builtins)")
        out[name] = out.get(name, 0.0) + tt
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def profile(name: str, budget: float, device: str, functions: bool = True, tiny: bool = False) -> dict:
    g, _ = import_graph(name, tiny)
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    if functions:
        pr.enable()
    pf = optimize(g, pareto=True, time_budget=budget, device=device)
    pr.disable()
    wall = time.perf_counter() - t0
    eager = pf.points[-1].peak
    stages = [dict(st, peak_at_5pct=st["peak_at_5pct"] / eager, peak_at_10pct=st["peak_at_10pct"] / eager)
              for st in pf.meta["stages"]]
    groups = grouped(pstats.Stats(pr)) if functions else {}
    total = sum(groups.values()) or 1.0
    return {"model": name, "ops": len(g.ops()), "budget": budget, "wall": round(wall, 2),
            "states": pf.meta["states"], "stages": stages,
            "profile": {k: round(v / total, 4) for k, v in groups.items()}}


def format_run(r: dict) -> str:
    lines = [f"== {r['model']} ({r['ops']} ops), budget {r['budget']:g} s: {r['wall']:.1f} s wall, {r['states']} states"]
    lines.append(f"  {'stage':<44} {'from s':>7} {'to s':>7} {'states':>7} {'<=5%':>7} {'<=10%':>7}")
    for st in r["stages"]:
        lines.append(f"  {st['name'][:44]:<44} {st['start']:7.2f} {st['end']:7.2f} {st['states']:7d} "
                     f"{st['peak_at_5pct']:7.3f} {st['peak_at_10pct']:7.3f}")
    if r["profile"]:
        lines.append("  own time by part (cProfile):  " + ", ".join(f"{k} {v:.0%}" for k, v in r["profile"].items() if v >= 0.01))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mixtral,sd_unet,gemma2")
    ap.add_argument("--budgets", default="10,30", help="seconds, comma-separated")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--tiny", action="store_true", help="the zoo models' tiny variants (a smoke test)")
    ap.add_argument("--no-functions", action="store_true",
                    help="stages only, without cProfile (whose overhead stretches every stage)")
    a = ap.parse_args(argv)
    runs = []
    for name in a.models.split(","):
        for b in a.budgets.split(","):
            runs.append(profile(name, float(b), a.device, not a.no_functions, a.tiny))
            print(format_run(runs[-1]), flush=True)
    if a.json:
        a.json.write_text(json.dumps({"device": a.device, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
