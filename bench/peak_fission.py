"""Peak fission (``search.peak_fission``) from DTR's plans of a zoo model, against the Swap steps
alone from the same plans.

Per DTR budget: DTR's plan adopted into the M-Optimizer (``MOptimizer.adopt``), then

* the baseline: Swap steps (the Swap and SwapLate rules, ``remat_steps``) from the plan, as the warm
  start takes them;
* peak fission: ``peak_fission_steps`` from the plan (F-Trans of windows around the peak step, a
  recomputed block with its backward among them), then the same Swap steps from its end;

each in its own optimizer, so neither sees the other's states.  Per column: the end's peak (x eager's)
and latency overhead, and the lowest peak within +10%.  Every number is a prediction of the analytic
model (RTX 3090 profile by default); nothing here ran on a GPU.

    python bench/peak_fission.py [--model sd_unet] [--budgets 0.44,0.45,0.4625] [--fission-seconds 40]
                                 [--swap-seconds 20] [--device rtx3090] [--tiny] [--json bench/results/peak_fission.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from zoo import import_graph  # noqa: E402

from core.cost.model import AnalyticCost  # noqa: E402
from core.search.moptimizer import MOptimizer  # noqa: E402
from core.search.peers.dtr import DTRFailure, DTRSim, budget_plan  # noqa: E402

SWAP_RULES = ("swap", "swap_late")
SLACK = 1.10


def _point(m: MOptimizer, s) -> dict:
    return {"peak": s.peak / m.root.peak, "overhead": s.latency / m.root.latency - 1, "depth": s.depth}


def _best_within(m: MOptimizer, below: set[int]) -> dict | None:
    """The lowest-peak state within +10% among the archive's states reached from the start (ids)."""
    ok = [a for a in m.archive if id(a) in below and a.latency <= SLACK * m.root.latency]
    return _point(m, min(ok, key=lambda a: (a.peak, a.latency))) if ok else None


def run_budget(g, cost, frac: float, free: dict, fission_s: float, swap_s: float, say) -> dict:
    plan = budget_plan(g, cost, frac, free)
    row: dict = {"budget": frac}
    for column in ("swaps", "fission"):
        m = MOptimizer(g, cost)
        s = m.adopt(plan)
        if s is None:
            raise SystemExit(f"DTR's plan at {frac} has no recomputation")
        row["start"] = _point(m, s)
        t0 = time.perf_counter()
        end = s
        if column == "fission":
            end = m.peak_fission_steps(s, fission_s)
            row["fission"] = dict(_point(m, end), seconds=round(time.perf_counter() - t0, 1))
        end = m.remat_steps(end, swap_s, step_rules=SWAP_RULES)
        reached = {id(a) for a in m.archive if s in a.path()}
        row[f"{column}_swaps"] = dict(_point(m, end), best_within_10pct=_best_within(m, reached),
                                      seconds=round(time.perf_counter() - t0, 1))
        say(f"  DTR {frac}: {column} done")
    return row


def _fmt(p: dict | None) -> str:
    return "-" if p is None else f"{p['peak']:.4f}x at {100 * p['overhead']:+.1f}%"


def format_table(rows: list[dict]) -> str:
    head = (f"{'DTR budget':>10}  {'DTR plan':>20}  {'Swap steps alone':>20}  {'best <= +10%':>20}  "
            f"{'peak fission':>20}  {'then Swap steps':>20}  {'best <= +10%':>20}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['budget']:>10g}  {_fmt(r['start']):>20}  {_fmt(r['swaps_swaps']):>20}  "
                     f"{_fmt(r['swaps_swaps']['best_within_10pct']):>20}  {_fmt(r['fission']):>20}  "
                     f"{_fmt(r['fission_swaps']):>20}  {_fmt(r['fission_swaps']['best_within_10pct']):>20}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="sd_unet")
    ap.add_argument("--budgets", default="0.44,0.45,0.4625", help="DTR's budgets, fractions of eager's peak")
    ap.add_argument("--fission-seconds", type=float, default=40.0)
    ap.add_argument("--swap-seconds", type=float, default=20.0)
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--tiny", action="store_true", help="the model's tiny variant (a smoke test)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)

    return over_dtr_plans(a.model, a.device, a.tiny, a.budgets, a.json, format_table,
                          lambda g, cost, frac, free, say: run_budget(g, cost, frac, free, a.fission_seconds,
                                                                      a.swap_seconds, say),
                          {"fission_seconds": a.fission_seconds, "swap_seconds": a.swap_seconds})


def over_dtr_plans(model: str, device: str, tiny: bool, budgets: str, json_path: Path | None, table,
                   run, settings: dict) -> int:
    """What a bench from DTR's plans shares: the model's graph and DTR's unbudgeted run, then
    ``run(g, cost, fraction, free, say)`` -> a row per budget of ``budgets`` ("0.44,0.45"; a budget
    DTR cannot meet is listed with its reason, not dropped), ``table(rows)`` printed and, with
    ``json_path``, the rows and ``settings`` written there."""
    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    g, _ = import_graph(model, tiny=tiny)
    cost = AnalyticCost(device)
    _, free = DTRSim(g, cost, None, 10.0).run()
    rows, failed = [], []
    for frac in (float(x) for x in budgets.split(",")):
        say(f"{model}: DTR {frac} ...")
        try:
            rows.append(run(g, cost, frac, free, say))
        except DTRFailure as e:
            failed.append({"budget": frac, "reason": str(e)})
            say(f"  DTR {frac}: {e}")
    print(f"{model} ({device}, analytic predictions; peak x eager's, latency overhead)")
    print(table(rows))
    for f in failed:
        print(f"DTR {f['budget']:g}: {f['reason']}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"model": model, "device": device, "tiny": tiny, **settings,
                                         "rows": rows, "failed": failed}, indent=1) + "\n")
        print(f"wrote {json_path}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
