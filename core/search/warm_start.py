"""The warm start of the M-Optimizer: the project's own phases before Algorithm 3's search.

Algorithm 3 (``moptimizer.py``) pops the best M-State and applies every rule to it; on a graph of
many equal layers single steps rarely lower a peak that every layer makes, and on graphs of
thousands of ops the queue is far from the low points when the user's budget ends.  These phases
are not in the paper; they take the search to where Algorithm 3 has something to do:

* seeds -- other methods' plans (DTR at a series of budgets, offloading with checkpointing) adopted
  as chains of states (``seeds.seed``);
* greedy fission -- the best-scoring F-Tree nodes enabled while they lower the peak (``greedy.py``);
* Remat steps, Swap steps -- one rule application per step, the child that lowers the peak at the
  least latency per byte (``remat_steps``);
* batch fission -- the whole step's F-Trans along the batch at states of a Remat chain;
* spike steps -- the curve's spikes lowered one at a time, each child judged at its spike;
* peak fission -- F-Trans of windows around the peak step (``low_end``).

Every state on the way enters the optimizer's Pareto archive.  The shares and sizes come from the
optimizer's ``SearchConfig`` (``search_config.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..ir.graph import Graph, NodeKind, TRef
from ..transform.fission import Fission
from ..transform.rule import Application, RuleNotApplicable
from ..transform.swap import Reissue
from .delta import Child
from .mstate import MState
from .search_config import DEFAULT_CONFIG, SearchConfig


class WarmStart:
    """The warm start's phases, as methods of the M-Optimizer (``moptimizer.MOptimizer`` is one):
    they read its evaluator ``ev``, archive, seen set and ``config``."""

    def warm_start(self, time_budget: float, seed_budget: float | None = None, quick: bool = True) -> MState:
        """A start state many steps from the root, where single steps rarely lower a peak made of
        many equal layers: the greedy fission pass (``greedy.greedy_fission``: the best-scoring
        F-Tree nodes enabled while they lower the peak; the F-Tree's big regions are many Enable /
        Lift steps away) with up to 1 - ``config.remat_share`` of the budget (it stops early when no node
        lowers the peak; the nodes' other n that lowered the peak enter the archive as well), then
        Remat steps on the result (``remat_steps``) with half of what is left but ``config.swap_share``
        -- the lever where fission cannot split the saved activations (batch norm couples the
        batch of a CNN) -- and Remat steps from the imported graph with the other half (a fission
        node over the whole training step leaves nothing to recompute at its peak), then, with
        ``config.batch_share``, the whole step's F-Trans along the batch at states of that last Remat
        chain (``batch_fission``: micro-batching of a partly recomputed step).  Last, Swap
        steps (the same steps with the Swap and SwapLate rules) from the archive's lowest-peak
        states within each latency slack of ``config.swap_from``: a swap whose copies overlap compute
        lowers the peak at no latency, but once a graph has copies every child is simulated in
        full, so swaps come after the delta-evaluated Remat chains rather than among them.  Swap
        steps that stop before their share is spent (no child lowers the peak: separate parts of the
        schedule peak at one height) hand the rest to ``spike_steps`` from the lowest-peak state
        they reached within the same slack.  Every state on the way enters the Pareto archive;
        the fission chain's end is returned.  Before
        all of these, with ``seed_budget`` seconds on top of ``time_budget`` (default:
        ``config.seed_share`` of it; what they overrun comes out of ``time_budget``), DTR's plans at a
        series of budgets and those of offloading with checkpointing are adopted as seeds
        (``seeds.seed``): on graphs of thousands of ops the Remat steps alone reach their peaks
        too slowly."""
        from .greedy import alternatives, greedy_fission
        from .seeds import seed

        t0 = time.perf_counter()
        budget = self.config.seed_share * time_budget if seed_budget is None else seed_budget
        self.seeds = seed(self, budget, first=self.config.seed_first * (time_budget + budget))
        time_budget = max(0.0, time_budget - max(0.0, time.perf_counter() - t0 - budget))  # what the seeds overran
        t0 = time.perf_counter()
        if self.cancelled():
            return self.root
        if quick and self.seeds.adopted:  # anytime: MAGIS's own steps on the seeds before the longer phases
            self.swap_phase(self.config.quick_swap_share * time_budget, "from the seeds")
        time_budget = max(0.0, time_budget - (time.perf_counter() - t0))
        t0 = time.perf_counter()
        s = self.root
        share = (1 - self.config.remat_share) * time_budget
        # (a shorter share would be spent on the F-Tree alone)
        if share >= self.config.greedy_min * self.evaluator_seconds and not self.cancelled():
            with self.stage("greedy fission"):
                res = greedy_fission(self.imported, self.order, self.cost, time_budget=share, ftree=self.ftree)
                s = self.seed(res.applications, alternatives(res))
        # whether the batch splits is a look at the whole graph (seconds on 100k ops): asked only where
        # the batch F-Trans's share could pay for an evaluation or two
        cfg = self.config
        batch = cfg.batch_share if cfg.batch_share * time_budget >= cfg.greedy_min * self.evaluator_seconds \
            and self.batch_splits() else 0.0
        rest = 1 - self.config.swap_share - batch  # the Remat steps' share; the batch F-Trans's comes after it
        with self.stage("Remat steps from greedy fission" if s is not self.root else "Remat steps"):
            end = chain = self.remat_steps(s, (time_budget * rest - (time.perf_counter() - t0)) / 2)
        if self.cancelled():
            return end
        if s is not self.root:  # fission can leave the peak where no tensor is recomputable
            with self.stage("Remat steps from the imported graph"):
                chain = self.remat_steps(self.root, time_budget * rest - (time.perf_counter() - t0))
        if batch:  # (where the batch does not split, going back to the root alone costs seconds)
            with self.stage("batch fission"):
                self.batch_fission(chain, time_budget * (1 - self.config.swap_share) - (time.perf_counter() - t0))
        if not self.cancelled():
            self.swap_phase(time_budget - (time.perf_counter() - t0))
        return end

    def swap_phase(self, time_budget: float, where: str = "") -> None:
        """Swap steps (``remat_steps`` with the Swap and SwapLate rules) from the archive's
        lowest-peak state within each latency slack of ``config.swap_from``, ``time_budget`` shared between
        them; a start whose Swap steps stop before its share is spent hands the rest to
        ``spike_steps`` from the lowest-peak state they reached within the same slack."""
        t0 = time.perf_counter()
        base = self.root.latency
        starts: list[tuple[MState, float]] = []
        for slack in self.config.swap_from:
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
            if rest > self.config.spike_min_seconds:  # the Swap steps stopped early: no child lowers the peak
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

    def batch_fission(self, end: MState, time_budget: float, depths: int | None = None,
                      slow: float | None = None) -> list[MState]:
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

        depths = self.config.batch_depths if depths is None else depths
        slow = self.config.batch_slow if slow is None else slow
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

    def remat_steps(self, s: MState, time_budget: float, candidates: int | None = None,
                    step_rules: tuple[str, ...] | None = None) -> MState:
        """From ``s``, commit one Remat or RematChain (or one of ``step_rules``) per step, the child
        that lowers the peak at the least latency per byte saved, until none lowers it or the budget
        ends; returns the last state.  A many-layer model has the same tensor in every layer and
        needs hundreds of steps, so the steps go by kind (producer op, shape, dtype): a full scan
        tries the largest hot-spot of each of up to ``candidates`` kinds that some rule applies to
        (down to 1 / ``config.remat_small`` of the largest whose child lowers the peak: smaller ones take
        as many steps for less); then, kind by kind in the scan's order (cheapest first), the
        largest hot-spot left of the kind is tried, one tensor per step, and committed while it
        lowers the peak at no more than ``config.lazy`` x the scan's best latency per byte; when no kind of
        the scan does, the next full scan starts."""
        rules = [self.ev.rules[k] for k in step_rules or ("remat", "remat_chain") if k in self.ev.rules]
        if not rules:
            return s
        candidates = self.config.remat_candidates if candidates is None else candidates
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
                if got is not None and got[0][0] <= self.config.lazy * bar:
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
                        floor = floor or ev.intervals[ref][2] // self.config.remat_small
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

    def spike_steps(self, s: MState, time_budget: float, tol: float | None = None, sep: int | None = None,
                    width: int | None = None, candidates: int | None = None,
                    step_rules: tuple[str, ...] | None = None, latency_cap: float | None = None) -> MState:
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

        c = self.config
        tol, sep = c.spike_tol if tol is None else tol, c.spike_sep if sep is None else sep
        width = c.spike_width if width is None else width
        candidates = c.spike_candidates if candidates is None else candidates
        step_rules = c.spike_rules if step_rules is None else step_rules
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



def spaced_first(n: int, first: int) -> list[int]:
    """The indices 0 .. n-1: ``first`` of them evenly spaced (0 and n-1 among them), then the rest
    in ascending order: ``spaced_first(9, 3)`` is ``[0, 4, 8, 1, 2, 3, 5, 6, 7]``."""
    first = max(first, 2)
    if n <= first:
        return list(range(n))
    head = list(dict.fromkeys(round(i * (n - 1) / (first - 1)) for i in range(first)))
    taken = set(head)
    return head + [i for i in range(n) if i not in taken]


def low_end(m: WarmStart, time_budget: float, limit: int | None = None) -> MState:
    """Below the lowest point of the warm start: with a memory ``limit`` (bytes), DTR's plans at
    budgets just above it (``config.low_end_budgets`` x the limit, a quarter of ``time_budget``) are adopted
    as seeds; then ``peak_fission_steps`` from the lowest-peak seed (another method's plan: DTR's
    recomputed blocks, which the F-Tree cannot split with their backward; the archive's lowest state
    when there is no seed) with half of what is left, then Swap steps from where they end with the
    rest; returns the last state.  For a memory limit the warm start does not meet (SD-1.x UNet:
    from DTR's 0.44 plan, 0.439x, to 0.407x: ``bench/peak_fission.py``)."""
    from .peers.dtr import DTRFailure, DTRSim, budget_plan

    t0 = time.perf_counter()
    if limit is not None and "remat" in m.ev.rules:
        free = m.seeds.dtr_free if m.seeds is not None and m.seeds.dtr_free else DTRSim(m.imported, m.cost, None).run()[1]
        for f in m.config.low_end_budgets:
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


def spikes_within(m: WarmStart, time_budget: float, limit: float, **spike_kw) -> None:
    """Under a latency ``limit`` (seconds), spend the latency the warm start leaves below it: from
    the archive's lowest-peak state within ``limit`` less each of ``config.spike_from`` (x the imported
    latency) in turn, Swap steps with ``config.spike_swap_share`` of the time left (their end is the
    start if it is still that far below the limit), then ``spike_steps`` capped at the limit until
    no spike falls or ``time_budget`` ends.  SD-1.x UNet within +10%: 0.386x with 180 s, where the
    search from the warm start alone ended at 0.433x.  ``spike_kw`` goes to ``spike_steps``."""
    deadline = time.perf_counter() + time_budget
    tried: list[MState] = []
    for below in m.config.spike_from:
        ok = [a for a in m.archive if a.latency <= limit - below * m.root.latency]
        st = min(ok, key=lambda a: (a.peak, a.latency), default=None)
        left = deadline - time.perf_counter()
        if st is None or st in tried or left <= 0:
            continue
        tried.append(st)
        end = m.remat_steps(st, m.config.spike_swap_share * left, step_rules=("swap", "swap_late"))
        if end.latency <= limit - below * m.root.latency:
            st = end
        m.spike_steps(st, deadline - time.perf_counter(), latency_cap=limit, **spike_kw)


def pareto_spikes(g: Graph, time_budget: float, config: SearchConfig = DEFAULT_CONFIG) -> bool:
    """Whether the Pareto mode spends spike steps below ``config.pareto_spikes``: where ``time_budget`` is at
    least ``config.pareto_spike_seconds`` per thousand ops of ``g`` (below that, the warm start needs it all)."""
    return time_budget >= config.pareto_spike_seconds * len(g.ops()) / 1000


__all__ = ["WarmStart", "low_end", "pareto_spikes", "spaced_first", "spikes_within"]
