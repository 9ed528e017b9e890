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
from .base import Method, refining
from .common import Failure, coarse_to_fine, forward_ops, realise, traced_order, two_instance_decision
from .microbatch import batch_split, drop_dominated, split_application, split_stats
from .offload_ckpt import MORE_MODES
from .sqrt_n import Sweep, checkpoint_modes

MODES = ("cheap", "cheap 0.25", "sqrt n")


class MicrobatchCkpt(Method):
    name = "microbatch_ckpt"
    label = "micro-batching + checkpointing"
    colour = "#ca8a04"
    symbol = "triangle-right"
    family = "baseline"
    paper = ("gradient accumulation over k micro-batches, each checkpointed (cheap ops or sqrt(n) segments "
             "recomputed): remat, then F-Trans of the whole step along the batch")

    def _run(self, g, cost, *, time_budget, progress, parts=None, checkpointing=MODES, refine=None, **_):
        """One point per (mode of ``checkpointing``, k of ``parts``; default: every k > 1 dividing the
        batch, coarse to fine); then, with ``refine`` and the default ``checkpointing``, while
        ``time_budget`` lasts, the finer cheap-ops fractions of ``offload_ckpt.MORE_MODES`` (a mode
        recomputing the same ops as an earlier one skipped) with every k.  A plan of the same peak and
        latency as an earlier one is given once; the plans by mode, then k.  ``extra``:
        ``Sweep.stats``."""
        refine = refining(refine)
        t0 = time.perf_counter()
        backward = {n.id for n in g.ops()} - forward_ops(g)
        sweep = Sweep(time_budget, t0)
        failures = sweep.failures
        modes = [(m, rc, True) for m, rc in checkpoint_modes(g, cost, checkpointing)]
        if refine and tuple(checkpointing) == MODES:
            sets = {frozenset(rc) for _, rc, _ in modes}
            for m, rc in checkpoint_modes(g, cost, MORE_MODES):
                if frozenset(rc) not in sets:
                    sets.add(frozenset(rc))
                    modes.append((m, rc, False))
        rank = {m: i for i, (m, _, _) in enumerate(modes)}
        for mode, recompute, report in modes:
            if not recompute:
                if report:
                    failures.append(Failure(mode, "nothing to recompute"))
                continue
            if sweep.spent():
                if report:
                    failures.append(Failure(mode, f"time budget {time_budget:g} s spent"))
                continue
            r = realise(g, two_instance_decision(g, recompute, backward))
            if not r.stats["recomputed"]:
                if report:
                    failures.append(Failure(mode, "the backward reads none of the dropped tensors: nothing is "
                                                  "recomputed (micro-batching alone)"))
                continue
            split, why = batch_split(r.graph, r.order, microbatching=True)
            if split is None:
                if report:
                    failures.append(Failure(mode, why))
                continue
            for k in list(parts) if parts else coarse_to_fine(split.divisors()):
                label = f"k={k}, {mode}"
                if k < 2 or split.length % k:
                    failures.append(Failure(label, f"{k} parts do not divide the batch of {split.length}"))
                    continue
                if not sweep.reach(label if report else None):
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
                if sweep.add(Plan(self.name, [*r.applications, app], order, sim.metrics(), label,
                                  {**split_stats(r.graph, split, k), "checkpointing": mode,
                                   "recomputed_per_part": r.stats["recomputed"]})):
                    progress(f"microbatch_ckpt {label}: peak {sim.peak} latency {sim.latency:.6f}")
        extra = sweep.finish()
        plans = sweep.plans if parts else sorted(sweep.plans, key=lambda p: (rank[p.stats["checkpointing"]],
                                                                             p.stats["parts"]))
        plans, worse = drop_dominated(g, cost, plans)
        return plans, failures + worse, extra


__all__ = ["MODES", "MicrobatchCkpt"]
