"""sqrt(n) checkpointing (Chen, Xu, Zhang, Guestrin: "Training Deep Nets with Sublinear Memory
Cost", arXiv:1604.06174, 2016, section 4 and Algorithm 3).

The forward pass, in the traced order, is cut into k segments (k = sqrt(n) for n forward ops by
default).  Only the values that cross a segment boundary are kept for the backward (Chen et al.
split at "articulation points"; on a DAG each boundary is placed, near its even position, where
the bytes crossing it are fewest, and every value crossing it is a checkpoint).  Every other
forward activation the backward reads is dropped after the forward and recomputed once, from the
checkpoints, just before the backward first needs it; the last segment is kept (its backward
follows at once).  So each forward op runs at most twice: latency at most one extra forward.

Several segment counts give several points (the budgeted variant: fewer segments keep fewer
checkpoints and recompute longer chains).
"""

from __future__ import annotations

import math
import time

from ...ir.graph import Graph
from .base import Peer
from .common import (
    Failure,
    candidates,
    forward_ops,
    make_plan,
    own_bytes,
    realise,
    storage_members,
    traced_order,
    two_instance_decision,
)


def crossing_intervals(g: Graph, fwd: list[int]) -> dict[int, tuple[int, int]]:
    """op -> (its position in ``fwd``, the position of its last forward member): the op's storage
    crosses the cut after position p iff first <= p < last."""
    pos = {v: i for i, v in enumerate(fwd)}
    members = storage_members(g)
    out = {}
    for v in fwd:
        last = max((pos[m] for m in members[v] if m in pos), default=pos[v])
        out[v] = (pos[v], last)
    return out


def cut_bytes(g: Graph, fwd: list[int], iv: dict[int, tuple[int, int]]) -> list[int]:
    """Bytes crossing the cut after each position of ``fwd``."""
    d = [0] * (len(fwd) + 1)
    for v, (a, b) in iv.items():
        if b > a:
            nb = own_bytes(g, v)
            d[a] += nb
            d[b] -= nb
    out, run = [], 0
    for i in range(len(fwd)):
        run += d[i]
        out.append(run)
    return out


def boundaries(cuts: list[int], k: int, window: float = 0.5) -> list[int]:
    """k-1 cut positions: near each even split point, the one with the fewest crossing bytes."""
    n = len(cuts)
    if k <= 1 or n < 2:
        return []
    seg = n / k
    half = max(1, int(seg * window / 2))
    out: list[int] = []
    for j in range(1, k):
        t = int(round(j * seg)) - 1
        lo, hi = max(out[-1] + 1 if out else 0, t - half), min(n - 2, t + half)
        if lo > hi:
            continue
        out.append(min(range(lo, hi + 1), key=lambda p: (cuts[p], abs(p - t))))
    return out


def checkpoints(g: Graph, k: int, window: float = 0.5) -> tuple[set[int], list[int], list[int]]:
    """(the forward ops kept for the backward, the cut positions, the forward order)."""
    fwdset = forward_ops(g)
    fwd = [v for v in traced_order(g) if v in fwdset]
    iv = crossing_intervals(g, fwd)
    cuts = boundaries(cut_bytes(g, fwd, iv), k, window)
    keep: set[int] = set()
    for p in cuts:
        keep.update(v for v, (a, b) in iv.items() if a <= p < b)
    last = cuts[-1] + 1 if cuts else 0
    keep.update(fwd[last:])  # the last segment's backward follows at once
    return keep, cuts, fwd


class SqrtN(Peer):
    name = "sqrt_n"
    label = "sqrt(n) checkpointing"
    colour = "#0ea5e9"
    symbol = "square"
    family = "peer"
    paper = "Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost (arXiv:1604.06174)"

    def _run(self, g, cost, *, time_budget, progress, segments=None, window=0.5, **_):
        t0 = time.perf_counter()
        fwdset = forward_ops(g)
        n = sum(1 for v in fwdset if own_bytes(g, v) > 0)
        root = max(1, round(math.sqrt(n)))
        ks = list(segments) if segments else sorted({max(2, round(root * f)) for f in (0.5, 1.0, 2.0)})
        cand = candidates(g)
        backward = {v.id for v in g.ops()} - fwdset
        plans, failures = [], []
        for k in ks:
            label = f"k={k}" + (" (sqrt n)" if k == root else "")
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            keep, cuts, fwd = checkpoints(g, k, window)
            recompute = cand - keep
            d = two_instance_decision(g, recompute, backward)
            r = realise(g, d)
            kept_bytes = sum(own_bytes(g, v) for v in keep)
            plans.append(make_plan(self.name, label, r, cost, segments=len(cuts) + 1, n=n,
                                   checkpoint_ops=len(keep), checkpoint_bytes=kept_bytes,
                                   cut_positions=cuts))
            progress(f"sqrt_n {label}: {len(cuts) + 1} segments, {r.stats['recomputed']} recomputed ops")
        return plans, failures


__all__ = ["SqrtN", "boundaries", "checkpoints", "cut_bytes"]
