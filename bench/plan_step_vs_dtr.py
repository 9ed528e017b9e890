"""``plan_step`` at its default budget against DTR on the same captured step.

Per model -- the tiny samples and ``examples/hf_causal_lm.py``'s Llama -- and memory limit: the plan
``plan_step`` runs (its default 10 s search, no cache), then DTR (``peers.dtr``, the strongest
recomputation a user reaches for at this scale) on the graph ``plan_step`` captured, with the same
budget.  The row compares MAGIS's plan with DTR's lowest-peak plan at no more latency: MAGIS wins
where its peak is at least as low.  Peaks are the simulator's bytes; latencies the analytic model's
predictions.

    python bench/plan_step_vs_dtr.py [--models bert_tiny,...,hf_llama] [--limits 0.8,0.6,0.4]
                                     [--time-budget 10] [--json bench/results/plan_step_vs_dtr.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from core.cost.model import AnalyticCost  # noqa: E402
from core.search.methods import run_method  # noqa: E402
from core.train import plan_step  # noqa: E402

MODELS = ("bert_tiny", "gpt_neo_tiny", "resnet50_tiny", "unet_tiny", "hf_llama")


def build(name: str):
    """(module, loss_fn, inputs) of a tiny sample, or of the README's Llama example (``hf_llama``)."""
    torch.manual_seed(0)
    if name == "hf_llama":
        sys.path.insert(0, str(ROOT / "examples"))
        from hf_causal_lm import build as llama

        w = llama()
        return w.module, w.loss_fn, tuple(w.inputs)
    import sample_graphs

    s = sample_graphs.build(name)
    return s.module, s.loss_fn, tuple(s.inputs)


def row(name: str, limit: float, budget: float) -> dict:
    module, loss_fn, inputs = build(name)
    step = plan_step(module, loss_fn, inputs, memory_limit=limit, time_budget=budget, cache=False, progress=False)
    c = step.first
    dtr = run_method("dtr", c.graph, AnalyticCost(step.profile), time_budget=budget)
    ok = [p for p in dtr.plans if p.latency <= c.plan.latency * (1 + 1e-9)]
    best = min(ok, key=lambda p: (p.peak, p.latency), default=None)
    return {"model": name, "limit": limit, "eager_peak": c.eager_peak, "magis_peak": c.plan.peak,
            "magis_latency": c.plan.latency, "reached": c.reached, "dtr_points": len(dtr.plans),
            "dtr_peak": None if best is None else best.peak, "dtr_latency": None if best is None else best.latency,
            "magis_at_or_below": best is None or c.plan.peak <= best.peak}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--limits", default="0.8,0.6,0.4")
    ap.add_argument("--time-budget", type=float, default=10.0, help="plan_step's default")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    rows = []
    print(f"{'model':<14} {'limit':>5} {'MAGIS peak':>10} {'latency':>8} {'DTR peak':>9} {'latency':>8}  at or below")
    for name in a.models.split(","):
        for lim in (float(x) for x in a.limits.split(",")):
            r = row(name, lim, a.time_budget)
            rows.append(r)
            e = r["eager_peak"]
            dtr = "-" if r["dtr_peak"] is None else f"{r['dtr_peak'] / e:.3f}x"
            dl = "-" if r["dtr_latency"] is None else f"{r['dtr_latency'] * 1e3:.3f}"
            print(f"{name:<14} {lim:5.2f} {r['magis_peak'] / e:9.3f}x {r['magis_latency'] * 1e3:8.3f} {dtr:>9} {dl:>8}  "
                  f"{'yes' if r['magis_at_or_below'] else 'NO'}", flush=True)
    wins = sum(r["magis_at_or_below"] for r in rows)
    print(f"MAGIS at or below DTR at no more latency: {wins} of {len(rows)} (latencies in ms, predicted)")
    if a.json:
        a.json.write_text(json.dumps({"time_budget": a.time_budget, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
