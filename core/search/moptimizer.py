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
from ..ir.graph import Graph, NodeKind, TRef
from ..metrics import Metrics
from ..schedule import get_scheduler
from ..transform.fission import Fission
from ..transform.ftree_rules import FTreeRule
from ..transform.registry import FTREE_FAMILY, TENSOR_FAMILIES, families, rules_of
from ..transform.rule import Application, RuleNotApplicable
from ..transform.substitution import SUBSTITUTIONS
from ..transform.swap import Reissue
from .delta import Child, DeltaEvaluator
from .limits import MemoryLimit
from .mstate import MState
from .pareto import FRONT, ParetoArchive, vector
from .plan import Plan

DELTA = 1.1  # relaxation of the push test (paper)
HOT = 6  # hot-spot tensors the tensor rules (remat, swap) are matched on per state
MIN_GAP = 0.05  # the Pareto sweep searches frontier gaps wider than 5% in peak
MIN_GAP_SEARCH = 1.0  # seconds: a shorter remainder of the budget is not spent on a gap
FLOOR = 0.8  # the Pareto sweep also searches below its lowest point, at this fraction of its peak
# optimize's share of the budget for the warm start: btlm_3b at +10%, 0.3 -> 0.5: 0.467x -> 0.373x;
# 0.5 -> 0.65: 0.360x -> 0.337x (its swap steps' time); bert_base, gpt_neo_1_3b, resnet50, unetpp unchanged
WARM = 0.65
LATENCY_WARM = 0.4  # ... under a latency limit, where the spike steps (spikes_within) take most of the rest
REMAT_SHARE = 0.3  # the warm start's Remat steps get at least this share of its budget
REMAT_CANDIDATES = 16  # kinds of hot-spot (producer op, shape, dtype) a full Remat scan of the warm start tries
REMAT_SMALL = 8  # a scan skips hot-spots under 1/8 of the largest it can lower the peak by (a step each)
LAZY = 2.0  # remat_steps commits a scan's next child while its latency per byte is within 2x the best
SWAP_SHARE = 0.25  # the warm start's share for Swap steps (resnet50 at <= 10%: 0.529x -> 0.442x)
SWAP_FROM = (1.05, 1.10)  # Swap steps start from the lowest-peak state within +5% and within +10% latency
LOW_END_SHARE = 0.5  # a memory limit below every state of the warm start: this share of what is left goes to ``low_end``
LOW_END_BUDGETS = (1.08, 1.07, 1.06, 1.05, 1.04)  # ``low_end``'s DTR budgets, x the memory limit, tried down to the first that fails
SPIKE_TOL = 0.004  # spike_steps works on the spikes within 0.4% (of the imported peak) of the working peak
SPIKE_SEP = 100  # ... at least this many steps apart
SPIKE_WIDTH = 30  # a child is judged by the most its curve holds at the ops within 30 steps of the spike
SPIKE_CANDIDATES = 10  # the largest tensors alive at the spike that the rules are matched on
SPIKE_RULES = ("swap", "swap_late", "swap_output", "remat", "remat_chain")
SPIKE_SHARE = 0.75  # under a latency limit, this share of what the warm start leaves goes to spike steps (spikes_within)
SPIKE_SWAP_SHARE = 0.3  # ... each start's Swap steps first (copies that overlap compute), with this share of the time left
SPIKE_FROM = (0.05, 0.03, 0.01)  # ... from the lowest-peak states this far below the limit (x the imported latency)
# the Pareto mode's spike steps (spikes_within, SPIKE_SHARE of what the warm start leaves) run below this
# latency (x the imported); SD-1.x UNet at <= 10%, 180 s: 0.427x without, 0.405x with half of it, 0.393x with 0.75
PARETO_SPIKES = 1.10
# ... where the budget is at least this many seconds per thousand ops (then the warm start gets LATENCY_WARM):
# at 20 s (4-20 s per thousand ops) a shorter warm start cost more than the spike steps gave (SD UNet 0.499x ->
# 0.597x, DeiT 0.401x -> 0.474x, EfficientNet 0.388x -> 0.476x); at 40 s per thousand ops DiT 0.519x -> 0.503x
PARETO_SPIKE_SECONDS = 30.0
SPIKE_MIN_SECONDS = 0.5  # the warm start's Swap steps that end this much before their share hand it to spike_steps
# the seeds' runs (``seeds.seed``; adopting them comes on top) before the warm start, this fraction of the
# warm start's budget on top of it (out of the sweep's share): at 60 s, btlm_3b at +10% 0.370x -> 0.291x
# against seeds taken out of the warm start's own budget; 20 s, t5 0.640x -> 0.506x; bert_base, resnet50 unchanged
SEED_SHARE = 0.45
# the first slack's DTR bisection (the plan within +10%) may take up to this share of the warm start and
# seeds together, more than the seeds' share where a DTR run is long (9k ops at 10 s; 100k ops at 30 s,
# where one run takes ten seconds and its plan is the only point within reach); on short graphs the
# bisection ends in a few runs long before it
SEED_FIRST = 0.8
# anytime: Swap steps from the adopted seeds get this share of the warm start before greedy fission, so a
# short search has MAGIS's own steps on its best points (the Swap steps at the end go on from where they end)
QUICK_SWAP_SHARE = 0.2
# greedy fission runs where its share is at least this many times the evaluator's construction (about one
# simulation of the graph): the F-Tree and each candidate's full simulation cost several of them
GREEDY_MIN = 10.0
BATCH_SHARE = 0.2  # the warm start's share for micro-batch F-Trans along its Remat chain (batch_fission)
BATCH_DEPTHS = 24  # states of the Remat chain that batch_fission splits first (evenly spaced)
BATCH_SLOW = 1.8  # batch_fission skips states and parts beyond this latency (x the imported graph's)
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


class MOptimizer:
    """Algorithm 3 over one imported graph (its F-Tree built once, L = ``levels``)."""

    def __init__(self, g: Graph, cost: CostModel | None = None, order: list[int] | None = None,
                 levels: int = LEVELS, rules: tuple[str, ...] | None = None, delta: float = DELTA,
                 hot: int = HOT, substitutions: bool = False) -> None:
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
        self.delta, self.hot = delta, hot
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

    def warm_start(self, time_budget: float, seed_budget: float | None = None, quick: bool = True) -> MState:
        """A start state many steps from the root, where single steps rarely lower a peak made of
        many equal layers: the greedy fission pass (``greedy.greedy_fission``: the best-scoring
        F-Tree nodes enabled while they lower the peak; the F-Tree's big regions are many Enable /
        Lift steps away) with up to 1 - ``REMAT_SHARE`` of the budget (it stops early when no node
        lowers the peak; the nodes' other n that lowered the peak enter the archive as well), then
        Remat steps on the result (``remat_steps``) with half of what is left but ``SWAP_SHARE``
        -- the lever where fission cannot split the saved activations (batch norm couples the
        batch of a CNN) -- and Remat steps from the imported graph with the other half (a fission
        node over the whole training step leaves nothing to recompute at its peak), then, with
        ``BATCH_SHARE``, the whole step's F-Trans along the batch at states of that last Remat
        chain (``batch_fission``: micro-batching of a partly recomputed step).  Last, Swap
        steps (the same steps with the Swap and SwapLate rules) from the archive's lowest-peak
        states within each latency slack of ``SWAP_FROM``: a swap whose copies overlap compute
        lowers the peak at no latency, but once a graph has copies every child is simulated in
        full, so swaps come after the delta-evaluated Remat chains rather than among them.  Swap
        steps that stop before their share is spent (no child lowers the peak: separate parts of the
        schedule peak at one height) hand the rest to ``spike_steps`` from the lowest-peak state
        they reached within the same slack.  Every state on the way enters the Pareto archive;
        the fission chain's end is returned.  Before
        all of these, with ``seed_budget`` seconds on top of ``time_budget`` (default:
        ``SEED_SHARE`` of it; what they overrun comes out of ``time_budget``), DTR's plans at a
        series of budgets and those of offloading with checkpointing are adopted as seeds
        (``seeds.seed``): on graphs of thousands of ops the Remat steps alone reach their peaks
        too slowly."""
        from .greedy import alternatives, greedy_fission
        from .seeds import seed

        t0 = time.perf_counter()
        budget = SEED_SHARE * time_budget if seed_budget is None else seed_budget
        self.seeds = seed(self, budget, first=SEED_FIRST * (time_budget + budget))
        time_budget = max(0.0, time_budget - max(0.0, time.perf_counter() - t0 - budget))  # what the seeds overran
        t0 = time.perf_counter()
        if self.cancelled():
            return self.root
        if quick and self.seeds.adopted:  # anytime: MAGIS's own steps on the seeds before the longer phases
            self.swap_phase(QUICK_SWAP_SHARE * time_budget, "from the seeds")
        time_budget = max(0.0, time_budget - (time.perf_counter() - t0))
        t0 = time.perf_counter()
        s = self.root
        share = (1 - REMAT_SHARE) * time_budget
        if share >= GREEDY_MIN * self.evaluator_seconds and not self.cancelled():  # else it would spend its share on the F-Tree alone
            with self.stage("greedy fission"):
                res = greedy_fission(self.imported, self.order, self.cost, time_budget=share, ftree=self.ftree)
                s = self.seed(res.applications, alternatives(res))
        # whether the batch splits is a look at the whole graph (seconds on 100k ops): asked only where
        # the batch F-Trans's share could pay for an evaluation or two
        batch = BATCH_SHARE if BATCH_SHARE * time_budget >= GREEDY_MIN * self.evaluator_seconds \
            and self.batch_splits() else 0.0
        rest = 1 - SWAP_SHARE - batch  # the Remat steps' share; the batch F-Trans's comes after it
        with self.stage("Remat steps from greedy fission" if s is not self.root else "Remat steps"):
            end = chain = self.remat_steps(s, (time_budget * rest - (time.perf_counter() - t0)) / 2)
        if self.cancelled():
            return end
        if s is not self.root:  # fission can leave the peak where no tensor is recomputable
            with self.stage("Remat steps from the imported graph"):
                chain = self.remat_steps(self.root, time_budget * rest - (time.perf_counter() - t0))
        if batch:  # (where the batch does not split, going back to the root alone costs seconds)
            with self.stage("batch fission"):
                self.batch_fission(chain, time_budget * (1 - SWAP_SHARE) - (time.perf_counter() - t0))
        if not self.cancelled():
            self.swap_phase(time_budget - (time.perf_counter() - t0))
        return end

    def swap_phase(self, time_budget: float, where: str = "") -> None:
        """Swap steps (``remat_steps`` with the Swap and SwapLate rules) from the archive's
        lowest-peak state within each latency slack of ``SWAP_FROM``, ``time_budget`` shared between
        them; a start whose Swap steps stop before its share is spent hands the rest to
        ``spike_steps`` from the lowest-peak state they reached within the same slack."""
        t0 = time.perf_counter()
        base = self.root.latency
        starts: list[tuple[MState, float]] = []
        for slack in SWAP_FROM:
            ok = [a for a in self.archive if a.latency <= slack * base]
            best = min(ok, key=lambda a: (a.peak, a.latency), default=None)
            if best is not None and best not in (s for s, _ in starts):
                starts.append((best, slack))
        for i, (st, slack) in enumerate(starts):
            share = (time_budget - (time.perf_counter() - t0)) / (len(starts) - i)
            if share <= 0 or self.cancelled():
                break
            t1 = time.perf_counter()
            with self.stage(f"Swap steps within +{slack - 1:.0%} {where}".strip()):
                self.remat_steps(st, share, step_rules=("swap", "swap_late"))
            rest = share - (time.perf_counter() - t1)
            if rest > SPIKE_MIN_SECONDS:  # the Swap steps stopped early: no child lowers the peak
                ok = [st] + [a for a in self.archive if a.latency <= slack * base and st in a.path()]
                with self.stage(f"spike steps within +{slack - 1:.0%} {where}".strip()):
                    self.spike_steps(min(ok, key=lambda a: (a.peak, a.latency)), rest)

    def batch_splits(self) -> bool:
        """Whether the imported graph's batch splits (``peers.microbatch.batch_split``): where it
        does not, no state of a Remat chain splits, and ``batch_fission``'s share of the warm
        start goes to the Remat steps."""
        from .peers.microbatch import batch_split

        if self._batch_splits is None:
            self._batch_splits = batch_split(self.imported, self.order)[0] is not None
        return self._batch_splits

    def batch_fission(self, end: MState, time_budget: float, depths: int = BATCH_DEPTHS,
                      slow: float = BATCH_SLOW) -> list[MState]:
        """Micro-batching with MAGIS's own recomputation: the F-Trans of the whole training step
        along the batch (``peers.microbatch.batch_split``: S = every op the input's batch reaches,
        each of the n parts running S in the state's schedule, so a recomputed copy runs just
        before its backward reader in every part) from states of the Remat chain that ends at
        ``end`` (Remat steps from the imported graph, ``remat_steps``): ``depths`` of them evenly
        spaced (the imported graph first), then, while the budget lasts, the states between them
        from the imported graph on (``spaced_first``: the shallow states' splits are the points at
        small overheads, where a point may sit between two spaced states -- unetpp's n = 4 split
        of the chain's fourth state is 0.22x at +9.5%, its spaced neighbours' +8.5% and +10.0%),
        each split in every n that divides the batch.
        A whole-step F-Trans leaves each part's activations, so recomputing some of them first
        lowers every part's peak: the points that neither Remat nor micro-batching alone reach.
        The F-Tree cannot express it (its nodes are the imported graph's, without the copies).
        States and parts slower than ``slow`` x the imported latency are skipped.  Every child
        enters the archive; none becomes the working state; returns them (chain order, n
        ascending).  Graphs whose batch does not split (training batch norm, data-dependent
        indexing) are left after one check."""
        from .peers.microbatch import batch_split

        t0 = time.perf_counter()
        ev = self.ev
        out: list[tuple[int, MState]] = []
        chain = list(dict.fromkeys(s for s in [self.root, *end.path()] if s.latency <= slow * self.root.latency))
        for i in spaced_first(len(chain), depths):
            if time.perf_counter() - t0 > time_budget:
                break
            s = chain[i]
            ev.goto(s)
            split, _ = batch_split(ev.g, ev.order)
            if split is None:
                if s is self.root:  # the batch stops (batch norm): no state of the chain splits
                    break
                continue
            for n in split.divisors():
                if time.perf_counter() - t0 > time_budget:
                    break
                try:
                    c = ev.evaluate(Fission.ordered_application(n, split.comp, split.nodes))
                except RuleNotApplicable:
                    continue
                if c.hash not in self.seen:
                    self.seen.add(c.hash)
                    out.append((i, ev.child_state(c)))
                    self._archive(out[-1][1])
                if c.latency > slow * self.root.latency:  # more parts only cost more
                    break
        return [c for _, c in sorted(out, key=lambda ic: ic[0])]

    def remat_steps(self, s: MState, time_budget: float, candidates: int = REMAT_CANDIDATES,
                    step_rules: tuple[str, ...] | None = None) -> MState:
        """From ``s``, commit one Remat or RematChain (or one of ``step_rules``) per step, the child
        that lowers the peak at the least latency per byte saved, until none lowers it or the budget
        ends; returns the last state.  A many-layer model has the same tensor in every layer and
        needs hundreds of steps, so the steps go by kind (producer op, shape, dtype): a full scan
        tries the largest hot-spot of each of up to ``candidates`` kinds that some rule applies to
        (down to 1 / ``REMAT_SMALL`` of the largest whose child lowers the peak: smaller ones take
        as many steps for less); then, kind by kind in the scan's order (cheapest first), the
        largest hot-spot left of the kind is tried, one tensor per step, and committed while it
        lowers the peak at no more than ``LAZY`` x the scan's best latency per byte; when no kind of
        the scan does, the next full scan starts."""
        rules = [self.ev.rules[k] for k in step_rules or ("remat", "remat_chain") if k in self.ev.rules]
        if not rules:
            return s
        t0 = time.perf_counter()
        ev = self.ev
        ev.goto(s)

        def kind(ref: TRef) -> tuple:
            node = ev.g.nodes[ref.node]
            t = node.outputs[ref.index]
            return node.op, tuple(t.shape), t.dtype

        def matched(ref: TRef, where) -> list[Application]:
            return [a for r in rules for a in r.match(ev.g, [ref], where)]

        ranked: list[tuple] = []  # the kinds of the last full scan, cheapest first
        bar = 0.0
        while time.perf_counter() - t0 < time_budget:
            if ranked:  # the largest hot-spot left of the scan's cheapest kind still in play
                ref = next((k for k in ev.hotspots() if k.index >= 0 and kind(k) == ranked[0]), None)
                got = self._cheapest(matched(ref, ev.where()), t0 + time_budget) if ref is not None else None
                if got is not None and got[0][0] <= LAZY * bar:
                    self._take(got[1])
                else:
                    ranked.pop(0)
                continue
            where = ev.where()
            kinds: set[tuple] = set()
            scored = []
            floor = 0
            for ref in ev.hotspots():  # weights, gradients, optimizer state: no application, skipped
                if len(kinds) >= candidates or time.perf_counter() - t0 > time_budget:
                    break
                if ref.index < 0 or ev.g.nodes[ref.node].kind == NodeKind.PLACEHOLDER:
                    continue
                kd = kind(ref)
                if kd in kinds:
                    continue
                if ev.intervals[ref][2] < floor:  # hot-spots are largest first: the rest is smaller
                    break
                apps = matched(ref, where)
                if apps:
                    kinds.add(kd)
                    got = self._cheapest(apps, t0 + time_budget)
                    if got is not None:
                        floor = floor or ev.intervals[ref][2] // REMAT_SMALL
                        scored.append((got[0], kd, got[1]))
            if not scored:
                break
            scored.sort(key=lambda x: x[0])
            bar = max(scored[0][0][0], 1e-12)
            self._take(scored[0][2])
            ranked = [kd for _, kd, _ in scored]
        return ev.state

    def _cheapest(self, apps: Sequence[Application], deadline: float,
                  gain: Callable[[Child], int] | None = None) -> tuple[tuple[float, int], Child] | None:
        """The child that lowers the working state's peak (or gets the most of ``gain``: bytes a
        child saves, 0 or less for none) at the least latency per byte among ``apps`` (those
        evaluated before ``deadline``), with its key (latency per byte, peak)."""
        ev = self.ev
        here, out = ev.state, None
        for app in apps:
            if time.perf_counter() > deadline:
                break
            try:
                c = ev.evaluate(app)
            except RuleNotApplicable:
                continue
            saved = here.peak - c.peak if gain is None else gain(c)
            if saved <= 0 or c.hash in self.seen:
                continue
            key = (max(c.latency - here.latency, 0.0) / saved, c.peak)
            if out is None or key < out[0]:
                out = (key, c)
        return out

    def _take(self, c: Child) -> None:
        """Commit child ``c``: it becomes the working state and enters the archive; on a graph with
        copies, then the LOADs it leaves late are re-issued (``_reissue``)."""
        child = self.ev.child_state(c)
        self.ev.commit(child)
        self.seen.add(child.hash)
        self._archive(child)
        if self.ev.storages.copy_nodes:
            self._reissue()

    def _reissue(self) -> None:
        """Commit ``Reissue`` of the working schedule's LOADs where it lowers the latency and leaves
        the peak where it is: a swap places its LOAD after the peak steps of its day, and once later
        steps lower them the LOAD holds up compute for nothing (on the SD-1.x UNet, 1.6% of the
        step at 0.418x)."""
        ev = self.ev
        if Reissue.name not in ev.rules:
            return
        loads = ev.loads()
        if not loads:
            return
        here = ev.state
        try:
            c = ev.evaluate(Application(Reissue.name, tuple(loads)))
        except RuleNotApplicable:
            return
        if c.latency < here.latency and c.peak <= here.peak:
            child = ev.child_state(c)
            ev.commit(child)
            self._archive(child)

    def peak_fission_steps(self, s: MState, time_budget: float) -> MState:
        """From ``s``, commit one F-Trans of a window around the peak step per step
        (``peak_fission.peak_windows``: regions of the state's own graph, such as a recomputed
        block with its backward), the child that lowers the peak at the least latency per byte,
        until none lowers it or the budget ends; returns the last state.  Not a phase of the warm
        start: on the SD-1.x UNet it lowers the frontier's low end (DTR's 0.44 plan, 0.439x at
        +12.6%, to 0.416x at +13.4%: ``bench/peak_fission.py``) but adds nothing within +10%, and
        a share of a 20 s warm start given to it cost the other phases more than it gave
        (``low_end`` uses it under a memory limit the warm start misses)."""
        from .peak_fission import peak_windows

        deadline = time.perf_counter() + time_budget
        ev = self.ev
        ev.goto(s)
        while time.perf_counter() < deadline:
            peaks = ev.where().peaks
            if not peaks:
                break
            got = self._cheapest(peak_windows(ev.g, ev.order, peaks[0]), deadline)
            if got is None:
                break
            self._take(got[1])
        return ev.state

    def spike_steps(self, s: MState, time_budget: float, tol: float = SPIKE_TOL, sep: int = SPIKE_SEP,
                    width: int = SPIKE_WIDTH, candidates: int = SPIKE_CANDIDATES,
                    step_rules: tuple[str, ...] = SPIKE_RULES, latency_cap: float | None = None) -> MState:
        """From ``s``, lower the spikes of the curve one at a time (``spikes.spikes``: local maxima
        within ``tol`` of the imported peak below the working peak, ``sep`` steps apart), highest
        first: per step, the rules of ``step_rules`` matched on the ``candidates`` largest tensors
        alive at the spike, each child evaluated against that spike (``DeltaEvaluator.focused``)
        and kept when it lowers the spike without raising the peak; the one of least latency per
        byte the spike goes down is committed (none above ``latency_cap`` seconds).  With
        ``"fission"`` among ``step_rules``, a spike no rule lowers is offered F-Trans of windows
        around it (``peak_fission.peak_windows``).  A spike no child lowers is left for the rest of
        the run.  Where ``remat_steps`` stops because two parts of the schedule peak at the same
        height, the peak falls once each of them is lowered.  Returns the last state.  On the
        SD-1.x UNet, from the Swap steps' states within +8-10% of DTR's 0.53 plan, it lowers the
        lowest point within +10% from 0.436x to 0.395x (``bench/spike_steps.py``; SwapOutput takes
        gradients off the device under the late spikes).  The warm start runs it only where its
        Swap steps end early: a fixed 10% share of a 20 s warm start cost them more than it gave on
        6 of 19 zoo models."""
        from .peak_fission import peak_windows
        from .spikes import spikes

        rules = [self.ev.rules[k] for k in step_rules if k in self.ev.rules and k != Fission.name]
        deadline = time.perf_counter() + time_budget
        ev = self.ev
        ev.goto(s)
        stuck: set[int] = set()  # the ops of spikes no child lowered
        while (rules or Fission.name in step_rules) and time.perf_counter() < deadline:
            curve = ev.curve
            top = int(curve.max()) if len(curve) else 0
            todo = [p for p in spikes(curve, top - tol * self.root.peak, sep) if ev.order[p] not in stuck]
            if not todo:
                break
            p = todo[0]
            here, height = ev.state, int(curve[p])
            hot = [k for k in ev.hotspots_at(p) if k.index >= 0
                   and ev.g.nodes[k.node].kind != NodeKind.PLACEHOLDER][:candidates]

            def gain(c: Child, height: int = height, peak: int = here.peak) -> int:
                """What the spike goes down by, where the peak does not go up (nor the latency
                above ``latency_cap``)."""
                if c.peak > peak or c.focus_peak is None or (latency_cap is not None and c.latency > latency_cap):
                    return 0
                return height - c.focus_peak

            with ev.focused(p, width):
                where = ev.where()
                best = self._cheapest([a for r in rules for a in r.match(ev.g, hot, where)], deadline, gain)
                if best is None and Fission.name in step_rules:  # F-Trans costs seconds to evaluate: a fallback
                    best = self._cheapest(peak_windows(ev.g, ev.order, p), deadline, gain)
            if best is None:
                stuck.add(ev.order[p])
                continue
            self._take(best[1])
        return ev.state

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
            if left <= MIN_GAP_SEARCH or cancel is not None and cancel.is_set():
                break
            gap = self._widest_gap(tried)
            if gap is None:
                break
            limit, begin = gap
            tried.add(limit)
            run(limit, begin, max(MIN_GAP_SEARCH, left / 2))
        stopped = res.stopped if res is not None else "cancelled"
        return SearchResult(best, self.root, records, self.frontier(), stopped, time.perf_counter() - t0)

    def _widest_gap(self, tried: set[int]) -> tuple[int, MState] | None:
        """(limit, start) of the widest gap in peak (a ratio) between neighbours on the frontier
        not searched yet: the limit halfway in peak, the start the neighbour above it.  Below the
        lowest point lies a gap of 1 / ``FLOOR``: the limit ``FLOOR`` x its peak, the start that
        point (the fixed limits of a sweep need not reach as low as the rules can go)."""
        front = self.frontier()
        best = None
        if front and (limit := int(front[0].peak * FLOOR)) not in tried:
            best = (1 / FLOOR, limit, front[0])
        for lo, hi in zip(front, front[1:], strict=False):
            limit = (lo.peak + hi.peak) // 2
            if lo.peak <= 0 or hi.peak / lo.peak < 1 + MIN_GAP or limit in tried:
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


__all__ = ["DELTA", "MOptimizer", "Objective", "Record", "SearchResult", "Stage"]


def spaced_first(n: int, first: int) -> list[int]:
    """The indices 0 .. n-1: ``first`` of them evenly spaced (0 and n-1 among them), then the rest
    in ascending order: ``spaced_first(9, 3)`` is ``[0, 4, 8, 1, 2, 3, 5, 6, 7]``."""
    first = max(first, 2)
    if n <= first:
        return list(range(n))
    head = list(dict.fromkeys(round(i * (n - 1) / (first - 1)) for i in range(first)))
    taken = set(head)
    return head + [i for i in range(n) if i not in taken]


def low_end(m: MOptimizer, time_budget: float, limit: int | None = None) -> MState:
    """Below the lowest point of the warm start: with a memory ``limit`` (bytes), DTR's plans at
    budgets just above it (``LOW_END_BUDGETS`` x the limit, a quarter of ``time_budget``) are adopted
    as seeds; then ``peak_fission_steps`` from the lowest-peak seed (another method's plan: DTR's
    recomputed blocks, which the F-Tree cannot split with their backward; the archive's lowest state
    when there is no seed) with half of what is left, then Swap steps from where they end with the
    rest; returns the last state.  For a memory limit the warm start does not meet (SD-1.x UNet:
    from DTR's 0.44 plan, 0.439x, to 0.407x: ``bench/peak_fission.py``)."""
    from .peers.dtr import DTRFailure, DTRSim, budget_plan

    t0 = time.perf_counter()
    if limit is not None and "remat" in m.ev.rules:
        free = m.seeds.dtr_free if m.seeds is not None and m.seeds.dtr_free else DTRSim(m.imported, m.cost, None).run()[1]
        for f in LOW_END_BUDGETS:
            left = time_budget / 4 - (time.perf_counter() - t0)
            if left <= 0:
                break
            try:
                p = budget_plan(m.imported, m.cost, f * limit / free["dtr_peak"], free,
                                deadline=time.perf_counter() + left)
            except DTRFailure:  # (a timeout too) too low a budget: the lower ones are no better
                break
            m.adopt(p)
    pool = list(m.adopted) or m.archive
    low = min(pool, key=lambda s: (s.peak, s.latency), default=m.root)
    end = m.peak_fission_steps(low, (time_budget - (time.perf_counter() - t0)) / 2)
    return m.remat_steps(end, time_budget - (time.perf_counter() - t0), step_rules=("swap", "swap_late"))


def spikes_within(m: MOptimizer, time_budget: float, limit: float, **spike_kw) -> None:
    """Under a latency ``limit`` (seconds), spend the latency the warm start leaves below it: from
    the archive's lowest-peak state within ``limit`` less each of ``SPIKE_FROM`` (x the imported
    latency) in turn, Swap steps with ``SPIKE_SWAP_SHARE`` of the time left (their end is the
    start if it is still that far below the limit), then ``spike_steps`` capped at the limit until
    no spike falls or ``time_budget`` ends.  SD-1.x UNet within +10%: 0.386x with 180 s, where the
    search from the warm start alone ended at 0.433x.  ``spike_kw`` goes to ``spike_steps``."""
    deadline = time.perf_counter() + time_budget
    tried: list[MState] = []
    for below in SPIKE_FROM:
        ok = [a for a in m.archive if a.latency <= limit - below * m.root.latency]
        st = min(ok, key=lambda a: (a.peak, a.latency), default=None)
        left = deadline - time.perf_counter()
        if st is None or st in tried or left <= 0:
            continue
        tried.append(st)
        end = m.remat_steps(st, SPIKE_SWAP_SHARE * left, step_rules=("swap", "swap_late"))
        if end.latency <= limit - below * m.root.latency:
            st = end
        m.spike_steps(st, deadline - time.perf_counter(), latency_cap=limit, **spike_kw)


def pareto_spikes(g: Graph, time_budget: float) -> bool:
    """Whether the Pareto mode spends spike steps below ``PARETO_SPIKES``: where ``time_budget`` is at
    least ``PARETO_SPIKE_SECONDS`` per thousand ops of ``g`` (below that, the warm start needs it all)."""
    return time_budget >= PARETO_SPIKE_SECONDS * len(g.ops()) / 1000


def optimize(g: Graph, *, memory_limit: MemoryLimit | str | float | None = None,
             latency_limit: float | None = None, pareto: bool = False, time_budget: float = 60.0,
             device: str = DEFAULT_PROFILE, warm: float | None = None,
             progress: Callable[[Record], None] | None = None, cancel: threading.Event | None = None,
             on_start: Callable[[MOptimizer], None] | None = None, cost: CostModel | None = None,
             cost_name: str = "analytic", substitutions: bool = False,
             on_stage: Callable[[Stage], None] | None = None):
    """One run of the M-Optimizer as a plan file (``plan.PlanFile``): point 0 is the answer (the best
    state under the limit, or the frontier's points by peak for ``pareto``), then PyTorch's eager
    order as the baseline.  ``memory_limit``: a ``limits.MemoryLimit`` or what ``MemoryLimit.parse``
    takes (a fraction of the imported peak in (0, 1], or a size with a unit such as "8GiB"; ValueError
    otherwise); ``latency_limit``: a factor of the imported latency.  The meta records the limit as
    given (``limit``) and, for a memory limit, the bytes it resolved to (``limit_bytes``).
    ``warm``: the share of the budget spent on the warm start (greedy fission, then Remat steps:
    ``MOptimizer.warm_start``; default ``WARM``, under a latency limit ``LATENCY_WARM``).  ``on_stage`` hears each stage as it ends (``Stage``: the warm start's seeds and steps, the sweep);
    ``cancel`` stops the run after the current stage or search iteration.  ``on_start`` gets the optimizer before the search starts (a caller
    that shows its archive while it grows).  ``cost``: the cost model (default: ``device``'s analytic
    model), ``cost_name`` its kind (``core.cost.choice``), recorded in the meta as ``cost``.
    ``substitutions``: TASO's substitution rules (``SEARCH_SUBSTITUTIONS``) are rules of the search too.
    A memory limit that no state of the warm start meets gets ``LOW_END_SHARE`` of what is left
    for ``low_end`` (peak fission, then Swap steps) before the search; a latency limit gets
    ``SPIKE_SHARE`` of it for ``spikes_within`` (spike steps below the limit), and so does ``pareto``
    below ``PARETO_SPIKES`` where the budget is long enough for the graph (``pareto_spikes``; its warm
    start then gets ``LATENCY_WARM``)."""
    from .plan import PlanFile
    from .wl_hash import graph_hash

    if sum(x is not None for x in (memory_limit, latency_limit)) + bool(pareto) != 1:
        raise ValueError("give exactly one of a memory limit, a latency limit or pareto")
    memory = None if memory_limit is None else MemoryLimit.parse(memory_limit)
    t0 = time.perf_counter()
    m = MOptimizer(g, cost if cost is not None else AnalyticCost(device), substitutions=substitutions)
    m.on_stage, m.cancel = on_stage, cancel
    if on_start is not None:
        on_start(m)
    spiky = pareto and pareto_spikes(g, time_budget)
    # the seeds run on top of the warm start's share, out of the sweep's
    if warm is None:
        warm = LATENCY_WARM if latency_limit is not None or spiky else WARM
    # the quick Swap steps on the seeds where the user waits; a budget long enough for the spike steps
    # (``pareto_spikes``) gives the later phases their whole share (qwen2_moe at 40 s per thousand ops,
    # within +10%: 0.492x with the quick steps, 0.403x without)
    quick = not pareto_spikes(g, time_budget)
    start = m.warm_start(warm * time_budget, SEED_SHARE * warm * time_budget, quick=quick) if warm > 0 else m.root
    left = max(0.0, time_budget - (time.perf_counter() - t0))
    if pareto:
        if spiky and not m.cancelled():
            with m.stage("spike steps below the sweep"):
                spikes_within(m, SPIKE_SHARE * left, PARETO_SPIKES * m.root.latency)
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
                low_end(m, LOW_END_SHARE * left, limit)
            left = max(0.0, time_budget - (time.perf_counter() - t0))
        elif mode == "latency":
            with m.stage("spike steps below the limit"):
                spikes_within(m, SPIKE_SHARE * left, limit)
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


__all__ += ["optimize", "pareto_spikes"]
