"""sqrt(n) checkpointing (Chen, Xu, Zhang, Guestrin: "Training Deep Nets with Sublinear Memory
Cost", arXiv:1604.06174, 2016, section 4 and Algorithm 3).

The forward pass, in the traced order, is cut into k segments (k = sqrt(n) for n forward ops by
default).  Only the values that cross a segment boundary are kept for the backward (Chen et al.
split at "articulation points"; on a DAG each boundary is placed, near its even position, where
the bytes crossing it are fewest, and every value crossing it is a checkpoint).  Every other
forward activation the backward reads is dropped after the forward and recomputed once, from the
checkpoints, just before the backward first needs it; the last segment is kept (its backward
follows at once).  So each forward op runs at most twice: latency at most one extra forward.

Three variants give the points: several segment counts (fewer segments keep fewer checkpoints and
recompute longer chains); Chen's memory-budget planning (section 4.1: a segment ends once the bytes
made since the last checkpoint exceed B; B swept over a grid); and "recompute only cheap ops" (no
segments: the outputs of ops the cost model calls memory-bound -- batch norm, ReLU, add, dropout --
are dropped and recomputed, those of convolutions and matmuls kept; what torch's selective
checkpointing policies and Chen's section 4.3 "drop the cheap layers" do).  While the time budget
lasts, finer grids of the three follow, level by level, until a level gives no new plan (``Sweep``:
the grid peers' shared bookkeeping of time, duplicates and counts).
"""

from __future__ import annotations

import math
import time

from ...cost.model import CostModel
from ...ir.graph import Graph
from .base import Method, refining
from .common import (
    Failure,
    candidates,
    coarse_to_fine,
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


def _keep_at(g: Graph, fwd: list[int], iv: dict[int, tuple[int, int]], cuts: list[int]) -> set[int]:
    """The values crossing any cut, and the last segment (its backward follows at once)."""
    keep: set[int] = set()
    for p in cuts:
        keep.update(v for v, (a, b) in iv.items() if a <= p < b)
    last = cuts[-1] + 1 if cuts else 0
    keep.update(fwd[last:])
    return keep


def forward_in_order(g: Graph) -> list[int]:
    fwdset = forward_ops(g)
    return [v for v in traced_order(g) if v in fwdset]


def checkpoints(g: Graph, k: int, window: float = 0.5) -> tuple[set[int], list[int], list[int]]:
    """(the forward ops kept for the backward, the cut positions, the forward order)."""
    fwd = forward_in_order(g)
    iv = crossing_intervals(g, fwd)
    cuts = boundaries(cut_bytes(g, fwd, iv), k, window)
    return _keep_at(g, fwd, iv, cuts), cuts, fwd


def budget_cuts(sizes: list[int], budget: float) -> list[int]:
    """Chen et al.'s memory-budget planning (section 4.1, the greedy of Algorithm 3's allocation):
    walking the forward in order, the bytes made since the last checkpoint are summed and a segment
    ends (a cut after that op) as soon as they exceed ``budget``.  ``sizes``: bytes each forward op
    allocates.  Returns the cut positions (never after the last op)."""
    out, run = [], 0
    for i, b in enumerate(sizes[:-1]):
        run += b
        if run > budget:
            out.append(i)
            run = 0
    return out


def budget_checkpoints(g: Graph, budget: float) -> tuple[set[int], list[int], list[int]]:
    """(kept forward ops, cut positions, forward order) of :func:`budget_cuts` at ``budget`` bytes."""
    fwd = forward_in_order(g)
    iv = crossing_intervals(g, fwd)
    cuts = budget_cuts([own_bytes(g, v) for v in fwd], budget)
    return _keep_at(g, fwd, iv, cuts), cuts, fwd


def cheap_ops(g: Graph, cost: CostModel, among: set[int]) -> set[int]:
    """The ops of ``among`` the cost model calls memory-bound (``CostModel.memory_bound``: batch
    norm, ReLU, add, dropout's mask multiply, views ...): recomputing them costs a pass over their
    inputs, while a convolution's or matmul's output is worth its bytes.  The op that makes the
    loss is not dropped: the backward starts from it."""
    loss = g.outputs.get("loss")
    kept = set() if loss is None else {loss.node, g.storage_root(loss).node}
    return {v for v in among if v not in kept and cost.memory_bound(g, g.nodes[v])}


def budget_grid(total: int, largest: int, points: int) -> list[float]:
    """``points`` budgets, geometric from the largest single allocation to half the forward's bytes
    (Chen et al. grid-search B)."""
    lo, hi = max(1.0, float(largest)), max(float(largest), total / 2)
    if points <= 1 or hi <= lo:
        return [hi]
    return [lo * (hi / lo) ** (j / (points - 1)) for j in range(points)]


def sqrt_segments(g: Graph) -> int:
    """sqrt(n) for the n forward ops that allocate."""
    return max(1, round(math.sqrt(sum(1 for v in forward_ops(g) if own_bytes(g, v) > 0))))


def checkpoint_modes(g: Graph, cost: CostModel, modes=("cheap", "sqrt n")) -> list[tuple[str, set[int]]]:
    """The checkpointing a user combines with another baseline, as (label, ops recomputed once for
    the backward): "cheap" -- the memory-bound ops (:func:`cheap_ops`); "cheap F" (F in (0, 1)) --
    those of them :func:`cheapest_first` picks within F of their recomputation time; "sqrt n" --
    every candidate outside sqrt(n) segments' checkpoints."""
    cand = candidates(g)
    out = []
    for m in modes:
        if m == "cheap":
            out.append(("cheap ops", cheap_ops(g, cost, cand)))
        elif m.startswith("cheap "):
            f = float(m.split()[1])
            out.append((f"cheap ops {100 * f:g}%", cheapest_first(g, cost, cheap_ops(g, cost, cand), f)))
        elif m == "sqrt n":
            out.append(("sqrt n", cand - checkpoints(g, sqrt_segments(g))[0]))
        else:
            raise ValueError(f"unknown checkpointing {m!r} (cheap, sqrt n)")
    return out


def cheapest_first(g: Graph, cost: CostModel, cheap: set[int], fraction: float) -> set[int]:
    """Part of ``cheap``, within ``fraction`` of its recomputation seconds: the knob a user turns
    between "checkpoint the ReLUs" and "checkpoint every cheap layer".  The unit is a connected run
    of cheap ops (batch norm -> ReLU, add -> layer norm -> dropout between two matmuls): dropping one
    op of a run alone would keep its cheap producer's output in its place, so a run is recomputed
    whole, from the compute-bound outputs around it.  Runs are taken by bytes freed per second of
    recomputation, while their seconds stay within the fraction (at least one run)."""
    if fraction >= 1.0:
        return set(cheap)
    parent = {v: v for v in cheap}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in sorted(cheap):
        for p in g.preds(v):
            if p in cheap:
                parent[find(p)] = find(v)
    runs: dict[int, list[int]] = {}
    for v in sorted(cheap):
        runs.setdefault(find(v), []).append(v)
    t = {v: cost.node_time(g, g.nodes[v]) for v in cheap}
    total = sum(t.values())

    def score(run: list[int]) -> tuple[float, int]:
        return (-sum(own_bytes(g, v) for v in run) / max(sum(t[v] for v in run), 1e-12), run[0])

    out: set[int] = set()
    spent = 0.0
    for run in sorted(runs.values(), key=score):
        dt = sum(t[v] for v in run)
        if out and spent + dt > fraction * total:
            continue
        out.update(run)
        spent += dt
    return out



STALE = 8  # a refinement's grid stops after 8 points in a row that gave no new plan
LEVELS = 4  # the refinement's finest level: segment counts 2^5+1, the budget grid's steps / 16, fractions j/128


class Sweep:
    """A grid peer's points within its ``time_budget``: the clock read before each point (a point's
    own computation may overrun), a point of the same (peak, latency) as an earlier one given once,
    and what was run counted for ``MethodRun.extra`` (``stats``): ``grid`` -- the points listed,
    ``tried`` -- those reached (computed, or found to repeat an earlier choice), ``duplicates``,
    ``untried`` -- those left when the time ran out, ``stale`` -- those a refinement left out after
    ``STALE`` points in a row gave no new plan, ``exhausted`` -- every point listed was reached."""

    def __init__(self, time_budget: float, t0: float | None = None, clock=time.perf_counter) -> None:
        self.clock, self.time_budget = clock, time_budget
        self.t0 = clock() if t0 is None else t0
        self.plans: list = []
        self.failures: list[Failure] = []
        self.points: set[tuple[int, float]] = set()
        self.grid = self.tried = self.duplicates = self.untried = self.stale = self.dominated = 0

    def spent(self) -> bool:
        return self.clock() - self.t0 > self.time_budget

    def reach(self, label: str | None = None) -> bool:
        """One more point of the grid: False (and counted as not tried; a failure where ``label``
        names it) once the time budget is spent."""
        self.grid += 1
        if self.spent():
            self.untried += 1
            if label is not None:
                self.failures.append(Failure(label, f"time budget {self.time_budget:g} s spent"))
            return False
        self.tried += 1
        return True

    def add(self, plan, eager: tuple[int, float] | None = None) -> bool:
        """Keep ``plan`` unless an earlier one has its peak and latency, or -- ``eager``: (its peak,
        its latency), for a refinement's points -- it holds at least eager's peak and takes at least
        its time (counted as ``dominated``)."""
        key = (plan.peak, plan.latency)
        if eager is not None and plan.peak >= eager[0] and plan.latency >= eager[1]:
            self.dominated += 1
            return False
        if key in self.points:
            self.duplicates += 1
            return False
        self.points.add(key)
        self.plans.append(plan)
        return True

    def finish(self, refined: bool = True) -> dict:
        """``extra``'s counts; points of a refinement not tried are one failure that says so."""
        if self.untried and refined and not any("time budget" in f.reason for f in self.failures):
            self.failures.append(Failure("refinement", f"{self.untried} finer grid points not tried: time budget "
                                                       f"{self.time_budget:g} s spent"))
        return self.stats()

    def stats(self) -> dict:
        return {"grid": self.grid, "tried": self.tried, "duplicates": self.duplicates, "untried": self.untried,
                "stale": self.stale, "dominated": self.dominated, "exhausted": self.untried == 0}


def interleave(*lists):
    """The items of ``lists`` taken in turn (the first of each, then the second ...)."""
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


def finer_fractions(level: int) -> list[float]:
    """The fractions j / 2^(level+3) in (0, 1), coarse to fine: the cheap-ops fractions of a refinement."""
    n = 2 ** (level + 3)
    return coarse_to_fine([j / n for j in range(1, n)])


def segment_counts(n: int, level: int) -> list[int]:
    """2^(level+1)+1 segment counts geometric from 2 to ``n`` (rounded, distinct), coarse to fine."""
    if n < 2:
        return []
    m = 2 ** (level + 1)
    return coarse_to_fine(sorted({max(2, min(n, round(2 * (n / 2) ** (j / m)))) for j in range(m + 1)}))

def _mb(b: float) -> str:
    if b >= 1e9:
        return f"{b / 1e9:.3g} GB"
    return f"{b / 1e6:.3g} MB" if b >= 1e5 else f"{b:.0f} B"


class SqrtN(Method):
    name = "sqrt_n"
    label = "sqrt(n) checkpointing"
    colour = "#0ea5e9"
    symbol = "square"
    family = "peer"
    paper = "Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost (arXiv:1604.06174)"

    def _run(self, g, cost, *, time_budget, progress, segments=None, window=0.5, budgets=None, budget_points=10,
             cheap=True, cheap_fractions=None, variants=("segments", "budget", "cheap"), refine=None, levels=LEVELS, **_):
        """Points of three variants: ``segments`` -- k evenly placed segments (k = sqrt(n) and half and
        twice that, or ``segments``); ``budget`` -- Chen's memory-budget greedy at each byte budget of
        ``budgets`` (default: ``budget_points`` of a geometric grid); ``cheap`` -- no segments: only
        the memory-bound ops are dropped and recomputed, the compute-bound ones kept (all of them, and
        for each of ``cheap_fractions`` below 1 -- default 1/8, 1/4, 1/2 -- the most bytes per second of
        them within that fraction of their recomputation time: :func:`cheapest_first`).  Points that
        recompute the same ops, or have the same peak and latency, are given once.

        Then, with ``refine``, while ``time_budget`` lasts, finer grids level by level (at most
        ``levels``), the variants' points interleaved, each grid coarse to fine: segment counts
        geometric from 2 to n (:func:`segment_counts`), the budget grid with its steps halved, and the
        cheap-ops fractions j / 2^(level+3) -- of the variants whose grid was not given -- until a
        whole level gives no new plan (the grid is exhausted).  ``extra``: ``Sweep.stats``."""
        refine = refining(refine)
        t0 = time.perf_counter()
        sweep = Sweep(time_budget, t0)
        fwdset = forward_ops(g)
        n = sum(1 for v in fwdset if own_bytes(g, v) > 0)
        root = max(1, round(math.sqrt(n)))
        cand = candidates(g)
        backward = {v.id for v in g.ops()} - fwdset
        seen: set[frozenset[int]] = set()
        labels: set[str] = set()
        tried: set[tuple[str, object]] = set()
        todo: list[tuple[str, str, object]] = []
        sizes = [own_bytes(g, v) for v in forward_in_order(g)]

        def seg(k: int) -> tuple[str, str, int]:
            return ("segments", f"k={k}" + (" (sqrt n)" if k == root else ""), k)

        def bud(b: float) -> tuple[str, str, float]:
            label = f"B={_mb(b)}"
            return ("budget", label if label not in labels else f"B={b:.0f} B", b)

        def chp(f: float) -> tuple[str, str, float]:
            return ("cheap", "cheap ops" if f >= 1 else f"cheap ops {100 * f:g}%", f)

        if "segments" in variants:
            ks = list(segments) if segments else sorted({max(2, round(root * f)) for f in (0.5, 1.0, 2.0)})
            todo += [seg(k) for k in ks]
        if "budget" in variants:
            bs = list(budgets) if budgets else budget_grid(sum(sizes), max(sizes, default=0), budget_points)
            todo += [bud(b) for b in bs]
        if "cheap" in variants and cheap:
            todo += [chp(f) for f in sorted(cheap_fractions or (0.125, 0.25, 0.5, 1.0), reverse=True)]

        def point(kind: str, label: str, arg) -> bool:
            """The plan of one grid point; True where it is a new one."""
            tried.add((kind, round(arg, 9) if kind == "budget" else arg))
            if kind == "segments":
                keep, cuts, _ = checkpoints(g, arg, window)
                recompute = cand - keep
            elif kind == "budget":
                keep, cuts, _ = budget_checkpoints(g, arg)
                recompute = cand - keep
            else:
                cuts = []
                recompute = cheapest_first(g, cost, cheap_ops(g, cost, cand), arg)
                keep = fwdset - recompute
            key = frozenset(recompute)
            if key in seen or not recompute:
                return False
            seen.add(key)
            d = two_instance_decision(g, recompute, backward)
            r = realise(g, d)
            kept_bytes = sum(own_bytes(g, v) for v in keep)
            stats = dict(variant=kind, segments=len(cuts) + 1, n=n, checkpoint_ops=len(keep),
                         checkpoint_bytes=kept_bytes, cut_positions=cuts, recompute_ops=len(recompute))
            if kind == "budget":
                stats["segment_budget"] = int(arg)
            if kind == "cheap":
                stats["cheap_fraction"] = arg
            if not sweep.add(make_plan(self.name, label, r, cost, **stats)):
                return False
            labels.add(label)
            progress(f"sqrt_n {label}: {len(cuts) + 1} segments, {r.stats['recomputed']} recomputed ops")
            return True

        for kind, label, arg in todo:
            if sweep.reach(label):
                point(kind, label, arg)
        for level in range(1, levels + 1 if refine else 1):
            more = []
            if "segments" in variants and not segments:
                more.append([seg(k) for k in segment_counts(n, level) if ("segments", k) not in tried])
            if "budget" in variants and not budgets:
                grid = budget_grid(sum(sizes), max(sizes, default=0), (budget_points - 1) * 2 ** level + 1)
                more.append([bud(b) for b in coarse_to_fine(grid) if ("budget", round(b, 9)) not in tried])
            if "cheap" in variants and cheap and not cheap_fractions:
                more.append([chp(f) for f in finer_fractions(level) if ("cheap", f) not in tried])
            items = interleave(*more)
            if not items:
                break
            new = 0
            for kind, label, arg in items:
                if sweep.reach():
                    new += point(kind, label, arg)
            if sweep.spent() or not new:
                break
        extra = sweep.finish()
        return sweep.plans, sweep.failures, extra


__all__ = ["SqrtN", "Sweep", "finer_fractions", "interleave", "segment_counts", "boundaries", "checkpoint_modes", "cheapest_first", "sqrt_segments", "budget_checkpoints", "budget_cuts", "budget_grid", "cheap_ops", "checkpoints",
           "cut_bytes", "forward_in_order"]
