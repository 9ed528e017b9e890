"""Server-side plans of the optimizer views: each graph's frontier, and per point everything the
views draw (the plan's graph, its timed simulation, its hot-spots, the imported ops it transformed,
and its rule applications step by step).

A graph's frontier is a plan file (``core.search.plan``): a sample's precomputed one
(``sample_graphs/plans``, ``make frontiers``), the result of an optimization run from the app, or a
plan file the user uploads for it.  Its points are every method's (MAGIS's frontier, the peers',
eager); the memory slider walks the *non-dominated* ones, peak ascending.  A point's view is built
on a worker thread and cached, so a slider drag on a loaded frontier is a dictionary lookup.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.analysis.lifetimes import Storage, resident_floor
from core.cost import DEFAULT_PROFILE, AnalyticCost
from core.fmt import plural
from core.ir.graph import Graph, NodeKind
from core.search.pareto import FRONT, non_dominated, vector
from core.search.plan import (
    Plan,
    PlanError,
    PlanFile,
    check_order,
    load_plans,
    merge_plans,
    plans_from_bytes,
    replay,
    sim_options,
)
from core.simulate import SimResult, simulate
from core.transform.registry import RULES, SUBSTITUTION_FAMILY, families, get_rule
from core.transform.rule import Application

from .errors import wait_result

log = logging.getLogger("magis.app")
MAX_VIEWS = 48  # point views kept in memory (all graphs together)
# how a plan changed an imported op, as the graph marks it: by the family of the rule
# (``Rule.family``: "fission", "remat", "swap", ...); a rule's one line for its steps is ``Rule.text``


def sample_plan_path(name: str) -> Path:
    from sample_graphs.frontiers import plan_path

    return plan_path(name)


# ---- what the views draw of one point ----------------------------------------------------------------
@dataclass
class PointView:
    key: int  # index of the point in its plan file
    plan: Plan
    graph: Graph  # the imported graph with the plan's applications replayed
    sim: SimResult  # timed simulation of the plan's schedule (compute and copy streams)
    hot: list[Storage]  # tensors alive at the peak, largest first
    hot_nodes: set[int]  # their producers (ids of the plan's graph)
    marks: dict[int, str]  # imported op id -> "fission" | "substitution" | "remat" | "swap"
    origin: dict[int, int]  # plan-graph node id -> the imported op it stands for (where there is one)
    seconds: float = 0.0  # time to build

    @property
    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(families(), 0)
        for k in self.marks.values():
            out[k] += 1
        return out

    def copies(self) -> int:
        return sum(1 for n in self.graph.nodes.values() if n.kind in (NodeKind.STORE, NodeKind.LOAD))

    def swaps(self) -> SwapCount:
        """What the plan swaps, the one count every view prints: a swapped tensor is one STORE (device
        -> host) with its LOADs (host -> device, one per later reuse)."""
        stores = [n for n in self.graph.nodes.values() if n.kind == NodeKind.STORE]
        loads = sum(1 for n in self.graph.nodes.values() if n.kind == NodeKind.LOAD)
        return SwapCount(len({n.inputs()[0] for n in stores if n.inputs()}), len(stores), loads)


@dataclass(frozen=True)
class SwapCount:
    tensors: int  # distinct tensors copied to the host
    stores: int
    loads: int

    def __bool__(self) -> bool:
        return bool(self.stores or self.loads)

    def text(self) -> str:
        """ "4 tensors swapped (4 stores, 4 loads)", or "no tensor swapped"."""
        if not self:
            return "no tensor swapped"
        return (f"{plural(self.tensors, 'tensor')} swapped ({plural(self.stores, 'store')}, "
                f"{plural(self.loads, 'load')})")


@dataclass
class Step:
    """One rule application of a plan, replayed from the imported graph with incremental scheduling."""

    index: int
    app: Application
    added: list[str]  # names of nodes the application added
    removed: list[str]  # names of nodes it erased
    rewired: list[str]  # names of nodes whose inputs it changed
    lo: int  # the parent schedule's positions lo..hi were re-ordered ...
    hi: int
    window: int  # ... into this many steps (MAGIS Algorithm 2)
    peak: tuple[int, int]  # before, after (bytes)
    latency: tuple[float, float]  # before, after (seconds)
    curve: tuple[np.ndarray, np.ndarray]  # memory per schedule step, before and after
    marks: dict[int, str]  # imported ops this step changed
    names: dict[int, str] = field(default_factory=dict)  # node id -> name, for the application's node params
    enables: list[int] = field(default_factory=list)  # later steps whose application names a node this one added
    order: np.ndarray | None = None  # the schedule after the step (node ids)
    recorded: bool = False  # that schedule is the search's own (a frontier point's), not an incremental replay's

    @property
    def rule(self) -> str:
        return self.app.rule


def origins(imported: Graph, g: Graph) -> dict[int, int]:
    """Plan-graph node -> the imported op it stands for: itself, a recomputed copy's original, a
    copy's (STORE / LOAD) tensor's producer."""
    out: dict[int, int] = {}
    nodes = g.nodes

    def root(nid: int) -> int | None:
        seen = 0
        while nid not in imported.nodes and seen < 64:
            n = nodes.get(nid)
            if n is None:
                return None
            if n.recompute_of is not None:
                nid = n.recompute_of
            elif n.kind in (NodeKind.STORE, NodeKind.LOAD) and n.inputs():
                nid = n.inputs()[0].node
            else:
                return None
            seen += 1
        return nid if nid in imported.nodes else None

    for nid in nodes:
        r = root(nid)
        if r is not None:
            out[nid] = r
    return out


def plan_marks(imported: Graph, g: Graph, origin: dict[int, int],
               applications: Sequence[Application] = ()) -> dict[int, str]:
    """Imported op -> how the plan changed it: taken into a fission node, replaced by a graph
    substitution (TASO's rules: merged, rewritten -- the source ops of the plan's substitution
    ``applications``), recomputed, or swapped."""
    marks: dict[int, str] = {}
    substituted = set()
    for app in applications:
        rule = RULES[app.rule] if app.rule in RULES else None
        if rule is not None and rule.family == SUBSTITUTION_FAMILY:
            substituted.update(app.params[:rule.sub.n_source])
    for n in imported.ops():
        if n.id not in g.nodes:
            marks[n.id] = "substitution" if n.id in substituted else "fission"
    on_load: dict[int, bool] = {}

    def remade_on_load(nid: int) -> bool:
        """A copied view of a LOAD, or of such a copy (SwapLate makes a swapped tensor's views again on
        its LOAD: views compute nothing, so the copies are part of the swap, not a recomputation)."""
        if nid not in on_load:
            view = any(t.alias is not None for t in g.nodes[nid].outputs)
            on_load[nid] = view and any(g.nodes[p].kind == NodeKind.LOAD
                                        or (g.nodes[p].recompute_of is not None and remade_on_load(p))
                                        for p in g.preds(nid))
        return on_load[nid]

    for n in g.nodes.values():
        if n.recompute_of is not None and n.id in origin:
            if not remade_on_load(n.id):
                marks.setdefault(origin[n.id], "remat")
        elif n.kind == NodeKind.STORE and n.id in origin:
            marks[origin[n.id]] = "swap"
    return marks


def state_sim(g: Graph, order: Sequence[int], device: str, plan: Plan | None = None) -> SimResult:
    """The one simulation of a state (a graph and its schedule) that every number the app shows of it
    reads: the plan card (``build_view``), each rule step's before and after (``build_steps``), the
    memory curves.  ``plan``: the plan whose graph ``g`` is (SwapAdvisor's streams, ``sim_options``)."""
    return simulate(g, order, AnalyticCost(device), validate=False, **(sim_options(plan) if plan is not None else {}))


def build_view(imported: Graph, plan: Plan, key: int, device: str) -> PointView:
    t0 = time.perf_counter()
    g = replay(imported, plan.applications)
    check_order(g, plan.order)
    sim = state_sim(g, plan.order, device, plan)
    hot = sim.memory.hotspots()
    origin = origins(imported, g)
    return PointView(key, plan, g, sim, hot, {s.root.node for s in hot if s.alloc >= 0},
                     plan_marks(imported, g, origin, plan.applications), origin, time.perf_counter() - t0)


def _app_key(apps: Sequence[Application]) -> tuple:
    return tuple((a.rule, tuple(a.params)) for a in apps)


def changed_window(before: Sequence[int], after: Sequence[int]) -> tuple[int, int, int]:
    """(lo, hi, n): the positions lo..hi of schedule ``before`` that ``after`` replaces by ``n`` ops
    (the common head and tail of the two schedules kept)."""
    m = min(len(before), len(after))
    lo = 0
    while lo < m and before[lo] == after[lo]:
        lo += 1
    tail = 0
    while tail < m - lo and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    return lo, len(before) - 1 - tail, len(after) - tail - lo


def build_steps(imported: Graph, plan: Plan, device: str, base_order: list[int],
                cancel: threading.Event | None = None, known: Sequence[Plan] = ()) -> list[Step]:
    """The plan's applications one by one from the imported graph (its traced schedule).  A state
    whose schedule the search recorded -- the plan's own last one, and any frontier point of
    ``known`` whose applications are a prefix of the plan's -- takes that schedule
    (``DeltaEvaluator.place``); the others are scheduled as the M-Optimizer evaluates a child
    (incremental scheduling, ``search.delta.DeltaEvaluator``).  Every state's peak, latency and
    memory curve come from ``state_sim``, as the plan card's: the last step's "after" is the card's
    numbers, a step that reaches a frontier point shows that point's card."""
    from core.search.delta import DeltaEvaluator

    ev = DeltaEvaluator(imported.copy(), base_order, AnalyticCost(device), rules=dict(RULES.items()))
    apps = list(plan.applications)
    recorded = {_app_key(q.applications): q for q in known if 0 < len(q.applications) <= len(apps)}
    recorded[_app_key(apps)] = plan
    steps: list[Step] = []
    made: dict[int, int] = {}  # node id -> the step that added it
    sim0 = state_sim(ev.g, ev.order, device)
    prev = (sim0.peak, sim0.latency, sim0.memory.step_bytes.copy())
    for k, app in enumerate(apps):
        if cancel is not None and cancel.is_set():
            break
        order0 = list(ev.order)
        names = {nid: n.name for nid, n in ev.g.nodes.items()}
        q = recorded.get(_app_key(apps[:k + 1]))
        placed = False
        if q is not None:
            try:
                ev.place([app], q.order)
                placed = True
            except ValueError:  # the recorded schedule is not this graph's: schedule it incrementally
                q = None
        if not placed:
            ev.advance(app)
        journal = ev.journal
        lo, hi, width = changed_window(order0, ev.order)
        if hi < lo:  # nothing moved: the window is the one place the application's nodes went
            lo, hi, width = lo, lo - 1, 0
        sim = state_sim(ev.g, ev.order, device, q if q is plan else None)
        added = journal.added()
        erased = [e.nid for e in journal.edits if e.kind == "erase" and e.nid in names]
        rewired = sorted(journal.touched() - set(added) - set(erased))
        g = ev.g
        origin = origins(imported, g)
        marks: dict[int, str] = {}
        kind = get_rule(app.rule).family
        for nid in erased:
            if nid in imported.nodes and imported.nodes[nid].kind != NodeKind.PLACEHOLDER:
                marks[nid] = kind
        for nid in added:
            if nid in origin:
                marks.setdefault(origin[nid], kind)
        shown = {p: names.get(p) or imported.nodes[p].name for p in app.params
                 if p in names or p in imported.nodes}
        for j in sorted({made[p] for p in app.params if p in made}):
            steps[j].enables.append(k)
        made.update(dict.fromkeys(added, k))
        after = (sim.peak, sim.latency, sim.memory.step_bytes.copy())
        steps.append(Step(k, app, [g.nodes[v].name for v in added if v in g.nodes],
                          [names[v] for v in erased], [g.nodes[v].name for v in rewired if v in g.nodes],
                          lo, hi, width, (prev[0], after[0]), (prev[1], after[1]), (prev[2], after[2]), marks, shown,
                          order=np.asarray(ev.order, dtype=np.int64), recorded=q is not None))
        prev = after
    return steps


# ---- one graph's frontier ------------------------------------------------------------------------------
@dataclass
class Frontier:
    gid: str
    plans: PlanFile
    source: str  # where it came from, for the page ("precomputed", "optimized here", "uploaded ...")
    version: int = 0  # bumps when the points change (a finished optimization run)

    @property
    def points(self) -> list[Plan]:
        return self.plans.points

    @property
    def device(self) -> str:
        return self.plans.device

    def baseline(self) -> int:
        """The key of PyTorch's eager point (the last one by convention, else the largest peak)."""
        eager = [k for k, p in enumerate(self.points) if p.method == "eager"]
        if eager:
            return eager[-1]
        return max(range(len(self.points)), key=lambda k: (self.points[k].peak, -self.points[k].latency))

    def default(self, overhead: float = 0.10) -> int:
        """The point a user most often wants first: the least peak within ``overhead`` of eager's
        latency (the baseline when none is)."""
        base = self.points[self.baseline()]
        ok = [k for k in self.slider() if self.points[k].latency <= (1 + overhead) * base.latency]
        return min(ok, key=lambda k: (self.points[k].peak, self.points[k].latency)) if ok else self.baseline()

    def stops(self) -> list[int]:
        """The memory slider's stops: every point's key, peak ascending (then latency, then key)."""
        pts = self.points
        return sorted(range(len(pts)), key=lambda k: (pts[k].peak, pts[k].latency, k))

    def slider(self) -> list[int]:
        """Keys of the non-dominated points, peak ascending (the baseline included, last)."""
        pts = self.points
        base = self.baseline()
        # ties go to the baseline (MAGIS's root state is eager's plan), then to MAGIS
        out = non_dominated(range(len(pts)), lambda k: vector(pts[k].metrics, FRONT),
                            tie=lambda k: (k != base, pts[k].method != "magis"), eps=1e-15)
        if base not in out:
            out.append(base)
        return out


# ---- background jobs ---------------------------------------------------------------------------------
class _Cancelled(BaseException):
    """A peers' run was cancelled from the page (raised from its progress callback; a BaseException
    so that ``compare``'s per-method failure handling does not take it for the method's failure)."""


@dataclass
class Job:
    """An optimization (or verification) run in the background; the page polls it."""

    kind: str  # "optimize" | "compare" | "verify"
    gid: str
    started: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: dict[str, Any] = field(default_factory=dict)
    frontier: list[tuple[int, float]] = field(default_factory=list)  # (peak, latency) so far
    done: bool = False
    error: str | None = None
    result: Any = None

    def status(self) -> dict[str, Any]:
        return {"kind": self.kind, "gid": self.gid, "seconds": round(time.time() - self.started, 1),
                "done": self.done, "error": self.error, "cancelled": self.cancel.is_set(), **self.progress}


class PlanStore:
    """Frontiers, point views, rule steps and background jobs, keyed by graph id.  ``entry`` is
    ``AppState.entry`` (the loaded graph of an id)."""

    def __init__(self, entry: Callable[[str], Any], workers: int = 1) -> None:
        self._entry = entry
        self._lock = threading.RLock()
        self._frontiers: dict[str, Frontier] = {}
        self._views: OrderedDict[tuple, Future] = OrderedDict()
        self._steps: OrderedDict[tuple, Future] = OrderedDict()
        self._jobs: dict[tuple[str, str], Job] = {}
        self._floors: dict[str, tuple[int, dict[str, int]]] = {}  # gid -> resident_floor of its graph
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="magis-plans")
        # rule steps replay a whole plan (seconds on a big graph): their own worker, so views never wait
        self._steps_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magis-steps")

    # ---- frontiers ---------------------------------------------------------------------------------
    def frontier(self, gid: str) -> Frontier:
        """The frontier of ``gid``: the latest set (optimization run, upload), else a sample's
        precomputed file, else the eager point alone."""
        with self._lock:
            f = self._frontiers.get(gid)
            if f is not None:
                return f
        g = self._entry(gid).graph
        f = self._precomputed(gid, g) or self._eager_only(gid, g)
        with self._lock:
            return self._frontiers.setdefault(gid, f)

    def floor(self, gid: str) -> tuple[int, dict[str, int]]:
        """The resident floor of ``gid``'s graph (``core.analysis.lifetimes.resident_floor``), cached:
        what no plan without swaps goes below."""
        with self._lock:
            fl = self._floors.get(gid)
        if fl is None:
            fl = resident_floor(self._entry(gid).graph)
            with self._lock:
                self._floors[gid] = fl
        return fl

    def _precomputed(self, gid: str, g: Graph) -> Frontier | None:
        kind, _, name = gid.partition(":")
        if kind != "sample":
            return None
        path = sample_plan_path(name)
        if not path.exists():
            return None
        try:
            pf = load_plans(path, g)
        except PlanError as e:  # a stale file (the graph was regenerated): say so, keep working
            log.warning("ignoring %s: %s", path, e)
            return None
        return Frontier(gid, pf, f"precomputed ({path.name}, {pf.device} profile)")

    def _eager_only(self, gid: str, g: Graph) -> Frontier:
        from core.search.methods import METHODS
        from core.search.wl_hash import graph_hash

        run = METHODS["eager"].run(g, AnalyticCost(DEFAULT_PROFILE))
        pf = PlanFile(g.name, graph_hash(g), DEFAULT_PROFILE, list(run.plans))
        return Frontier(gid, pf, "not optimized yet")

    def set_frontier(self, gid: str, pf: PlanFile, source: str) -> Frontier:
        """Make ``pf`` (checked against the graph) the frontier of ``gid``; PlanError if it is not
        for this graph."""
        g = self._entry(gid).graph
        pf.check_graph(g)
        if not pf.points:
            raise PlanError("the plan file has no points")
        with self._lock:
            old = self._frontiers.get(gid)
            f = Frontier(gid, pf, source, (old.version + 1) if old else 1)
            self._frontiers[gid] = f
            for cache in (self._views, self._steps):
                for k in [k for k in cache if k[0] == gid]:
                    del cache[k]
        return f

    def merge_frontier(self, gid: str, pf: PlanFile, source: str) -> Frontier:
        """``pf``'s points merged into ``gid``'s frontier (``merge_plans``: per method the points no
        other of that method dominates, so nothing found is lost -- the precomputed frontier, the
        peers', an earlier run's); a frontier of another device profile or cost model is replaced
        (its latencies are another device's, or another model's).  PlanError if ``pf`` is not for this graph."""
        self._entry(gid).graph  # noqa: B018 -- the graph is loaded (set_frontier checks pf against it)
        old = self.frontier(gid)
        same_cost = old.plans.meta.get("cost", "analytic") == pf.meta.get("cost", "analytic")
        if old.device == pf.device and old.plans.graph_hash == pf.graph_hash and same_cost:
            kept = len(old.points)
            pf = merge_plans(old.plans, pf)
            source = f"{source}, merged with the {plural(kept, 'point')} there before"
        return self.set_frontier(gid, pf, source)

    def load_upload(self, gid: str, data: bytes, filename: str) -> Frontier:
        pf = plans_from_bytes(data)
        return self.merge_frontier(gid, pf, f"uploaded ({filename})")

    # ---- point views -------------------------------------------------------------------------------
    def _future(self, cache: OrderedDict, key: tuple, fn: Callable[[], Any],
                pool: ThreadPoolExecutor | None = None) -> Future:
        with self._lock:
            fut = cache.get(key)
            if fut is None or fut.cancelled():
                fut = cache[key] = (pool or self._pool).submit(fn)
            cache.move_to_end(key)
            while len(cache) > MAX_VIEWS:
                cache.popitem(last=False)
            return fut

    @staticmethod
    def _result(fut: Future, wait: float | None):
        return wait_result(fut, wait, "building the plan failed", keep=(PlanError,))

    def view(self, gid: str, k: int, wait: float | None = None) -> PointView | None:
        """Point ``k`` of ``gid``'s frontier as the views draw it (None while it is being built)."""
        f = self.frontier(gid)
        plan = f.plans.point(k)
        imported = self._entry(gid).graph
        fut = self._future(self._views, (gid, f.version, k), lambda: build_view(imported, plan, k, f.device))
        return self._result(fut, wait)

    def prefetch(self, gid: str, around: int | None = None, reach: int = 2) -> None:
        """Build in the background the views of point ``around`` (default: the frontier's default),
        the baseline, and the ``reach`` slider stops on either side -- where a drag goes next.
        Building them all at once would hold the interpreter while the page first renders."""
        f = self.frontier(gid)
        keys = f.stops()
        k = f.default() if around is None else around
        i = keys.index(k) if k in keys else 0
        near = sorted(keys[max(0, i - reach):i + reach + 1], key=lambda j: abs(keys.index(j) - i))
        for j in dict.fromkeys([k, f.baseline(), *near]):
            self.view(gid, j, wait=0)

    def steps(self, gid: str, k: int, wait: float | None = None) -> list[Step] | None:
        f = self.frontier(gid)
        plan = f.plans.point(k)
        imported = self._entry(gid).graph
        base = f.points[f.baseline()].order
        known = list(f.points)
        fut = self._future(self._steps, (gid, f.version, k),
                           lambda: build_steps(imported, plan, f.device, base, known=known), self._steps_pool)
        return self._result(fut, wait)

    # ---- jobs --------------------------------------------------------------------------------------
    def job(self, gid: str, kind: str = "optimize") -> Job | None:
        with self._lock:
            return self._jobs.get((gid, kind))

    def start_optimize(self, gid: str, time_budget: float, device: str, cost: str = "analytic",
                       substitutions: bool = False) -> Job:
        """Run ``optimize(pareto=True)`` on ``gid`` in a thread; its points are merged into the
        frontier (``merge_frontier``: what was there stays unless a new point dominates it).
        ``cost``: the cost model (``core.cost.choice``; a measuring one needs ``device`` to be this
        machine's profile); ``substitutions``: TASO's rules among the search's rules."""
        with self._lock:
            old = self._jobs.get((gid, "optimize"))
            if old is not None and not old.done:
                return old
            job = self._jobs[(gid, "optimize")] = Job("optimize", gid)
        job.progress = {"budget": time_budget}
        g = self._entry(gid).graph
        # states evaluated by the sweep's searches: each search's Record counts its own from 0
        done = {"search": None, "before": 0, "last": 0}

        def run() -> None:
            from core.search import moptimizer

            try:
                def progress(r) -> None:
                    m = job.result
                    at = getattr(m, "sweep_at", None)
                    if at is not None and at[0] != done["search"] or at is None and r.iteration == 1:
                        done["search"] = at[0] if at is not None else None
                        done["before"] += done["last"]
                    done["last"] = r.generated
                    job.progress = {"budget": time_budget, "iteration": r.iteration, "best_peak": r.best_peak,
                                    "best_latency": r.best_latency, "states": r.generated,
                                    "evaluated": done["before"] + r.generated,
                                    "distinct": len(m.seen) if m is not None else None,
                                    "frontier_peak": r.frontier_peak, "search_seconds": round(r.seconds, 1)}
                    if at is not None:
                        job.progress.update(limit=at[0], limits=at[1], limit_bytes=at[2],
                                            limit_ratio=at[2] / m.root.peak if m.root.peak else 1.0)
                    if m is not None:
                        job.frontier = [(s.peak, s.latency) for s in m.frontier()]

                from core.cost.choice import make_cost

                model = make_cost(cost, device, graphs=[g])  # a first calibration times the graph's ops
                pf = moptimizer.optimize(g, pareto=True, time_budget=time_budget, device=device,
                                         progress=progress, cancel=job.cancel,
                                         on_start=lambda m: setattr(job, "result", m), cost=model,
                                         cost_name=cost, substitutions=substitutions)
                why = "cancelled, best kept" if job.cancel.is_set() else pf.meta.get("stopped", "")
                found = sum(p.method == "magis" for p in pf.points)
                rules = ", substitution rules" if substitutions else ""
                f = self.merge_frontier(gid, pf, f"optimized here ({time_budget:g} s budget, {device}, {cost} cost"
                                                 f"{rules}; {why})")
                job.frontier = [(p.peak, p.latency) for p in f.points if p.method == "magis"]
                job.progress["points"] = found
                job.progress["distinct"] = pf.meta.get("states")  # every distinct state, the warm start's too
                job.progress.setdefault("evaluated", 0)
                self.prefetch(gid)
            except Exception as e:  # noqa: BLE001 -- the page shows it; the server keeps running
                log.exception("optimization of %s failed", gid)
                job.error = f"{type(e).__name__}: {e}"
            finally:
                job.result = None
                job.done = True

        threading.Thread(target=run, name="magis-optimize", daemon=True).start()
        return job

    def start_compare(self, gid: str, time_budget: float, device: str, methods: list[str] | None = None) -> Job:
        """Every peer and baseline (``core.search.compare``, each within ``time_budget`` s) on
        ``gid``'s graph in a thread -- an uploaded graph's too: no method needs the model's code --
        its points merged into the frontier, each method that gave no point saying why
        (``meta.peer_failures``, drawn on the Pareto figure)."""
        from core.search.compare import compare, default_methods, plan_file_of

        with self._lock:
            old = self._jobs.get((gid, "compare"))
            if old is not None and not old.done:
                return old
            job = self._jobs[(gid, "compare")] = Job("compare", gid)
        chosen = [m for m in (methods or default_methods()) if m != "magis"]
        job.progress = {"budget": time_budget * len(chosen), "methods": len(chosen), "method_index": 0}
        g = self._entry(gid).graph

        def run() -> None:
            try:
                w = {"results": {}}

                def say(line: str) -> None:
                    if job.cancel.is_set():
                        raise _Cancelled
                    job.progress["line"] = line.strip()

                done: dict = {}
                for i, m in enumerate(chosen):
                    if job.cancel.is_set():
                        break
                    job.progress.update(method=m, method_index=i + 1)
                    try:
                        w = compare(g, device=device, methods=[m], time_budget=time_budget, progress=say)
                    except _Cancelled:
                        break
                    done.update(w["results"])
                    job.progress["points"] = sum(len(r.plans) for r in done.values())
                if done:
                    w["results"] = done
                    pf = plan_file_of(w, g)
                    self.merge_frontier(gid, pf, f"peers run here ({time_budget:g} s each, {device})")
                self.prefetch(gid)
            except Exception as e:  # noqa: BLE001 -- the page shows it; the server keeps running
                log.exception("the peers' run on %s failed", gid)
                job.error = f"{type(e).__name__}: {e}"
            finally:
                job.done = True

        threading.Thread(target=run, name="magis-compare", daemon=True).start()
        return job

    def start_verify(self, gid: str, spec: str, plan_bytes: bytes, point: int, timeout: float = 300.0) -> Job:
        """``magis verify SPEC --plan ... --point K`` in a subprocess (eager PyTorch vs the plan's
        exported script); its JSON report is the job's result."""
        import json
        import subprocess
        import sys
        import tempfile

        with self._lock:
            old = self._jobs.get((gid, "verify"))
            if old is not None and not old.done:
                return old
            job = self._jobs[(gid, "verify")] = Job("verify", gid)
        job.progress = {"point": point}

        def run() -> None:
            try:
                with tempfile.TemporaryDirectory(prefix="magis-verify-") as d:
                    path = Path(d) / "plan.json"
                    path.write_bytes(plan_bytes)
                    cmd = [sys.executable, "-m", "app.cli", "verify", spec, "--plan", str(path),
                           "--point", str(point), "--json"]
                    root = Path(__file__).resolve().parents[1]
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
                if p.returncode in (0, 1) and p.stdout.strip():  # 1: the report of a failed comparison
                    job.result = json.loads(p.stdout)
                else:
                    last = (p.stderr or p.stdout).strip().splitlines()
                    job.error = last[-1] if last else f"exit status {p.returncode}"
            except subprocess.TimeoutExpired:
                job.error = f"verification did not finish in {timeout:g} s"
            except Exception as e:  # noqa: BLE001
                job.error = f"{type(e).__name__}: {e}"
            finally:
                job.done = True

        threading.Thread(target=run, name="magis-verify", daemon=True).start()
        return job

    def cancel(self, gid: str) -> None:
        with self._lock:
            for (g, _k), job in self._jobs.items():
                if g == gid:
                    job.cancel.set()

    def forget(self, gid: str) -> None:
        """Drop everything of ``gid`` (the graph left the cache)."""
        self.cancel(gid)
        with self._lock:
            self._frontiers.pop(gid, None)
            for cache in (self._views, self._steps):
                for k in [k for k in cache if k[0] == gid]:
                    del cache[k]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._steps_pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["Frontier", "Job", "PlanStore", "PointView", "Step", "SwapCount", "build_steps", "build_view", "changed_window", "get_rule",
           "state_sim",
           "origins", "plan_marks"]
