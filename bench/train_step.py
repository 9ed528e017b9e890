"""The step API on every tiny workload: 5 Adam steps under a plan at a memory limit, against eager.

    PYTHONPATH=. python bench/train_step.py [--limit 0.5] [--time-budget 3] [--steps 5] [names...]

Per workload: eager's simulated peak, the limit in bytes, the plan's simulated peak (x eager) and
whether it reaches the limit, the largest live bytes measured over the steps (the simulator's way
of counting: ``PlanStep.measure``), and the largest difference from eager of the losses and of the
parameters and buffers after the steps.  Plans go to the plan cache (``$MAGIS_CACHE``).
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings

import torch

from app.specs import build_workload
from core.fmt import format_bytes
from core.train import LimitWarning, plan_step

RTOL, ATOL = 1e-4, 1e-5  # core.codegen.verify's tolerances
TINY = ["bert_tiny", "vit_tiny", "gpt_neo_tiny", "btlm_tiny", "resnet50_tiny", "unet_tiny", "unetpp_tiny",
        "fig2_skip", "fig6_ftree"]


def run(name: str, limit: str, budget: float, steps: int) -> dict:
    w = build_workload(name, 0)
    model, reference = w.module, copy.deepcopy(w.module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LimitWarning)
        step = plan_step(model, w.loss_fn, tuple(w.inputs), memory_limit=limit, time_budget=budget,
                         progress=False, name=name)
    opt, opt_ref = torch.optim.Adam(model.parameters(), 1e-3), torch.optim.Adam(reference.parameters(), 1e-3)
    loss_diff, measured = 0.0, 0
    for k in range(steps):
        batch = tuple(t.roll(k, 0) for t in w.inputs)
        opt.zero_grad()
        loss, mem = step.measure(*batch)
        opt.step()
        opt_ref.zero_grad()
        ref = w.loss_fn(reference, *batch)
        ref.backward()
        opt_ref.step()
        loss_diff = max(loss_diff, abs(loss.item() - ref.item()) / abs(ref.item()))
        measured = max(measured, mem["measured_peak_bytes"])
    pairs = list(zip(model.state_dict().values(), reference.state_dict().values(), strict=True))
    state = max(float((u.double() - v.double()).abs().max()) for u, v in pairs)
    close = all(torch.allclose(u.double(), v.double(), rtol=RTOL, atol=ATOL) for u, v in pairs)
    c = step.first
    return {"name": name, "apps": len(c.plan.applications), "eager": c.eager_peak, "limit": c.limit_bytes,
            "plan": c.simulated_peak, "reached": c.reached, "measured": measured, "loss": loss_diff,
            "state": state, "close": close, "cached": step.from_cache}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", default=TINY)
    p.add_argument("--limit", default="0.5")
    p.add_argument("--time-budget", type=float, default=3.0)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args(argv)
    head = ["workload", "eager peak", "limit", "plan peak", "x eager", "reached", "measured max", "rules",
            "loss rel diff", "state max abs diff", "allclose"]
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    ok = True
    for name in a.names:
        r = run(name, a.limit, a.time_budget, a.steps)
        ok &= r["measured"] <= r["plan"] and r["loss"] <= RTOL and r["close"]
        print(" | ".join([name, format_bytes(r["eager"]), format_bytes(r["limit"]), format_bytes(r["plan"]),
                          f"{r['plan'] / r['eager']:.3f}", "yes" if r["reached"] else "no",
                          format_bytes(r["measured"]), str(r["apps"]), f"{r['loss']:.1e}", f"{r['state']:.1e}",
                          "yes" if r["close"] else "no"]),
              flush=True)
    print("ok" if ok else f"FAILED: a measured peak above the simulated one, or a difference beyond rtol {RTOL}, "
                          f"atol {ATOL}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
