"""Activation offloading combined with checkpointing, as a careful user tunes it by hand: the cheap
activations are dropped and recomputed (checkpointing), what is kept for the backward is offloaded
to pinned host memory (``save_on_cpu``) and prefetched before the backward reads it.

Realised with our own rules: the checkpointing decision of ``sqrt_n.checkpoint_modes`` (the
memory-bound ops, or everything outside sqrt(n) segments' checkpoints) as ``remat`` applications
(``common.realise``); then, in that schedule, every saved activation left -- a tensor the forward
makes and the backward reads, now the compute-bound ops' outputs and the checkpoints -- is
offloaded with ``SwapLate`` exactly as ``offload`` does (all of them, or those of at least 1/2, 1/4,
1/8 of the largest), the copies placed by ``schedule.placement.place_and_simulate``.  The
recomputed copies read the loaded tensors where they read a kept one.
"""

from __future__ import annotations

import time

from ...ir.graph import NodeKind, TRef
from ...ir.topo import pull_order
from ...schedule.placement import place_and_simulate
from ..plan import Plan
from .base import Method
from .common import Failure, forward_ops, realise, two_instance_decision
from .offload import FRACTIONS, offloaded, saved_activations
from .sqrt_n import checkpoint_modes

MODES = ("cheap", "cheap 0.25", "sqrt n")


class OffloadCkpt(Method):
    name = "offload_ckpt"
    label = "offloading + checkpointing"
    colour = "#14b8a6"
    symbol = "square-x"
    family = "baseline"
    paper = ("save_on_cpu for what checkpointing keeps (cheap ops or sqrt(n) segments recomputed): remat, "
             "then SwapLate of every saved activation left")

    def _run(self, g, cost, *, time_budget, progress, fractions=FRACTIONS, checkpointing=MODES, **_):
        t0 = time.perf_counter()
        backward = {n.id for n in g.ops()} - forward_ops(g)
        plans: list[Plan] = []
        failures: list[Failure] = []
        for mode, recompute in checkpoint_modes(g, cost, checkpointing):
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(mode, f"time budget {time_budget:g} s spent"))
                continue
            r = realise(g, two_instance_decision(g, recompute, backward))
            if not r.stats["recomputed"]:
                failures.append(Failure(mode, "the backward reads none of the dropped tensors: nothing is "
                                              "recomputed (offloading alone)"))
                continue
            saved = saved_activations(r.graph, r.order)
            if not saved:
                failures.append(Failure(mode, "no saved activation is left after checkpointing"))
                continue
            largest = max(r.graph.tensor(ref).nbytes for ref, _, _ in saved)
            seen: set[tuple[TRef, ...]] = set()
            for d in fractions:
                label = f"{mode}, " + ("all kept" if d is None else f">= 1/{d} of the largest")
                pick = [x for x in saved if d is None or r.graph.tensor(x[0]).nbytes * d >= largest]
                key = tuple(ref for ref, _, _ in pick)
                if key in seen:
                    continue
                seen.add(key)
                if time.perf_counter() - t0 > time_budget:
                    failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                    continue
                h, apps, refused, stored = offloaded(r.graph, pick)
                # the checkpointed schedule, each node the swaps added just before its first reader
                # (the placement then moves the copies)
                order = pull_order(h, [v for v in r.order if v in h.nodes] + [n.id for n in h.ops()],
                                   lambda v, h=h: (p for p in h.preds(v) if h.nodes[p].kind != NodeKind.PLACEHOLDER),
                                   "the offloaded schedule has a cycle")
                order, sim = place_and_simulate(h, order, cost)
                plans.append(Plan(self.name, [*r.applications, *apps], order, sim.metrics(), label,
                                  {"checkpointing": mode, "recomputed": r.stats["recomputed"],
                                   "offloaded": len(apps), "refused": refused, "saved_activations": len(saved),
                                   "offloaded_bytes": stored}))
                progress(f"offload_ckpt {label}: {len(apps)} tensors, peak {sim.peak} latency {sim.latency:.6f}")
        return plans, failures


__all__ = ["MODES", "OffloadCkpt"]
