"""Spike steps (``MOptimizer.spike_steps``) after the Swap steps, on DTR's plans of a zoo model.

Per DTR budget: DTR's plan adopted into the M-Optimizer (``MOptimizer.adopt``), then the Swap steps
(the Swap and SwapLate rules, ``remat_steps``), as the warm start takes them, until none lowers the
peak or their seconds end; then spike steps from the lowest-peak state the Swap steps reached within
each latency slack of ``--from`` (x eager's latency), each until no spike can be lowered.  Per
budget: DTR's plan, the end of the Swap steps and their lowest peak within +10%, then the lowest
peak within +10% and the lowest peak of all once the spike steps are added (the same optimizer: its
archive holds both).  Every number is a prediction of the analytic model (RTX 3090 profile by
default); nothing here ran on a GPU.

    python bench/spike_steps.py [--model sd_unet] [--budgets 0.48,0.53,0.56] [--swap-seconds 25]
                                [--spike-seconds 30] [--from 1.08,1.09,1.10] [--device rtx3090] [--tiny]
                                [--json bench/results/spike_steps.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peak_fission import SLACK, SWAP_RULES, _fmt, _point, over_dtr_plans  # noqa: E402

from core.search.moptimizer import MOptimizer  # noqa: E402
from core.search.peers.dtr import budget_plan  # noqa: E402
from core.search.search_config import DEFAULT_CONFIG  # noqa: E402


def _lowest(m: MOptimizer, start, slack: float | None = None):
    """The lowest-peak archive state reached from ``start`` (within ``slack`` x eager's latency)."""
    ok = [a for a in m.archive if start in a.path() and (slack is None or a.latency <= slack * m.root.latency)]
    return min(ok, key=lambda a: (a.peak, a.latency), default=None)


def run_budget(g, cost, frac: float, free: dict, swap_s: float, spike_s: float, slacks: list[float], say,
               rules: tuple[str, ...] = DEFAULT_CONFIG.spike_rules) -> dict:
    m = MOptimizer(g, cost)
    s = m.adopt(budget_plan(g, cost, frac, free))
    if s is None:
        raise SystemExit(f"DTR's plan at {frac} has no recomputation")
    t0 = time.perf_counter()
    end = m.remat_steps(s, swap_s, step_rules=SWAP_RULES)
    swap_seconds = time.perf_counter() - t0
    within = _lowest(m, s, SLACK)
    row = {"budget": frac, "start": _point(m, s),
           "swaps": dict(_point(m, end), seconds=round(swap_seconds, 1),
                         best_within_10pct=_point(m, within) if within is not None else None)}
    starts = []
    for slack in slacks:
        st = _lowest(m, s, slack)
        if st is not None and st not in starts:
            starts.append(st)
    t0 = time.perf_counter()
    steps = 0
    for i, st in enumerate(starts):
        left = spike_s - (time.perf_counter() - t0)
        got = m.spike_steps(st, left / (len(starts) - i), step_rules=rules)
        steps += got.depth - st.depth
    within, low = _lowest(m, s, SLACK), _lowest(m, s)
    row["spikes"] = {"from": [_point(m, st) for st in starts], "steps": steps,
                     "seconds": round(time.perf_counter() - t0, 1),
                     "best_within_10pct": _point(m, within) if within is not None else None,
                     "lowest": _point(m, low)}
    say(f"  DTR {frac}: done")
    return row


def format_table(rows: list[dict]) -> str:
    cols = ("DTR budget", "DTR plan", "Swap steps", "best <= +10%", "then spike steps: best <= +10%",
            "lowest", "steps")
    lines = ["  ".join(cols)]
    for r in rows:
        sp = r["spikes"]
        lines.append("  ".join((f"{r['budget']:g}", _fmt(r["start"]), _fmt(r["swaps"]),
                                _fmt(r["swaps"]["best_within_10pct"]), _fmt(sp["best_within_10pct"]),
                                _fmt(sp["lowest"]), str(sp["steps"]))))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="sd_unet")
    ap.add_argument("--budgets", default="0.48,0.53,0.56", help="DTR's budgets, fractions of its unbudgeted peak")
    ap.add_argument("--swap-seconds", type=float, default=25.0)
    ap.add_argument("--spike-seconds", type=float, default=30.0)
    ap.add_argument("--from", dest="slacks", default="1.08,1.09,1.10",
                    help="latency slacks (x eager's) of the states the spike steps start from")
    ap.add_argument("--rules", default=",".join(DEFAULT_CONFIG.spike_rules), help="the spike steps' rules (fission: F-Trans "
                    "of windows around the spike, peak_fission.peak_windows)")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--tiny", action="store_true", help="the model's tiny variant (a smoke test)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)

    slacks = [float(x) for x in a.slacks.split(",")]
    return over_dtr_plans(a.model, a.device, a.tiny, a.budgets, a.json, format_table,
                          lambda g, cost, frac, free, say: run_budget(g, cost, frac, free, a.swap_seconds,
                                                                      a.spike_seconds, slacks, say,
                                                                      tuple(a.rules.split(","))),
                          {"swap_seconds": a.swap_seconds, "spike_seconds": a.spike_seconds, "from": slacks,
                           "rules": a.rules.split(",")})

if __name__ == "__main__":
    raise SystemExit(main())
