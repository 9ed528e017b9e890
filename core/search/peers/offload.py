"""Activation offloading to host memory, as ``torch.autograd.graph.save_on_cpu(pin_memory=True)``
does: every saved activation -- a tensor the forward makes and the backward reads -- is copied to
pinned host memory after it is made, its device copy is freed once the forward is done with it, and
it is copied back before the backward first reads it.

It is realised with our own rule, ``SwapLate`` (``transform.swap``, MAGIS section 5.2): for each
saved activation A (an op of the forward owning its storage, ``peers.common.forward_ops``; not a
graph output), the readers of A's storage from the backward's first op on (``common.backward_start``
in the traced order; through views too, the forward's views of A made again on the loaded copy) read
one LOAD of A's host copy.  The copies are placed by ``schedule.placement.place_and_simulate`` -- the
STORE right after A's producer, the LOAD as late as its transfer is still hidden behind compute (the
prefetch that ``save_on_cpu`` leaves to the caching allocator) -- on the traced order of the
transformed graph.  A tensor the rule refuses (``RuleNotApplicable``: a reader that re-interprets
the storage, say) stays on the device.

Points: all saved activations offloaded, and only those of at least 1/2, 1/4 and 1/8 of the
largest one's bytes (the trade-off a user tunes with a size threshold on the pack hook); then, while
the time budget lasts, every distinct size threshold and every "largest N" set, coarse to fine
(``size_grid``).  Points that offload the same tensors are given once (under the highest threshold
that picks them), and so are points of the same peak and latency.
"""

from __future__ import annotations

import time

from ...errors import RuleNotApplicable
from ...fmt import format_bytes
from ...ir.graph import Graph, TRef
from ...schedule.placement import place_and_simulate
from ...simulate import simulate
from ...transform.remat import storage_readers
from ...transform.rule import Application
from ...transform.swap import SwapLate, swappable
from ..plan import Plan
from .base import Method, refining
from .common import Failure, backward_start, coarse_to_fine, forward_ops, traced_order
from .sqrt_n import STALE, Sweep

FRACTIONS = (None, 2, 4, 8)  # None: every saved activation; d: those of at least 1/d of the largest


def saved_activations(g: Graph, order: list[int] | None = None) -> list[tuple[TRef, list[int], list[int]]]:
    """(A, the backward readers of A's storage, the forward views of A they read through) for
    every saved activation A, in the traced order of their producers (or in ``order``, a schedule
    of ``g``: the forward is what runs before the backward's first op)."""
    order = order or traced_order(g)
    pos = {v: i for i, v in enumerate(order)}
    start = backward_start(g, order)
    fwd = forward_ops(g)
    outputs = {g.storage_root(o) for o in g.output_refs()}
    out = []
    for v in order:
        if v not in fwd or pos[v] >= start:
            continue
        for j in range(len(g.nodes[v].outputs)):
            ref = TRef(v, j)
            if ref in outputs or not swappable(g, ref):
                continue
            readers, views = storage_readers(g, ref)
            late = sorted((r for r in readers if pos.get(r, -1) >= start), key=pos.__getitem__)
            if not late:
                continue
            remade: set[int] = set()
            for b in late:  # the forward's views a backward reader reads through
                for x in g.preds(b):
                    while x in views and x not in remade and pos.get(x, -1) < start:
                        remade.add(x)
                        x = views[x]
            out.append((ref, late, sorted(remade, key=pos.__getitem__)))
    return out



def offloaded(g: Graph, pick: list) -> tuple[Graph, list[Application], int, int]:
    """A copy of ``g`` with each picked saved activation (``saved_activations``'s (tensor, late
    readers, views remade)) offloaded by ``swap_late``: (graph, applications, how many the rule
    refused, bytes offloaded)."""
    rule = SwapLate()
    h = g.copy()
    apps: list[Application] = []
    refused = stored = 0
    for ref, late, remade in pick:
        app = Application(rule.name, (ref.node, ref.index, len(late), *late, *remade))
        try:
            rule.apply(h, app)
        except RuleNotApplicable:
            refused += 1
            continue
        apps.append(app)
        stored += g.tensor(ref).nbytes
    return h, apps, refused, stored


class Offload(Method):
    name = "offload"
    label = "activation offloading"
    colour = "#0f766e"
    symbol = "diamond-wide"
    family = "baseline"
    paper = "torch.autograd.graph.save_on_cpu: saved activations in pinned host memory, loaded for the backward"

    def _run(self, g, cost, *, time_budget, progress, fractions=FRACTIONS, refine=None, **_):
        """The points of ``fractions``; then, with ``refine`` (and the default fractions), while
        ``time_budget`` lasts: every distinct size threshold of the saved activations (those of at
        least each size that occurs), then the largest N of them for every N (ties in traced
        order), each grid coarse to fine (:func:`size_grid`).  A set offloaded already, or a plan of
        the same peak and latency as an earlier one, is given once.  ``extra``: ``Sweep.stats``."""
        refine = refining(refine)
        t0 = time.perf_counter()
        saved = saved_activations(g)
        if not saved:
            return [], [Failure("all", "no saved activation: the graph has no backward that reads the forward's "
                                       "tensors")]
        largest = max(g.tensor(ref).nbytes for ref, _, _ in saved)
        sweep = Sweep(time_budget, t0)
        seen: set[frozenset[TRef]] = set()

        eager = None  # a refinement's point no better than eager is left out

        def point(label: str, pick: list) -> bool:
            h, apps, refused, stored = offloaded(g, pick)
            order, sim = place_and_simulate(h, traced_order(h), cost)
            if sweep.add(Plan(self.name, apps, order, sim.metrics(), label,
                              {"offloaded": len(apps), "refused": refused, "saved_activations": len(saved),
                               "offloaded_bytes": stored}), eager):
                progress(f"offload {label}: {len(apps)} tensors, peak {sim.peak} latency {sim.latency:.6f}")
                return True
            return False

        for d in fractions:
            label = "all saved" if d is None else f">= 1/{d} of the largest"
            pick = [x for x in saved if d is None or g.tensor(x[0]).nbytes * d >= largest]
            key = frozenset(ref for ref, _, _ in pick)
            if key in seen:
                continue
            seen.add(key)
            if sweep.reach(label):
                point(label, pick)
        if refine and tuple(fractions) == FRACTIONS:
            e = simulate(g, traced_order(g), cost)
            eager = (e.peak, e.latency)
            grid = size_grid(g, saved)
            for part in (False, True):  # the thresholds, then the largest N
                stale = 0
                for label, pick in grid:
                    if label.startswith("largest") != part:
                        continue
                    key = frozenset(ref for ref, _, _ in pick)
                    if key in seen:
                        continue
                    seen.add(key)
                    if stale >= STALE:
                        sweep.stale += 1
                    elif sweep.reach():
                        stale = 0 if point(label, pick) else stale + 1
        extra = sweep.finish()
        return sweep.plans, sweep.failures, extra


def size_grid(g: Graph, saved: list) -> list[tuple[str, list]]:
    """The offloading sets of a refinement, as (label, the picked items of ``saved`` in its order):
    those of at least each size that occurs among ``saved`` (coarse to fine), then the largest N
    for every N (ties in ``saved``'s order; coarse to fine)."""
    size = {x[0]: g.tensor(x[0]).nbytes for x in saved}
    out = []
    for s in coarse_to_fine(sorted(set(size.values()), reverse=True)):
        out.append((f">= {format_bytes(s)}", [x for x in saved if size[x[0]] >= s]))
    ranked = sorted(range(len(saved)), key=lambda i: -size[saved[i][0]])
    for n in coarse_to_fine(range(1, len(saved) + 1)):
        top = set(ranked[:n])
        out.append((f"largest {n}", [x for i, x in enumerate(saved) if i in top]))
    return out


__all__ = ["FRACTIONS", "Offload", "saved_activations", "size_grid"]
