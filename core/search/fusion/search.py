"""Searches over partition plans with a plan budget: random search, local search and NSGA-II (the
three the GET paper pairs its splitting with, section IV-B).

A plan's genotype is one bit per boundary between consecutive ops of the topological order: cut or
not.  The ops between two cuts form a segment and its weakly connected components are the groups, so
every group is weakly connected and every edge between groups goes forward in the order (the group
graph is a DAG) by construction.  Ops unfixable alone are always cut off (filtered out beforehand).
Evaluating a genotype (one plan of the budget) decodes its groups, repairs each invalid one with the
:class:`~.split.Splitter` (guided or random) and sums F_D.

* random search: independent genotypes, each boundary cut with a probability drawn per plan;
* local search: the best 10 plans kept; each step flips one boundary of one of them (a one-edit
  mutation: merge two neighbouring segments, or split one) and keeps the child if it enters the 10
  (under a guided, deterministic repair a genotype is evaluated once);
* NSGA-II (Deb et al. 2002): two-point crossover and bit-flip mutation, non-dominated sorting with
  crowding distance, on DRAM traffic and a second objective -- the number of groups, or the latency
  of the plan on the roofline with fused groups (``plan_latency``).

All randomness comes from one seeded generator: a search is deterministic.  A plan keeps the split
steps that made its repaired groups (``SplitStep``), so the best plan's come with the result; a
search reports each evaluated plan to ``on_plan`` and stops early, with its best so far, when
``cancel`` is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...cost.devices import DEFAULT_PROFILE, get_device
from ...cost.model import roofline
from ...registry import Registry
from .problem import FusionProblem, Group
from .split import SplitStep, Splitter

SECOND_OBJECTIVES = ("groups", "latency")


def decode(problem: FusionProblem, cuts: np.ndarray) -> list[Group]:
    """Groups of a genotype: weakly connected components of the segments between cuts."""
    n = problem.n
    seg = np.concatenate([[0], np.cumsum(cuts.astype(np.int64))]) if n > 1 else np.zeros(1, np.int64)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for v in range(n):
        sv = seg[v]
        for u in problem.preds[v]:
            if seg[u] == sv:
                ru, rv = find(u), find(v)
                if ru != rv:
                    parent[rv] = ru
    comps: dict[int, list[int]] = {}
    for v in range(n):
        comps.setdefault(find(v), []).append(v)
    return sorted((frozenset(c) for c in comps.values()), key=min)


def plan_latency(problem: FusionProblem, groups: list[Group], device: str = DEFAULT_PROFILE) -> float:
    """Seconds of a plan on the analytic roofline: each group one kernel, its compute the sum of its
    ops' FLOPs and its memory term its DRAM traffic F_D (fused intermediates never touch DRAM)."""
    dev = get_device(device)
    total = 0.0
    for gr in groups:
        flops = sum(problem.flops[v] for v in gr)
        mm = any(problem.kind[v] in ("conv", "dwconv", "matmul") for v in gr)
        total += roofline(dev, flops, problem.dram(gr), dev.matmul_peak("float32") if mm else None)
    return total


@dataclass
class PlanEval:
    groups: list[Group]
    dram: float
    second: float
    steps: list[SplitStep] = field(default_factory=list)  # the splits of its repaired groups, in order


@dataclass
class SearchResult:
    """The best plan (least DRAM) a search found, its best-so-far curve over the evaluated plans, and
    (NSGA-II) its front of (DRAM, second objective)."""

    search: str
    groups: list[Group]
    dram: float
    trivial_dram: float
    plans: int
    seconds: float
    curve: list[float] = field(default_factory=list)  # best DRAM after each plan
    front: list[tuple[float, float]] = field(default_factory=list)
    steps: list[SplitStep] = field(default_factory=list)  # the split steps behind the best plan's groups
    cancelled: bool = False

    def best_at(self, budget: int) -> float:
        """Best DRAM after the first ``budget`` plans."""
        return self.curve[min(budget, len(self.curve)) - 1]


class PlanSearch:
    """Evaluates genotypes against a plan budget; the three searches share it."""

    def __init__(self, problem: FusionProblem, beta: float, splitter: Splitter, budget: int, seed: int = 0,
                 second: str = "groups", device: str = DEFAULT_PROFILE,
                 on_plan: Callable[[int, float], None] | None = None, cancel: Any = None) -> None:
        if second not in SECOND_OBJECTIVES:
            raise ValueError(f"unknown second objective {second!r}; known: {', '.join(SECOND_OBJECTIVES)}")
        self.p = problem
        self.beta = beta
        self.splitter = splitter
        self.budget = budget
        self.rng = np.random.default_rng(seed)
        self.second = second
        self.device = device
        self.on_plan = on_plan  # (plans evaluated, best DRAM so far) after each plan
        self.cancel = cancel  # an object with ``is_set()`` (a threading.Event): stop, keep the best
        n = problem.n
        self.forced = np.zeros(max(n - 1, 0), dtype=bool)
        for v in problem.unfusable(beta):
            if v > 0:
                self.forced[v - 1] = True
            if v < n - 1:
                self.forced[v] = True
        self.free = np.flatnonzero(~self.forced)
        self.curve: list[float] = []
        self.best: PlanEval | None = None
        self._repaired: dict[Group, tuple[list[Group], list[SplitStep]]] = {}

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def done(self) -> bool:
        return len(self.curve) >= self.budget or (bool(self.curve) and self.cancelled())

    def evaluate(self, cuts: np.ndarray) -> PlanEval:
        cuts = cuts | self.forced
        groups: list[Group] = []
        steps: list[SplitStep] = []
        for gr in decode(self.p, cuts):
            if len(gr) == 1 or self.p.valid(gr, self.beta):  # valid, or unfixable alone
                groups.append(gr)
            elif self.splitter.explainer is not None and gr in self._repaired:
                parts, trace = self._repaired[gr]
                groups += parts
                steps += trace
            else:
                parts = self.splitter.repair(gr)
                if self.splitter.explainer is not None:
                    self._repaired[gr] = (parts, self.splitter.last_trace)
                groups += parts
                steps += self.splitter.last_trace
        dram = self.p.total_dram(groups)
        second = float(len(groups)) if self.second == "groups" else plan_latency(self.p, groups, self.device)
        ev = PlanEval(groups, dram, second, steps)
        if self.best is None or dram < self.best.dram:
            self.best = ev
        self.curve.append(self.best.dram)
        if self.on_plan is not None:
            self.on_plan(len(self.curve), self.best.dram)
        return ev

    def random_genotype(self) -> np.ndarray:
        p = self.rng.uniform(0.02, 0.5)
        return self.rng.random(len(self.forced)) < p

    def result(self, search: str, t0: float, front: list[tuple[float, float]] | None = None) -> SearchResult:
        assert self.best is not None
        return SearchResult(search, sorted(self.best.groups, key=min), self.best.dram,
                            self.p.total_dram(self.p.trivial()), len(self.curve), time.perf_counter() - t0,
                            list(self.curve), front or [], list(self.best.steps),
                            self.cancelled() and len(self.curve) < self.budget)


def random_search(s: PlanSearch) -> SearchResult:
    t0 = time.perf_counter()
    s.evaluate(np.ones(len(s.forced), dtype=bool))  # the trivial plan: always valid
    while not s.done():
        s.evaluate(s.random_genotype())
    return s.result("random", t0)


def local_search(s: PlanSearch, keep: int = 10) -> SearchResult:
    t0 = time.perf_counter()
    pool: list[tuple[float, bytes, np.ndarray]] = []
    # a guided repair is deterministic (memoised per group): a genotype seen before would give the
    # same plan again, so it is not evaluated again; a random split gives a new plan each time
    seen: set[bytes] | None = set() if s.splitter.explainer is not None else None

    def offer(cuts: np.ndarray) -> None:
        key = cuts.tobytes()
        if seen is not None:  # the pool's genotypes are among those seen
            if key in seen:
                return
            seen.add(key)
        elif any(k == key for _, k, _ in pool):
            return
        ev = s.evaluate(cuts)
        if len(pool) < keep or ev.dram < pool[-1][0]:
            pool.append((ev.dram, key, cuts))
            pool.sort(key=lambda x: x[0])
            del pool[keep:]

    offer(np.ones(len(s.forced), dtype=bool))
    while len(pool) < keep and not s.done():
        offer(s.random_genotype())
    misses = restarts = 0
    while not s.done() and len(s.free):
        parent = pool[int(s.rng.integers(len(pool)))][2]
        child = parent.copy()
        i = s.free[int(s.rng.integers(len(s.free)))]
        child[i] = not child[i]
        before = len(s.curve)
        offer(child)
        misses = misses + 1 if len(s.curve) == before else 0
        if misses > 100 * keep:  # every one-edit neighbour of the pool was seen: restart one slot
            offer(s.random_genotype())
            restarts = restarts + 1 if len(s.curve) == before else 0
            if restarts > 10:  # a small graph whose every plan was evaluated: done
                break
            misses = 0
    return s.result("local", t0)


def _nondominated_sort(objs: np.ndarray) -> list[list[int]]:
    n = len(objs)
    dominated: list[list[int]] = [[] for _ in range(n)]
    count = np.zeros(n, dtype=int)
    for i in range(n):
        le = np.all(objs[i] <= objs, axis=1) & np.any(objs[i] < objs, axis=1)
        ge = np.all(objs <= objs[i], axis=1) & np.any(objs < objs[i], axis=1)
        dominated[i] = list(np.flatnonzero(le))
        count[i] = int(ge.sum())
    fronts = [list(np.flatnonzero(count == 0))]
    while fronts[-1]:
        nxt = []
        for i in fronts[-1]:
            for j in dominated[i]:
                count[j] -= 1
                if count[j] == 0:
                    nxt.append(j)
        fronts.append(nxt)
    return [f for f in fronts if f]


def _crowding(objs: np.ndarray) -> np.ndarray:
    n, m = objs.shape
    d = np.zeros(n)
    for k in range(m):
        order = np.argsort(objs[:, k], kind="stable")
        span = objs[order[-1], k] - objs[order[0], k]
        d[order[0]] = d[order[-1]] = np.inf
        if span > 0 and n > 2:
            d[order[1:-1]] += (objs[order[2:], k] - objs[order[:-2], k]) / span
    return d


def nsga2(s: PlanSearch, pop_size: int = 32) -> SearchResult:
    t0 = time.perf_counter()
    n_bits = len(s.forced)
    pop = [np.ones(n_bits, dtype=bool)] + [s.random_genotype() for _ in range(pop_size - 1)]
    evals = [s.evaluate(c) for c in pop[: s.budget]]
    pop = pop[: len(evals)]

    def objs(es: list) -> np.ndarray:
        return np.array([[e.dram, e.second] for e in es], dtype=float)

    def rank_and_crowd(es: list) -> tuple[np.ndarray, np.ndarray]:
        o = objs(es)
        rank = np.zeros(len(es), dtype=int)
        crowd = np.zeros(len(es))
        for r, f in enumerate(_nondominated_sort(o)):
            rank[f] = r
            crowd[f] = _crowding(o[f])
        return rank, crowd

    rank, crowd = rank_and_crowd(evals)
    def pick(rank: np.ndarray, crowd: np.ndarray) -> int:  # binary tournament
        a, b = s.rng.integers(len(rank), size=2)
        return int(a) if (rank[a], -crowd[a]) <= (rank[b], -crowd[b]) else int(b)

    while not s.done():
        kids: list[np.ndarray] = []
        while len(kids) < pop_size and len(kids) + len(s.curve) < s.budget:
            x, y = pop[pick(rank, crowd)], pop[pick(rank, crowd)]
            child = x.copy()
            if n_bits > 1:
                i, j = sorted(s.rng.integers(n_bits, size=2))
                child[i:j] = y[i:j]
            flip = s.rng.random(n_bits) < 2.0 / max(n_bits, 1)
            if len(s.free) and not flip[s.free].any():
                flip[s.free[int(s.rng.integers(len(s.free)))]] = True
            kids.append(child ^ flip)
        kid_evals = [s.evaluate(c) for c in kids]
        allp, alle = pop + kids, evals + kid_evals
        o = objs(alle)
        chosen: list[int] = []
        for f in _nondominated_sort(o):
            if len(chosen) + len(f) <= pop_size:
                chosen += f
            else:
                c = _crowding(o[f])
                chosen += [f[i] for i in np.argsort(-c, kind="stable")[: pop_size - len(chosen)]]
                break
        pop = [allp[i] for i in chosen]
        evals = [alle[i] for i in chosen]
        rank, crowd = rank_and_crowd(evals)
    o = objs(evals)
    front = sorted({(float(a), float(b)) for a, b in o[_nondominated_sort(o)[0]]})
    return s.result("nsga2", t0, front)


SEARCHES: Registry[Callable[[PlanSearch], SearchResult]] = Registry("search")  # name -> the search over plans
SEARCHES.register("random", random_search)
SEARCHES.register("local", local_search)
SEARCHES.register("nsga2", nsga2)


def run_search(problem: FusionProblem, beta: float, search: str, splitter: Splitter, budget: int,
               seed: int = 0, second: str = "groups", on_plan: Callable[[int, float], None] | None = None,
               cancel: Any = None) -> SearchResult:
    """``search`` over at most ``budget`` plans (fewer when ``cancel`` is set: the best so far)."""
    fn = SEARCHES.get(search)  # ValueError listing the searches for an unknown one
    return fn(PlanSearch(problem, beta, splitter, budget, seed, second, on_plan=on_plan, cancel=cancel))
