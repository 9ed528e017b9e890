"""The compiled cost model against a real ``torch.compile`` on this machine's CPU.

Per sample training step: eager PyTorch's step time and ``torch.compile``'s (Inductor, default mode)
measured on one CPU thread (the median of ``--rounds`` alternating rounds, each the mean of enough
back-to-back steps to last ``--min-run`` seconds, after the compile and a warm-up), and the speedup
both cost models predict for the same step on the ``cpu`` profile: the analytic model's eager latency
over the compiled model's.  The speedup is what the compiled model claims (fusion's gain), so the
check is the predicted speedup against the measured one; absolute times are not compared (the
``cpu`` profile's datasheet constants are not calibrated, see docs/cost-models.md).

    python bench/compiled_check.py [--samples bert_tiny,resnet50_tiny] [--rounds 5] [--json bench/results/compiled_check.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLES = ("bert_tiny", "resnet50_tiny", "unet_tiny")


def predicted(name: str) -> dict:
    """Eager's and the compiled model's latency of the sample's step in PyTorch's order (``cpu``)."""
    from core.cost.compiled import CompiledCost
    from core.cost.model import AnalyticCost
    from core.search.peers.common import traced_order
    from core.simulate import simulate
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph(name)
    order = traced_order(g)
    eager = simulate(g, order, AnalyticCost("cpu")).latency
    compiled = simulate(g, order, CompiledCost("cpu")).latency
    return {"ops": len(g.ops()), "eager_s": eager, "compiled_s": compiled, "speedup": eager / compiled}


def measured(name: str, rounds: int, min_run: float) -> dict:
    """Eager's and torch.compile's step time of the sample on one CPU thread."""
    import torch

    from app.specs import build_workload
    from core.frontend.workload import workload_fns

    torch.set_num_threads(1)
    w = build_workload(name, 0)
    loss_fn, _ = workload_fns(w)
    model, inputs = w.module, tuple(w.inputs)

    def step() -> None:
        loss = loss_fn(model, *inputs)
        loss.backward()
        for p in model.parameters():
            p.grad = None

    t0 = time.perf_counter()
    compiled_model = torch.compile(model)

    def compiled_step() -> None:
        loss = loss_fn(compiled_model, *inputs)
        loss.backward()
        for p in model.parameters():
            p.grad = None

    compiled_step()
    compile_s = time.perf_counter() - t0
    step()

    def timed(fn) -> float:
        n, t = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t
            if dt >= min_run:
                return dt / n

    eager, comp = [], []
    for _ in range(rounds):
        eager.append(timed(step))
        comp.append(timed(compiled_step))
    e, c = statistics.median(eager), statistics.median(comp)
    return {"eager_s": e, "compiled_s": c, "speedup": e / c, "compile_s": round(compile_s, 1),
            "eager_rounds": eager, "compiled_rounds": comp}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", default=",".join(SAMPLES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-run", type=float, default=0.5, help="seconds of back-to-back steps per round")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    rows = []
    print(f"{'sample':<12} {'ops':>5} {'predicted speedup':>18} {'measured speedup':>17} {'eager ms':>9} "
          f"{'compiled ms':>12} {'compile s':>10}")
    for name in [s for s in a.samples.split(",") if s]:
        p = predicted(name)
        m = measured(name, a.rounds, a.min_run)
        rows.append({"sample": name, "predicted": p, "measured": m})
        print(f"{name:<12} {p['ops']:>5} {p['speedup']:>17.2f}x {m['speedup']:>16.2f}x {m['eager_s'] * 1e3:>9.2f} "
              f"{m['compiled_s'] * 1e3:>12.2f} {m['compile_s']:>10.1f}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"device": "cpu", "threads": 1, "rounds": a.rounds, "rows": rows}, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
