"""SwapAdvisor's genetic search (Huang et al. 2020, section 4.3) over schedule, memory-pool
allocation and -- through the planner (``schedule.swap_planner``) -- swap plan.

A chromosome is (SCH, CLS, CNT): a topological order of the ops, the size class of each distinct
tensor size, and the object count of each class (``analysis.mempool``).  Its fitness is the
simulated iteration time of the swap plan the planner derives from it on the three streams.

* Schedule crossover: a child takes a prefix of one parent and the remaining ops in the other
  parent's order (always topological).  Schedule mutation replays a ready list: with probability P a
  random ready op runs next, else the ready op earliest in the parent (P = 0 gives the parent back).
* CLS: one-point crossover with repair; CNT: through the per-size expansion CNT_EXT, averaged back
  per class of the child, the classes over capacity reduced by an equal share of the excess each.
* Selection: softmax over t_norm = (T_best - t) / T_best.  Each crossover yields four children
  (two schedules x two allocations); about 10% of the children are mutated; the population (144)
  is the best of parents and children, and the best chromosome ever seen is kept apart.
* Seeded (``random.Random(seed)``) and deterministic for a given number of generations; a time
  budget stops it between evaluations; ``progress`` hears of every generation.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..analysis.mempool import (
    Allocation,
    allocation_for,
    cls_crossover,
    cnt_crossover,
    cnt_ext,
    fit_capacity,
    object_sizes_of,
    random_allocation,
)
from ..schedule.swap_planner import SwapPlan, SwapProblem, plan_swaps

POPULATION = 144
MUTATION = 0.10
CHILDREN_PER_CROSSOVER = 4
MUTATION_P = 0.05
PATIENCE = 40  # generations without a better chromosome after which a budgeted search stops  # the random-pick probability of a mutated child's ready-list replay


def schedule_crossover(s1: Sequence[int], s2: Sequence[int], cut: int) -> tuple[list[int], list[int]]:
    """child1 = SCH2[:cut] + the rest in SCH1's order; child2 = SCH1[:cut] + the rest in SCH2's order.
    A prefix of a topological order is closed under predecessors, so both children are topological."""
    h2 = set(s2[:cut])
    h1 = set(s1[:cut])
    return list(s2[:cut]) + [v for v in s1 if v not in h2], list(s1[:cut]) + [v for v in s2 if v not in h1]


def schedule_mutation(preds: Sequence[Sequence[int]], parent: Sequence[int], prob: float,
                      rng: random.Random) -> list[int]:
    """Replay a ready list over ``parent``: with probability ``prob`` a random ready op runs next,
    else the ready op earliest in ``parent``."""
    n = len(parent)
    rank = [0] * n
    for i, v in enumerate(parent):
        rank[v] = i
    indeg = [len(set(p)) for p in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for u in set(preds[v]):
            succs[u].append(v)
    ready = sorted((rank[v], v) for v in range(n) if indeg[v] == 0)
    out: list[int] = []
    while ready:
        k = rng.randrange(len(ready)) if prob > 0 and rng.random() < prob else 0
        _, v = ready.pop(k)
        out.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                bisect.insort(ready, (rank[w], w))
    if len(out) != n:
        raise ValueError("the dependencies have a cycle")
    return out


def is_topological(preds: Sequence[Sequence[int]], order: Sequence[int]) -> bool:
    seen: set[int] = set()
    for v in order:
        if any(u not in seen for u in preds[v]):
            return False
        seen.add(v)
    return len(seen) == len(preds) == len(order)


def softmax_probs(times: Sequence[float]) -> list[float]:
    """Selection probabilities: softmax over t_norm = (T_best - t) / T_best (an infinite time: 0)."""
    best = min(times)
    if not math.isfinite(best) or best <= 0:
        fin = [math.isfinite(t) for t in times]
        k = sum(fin) or len(times)
        return [(1.0 / k if (f or not any(fin)) else 0.0) for f in fin]
    xs = [math.exp((best - t) / best) if math.isfinite(t) else 0.0 for t in times]
    tot = sum(xs)
    return [x / tot for x in xs]


@dataclass
class Chromosome:
    sch: tuple[int, ...]
    cls: tuple[int, ...]
    cnt: tuple[int, ...]
    time: float = math.inf

    def key(self) -> tuple:
        return (self.sch, self.cls, self.cnt)


@dataclass
class GAResult:
    best: Chromosome
    plan: SwapPlan
    allocation: Allocation
    generations: int
    evaluations: int
    seconds: float
    records: list[dict] = field(default_factory=list)  # per generation: seconds, best time, mean time


class SwapAdvisorGA:
    """The search for one memory limit (bytes, residents included)."""

    def __init__(self, p: SwapProblem, limit: int, *, seed: int = 0, population: int = POPULATION,
                 mutation: float = MUTATION) -> None:
        self.p = p
        self.limit = int(limit)
        self.capacity = p.pool_capacity(self.limit)
        self.rng = random.Random(seed)
        self.population = population
        self.mutation = mutation
        self.sizes = p.pool_sizes()
        w = dict.fromkeys(self.sizes, 0.0)
        for b, pin in zip(p.t_bytes, p.t_pinned, strict=True):
            if b > 0 and not pin:
                w[b] += b
        self.weight = [w[s] for s in self.sizes]
        self._floor: dict[tuple[int, ...], list[int]] = {}
        self._seen: dict[tuple, float] = {}
        self.evaluations = 0
        self.ideal = sum(p.time)  # the lower bound: every op back to back

    def floor(self, cls: Sequence[int]) -> list[int]:
        key = tuple(cls)
        if key not in self._floor:
            self._floor[key] = self.p.class_floor(self.sizes, key)
        return self._floor[key]

    def alloc(self, c: Chromosome) -> Allocation:
        return Allocation(self.sizes, c.cls, c.cnt)

    def evaluate(self, c: Chromosome) -> Chromosome:
        k = c.key()
        if k not in self._seen:
            self.evaluations += 1
            self._seen[k] = plan_swaps(self.p, c.sch, self.alloc(c)).time
        c.time = self._seen[k]
        return c

    def initial(self) -> list[Chromosome]:
        """The traced order and its mutations (P in 0..0.05), each with a random pool; the first with
        the traced order's own pool when it fits (no swap), else one class per size."""
        p, rng = self.p, self.rng
        base = list(range(p.n))
        out: list[Chromosome] = []
        for i in range(self.population * 3):
            if len(out) >= self.population:
                break
            sch = base if i == 0 else schedule_mutation(p.preds, base, rng.choice((0.0, 0.005, 0.02, 0.05)), rng)
            a = self.eager_allocation() if i == 0 else None
            if a is None:
                a = random_allocation(self.sizes, self.weight, self.capacity, rng, self.floor,
                                      classes=len(self.sizes) if i == 0 else None)
            if a is None:
                a = self.fallback_allocation()
            if a is None:
                continue
            out.append(Chromosome(tuple(sch), a.cls, a.cnt))
        return out

    def eager_allocation(self) -> Allocation | None:
        """One class per size, as many objects as the traced order has alive at once: no swap at all
        (None if it does not fit the limit)."""
        cnt = [max(1, c) for c in self.p.live_counts(self.sizes)]
        a = Allocation(self.sizes, tuple(range(len(self.sizes))), tuple(cnt))
        return a if a.pool_bytes <= self.capacity else None

    def fallback_allocation(self) -> Allocation | None:
        """One class per size if its pool fits, else the classes merged until it does
        (``SwapProblem.coarsen``), counts in proportion to bytes."""
        if not hasattr(self, "_fallback"):
            cls = self.p.coarsen(self.sizes, self.capacity)
            self._fallback = None if cls is None else allocation_for(self.sizes, cls, self.weight, self.capacity,
                                                                     self.floor)
        return self._fallback

    def mutate_alloc(self, cls: tuple[int, ...], cnt: tuple[int, ...]) -> tuple[int, ...] | None:
        """Move one object's bytes from one class to another (then fitted to capacity)."""
        if len(cnt) < 2:
            return cnt
        obj = object_sizes_of(self.sizes, cls)
        a, b = self.rng.sample(range(len(cnt)), 2)
        out = list(cnt)
        out[b] += max(1, obj[a] // obj[b]) if obj[a] >= obj[b] else 1
        out[a] = max(1, out[a] - (1 if obj[a] >= obj[b] else max(1, obj[b] // obj[a])))
        fitted = fit_capacity(out, obj, self.capacity, self.floor(cls))
        return None if fitted is None else tuple(fitted)

    def children(self, a: Chromosome, b: Chromosome) -> list[Chromosome]:
        """Four children of ``a`` and ``b``: two schedules x two allocations, about ``mutation`` of them
        mutated (the schedule by a ready-list replay, or the counts)."""
        rng, p = self.rng, self.p
        cut = rng.randrange(1, p.n) if p.n > 1 else 0
        s1, s2 = schedule_crossover(a.sch, b.sch, cut)
        ccut = rng.randrange(1, len(self.sizes)) if len(self.sizes) > 1 else 0
        c1, c2 = cls_crossover(a.cls, b.cls, ccut)
        ea, eb = cnt_ext(a.cls, a.cnt), cnt_ext(b.cls, b.cnt)
        allocs = []
        for cls, (x, y) in ((c1, (ea, eb)), (c2, (eb, ea))):
            cnt = cnt_crossover(cls, x, y, ccut, object_sizes_of(self.sizes, cls), self.capacity, self.floor(cls))
            if cnt is not None:
                allocs.append((tuple(cls), tuple(cnt)))
        if not allocs:
            allocs = [(a.cls, a.cnt), (b.cls, b.cnt)]
        out: list[Chromosome] = []
        for sch in (s1, s2):
            for cls, cnt in allocs:
                s, n = sch, cnt
                if rng.random() < self.mutation:
                    if rng.random() < 0.5:
                        s = schedule_mutation(p.preds, sch, MUTATION_P, rng)
                    else:
                        n = self.mutate_alloc(cls, cnt) or cnt
                out.append(Chromosome(tuple(s), cls, n))
        return out[:CHILDREN_PER_CROSSOVER]

    def run(self, *, time_budget: float = 60.0, generations: int | None = None, patience: int = PATIENCE,
            progress: Callable[[str], None] | None = None) -> GAResult | None:
        """Search until ``generations`` (when given), else until ``time_budget`` seconds or ``patience``
        generations without a better chromosome; None if no chromosome gives a plan within the limit."""
        t0 = time.perf_counter()
        say = progress or (lambda _m: None)

        def out_of_time() -> bool:
            return generations is None and time.perf_counter() - t0 > time_budget

        pop = []
        for c in self.initial():
            pop.append(self.evaluate(c))
            if out_of_time() and any(math.isfinite(x.time) for x in pop):
                break
        pop = [c for c in pop if math.isfinite(c.time)]
        if not pop:
            return None
        pop.sort(key=lambda c: c.time)
        best = pop[0]
        records = [{"generation": 0, "seconds": time.perf_counter() - t0, "best": best.time}]
        say(f"swapadvisor: generation 0, best {best.time * 1e3:.3f} ms ({len(pop)} chromosomes)")
        gen = improved = 0
        while (generations is None or gen < generations) and not out_of_time():
            if generations is None and (gen - improved >= patience or best.time <= self.ideal):
                break  # no progress for a while, or no time left to win: nothing waits for a copy
            gen += 1
            probs = softmax_probs([c.time for c in pop])
            kids: list[Chromosome] = []
            while len(kids) < self.population and not out_of_time():
                a, b = self.rng.choices(pop, probs, k=2)
                for k in self.children(a, b):
                    kids.append(self.evaluate(k))
            seen: set[tuple] = set()
            merged = []
            for c in sorted(pop + kids, key=lambda c: c.time):
                if math.isfinite(c.time) and c.key() not in seen:
                    seen.add(c.key())
                    merged.append(c)
            pop = merged[:self.population]
            if pop[0].time < best.time:
                best = pop[0]
                improved = gen
            records.append({"generation": gen, "seconds": time.perf_counter() - t0, "best": best.time,
                            "mean": sum(c.time for c in pop) / len(pop)})
            say(f"swapadvisor: generation {gen}, best {best.time * 1e3:.3f} ms, {self.evaluations} evaluated")
        plan = plan_swaps(self.p, best.sch, self.alloc(best))
        return GAResult(best, plan, self.alloc(best), gen, self.evaluations, time.perf_counter() - t0, records)


def class_maps(n: int) -> Iterator[tuple[int, ...]]:
    """Every CLS of ``n`` sizes: a class is a run of consecutive sizes, so 2^(n-1) maps."""
    for cuts in itertools.product((0, 1), repeat=max(n - 1, 0)):
        cls = [0]
        for c in cuts:
            cls.append(cls[-1] + c)
        yield tuple(cls)


def maximal_pools(p: SwapProblem, limit: int) -> Iterator[Allocation]:
    """Every pool the GA could hold at ``limit`` that no object can be added to: each CLS, each CNT
    with every class at or above its floor (``SwapProblem.class_floor``) and at most as many objects
    as the class has tensors, within the pool's capacity, and no class that could take one more
    object (a class short of its tensor count whose object still fits).  An object more leaves the
    planner more room, so these are taken to hold the best pool of every CLS (the planner is a
    heuristic, so this is checked, not proved: against every pool, by brute force, on tiny
    workloads in the tests)."""
    sizes = p.pool_sizes()
    cap = p.pool_capacity(limit)
    tensors: dict[int, int] = {}
    for b, pin in zip(p.t_bytes, p.t_pinned, strict=True):
        if b > 0 and not pin:
            tensors[b] = tensors.get(b, 0) + 1
    for cls in class_maps(len(sizes)):
        obj = object_sizes_of(sizes, cls)
        floor = p.class_floor(sizes, cls)
        most = [0] * len(obj)
        for b, c in zip(sizes, cls, strict=True):
            most[c] += tensors.get(b, 0)
        most = [max(m, f) for m, f in zip(most, floor, strict=True)]
        if sum(f * o for f, o in zip(floor, obj, strict=True)) > cap:
            continue
        for cnt in _maximal_counts(floor, most, obj, cap):
            yield Allocation(sizes, cls, cnt)


def _maximal_counts(floor: Sequence[int], most: Sequence[int], obj: Sequence[int], cap: int
                    ) -> Iterator[tuple[int, ...]]:
    """Every CNT with floor <= CNT <= most and sum CNT * obj <= cap that no class can grow by one
    (largest objects chosen first: the fewest choices)."""
    k = len(obj)
    big = sorted(range(k), key=lambda i: -obj[i])
    rest = [sum(floor[x] * obj[x] for x in big[j + 1:]) for j in range(k)]
    cnt = [0] * k

    def fill(j: int, left: int) -> Iterator[tuple[int, ...]]:
        if j == k:
            if not any(cnt[i] < most[i] and obj[i] <= left for i in range(k)):
                yield tuple(cnt)
            return
        i = big[j]
        for c in range(floor[i], min(most[i], (left - rest[j]) // obj[i]) + 1):
            cnt[i] = c
            yield from fill(j + 1, left - c * obj[i])

    yield from fill(0, cap)


@dataclass
class PoolCeiling:
    """The best of SwapAdvisor's planner over every maximal pool (``maximal_pools``) for one
    schedule: what the GA's allocation search can reach at most on that schedule."""

    time: float
    allocation: Allocation | None
    pools: int  # maximal pools tried
    complete: bool  # False: stopped at the deadline


def pool_ceiling(p: SwapProblem, limit: int, schedule: Sequence[int] | None = None,
                 deadline: float | None = None) -> PoolCeiling:
    """The planner on ``schedule`` (default: the traced order) with every maximal pool at ``limit``,
    the fastest kept; ``deadline`` (a ``time.perf_counter()`` value) stops it, marked incomplete."""
    order = list(schedule) if schedule is not None else list(range(p.n))
    best = PoolCeiling(math.inf, None, 0, True)
    for a in maximal_pools(p, limit):
        if deadline is not None and time.perf_counter() > deadline:
            best.complete = False
            break
        best.pools += 1
        sp = plan_swaps(p, order, a)
        if sp.feasible and sp.time < best.time:
            best.time, best.allocation = sp.time, a
    return best


def allocation_of(p: SwapProblem, limit: int, cls: Sequence[int] | None = None) -> Allocation | None:
    """A pool for ``limit`` (one class per size unless ``cls``), counts in proportion to the bytes of
    each class (the GA's first chromosome)."""
    sizes = p.pool_sizes()
    w = dict.fromkeys(sizes, 0.0)
    for b, pin in zip(p.t_bytes, p.t_pinned, strict=True):
        if b > 0 and not pin:
            w[b] += b
    cls = list(cls) if cls is not None else list(range(len(sizes)))
    return allocation_for(sizes, cls, [w[s] for s in sizes], p.pool_capacity(limit),
                          lambda c: p.class_floor(sizes, c))


__all__ = ["CHILDREN_PER_CROSSOVER", "Chromosome", "GAResult", "MUTATION", "PATIENCE", "POPULATION", "PoolCeiling",
           "SwapAdvisorGA", "allocation_of", "class_maps", "is_topological", "maximal_pools", "pool_ceiling",
           "schedule_crossover", "schedule_mutation", "softmax_probs"]
