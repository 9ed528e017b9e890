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
from ...simulate import simulate
from ..plan import Plan
from .base import Method, refining
from .common import Failure, forward_ops, realise, traced_order, two_instance_decision
from .offload import FRACTIONS, offloaded, saved_activations, size_grid
from .sqrt_n import STALE, Sweep, checkpoint_modes, interleave

MODES = ("cheap", "cheap 0.25", "sqrt n")
MORE_MODES = ("cheap 0.5", "cheap 0.125", "cheap 0.0625", "cheap 0.75", "cheap 0.375")  # a refinement's


class OffloadCkpt(Method):
    name = "offload_ckpt"
    label = "offloading + checkpointing"
    colour = "#14b8a6"
    symbol = "square-x"
    family = "baseline"
    paper = ("save_on_cpu for what checkpointing keeps (cheap ops or sqrt(n) segments recomputed): remat, "
             "then SwapLate of every saved activation left")

    def _run(self, g, cost, *, time_budget, progress, fractions=FRACTIONS, checkpointing=MODES, refine=None, **_):
        """The points of ``checkpointing`` x ``fractions``; then, with ``refine`` (and the default
        fractions), while ``time_budget`` lasts: each mode's every distinct size threshold of what it
        keeps (``offload.size_grid``, the modes in turn), then -- with the default ``checkpointing`` --
        the finer cheap-ops fractions of ``MORE_MODES`` with the fractions and thresholds, then every
        mode's largest-N sets, a mode's grid left after ``STALE`` points in a row that gave no new
        plan.  A mode recomputing the same ops as an earlier one, a set offloaded
        already, or a plan of the same peak and latency as an earlier one, is given once.
        ``extra``: ``Sweep.stats``."""
        refine = refining(refine)
        t0 = time.perf_counter()
        backward = {n.id for n in g.ops()} - forward_ops(g)
        sweep = Sweep(time_budget, t0)
        failures = sweep.failures
        ready: dict[str, tuple | None] = {}  # mode -> (its realised checkpointing, saved activations, largest)
        seen: dict[str, set[frozenset[TRef]]] = {}
        eager = None

        def prepare(mode: str, recompute: set[int], report: bool) -> tuple | None:
            if mode not in ready:
                r = realise(g, two_instance_decision(g, recompute, backward))
                ready[mode] = None
                if not r.stats["recomputed"]:
                    if report:
                        failures.append(Failure(mode, "the backward reads none of the dropped tensors: nothing is "
                                                      "recomputed (offloading alone)"))
                    return None
                saved = saved_activations(r.graph, r.order)
                if not saved:
                    if report:
                        failures.append(Failure(mode, "no saved activation is left after checkpointing"))
                    return None
                ready[mode] = (r, saved, max(r.graph.tensor(ref).nbytes for ref, _, _ in saved))
                seen[mode] = set()
            return ready[mode]

        def point(mode: str, label: str, pick: list, report: bool) -> bool | None:
            """True: a new plan; False: none; None: not run (a set seen, or the time spent)."""
            r, saved, _ = ready[mode]
            key = frozenset(ref for ref, _, _ in pick)
            if key in seen[mode]:
                return None
            seen[mode].add(key)
            if not sweep.reach(f"{mode}, {label}" if report else None):
                return None
            h, apps, refused, stored = offloaded(r.graph, pick)
            # the checkpointed schedule, each node the swaps added just before its first reader
            # (the placement then moves the copies)
            order = pull_order(h, [v for v in r.order if v in h.nodes] + [n.id for n in h.ops()],
                               lambda v, h=h: (p for p in h.preds(v) if h.nodes[p].kind != NodeKind.PLACEHOLDER),
                               "the offloaded schedule has a cycle")
            order, sim = place_and_simulate(h, order, cost)
            if sweep.add(Plan(self.name, [*r.applications, *apps], order, sim.metrics(), f"{mode}, {label}",
                              {"checkpointing": mode, "recomputed": r.stats["recomputed"],
                               "offloaded": len(apps), "refused": refused, "saved_activations": len(saved),
                               "offloaded_bytes": stored}), None if report else eager):
                progress(f"offload_ckpt {mode}, {label}: {len(apps)} tensors, peak {sim.peak} "
                         f"latency {sim.latency:.6f}")
                return True
            return False

        def by_fraction(mode: str, report: bool) -> None:
            r, saved, largest = ready[mode]
            for d in fractions:
                pick = [x for x in saved if d is None or r.graph.tensor(x[0]).nbytes * d >= largest]
                point(mode, "all kept" if d is None else f">= 1/{d} of the largest", pick, report)

        def by_size(modes: list[str], part: str) -> None:
            grids = [[(m, label, pick) for label, pick in size_grid(ready[m][0].graph, ready[m][1])
                      if label.startswith("largest") == (part == "largest")] for m in modes]
            stale = dict.fromkeys(modes, 0)  # a mode's grid left after STALE points in a row gave no new plan
            for m, label, pick in interleave(*grids):
                if stale[m] >= STALE:
                    sweep.stale += frozenset(ref for ref, _, _ in pick) not in seen[m]
                    continue
                new = point(m, label, pick, False)
                if new is not None:
                    stale[m] = 0 if new else stale[m] + 1

        base: list[str] = []
        modes = checkpoint_modes(g, cost, checkpointing)
        for mode, recompute in modes:
            if sweep.spent():
                failures.append(Failure(mode, f"time budget {time_budget:g} s spent"))
                continue
            if prepare(mode, recompute, True) is None:
                continue
            base.append(mode)
            by_fraction(mode, True)
        if refine and tuple(fractions) == FRACTIONS:
            e = simulate(g, traced_order(g), cost)
            eager = (e.peak, e.latency)  # a refinement's point no better than eager is left out
            by_size(base, "threshold")
            more: list[str] = []
            if tuple(checkpointing) == MODES:
                sets = {frozenset(rc) for _, rc in modes}
                for mode, recompute in checkpoint_modes(g, cost, MORE_MODES):
                    if frozenset(recompute) in sets or sweep.spent():
                        continue
                    sets.add(frozenset(recompute))
                    if prepare(mode, recompute, False) is not None:
                        more.append(mode)
                        by_fraction(mode, False)
                by_size(more, "threshold")
            by_size(base + more, "largest")
        extra = sweep.finish()
        return sweep.plans, sweep.failures, extra


__all__ = ["MODES", "MORE_MODES", "OffloadCkpt"]
