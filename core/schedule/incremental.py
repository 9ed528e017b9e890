"""MAGIS incremental scheduling (Chen et al., ASPLOS'24, section 6.1, Algorithm 2).

After a graph transformation only a neighbourhood of the mutated sub-graph needs a new order:

1. GetRescheduleInterval: the positions of the mutated region in the previous schedule (the nodes
   the transformation removed, added or rewired, and their neighbours) span [lo, hi]; each side is
   widened by at least ``MARGIN`` (4) ops, then by up to ``SEARCH`` (20) more until a boundary op
   with a narrow-waist value nw(v) <= ``NW_OK`` (10) -- the nearest such op, else the op of smallest
   nw in reach.  A small nw means the ops beyond the boundary hardly interact with the window.  (The
   paper names the constants 20, 10 and 4 without the pseudo-code of lines 2-6; this is our reading.)
2. S_new: the new graph's ops in the interval, plus the ops the transformation created.
3. GraphPartition (``core.analysis.narrow_waist``): cut S_new at nw <= 1 dividing points.
4. DpSchedule: Serenity's DP on each part, after the unchanged prefix of the old schedule.
5. Splice: prefix + new window + unchanged suffix.  The live bytes after a set of ops do not depend
   on their order, so the prefix and suffix keep their footprints: the new peak is the max of the
   old prefix's, the window's and the suffix's.

``incremental_schedule`` falls back to a full schedule when the window is not closed under
dependencies (a transformation that rewired far-apart nodes).  The ``incremental`` scheduler is
the full version: GraphPartition of the whole graph + DP per part (the paper's FS baseline).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..analysis.narrow_waist import graph_partition, nw_values
from ..ir.graph import Graph, NodeKind
from .deadline import Deadline
from .footprint import MemoryModel, MemoryScheduler, best_of, bits, rpo_order, traced_order
from .serenity import INF, DPStats, run_units, unit_dp
from .units import UnitProblem

MARGIN = 4
SEARCH = 20
NW_OK = 10
COVER = 10  # ours: peak steps this close to the window are taken in


def get_reschedule_interval(nw: Sequence[int], lo: int, hi: int) -> tuple[int, int]:
    """[L, R] (positions of the old schedule, inclusive) to reschedule around [lo, hi]; ``nw`` is
    nw(v) of the op at each position.  Each side keeps at least ``MARGIN`` ops of context, then
    scans outwards up to ``SEARCH`` ops for a boundary op: the nearest one with nw <= ``NW_OK``,
    else the one with the smallest nw (nearest on ties).  The boundary op stays outside."""
    n = len(nw)

    def side(start: int, step: int) -> int:
        best_pos, best_nw = None, None
        for k in range(MARGIN + 1, MARGIN + 1 + SEARCH):
            p = start + step * k
            if p < 0 or p >= n:
                break
            if nw[p] <= NW_OK:
                best_pos = p
                break
            if best_nw is None or nw[p] < best_nw:
                best_pos, best_nw = p, nw[p]
        if best_pos is None:
            return 0 if step < 0 else n - 1
        return best_pos - step  # the window ends just inside the boundary op

    return max(0, side(lo, -1)), min(n - 1, side(hi, +1))


def _op_ids(g: Graph) -> set[int]:
    return {n.id for n in g if n.kind != NodeKind.PLACEHOLDER}


def schedule_parts(P: UnitProblem, units: Sequence[int], S0: int, live0: int, threshold: int = 1,
                   split_components: bool = False, max_states: int | None = 200_000,
                   deadline: Deadline | None = None, floor: float = -INF, budget: float = INF
                   ) -> tuple[list[int], int, int, DPStats]:
    """GraphPartition + DpSchedule over ``units`` of P (MAGIS Algorithm 2, line 11): (unit order,
    peak, live after, stats).  Each part falls back to its traced order if the DP is worse, and
    keeps its traced order outright when that does not lift the running peak or ``floor`` (the
    peak of the rest of the schedule): no order of the part could lower the overall peak then."""
    deadline = deadline or Deadline(None)
    uset = set(units)
    loc = sorted(uset)
    lpreds = [[p for p in bits(P.upred[u]) if p in uset] for u in loc]
    index = {u: k for k, u in enumerate(loc)}
    lpreds = [[index[p] for p in ps] for ps in lpreds]
    parts = graph_partition(lpreds, threshold=threshold, split_components=split_components)
    ref_pos = {u: k for k, u in enumerate(P.reference_units())}
    out: list[int] = []
    S, live, peak = S0, live0, live0
    stats = DPStats()
    left = len(loc)
    for part_local in parts:
        part = [loc[k] for k in part_local]
        share = len(part) / max(1, left)
        ref = sorted(part, key=ref_pos.__getitem__)
        hpeak, hlive = run_units(P, ref, S, live)
        cap = None if max_states is None else max(256, int(max_states * share))
        pstats = DPStats()
        good_enough = max(floor, peak)
        res = None
        if hpeak > good_enough:
            res = unit_dp(P, part, S0=S, live0=live, budget=min(hpeak, budget), max_states=cap,
                          deadline=deadline.sub(share), reference=ref, stats=pstats, floor=good_enough)
        stats.states += pstats.states
        stats.truncated |= pstats.truncated
        stats.timed_out |= pstats.timed_out
        if res is None or res[1] > hpeak:
            order, ppeak, plive = ref, hpeak, hlive
        else:
            order, ppeak, plive = res
        out.extend(order)
        for u in part:
            S |= 1 << u
        peak, live = max(peak, ppeak), plive
        left -= len(part)
    stats.layers = len(parts)
    return out, peak, live, stats


def incremental_schedule(old_graph: Graph, old_order: Sequence[int], new_graph: Graph, mutated: Iterable[int],
                         free_inputs: bool = False, count_weights: bool = True, threshold: int = 1,
                         split_components: bool = False, max_states: int | None = 200_000,
                         cover_peak: int = COVER, refine: int = 0, info: dict | None = None) -> list[int]:
    """MAGIS Algorithm 2: a schedule of ``new_graph`` that reuses ``old_order`` outside a window
    around the ``mutated`` nodes (ids of new-graph nodes that were added or whose inputs changed).

    Additions of ours: ``cover_peak`` -- the region is widened to the schedule's peak steps that lie
    within that many ops of it (a transformation next to the peak often lets the peak's
    neighbourhood be reordered better); ``refine`` -- afterwards, up to that many windows around the
    peak are re-run with the budget peak - 1 (``refine_peak_windows``)."""
    new_ops = _op_ids(new_graph)
    old_pos = {nid: k for k, nid in enumerate(old_order)}
    mutated = set(mutated)
    # 1. the mutated region in the old schedule
    touched: set[int] = {nid for nid in old_order if nid not in new_ops}  # removed
    for v in mutated:
        if v not in new_graph.nodes:
            continue
        touched.add(v)
        touched.update(new_graph.preds(v))
        touched.update(new_graph.users(v))
    positions = sorted(old_pos[v] for v in touched if v in old_pos)
    lo, hi = (positions[0], positions[-1]) if positions else (0, 0)
    # nw of the old schedule's ops, by position
    oindex = {nid: k for k, nid in enumerate(old_order)}
    opreds = [[oindex[p] for p in old_graph.preds(nid) if p in oindex] for nid in old_order]
    nw = nw_values(opreds) if _is_topological(opreds) else [0] * len(old_order)
    model = MemoryModel.build(new_graph, free_inputs, count_weights)
    added = sorted((v for v in new_ops if v not in old_pos), key=model.index.__getitem__)

    def split(L: int, R: int) -> tuple[list[int], list[int], list[int]]:
        for _ in range(3):
            prefix = [v for v in old_order[:L] if v in new_ops]
            window = [v for v in old_order[L:R + 1] if v in new_ops] + added
            suffix = [v for v in old_order[R + 1:] if v in new_ops]
            if _closed(new_graph, prefix, window, suffix):
                return prefix, window, suffix
            L, R = max(0, L - SEARCH), min(len(old_order) - 1, R + SEARCH)
        return [], sorted(new_ops, key=model.index.__getitem__), []

    def provisional(prefix, window, suffix):
        P = UnitProblem(model, [model.index[v] for v in window], [model.index[v] for v in prefix])
        return P, model.simulate(prefix + P.emit(P.reference_units()) + suffix)[1]

    L, R = get_reschedule_interval(nw, lo, hi)
    prefix, window, suffix = split(L, R)
    P, steps = provisional(prefix, window, suffix)
    if cover_peak and steps:
        top = max(steps)
        a, b = len(prefix), len(prefix) + len(window)
        near = [old_pos[(prefix + window + suffix)[k]] for k, x in enumerate(steps)
                if x == top and (a - cover_peak <= k < a or b <= k < b + cover_peak)]
        near = [k for k in near if k is not None]
        if near:
            L, R = get_reschedule_interval(nw, min(lo, min(near)), max(hi, max(near)))
            prefix, window, suffix = split(L, R)
            P, steps = provisional(prefix, window, suffix)
    # the peak outside the window does not depend on the window's order: a window order below it
    # is as good as the best one
    outside = steps[:len(prefix)] + steps[len(prefix) + len(window):]
    floor = max(outside) if outside else -INF
    units, peak, _, stats = schedule_parts(P, range(P.n_units), 0, P.live0, threshold=threshold,
                                           split_components=split_components, max_states=max_states,
                                           floor=floor)
    order = prefix + P.emit(units) + suffix
    rinfo: dict = {}
    if refine:
        order, rinfo = refine_peak_windows(model, order, max_windows=refine, max_width=24)
    if info is not None:
        info.update({"interval": (L, R), "window_ops": len(window), "prefix": len(prefix),
                     "suffix": len(suffix), "parts": stats.layers, "states": stats.states,
                     "exact": not (stats.truncated or stats.timed_out),
                     "refined": rinfo.get("accepted", 0)})
    return order


def refine_peak_windows(model: MemoryModel, order: list[int], deadline: Deadline | None = None,
                        width: int = 12, max_width: int = 48, max_windows: int = 400,
                        max_states: int | None = 50_000) -> tuple[list[int], dict]:
    """Local search with the interval rescheduling of Algorithm 2: re-run Serenity's DP on a window
    of ``2 * width + 1`` ops around a peak step, with the budget peak - 1 (a window is accepted only
    if it lowers every step it covers below the peak; the budget makes hopeless windows cheap).  The
    ops outside a window keep their footprints, so each accepted window can only lower the schedule.
    Windows grow up to ``max_width`` when no window of the current size helps."""
    deadline = deadline or Deadline(None)
    idx = model.index
    tried = accepted = 0
    start_peak = model.simulate(order)[0]
    failed: set[tuple[int, int, int]] = set()
    while tried < max_windows and not deadline.expired():
        peak, steps = model.simulate(order)
        progress = False
        for k, b in enumerate(steps):
            if b != peak:
                continue
            L, R = max(0, k - width), min(len(order) - 1, k + width)
            key = (L, R, peak)
            if key in failed:
                continue
            tried += 1
            P = UnitProblem(model, [idx[v] for v in order[L:R + 1]], [idx[v] for v in order[:L]])
            res = unit_dp(P, budget=peak - 1, max_states=max_states, deadline=deadline)
            if res is not None and res[1] < peak:
                order = order[:L] + P.emit(res[0]) + order[R + 1:]
                accepted += 1
                progress = True
                break
            failed.add(key)
            if tried >= max_windows or deadline.expired():
                break
        if not progress:
            if width >= max_width:
                break
            width = min(max_width, width * 2)
    return order, {"windows": tried, "accepted": accepted, "from_peak": start_peak,
                   "to_peak": model.simulate(order)[0]}


def _is_topological(preds: list[list[int]]) -> bool:
    return all(p < i for i, ps in enumerate(preds) for p in ps)


def _closed(g: Graph, prefix: list[int], window: list[int], suffix: list[int]) -> bool:
    """prefix, then window (any order), then suffix respects every dependency of ``g``."""
    seen: set[int] = set()
    for v in prefix:
        if any(p not in seen and g.nodes[p].kind != NodeKind.PLACEHOLDER for p in g.preds(v)):
            return False
        seen.add(v)
    wset = set(window)
    for v in window:
        if any(p not in seen and p not in wset and g.nodes[p].kind != NodeKind.PLACEHOLDER for p in g.preds(v)):
            return False
    seen |= wset
    for v in suffix:
        if any(p not in seen and g.nodes[p].kind != NodeKind.PLACEHOLDER for p in g.preds(v)):
            return False
        seen.add(v)
    return True


class IncrementalFull(MemoryScheduler):
    """The full scheduling of MAGIS's Algorithm 2 (its FS baseline): GraphPartition of the whole
    graph at nw <= ``threshold`` and Serenity's DP on each part.  ``incremental_schedule`` is the
    incremental entry point."""

    name = "incremental"

    def __init__(self, time_budget: float | None = None, threshold: int = 1, split_components: bool = False,
                 max_states: int | None = 1_000_000, free_inputs: bool = False,
                 count_weights: bool = True) -> None:
        super().__init__(time_budget=time_budget, free_inputs=free_inputs, count_weights=count_weights)
        self.threshold = threshold
        self.split_components = split_components
        self.max_states = max_states

    def order(self, g: Graph) -> list[int]:
        deadline = self.deadline(0.7)
        model = MemoryModel.build(g, self.free_inputs, self.count_weights)
        P = UnitProblem(model, range(model.n), sequences=False)
        units, peak, _, stats = schedule_parts(P, range(P.n_units), 0, P.live0, threshold=self.threshold,
                                               split_components=self.split_components,
                                               max_states=self.max_states, deadline=deadline)
        ops = P.emit(units)
        pick, ops = best_of(model, {"incremental": ops, "traced": traced_order(model), "rpo": rpo_order(model)})
        self.info = {"parts": stats.layers, "states": stats.states, "dp_peak": peak,
                     "exact_parts": not (stats.truncated or stats.timed_out), "picked": pick}
        return ops


__all__ = ["get_reschedule_interval", "incremental_schedule", "schedule_parts", "IncrementalFull", "INF"]
