"""The M-Optimizer: MAGIS's top-level search (section 6.2, Algorithm 3).

A best-first priority queue of M-States (``mstate.MState``: a parent, one rule application and the
schedule window that incremental scheduling re-ordered).  Each iteration pops the best state, moves
the one working graph there (``delta.DeltaEvaluator.goto``: applications undone and replayed along
the tree), applies every rule -- the F-Tree mutations (Enable, Lift, Disable, Mutate), Remat /
RematChain, De-remat and Swap / SwapLate / De-swap on the memory hot-spots -- and evaluates each
child as a delta (the changed window rescheduled by MAGIS Algorithm 2, the memory curve and latency
updated).  Children are deduplicated by the canonical graph hash (``wl_hash``) and pushed when they
are not worse than the best state so far relaxed by ``delta`` = 1.1.

Two modes, compared lexicographically as the paper does:

* ``memory`` limit M (latency under a memory limit): two states that both meet M compare by latency
  (then peak); otherwise by peak (then latency);
* ``latency`` limit T (memory under a latency limit): both within T compare by peak; otherwise by
  latency.

Every evaluated state also enters a Pareto archive of (peak, latency); ``pareto`` runs the memory
mode at a sweep of limits and returns the archive's frontier.  Each iteration is recorded (time,
best peak and latency, states generated / deduplicated / filtered): the convergence curves.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..analysis.ftree import LEVELS, build_ftree
from ..cost.devices import DEFAULT_PROFILE
from ..cost.model import AnalyticCost, CostModel
from ..fmt import format_bytes
from ..ir.graph import Graph
from ..metrics import Metrics
from ..schedule import get_scheduler
from ..transform.ftree_rules import FTreeRule
from ..transform.registry import FTREE_FAMILY, TENSOR_FAMILIES, families, rules_of
from ..transform.rule import Application, RuleNotApplicable
from ..transform.substitution import SUBSTITUTIONS
from .delta import DeltaEvaluator
from .limits import MemoryLimit
from .mstate import MState
from .pareto import FRONT, ParetoArchive, vector
from .plan import Plan
from .search_config import DEFAULT_CONFIG, SearchConfig
from .warm_start import WarmStart, low_end, pareto_spikes, spikes_within

# the substitution rules of the search with ``substitutions``: every A-Trans valid on a training step
# and the common-subexpression identities that make merges possible (one flatten of Q/K/V's input)
SEARCH_SUBSTITUTIONS = tuple(s.name for s in SUBSTITUTIONS if s.training and (s.kind == "A-Trans" or s.name.startswith("cse_")))


@dataclass
class Record:
    """One iteration of the search (a point of its convergence curves)."""

    seconds: float
    iteration: int
    best_peak: int
    best_latency: float
    generated: int
    deduplicated: int
    filtered: int  # refused applications and children worse than the relaxed best
    frontier_peak: int = 0  # the lowest peak of the Pareto archive so far (warm start included)

    def to_dict(self) -> dict:
        return {"seconds": round(self.seconds, 4), "iteration": self.iteration, "best_peak": self.best_peak,
                "best_latency": self.best_latency, "generated": self.generated,
                "deduplicated": self.deduplicated, "filtered": self.filtered, "frontier_peak": self.frontier_peak}


@dataclass
class Stage:
    """One stage of a run (the F-Tree and evaluator built, the seeds, greedy fission, Remat steps,
    the sweep ...): its start and end in seconds since the optimizer was created, the states it
    added to the seen set, and the archive's lowest peak within +5% and +10% latency after it (the
    anytime profile: ``bench/profile_search.py``)."""

    name: str
    start: float
    end: float
    states: int
    peak_at_5pct: int
    peak_at_10pct: int
    lowest_peak: int = 0  # the archive's lowest peak at any latency

    def to_dict(self) -> dict:
        return {"name": self.name, "start": round(self.start, 3), "end": round(self.end, 3), "states": self.states,
                "peak_at_5pct": self.peak_at_5pct, "peak_at_10pct": self.peak_at_10pct,
                "lowest_peak": self.lowest_peak}


@dataclass
class SearchResult:
    best: MState
    root: MState
    records: list[Record] = field(default_factory=list)
    archive: list[MState] = field(default_factory=list)  # Pareto-optimal states seen (peak ascending)
    stopped: str = ""
    seconds: float = 0.0


class Objective:
    """MAGIS's lexicographic order over named metrics (section 6.2): a ``limit`` on one metric
    (``limited``) and the metric optimized under it (``target``).  Two states that both meet the
    limit compare by the target, then the limited metric; otherwise by the limited metric, then the
    target.  ``key`` sorts metrics vectors best first.  The paper's two modes are ``memory`` (peak
    limited, latency the target) and ``latency`` (the mirror image)."""

    MODES = {"memory": ("peak", "latency"), "latency": ("latency", "peak")}

    def __init__(self, mode: str, limit: float) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r} (memory or latency)")
        self.mode, self.limit = mode, limit
        self.limited, self.target = self.MODES[mode]

    def meets(self, m: Metrics) -> bool:
        return m[self.limited] <= self.limit

    def key(self, m: Metrics) -> tuple:
        a, b = m[self.limited], m[self.target]
        return (0, b, a) if a <= self.limit else (1, a, b)

    def relaxed(self, m: Metrics, best: Metrics, delta: float) -> bool:
        """Not worse than ``best`` relaxed by ``delta`` in the metric the comparison starts with."""
        k = self.target if self.meets(m) and self.meets(best) else self.limited
        return m[k] <= delta * best[k]


class MOptimizer(WarmStart):
    """Algorithm 3 over one imported graph (its F-Tree built once, L = ``levels``), tuned by
    ``config``; its warm start (``warm_start.WarmStart``) is the project's own."""

    def __init__(self, g: Graph, cost: CostModel | None = None, order: list[int] | None = None,
                 levels: int = LEVELS, rules: tuple[str, ...] | None = None, delta: float | None = None,
                 hot: int | None = None, substitutions: bool = False, config: SearchConfig = DEFAULT_CONFIG) -> None:
        self.created = time.perf_counter()
        self.stages: list[Stage] = []  # what each stage of the run took and gave (``stage``)
        self.on_stage: Callable[[Stage], None] | None = None  # told each stage as it ends (``optimize``)
        self.cancel: threading.Event | None = None  # set by the caller: stop after the current stage
        self.imported = g
        self.cost = cost or AnalyticCost()
        # the traced order alone (the scheduler's ``run`` also simulates it: seconds on 100k ops)
        self.order = list(order) if order is not None else get_scheduler("traced").order(g)
        self.levels = levels
        self._ftree = None  # built on first use (``ftree``)
        tensor = rules_of(*TENSOR_FAMILIES)
        names = rules if rules is not None else ("ftree", *tensor)
        if substitutions:  # TASO's rules among the M-Rules (MAGIS section 3): the A-Trans and the
            names = (*names, *SEARCH_SUBSTITUTIONS)  # identities that open the way for them
        table = dict(rules_of(FTREE_FAMILY)) if "ftree" in names else {}  # they apply what "ftree" matches
        table.update({k: r for k, r in rules_of(*families()).items() if k in names})
        if "ftree" in names:
            table["ftree"] = FTreeRule(lambda: self.ftree)
        self.config = config
        self.delta = config.delta if delta is None else delta
        self.hot = config.hot if hot is None else hot
        self.ev = DeltaEvaluator(g.copy(), self.order, self.cost, rules=table)
        self.root = self.ev.root
        self.seen: set[int] = {self.root.hash}
        # the Pareto sweep's current search, for a caller that shows progress: (k, n, limit bytes) --
        # the k-th search (1-based) of the sweep's n fixed limits, k > n for a search of a frontier gap
        self.sweep_at: tuple[int, int, int] | None = None
        self._batch_splits: bool | None = None  # ``batch_splits``, checked once
        self.seeds = None  # the warm start's seeds (``seeds.Seeds``)
        self.adopted: dict[MState, str] = {}  # an adopted plan's last state -> "method label"
        self.pareto_archive: ParetoArchive[MState] = ParetoArchive(lambda s: vector(s.metrics, FRONT))
        self.pareto_archive.add(self.root)
        self.evaluator_seconds = time.perf_counter() - self.created  # about one simulation of the whole graph
        self.stages.append(Stage("evaluator", 0.0, self.evaluator_seconds, 1, self.root.peak, self.root.peak,
                                 self.root.peak))

    @property
    def ftree(self):
        """The imported graph's F-Tree (L = ``levels``), built on first use: on a graph of 10k ops it
        takes seconds that a short search spends on its seeds."""
        if self._ftree is None:
            self._ftree = build_ftree(self.imported, self.order, levels=self.levels)
        return self._ftree

    # ---- the run's stages --------------------------------------------------------------------------
    def lowest_within(self, slack: float) -> int:
        """The archive's lowest peak within ``slack`` x the imported latency."""
        bar = slack * self.root.latency * (1 + 1e-12)
        return min((a.peak for a in self.archive if a.latency <= bar), default=self.root.peak)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Record the enclosed work as a ``Stage`` named ``name`` in ``stages`` and tell ``on_stage``."""
        t, n = time.perf_counter() - self.created, len(self.seen)
        try:
            yield
        finally:
            self.stages.append(Stage(name, t, time.perf_counter() - self.created, len(self.seen) - n,
                                     self.lowest_within(1.05), self.lowest_within(1.10),
                                     min(a.peak for a in self.archive)))
            if self.on_stage is not None:
                self.on_stage(self.stages[-1])

    def cancelled(self) -> bool:
        """Whether the caller asked the run to stop (``cancel``): the warm start checks between its
        stages, the search between its iterations; the best state found is kept."""
        return self.cancel is not None and self.cancel.is_set()

    # ---- the archive of non-dominated states ---------------------------------------------------
    @property
    def archive(self) -> list[MState]:
        """The non-dominated states seen so far (peak, latency), in the order they came."""
        return self.pareto_archive.items

    def _archive(self, s: MState) -> None:
        self.pareto_archive.add(s)

    def frontier(self) -> list[MState]:
        return self.pareto_archive.front()

    def seed(self, applications: list[Application],
             alternatives: list[tuple[int, Application]] = ()) -> MState:
        """Commit ``applications`` (e.g. a greedy pass's, replayable from the imported graph) as a
        chain of states from the root; returns the last one (a warm start for ``search``).  Each
        of ``alternatives`` -- (k, application) -- is evaluated after the first k applications and
        enters the archive (and the seen set) too."""
        ev = self.ev
        ev.goto(self.root)
        at: dict[int, list[Application]] = {}
        for k, app in alternatives:
            at.setdefault(k, []).append(app)
        states: list[MState] = []
        for k in range(len(applications) + 1):
            for app in at.get(k, ()):  # before the chain moves on
                try:
                    states.append(ev.child_state(ev.evaluate(app)))
                except RuleNotApplicable:
                    continue
            if k < len(applications):
                states.append(ev.advance(applications[k]))
        for s in states:
            self.seen.add(s.hash)
            self._archive(s)
        return ev.state

    def adopt(self, plan: Plan) -> MState | None:
        """Another method's plan (applications from the imported graph, its own schedule) as a
        chain of states from the root (``DeltaEvaluator.place``: nothing rescheduled, the plan's
        schedule put in with its last application); its last state -- the plan's graph, schedule,
        peak and latency -- enters the archive and the seen set and is returned (None for a plan
        without applications, or one already seen).  The search may go on from it."""
        if not plan.applications:
            return None
        ev = self.ev
        ev.goto(self.root)
        s = ev.place(plan.applications, plan.order)
        if s.hash in self.seen:
            return None
        self.seen.add(s.hash)
        self._archive(s)
        self.adopted[s] = f"{plan.method} {plan.label}".strip()
        return s

    # ---- Algorithm 3 -----------------------------------------------------------------------------
    def _applications(self) -> list[Application]:
        ev = self.ev
        hot = [k for k in ev.hotspots() if k.index >= 0][: self.hot]
        where = ev.where()
        return [a for r in ev.rules.values() for a in r.match(ev.g, hot, where)]

    def search(self, mode: str, limit: float, time_budget: float = 60.0,
               progress: Callable[[Record], None] | None = None, cancel: threading.Event | None = None,
               start: MState | None = None) -> SearchResult:
        """Best-first search in ``mode`` ("memory": ``limit`` bytes, "latency": ``limit`` seconds)
        until the queue empties, ``time_budget`` seconds pass or ``cancel`` is set; the best state
        found is kept either way."""
        obj = Objective(mode, limit)
        t0 = time.perf_counter()
        start = start or self.root
        best = start
        tick = 0
        queue: list[tuple[tuple, int, MState]] = [(obj.key(start.metrics), tick, start)]
        records: list[Record] = []
        generated = deduplicated = filtered = 0
        stopped = "the queue is empty"
        it = 0
        while queue:
            if time.perf_counter() - t0 > time_budget:
                stopped = f"time budget ({time_budget:g} s)"
                break
            if cancel is not None and cancel.is_set():
                stopped = "cancelled"
                break
            _, _, s = heapq.heappop(queue)
            it += 1
            self.ev.goto(s)
            for app in self._applications():
                if cancel is not None and cancel.is_set() or time.perf_counter() - t0 > time_budget:
                    break
                try:
                    c = self.ev.evaluate(app)
                except RuleNotApplicable:
                    filtered += 1  # the rule does not apply here; anything else is a bug and propagates
                    continue
                generated += 1
                if c.hash in self.seen:
                    deduplicated += 1
                    continue
                self.seen.add(c.hash)
                child = self.ev.child_state(c)
                self._archive(child)
                if obj.key(child.metrics) < obj.key(best.metrics):
                    best = child
                if obj.relaxed(child.metrics, best.metrics, self.delta):
                    tick += 1
                    heapq.heappush(queue, (obj.key(child.metrics), tick, child))
                else:
                    filtered += 1
            rec = Record(time.perf_counter() - t0, it, best.peak, best.latency, generated, deduplicated, filtered,
                         min(a.peak for a in self.archive))
            records.append(rec)
            if progress is not None:
                progress(rec)
        return SearchResult(best, self.root, records, self.frontier(), stopped, time.perf_counter() - t0)

    def pareto(self, fractions: tuple[float, ...] = (0.8, 0.6, 0.4, 0.25), time_budget: float = 60.0,
               progress: Callable[[Record], None] | None = None,
               cancel: threading.Event | None = None, start: MState | None = None,
               gaps: bool = True) -> SearchResult:
        """The memory mode at limits ``fractions`` x the imported peak (the first search starting
        from ``start``, each next one from the best state of the previous one), then -- with
        ``gaps`` and while the budget lasts -- at the middle of the widest gap in peak between
        neighbours on the archive's frontier (from the neighbour with the higher peak): a search
        whose queue empties early leaves its time to the frontier's holes.  The archive's frontier."""
        t0 = time.perf_counter()
        records: list[Record] = []
        best = start or self.root
        res = None
        tried: set[int] = set()
        self.sweep_at = None

        def run(limit: float, begin: MState, share: float) -> None:
            nonlocal res
            self.sweep_at = (self.sweep_at[0] + 1 if self.sweep_at else 1, len(fractions), int(limit))
            res = self.search("memory", limit, share, progress, cancel, start=begin)
            offset = time.perf_counter() - t0 - res.seconds
            records.extend(Record(r.seconds + offset, r.iteration, r.best_peak, r.best_latency, r.generated,
                                  r.deduplicated, r.filtered, r.frontier_peak) for r in res.records)

        for k, f in enumerate(fractions):
            left = time_budget - (time.perf_counter() - t0)
            if left <= 0 or cancel is not None and cancel.is_set():
                break
            run(f * self.root.peak, best, left / (len(fractions) - k))
            best = res.best
        while gaps:
            left = time_budget - (time.perf_counter() - t0)
            if left <= self.config.min_gap_search or cancel is not None and cancel.is_set():
                break
            gap = self._widest_gap(tried)
            if gap is None:
                break
            limit, begin = gap
            tried.add(limit)
            run(limit, begin, max(self.config.min_gap_search, left / 2))
        stopped = res.stopped if res is not None else "cancelled"
        return SearchResult(best, self.root, records, self.frontier(), stopped, time.perf_counter() - t0)

    def _widest_gap(self, tried: set[int]) -> tuple[int, MState] | None:
        """(limit, start) of the widest gap in peak (a ratio) between neighbours on the frontier
        not searched yet: the limit halfway in peak, the start the neighbour above it.  Below the
        lowest point lies a gap of 1 / ``config.floor``: the limit ``config.floor`` x its peak, the start that
        point (the fixed limits of a sweep need not reach as low as the rules can go)."""
        front = self.frontier()
        floor, min_gap = self.config.floor, self.config.min_gap
        best = None
        if front and (limit := int(front[0].peak * floor)) not in tried:
            best = (1 / floor, limit, front[0])
        for lo, hi in zip(front, front[1:], strict=False):
            limit = (lo.peak + hi.peak) // 2
            if lo.peak <= 0 or hi.peak / lo.peak < 1 + min_gap or limit in tried:
                continue
            if best is None or hi.peak / lo.peak > best[0]:
                best = (hi.peak / lo.peak, limit, hi)
        return None if best is None else (best[1], best[2])

    # ---- plans -----------------------------------------------------------------------------------
    def plan(self, s: MState, method: str = "magis", label: str = "") -> Plan:
        """The plan of state ``s``: its applications from the imported graph, its schedule, and its
        peak and latency -- the simulator's for that graph and schedule (the evaluator's numbers
        are exact, the latency to rounding as it sums op times in another order:
        ``tests/test_delta_eval.py``), so no copy of the graph and no simulation."""
        return self.plans([s], method, [label])[0]

    def plans(self, states: Sequence[MState], method: str = "magis",
              labels: Sequence[str] | None = None) -> list[Plan]:
        """``plan`` of each of ``states``, in their order.  A state's schedule is its parent's with
        its window put in place; the states are visited in the order of their paths, so a path's
        schedules are built once for every state below them, and the working graph never moves."""
        labels = list(labels) if labels is not None else [""] * len(states)
        out: list[Plan | None] = [None] * len(states)
        stack: list[tuple[MState, list[int]]] = []  # a path from the root: its states' schedules
        paths = [s.path() for s in states]
        for k in sorted(range(len(states)), key=lambda k: [id(p) for p in paths[k]]):
            s, path = states[k], paths[k]
            del stack[len(path):]
            while stack and stack[-1][0] is not path[len(stack) - 1]:
                stack.pop()
            order = stack[-1][1] if stack else self.order
            for p in path[len(stack):]:
                if p.window or p.hi >= p.lo:  # an adopted plan's inner steps keep the schedule: no copy
                    order = order[:p.lo] + list(p.window) + order[p.hi + 1:]  # (thousands of them on 100k ops)
                stack.append((p, order))
            stats: dict = {"depth": s.depth}
            seed = next((p for p in reversed(path) if p in self.adopted), None)
            if seed is not None:  # the state is another method's plan, or a state the search reached from one
                stats["seed"] = self.adopted[seed]
                stats["seed_steps"] = s.depth - seed.depth
            out[k] = Plan(method, s.applications(), list(order), dict(s.metrics), labels[k], stats)
        return out





def optimize(g: Graph, *, memory_limit: MemoryLimit | str | float | None = None,
             latency_limit: float | None = None, pareto: bool = False, time_budget: float = 60.0,
             device: str = DEFAULT_PROFILE, warm: float | None = None,
             progress: Callable[[Record], None] | None = None, cancel: threading.Event | None = None,
             on_start: Callable[[MOptimizer], None] | None = None, cost: CostModel | None = None,
             cost_name: str = "analytic", substitutions: bool = False,
             on_stage: Callable[[Stage], None] | None = None, config: SearchConfig = DEFAULT_CONFIG):
    """One run of the M-Optimizer as a plan file (``plan.PlanFile``): point 0 is the answer (the best
    state under the limit, or the frontier's points by peak for ``pareto``), then PyTorch's eager
    order as the baseline.  ``memory_limit``: a ``limits.MemoryLimit`` or what ``MemoryLimit.parse``
    takes (a fraction of the imported peak in (0, 1], or a size with a unit such as "8GiB"; ValueError
    otherwise); ``latency_limit``: a factor of the imported latency.  The meta records the limit as
    given (``limit``) and, for a memory limit, the bytes it resolved to (``limit_bytes``).
    ``warm``: the share of the budget spent on the warm start (greedy fission, then Remat steps:
    ``MOptimizer.warm_start``; default ``config.warm``, under a latency limit ``config.latency_warm``).  ``on_stage`` hears each stage as it ends (``Stage``: the warm start's seeds and steps, the sweep);
    ``cancel`` stops the run after the current stage or search iteration.  ``on_start`` gets the optimizer before the search starts (a caller
    that shows its archive while it grows).  ``cost``: the cost model (default: ``device``'s analytic
    model), ``cost_name`` its kind (``core.cost.choice``), recorded in the meta as ``cost``.
    ``substitutions``: TASO's substitution rules (``SEARCH_SUBSTITUTIONS``) are rules of the search too.
    A memory limit that no state of the warm start meets gets ``config.low_end_share`` of what is left
    for ``low_end`` (peak fission, then Swap steps) before the search; a latency limit gets
    ``config.spike_share`` of it for ``spikes_within`` (spike steps below the limit), and so does ``pareto``
    below ``config.pareto_spikes`` where the budget is long enough for the graph (``pareto_spikes``; its warm
    start then gets ``config.latency_warm``).  ``config``: the search's tuning (``SearchConfig``)."""
    from .plan import PlanFile
    from .wl_hash import graph_hash

    if sum(x is not None for x in (memory_limit, latency_limit)) + bool(pareto) != 1:
        raise ValueError("give exactly one of a memory limit, a latency limit or pareto")
    memory = None if memory_limit is None else MemoryLimit.parse(memory_limit)
    t0 = time.perf_counter()
    m = MOptimizer(g, cost if cost is not None else AnalyticCost(device), substitutions=substitutions, config=config)
    m.on_stage, m.cancel = on_stage, cancel
    if on_start is not None:
        on_start(m)
    spiky = pareto and pareto_spikes(g, time_budget, config)
    # the seeds run on top of the warm start's share, out of the sweep's
    if warm is None:
        warm = config.latency_warm if latency_limit is not None or spiky else config.warm
    # the quick Swap steps on the seeds where the user waits; a budget long enough for the spike steps
    # (``pareto_spikes``) gives the later phases their whole share (qwen2_moe at 40 s per thousand ops,
    # within +10%: 0.492x with the quick steps, 0.403x without)
    quick = not pareto_spikes(g, time_budget, config)
    start = m.warm_start(warm * time_budget, config.seed_share * warm * time_budget, quick=quick) if warm > 0 else m.root
    left = max(0.0, time_budget - (time.perf_counter() - t0))
    if pareto:
        if spiky and not m.cancelled():
            with m.stage("spike steps below the sweep"):
                spikes_within(m, config.spike_share * left, config.pareto_spikes * m.root.latency)
            left = max(0.0, time_budget - (time.perf_counter() - t0))
        # the sweep searches from the root: its states stay reachable (a sweep from the warm start
        # left vit_base's frontier at eager's peak within 10% latency); the warm start's states are
        # in the archive either way
        with m.stage("Pareto sweep (Algorithm 3)"):
            res = m.pareto(time_budget=left, progress=progress, cancel=cancel)
        states = res.archive
        labels = [f"frontier {k}" for k in range(len(states))]
    else:
        if memory is not None:
            mode, limit = "memory", memory.bytes(m.root.peak)
        else:
            mode, limit = "latency", latency_limit * m.root.latency
        if m.cancelled():
            pass
        elif mode == "memory" and not any(s.peak <= limit for s in m.archive):
            with m.stage("low end (DTR near the limit, peak fission, Swap steps)"):
                low_end(m, config.low_end_share * left, limit)
            left = max(0.0, time_budget - (time.perf_counter() - t0))
        elif mode == "latency":
            with m.stage("spike steps below the limit"):
                spikes_within(m, config.spike_share * left, limit)
            left = max(0.0, time_budget - (time.perf_counter() - t0))
        # from the best state known under the limit: the warm start's end may break a latency
        # limit that the imported graph meets
        obj = Objective(mode, limit)
        start = min([start, *m.archive], key=lambda s: obj.key(s.metrics))
        with m.stage("search (Algorithm 3)"):
            res = m.search(mode, limit, left, progress, cancel, start=start)
        states = [res.best]
        labels = [f"memory limit {format_bytes(limit)}" if mode == "memory" else f"latency limit {limit * 1e3:.2f} ms"]
    points = m.plans(states, "magis", labels)
    points.append(m.plan(m.root, "eager", "traced order"))
    meta = {"mode": "pareto" if pareto else ("memory" if memory is not None else "latency"),
            "limit": None if pareto else (str(memory) if memory is not None else latency_limit),
            "limit_bytes": None if memory is None else memory.bytes(m.root.peak),
            "time_budget": time_budget, "seconds": round(time.perf_counter() - t0, 3), "stopped": res.stopped,
            "ftree_nodes": len(m._ftree.nodes) if m._ftree is not None else None, "states": len(m.seen),
            "seeds": len(m.seeds.adopted) if m.seeds is not None else 0, "cost": cost_name, "substitutions": substitutions,
            "cost_profile": m.cost.device.name, "stages": [st.to_dict() for st in m.stages]}
    return PlanFile(g.name, graph_hash(g), device, points, [r.to_dict() for r in res.records], meta)


__all__ = ["MOptimizer", "Objective", "Record", "SearchConfig", "SearchResult", "Stage", "low_end", "optimize",
           "pareto_spikes", "spikes_within"]
