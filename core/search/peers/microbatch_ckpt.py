"""Micro-batching combined with checkpointing, as a careful user tunes it by hand: gradient
accumulation over k parts of the batch, each part's step checkpointed (``torch.utils.checkpoint``
around the cheap layers, or sqrt(n) segments).

Realised with our own rules: the checkpointing decision of ``sqrt_n.checkpoint_modes`` (the
memory-bound ops, or everything outside sqrt(n) segments' checkpoints, recomputed once for the
backward) as ``remat`` applications (``common.realise``), then the F-Trans of the whole step along
the batch (``microbatch.batch_split``) of that graph -- the recomputed copies are ops of the step,
so each part recomputes its own.  Each part runs the step in the checkpointed schedule (the
fission lists its ops in that order: ``Fission.ordered_application``), so a recomputation runs
just before the backward op that reads it, in every part.  One point per (checkpointing, k) with k
dividing the batch; a graph whose batch does not split (training batch norm) is a failure that
says why, as for ``microbatch``; so is a point no better than PyTorch eager in either peak or
latency.
"""

from __future__ import annotations

import time

from ...errors import SplitError
from ...simulate import simulate
from ...transform.fission import apply_split
from ..plan import Plan
from .base import Method
from .common import Failure, forward_ops, realise, traced_order, two_instance_decision
from .microbatch import batch_split, drop_dominated, split_application, split_stats
from .sqrt_n import checkpoint_modes

MODES = ("cheap", "cheap 0.25", "sqrt n")


class MicrobatchCkpt(Method):
    name = "microbatch_ckpt"
    label = "micro-batching + checkpointing"
    colour = "#ca8a04"
    symbol = "triangle-right"
    family = "baseline"
    paper = ("gradient accumulation over k micro-batches, each checkpointed (cheap ops or sqrt(n) segments "
             "recomputed): remat, then F-Trans of the whole step along the batch")

    def _run(self, g, cost, *, time_budget, progress, parts=None, checkpointing=MODES, **_):
        t0 = time.perf_counter()
        backward = {n.id for n in g.ops()} - forward_ops(g)
        plans: list[Plan] = []
        failures: list[Failure] = []
        for mode, recompute in checkpoint_modes(g, cost, checkpointing):
            if not recompute:
                failures.append(Failure(mode, "nothing to recompute"))
                continue
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(mode, f"time budget {time_budget:g} s spent"))
                continue
            r = realise(g, two_instance_decision(g, recompute, backward))
            if not r.stats["recomputed"]:
                failures.append(Failure(mode, "the backward reads none of the dropped tensors: nothing is "
                                              "recomputed (micro-batching alone)"))
                continue
            split, why = batch_split(r.graph, r.order, microbatching=True)
            if split is None:
                failures.append(Failure(mode, why))
                continue
            for k in list(parts) if parts else split.divisors():
                label = f"k={k}, {mode}"
                if k < 2 or split.length % k:
                    failures.append(Failure(label, f"{k} parts do not divide the batch of {split.length}"))
                    continue
                if time.perf_counter() - t0 > time_budget:
                    failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                    continue
                h = r.graph.copy()
                try:
                    apply_split(h, split, k)
                except SplitError as e:
                    failures.append(Failure(label, str(e)))
                    continue
                order = traced_order(h)
                sim = simulate(h, order, cost)
                app = split_application(split, k, ordered=True)
                plans.append(Plan(self.name, [*r.applications, app], order, sim.metrics(), label,
                                  {**split_stats(r.graph, split, k), "checkpointing": mode,
                                   "recomputed_per_part": r.stats["recomputed"]}))
                progress(f"microbatch_ckpt {label}: peak {sim.peak} latency {sim.latency:.6f}")
        plans, worse = drop_dominated(g, cost, plans)
        return plans, failures + worse


__all__ = ["MODES", "MicrobatchCkpt"]
