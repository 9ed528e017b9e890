"""Where the copies of a swap go in a schedule (MAGIS section 5.2 and section 3's two streams).

Given any order of a graph with STORE/LOAD nodes, the compute ops keep their order and each copy
is re-issued:

* a STORE right after the op that produces the stored tensor (as early as possible: the sooner the
  copy is done, the sooner the device storage can be freed);
* a LOAD as late as possible while its transfer stays hidden: issued before its first reader B at
  the latest point where the compute ops in between take at least the copy's time (no earlier than
  its STORE) -- :func:`load_slot`, which the search's delta evaluator and the greedy swap pass use
  too.  The copy stream is shared, so a LOAD can still be late when copies queue up; the placement
  is then checked on the simulator, and every LOAD whose reader waited is moved earlier by the wait
  (a few rounds).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

from ..cost.model import AnalyticCost, CostModel
from ..ir.graph import Graph, NodeKind
from ..simulate import COPY_KINDS, SimResult, simulate

ROUNDS = 4  # simulator checks of the LOAD placement


def load_slot(reader: int, need: float, floor: int, *, start: Sequence[float] | None = None,
              step_time: Callable[[int], float] | None = None) -> int:
    """Where a LOAD goes, just in time (MAGIS section 5.2, on section 3's separate copy stream): the
    latest slot k <= ``reader`` (slot k: issued right before step k; ``reader``: the step of its
    first reader) from which the compute up to the reader takes at least ``need`` seconds, so the
    transfer hides behind it -- but no earlier than slot ``floor``: ``floor`` when no slot after it
    covers the transfer, ``reader`` when ``floor >= reader``.

    The compute time between two slots is read from one of two timelines:

    * ``start``: when each step starts (an extra last entry when ``reader`` may be the end); the
      latest k with ``start[k] <= start[reader] - need``, by binary search;
    * ``step_time(k)``: the compute time of step k (0 for a copy), summed back from the reader until
      it covers ``need`` -- it walks only the slots the transfer spans, and needs no start times.

    The two agree up to rounding (a tie in the last bit may tip either way), so each caller keeps to
    one of them.  The callers differ in what they know and want:

    * :func:`place_and_simulate` (every scheduler's order of a swapped graph, ``greedy_swap``'s
      candidates): the analytic start times of the compute ops alone (the copies are what is being
      placed, and no wait is known yet); ``need`` is the LOAD's time plus the waits its reader saw
      in the simulator's earlier rounds; ``floor`` is its STORE's slot (in a slot, STOREs go first).
    * ``DeltaEvaluator._swap_window`` (a search child that adds a swap): the working schedule as it
      stands, copies included, timed by the evaluator's per-op cache (``step_time``: a schedule
      that changes with every child keeps no start times); ``floor`` is one past the STORE (past
      the producer for a STORE the same child adds, placed right after it) and one past the last
      peak step before the reader, so the tensor is off the device at the peak.
    * ``greedy._swap_estimates`` (a swap's saving estimated before it is placed): the simulated
      start times of the current schedule (waits and earlier copies included); ``floor`` is the
      first step without the tensor -- a LOAD there frees nothing, and the swap is not estimated.
    """
    if start is not None:
        k = bisect.bisect_right(start, start[reader] - need) - 1
        return min(reader, max(floor, k))
    assert step_time is not None, "load_slot needs start or step_time"
    q, covered = reader, 0.0
    while q > floor and covered < need:
        q -= 1
        covered += step_time(q)
    return q


def hoist_loads(order: Sequence[int], curve: np.ndarray, cap: int,
                loads: Sequence[tuple[int, int, int, int, float, int]],
                step_time: Callable[[int], float]) -> tuple[list[int], dict[int, int]]:
    """Re-issue LOADs earlier (``transform.swap.Reissue``): ``loads`` are (LOAD node, its position
    p, its floor, the position b of its first reader, its transfer seconds, its bytes) in ``order``,
    whose memory curve is ``curve`` (bytes alive per step).  Each LOAD goes to its just-in-time slot
    q = ``load_slot(b, transfer, floor)``, but where the curve with its bytes added over q..p-1
    would exceed ``cap``, only as far back as it stays at or under ``cap`` (the LOADs in order of
    position, each one's bytes added to the curve before the next is placed).  Returns the new
    order (each moved LOAD right before the op at its slot, moved LOADs sharing a slot in their old
    order) and {moved LOAD: its slot}.  The curve is the one the schedule had: how the copies then
    queue is for a simulation to say."""
    curve = np.array(curve, dtype=np.int64, copy=True)
    slot: dict[int, int] = {}
    for v, p, floor, b, need, nbytes in sorted(loads, key=lambda x: x[1]):
        q = load_slot(b, need, floor, step_time=step_time)
        k = p
        while k > q and curve[k - 1] + nbytes <= cap:
            k -= 1
        if k < p:
            slot[v] = k
            curve[k:p] += nbytes
    if not slot:
        return list(order), slot
    keyed = sorted(((slot[v] - 0.5, i) if v in slot else (i, 0), v) for i, v in enumerate(order))
    return [v for _, v in keyed], slot


def has_copies(g: Graph) -> bool:
    return any(n.kind in COPY_KINDS for n in g.nodes.values())


def place_copies(g: Graph, order: Sequence[int], cost: CostModel | None = None,
                 rounds: int = ROUNDS) -> list[int]:
    """``order`` with its STORE/LOAD nodes re-issued as the module docstring says."""
    return place_and_simulate(g, order, cost, rounds)[0]


def place_and_simulate(g: Graph, order: Sequence[int], cost: CostModel | None = None,
                       rounds: int = ROUNDS) -> tuple[list[int], SimResult]:
    """:func:`place_copies` and the simulation of its result (the placement's last check)."""
    order = list(order)
    cost = cost or AnalyticCost()
    copies = [v for v in order if g[v].kind in COPY_KINDS]
    if not copies:
        return order, simulate(g, order, cost, validate=False)
    compute = [v for v in order if g[v].kind not in COPY_KINDS]
    cpos = {v: i for i, v in enumerate(compute)}
    start = np.concatenate([[0.0], np.cumsum([cost.node_time(g, g[v]) for v in compute])])
    end = len(compute)  # anchor k: issued right before compute[k] (k == end: after the last op)

    anchor: dict[int, int] = {}
    stores = [v for v in copies if g[v].kind == NodeKind.STORE]
    loads = [v for v in copies if g[v].kind == NodeKind.LOAD]
    for s in stores:
        p = g[s].inputs()[0].node
        anchor[s] = cpos[p] + 1 if p in cpos else 0
    reader: dict[int, int] = {}
    for v in loads:
        rs = [cpos[u] for u in g.users(v) if u in cpos]
        reader[v] = min(rs) if rs else end
    need = {v: cost.node_time(g, g[v]) for v in loads}

    def place_loads() -> None:
        for v in loads:
            anchor[v] = load_slot(reader[v], need[v], anchor.get(g[v].inputs()[0].node, 0), start=start)

    def merged() -> list[int]:
        slots: list[list[int]] = [[] for _ in range(end + 1)]
        for v in stores:
            slots[anchor[v]].append(v)
        for v in sorted(loads, key=lambda v: (anchor[v], reader[v], v)):
            slots[anchor[v]].append(v)
        out: list[int] = []
        for k in range(end + 1):
            out.extend(slots[k])
            if k < end:
                out.append(compute[k])
        return out

    place_loads()
    new = merged()
    sim = simulate(g, new, cost, validate=False)
    for _ in range(rounds):
        step = {v: i for i, v in enumerate(new)}
        reached = np.zeros(len(new))  # when the compute stream was free to start each step
        t = 0.0
        for i, kind in enumerate(sim.stream):
            reached[i] = t
            if kind == "compute":
                t = float(sim.end[i])
        moved = False
        for v in loads:
            if reader[v] == end:
                continue
            late = float(sim.end[step[v]] - reached[step[compute[reader[v]]]])
            if late > 1e-12 and anchor[v] > anchor.get(g[v].inputs()[0].node, 0):
                need[v] += late
                moved = True
        if not moved:
            break
        place_loads()
        new = merged()
        sim = simulate(g, new, cost, validate=False)
    return new, sim


__all__ = ["has_copies", "load_slot", "place_and_simulate", "place_copies"]
