"""A MAGIS plan as torch's selective-checkpoint policy, against eager and the plan run by plan_step.

    PYTHONPATH=. python bench/checkpoint_policy.py [--limit 0.7] [--time-budget 3] [--reps 5] [names...]

Per workload and way of running one training step (forward, loss, backward): the peak of live
tensor storages measured on the CPU (``core.codegen.runtime.LiveBytesTracker``, parameters, buffers
and batch counted from the start; the compiled policy is not measured -- a dispatch mode around a
compiled step sees the compiled region as one call) and the median step time over ``--reps``
steps after one warm-up.  Rows: eager; the policy in eager mode, the whole step as one checkpoint
region; the same under ``torch.compile(backend="aot_eager")``; the policy with one checkpoint region
per block (``regions="blocks"``, ``policy.apply(module)``: each repeated block's forward
checkpointed on its own, so torch recomputes block by block during the backward); the full plan via
``plan_step``.  Both policies come from one searched plan.  The predicted peaks are the simulator's
(eager, policy, per-block policy, plan).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings

import torch
from torch.utils.checkpoint import checkpoint

import sample_graphs
from core.codegen.runtime import LiveBytesTracker
from core.fmt import format_bytes
from core.policy import policy_of_step
from core.train import LimitWarning, PlanStep, plan_step

NAMES = ["gpt_neo_tiny", "bert_tiny", "resnet50_tiny"]


def _measure(step, module: torch.nn.Module, batch: tuple, reps: int, track: bool) -> tuple[int | None, float]:
    step(*batch)
    module.zero_grad(set_to_none=True)
    peak = None
    if track:
        roots = [*module.parameters(), *module.buffers(), *batch]
        with LiveBytesTracker("cpu", roots) as t:
            step(*batch)
        peak = t.peak_bytes
        module.zero_grad(set_to_none=True)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step(*batch)
        times.append(time.perf_counter() - t0)
        module.zero_grad(set_to_none=True)
    return peak, statistics.median(times)


def run(name: str, limit: float, budget: float, reps: int) -> list[tuple]:
    s = sample_graphs.build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LimitWarning)
        step = PlanStep(s.module, s.loss_fn, s.inputs, memory_limit=limit, time_budget=budget, cache=False,
                        progress=False)
        pol = policy_of_step(step, s.module, s.loss_fn, tuple(s.inputs))
        blocks = policy_of_step(step, s.module, s.loss_fn, tuple(s.inputs), regions="blocks")
        ps = plan_step(copy.deepcopy(s.module), s.loss_fn, s.inputs, memory_limit=limit, time_budget=budget,
                       cache=False, progress=False)
    batch = tuple(s.inputs)
    rows = []

    m = copy.deepcopy(s.module)
    rows.append(("eager", *_measure(lambda *b: s.loss_fn(m, *b).backward(), m, batch, reps, True),
                 pol.eager_peak, None))
    m = copy.deepcopy(s.module)
    rows.append(("policy", *_measure(lambda *b: pol.checkpoint(s.loss_fn, m, *b).backward(), m, batch, reps, True),
                 pol.policy_peak, pol))
    m = blocks.apply(copy.deepcopy(s.module))
    rows.append(("policy, per block", *_measure(lambda *b: s.loss_fn(m, *b).backward(), m, batch, reps, True),
                 blocks.policy_peak, blocks))
    m = copy.deepcopy(s.module)
    torch._dynamo.reset()
    comp = torch.compile(lambda *b: checkpoint(s.loss_fn, m, *b, use_reentrant=False, context_fn=pol.context_fn),
                         backend="aot_eager")
    rows.append(("policy, compiled", *_measure(lambda *b: comp(*b).backward(), m, batch, reps, False),
                 pol.policy_peak, pol))
    rows.append(("plan_step", *_measure(ps, ps.module, batch, reps, False), ps.simulated_peak, None))
    _, mem = ps.measure(*batch)
    ps.module.zero_grad(set_to_none=True)
    rows[-1] = (rows[-1][0], mem["measured_peak_bytes"], *rows[-1][2:])
    print(f"# {name}: {pol.summary()}", file=sys.stderr)
    print(f"# {name}, per block: {blocks.summary()}", file=sys.stderr)
    return [(name, how, peak, sec, pred, f"{p.expressed} / {p.dropped}" if p is not None else "")
            for how, peak, sec, pred, p in rows]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=NAMES)
    ap.add_argument("--limit", type=float, default=0.7)
    ap.add_argument("--time-budget", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    rows = [r for n in a.names for r in run(n, a.limit, a.time_budget, a.reps)]
    print("| workload | run | measured peak | predicted peak | step time (ms) | plan decisions expressed / dropped |")
    print("|---|---|---:|---:|---:|---|")
    for name, how, peak, sec, pred, decisions in rows:
        print(f"| {name} | {how} | {format_bytes(peak) if peak is not None else 'n/a'} | {format_bytes(pred)} | "
              f"{sec * 1e3:.1f} | {decisions} |")


if __name__ == "__main__":
    main()
