"""Splitting an invalid fusion group: explanation edges -> candidate cuts -> the greedy tree split of
GET (paper section III-C and Algorithm 1), and the random split the searches use without GET.

Cuts by topological position (section III-C): the ops carry their topological position as label, so
an explanation edge ``(u, v)`` gives one candidate cut per position ``p`` with ``u <= p < v``: the
group's ops at positions ``<= p`` on one side, the others on the other.  Every edge that crosses
``p`` is removed with ``(u, v)`` -- for a skip edge, the skip plus each main-path edge it spans; for a
main-path edge under a skip, that edge plus the skip -- and every removed edge goes forward, so the
group graph stays a DAG.  A side that falls apart is taken as its weakly connected components.
Duplicate cuts (the same side) are kept once: the minimal set of solutions.

``Splitter.repair(group)`` returns valid groups covering ``group``.  With an explainer it runs
Algorithm 1: among the candidate cuts, one with every part valid and the least F_D (category 1);
else the one whose valid part is largest, recursing on the rest (category 2); else it recurses on
every part of the most promising cuts (category 3).  Each recursion asks the explainer again, up to
``max_depth`` rounds; a group is *rectified* when the explanation cuts alone make it valid within
them, and what is left invalid after that is split at random (counted as not rectified).  Results
are memoised per group.  Without an explainer, it splits at random positions until every part is
valid (the baseline: no DRAM awareness).  A one-op invalid group is *unfixable*.

Every split is recorded as a :class:`SplitStep` (the group, its F_beta, the explanation edges, how
Algorithm 1 chose and the parts of the chosen cut), in the order Algorithm 1 made them: a repair's
steps are ``Splitter.last_trace``, and a memoised group's steps come back with its parts, so the
record costs no explanation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .problem import FusionProblem, Group

Edge = tuple[int, int]
# (problem, group, beta, k) -> up to k edges of the group, most responsible for its invalidity first
Explainer = Callable[[FusionProblem, Group, float, int], list[Edge]]

UNFIXABLE = "unfixable"

# how a split step chose its parts (Algorithm 1's categories, or a random split and why)
HOW = {
    "cut": "a cut with every part valid, the least DRAM (category 1)",
    "largest": "the cut with the largest valid part; the rest split again (category 2)",
    "both": "no cut leaves a valid part: both sides split again (category 3)",
    "no-cut": "the explanation gave no cut: split at random",
    "rounds": "out of explanation rounds: split at random",
    "random": "split at random positions (no explainer)",
}


def group_edges(problem: FusionProblem, group: Group) -> list[Edge]:
    return [(u, v) for v in sorted(group) for u in problem.preds[v] if u in group]


def candidate_cuts(problem: FusionProblem, group: Group, edges: Sequence[Edge]) -> list[list[Group]]:
    """The parts of each distinct cut by topological position through ``edges`` (in their order)."""
    pos = sorted(group)
    seen: set[Group] = set()
    cuts: list[list[Group]] = []
    for u, v in edges:
        for p in pos:
            if p < u or p >= v:
                continue
            a = frozenset(w for w in pos if w <= p)
            if a in seen or len(a) == len(pos):
                continue
            seen.add(a)
            cuts.append(problem.components(a) + problem.components(group - a))
    return cuts


@dataclass
class SplitStep:
    """One split of an invalid group: the group (positions), its F_beta, its depth in the tree split
    (0: the group a plan met), the edges the explainer proposed (none for a random split), how the
    parts were chosen (a key of ``HOW``) and the parts of the chosen cut (for a random split, its
    final parts)."""

    group: Group
    buffer: float
    depth: int
    explained: tuple[Edge, ...] = ()
    how: str = "random"
    parts: tuple[Group, ...] = ()

    def cut_edges(self, problem: FusionProblem) -> list[Edge]:
        """The group's edges between two different parts: what the chosen cut removed."""
        part_of = {v: i for i, x in enumerate(self.parts) for v in x}
        return [(u, v) for u, v in group_edges(problem, self.group) if part_of.get(u) != part_of.get(v)]


@dataclass
class SplitStats:
    """Invalid groups met, rectified by explanation cuts alone, one-op unfixable ones, explanations
    asked for, memo hits, and the seconds spent explaining and splitting."""

    invalid: int = 0
    rectified: int = 0
    one_cut: int = 0  # rectified by the first explanation's best cut alone (category 1 at the top)
    unfixable: int = 0
    explanations: int = 0
    memo_hits: int = 0
    seconds: float = 0.0
    explain_seconds: float = 0.0

    @property
    def rectify_rate(self) -> float:
        return self.rectified / self.invalid if self.invalid else 1.0

    def as_dict(self) -> dict[str, float]:
        d = dict(self.__dict__)
        d["rectify_rate"] = self.rectify_rate
        d["one_cut_rate"] = self.one_cut / self.invalid if self.invalid else 1.0
        return d


@dataclass
class Splitter:
    """Makes invalid groups valid: guided by ``explainer`` (Algorithm 1), or at random (None)."""

    problem: FusionProblem
    beta: float
    explainer: Explainer | None = None
    seed: int = 0
    top_k: int = 6  # at most this many explanation edges per group ...
    top_frac: float = 1.0  # ... and at most this fraction of its edges (at least one)
    max_depth: int = 3  # rounds of explanation before a group counts as not rectified
    category3_cuts: int = 2  # cuts of category 3 recursed into
    stats: SplitStats = field(default_factory=SplitStats)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        # group -> (parts, rectified, the steps that split it)
        self._memo: dict[Group, tuple[list[Group], bool, list[SplitStep]]] = {}
        self._trace: list[SplitStep] = []
        self.last_trace: list[SplitStep] = []  # the steps of the last ``repair`` / ``split_once``

    def valid(self, group: Group) -> bool:
        return self.problem.valid(group, self.beta)

    def repair(self, group: Group) -> list[Group]:
        """Valid groups covering ``group`` (an unfixable one-op group is returned as it is)."""
        self.last_trace = []
        if self.valid(group):
            return [group]
        if len(group) == 1:  # unfixable: not an invalid group a split could fix
            self.stats.unfixable += 1
            return [group]
        t0 = time.perf_counter()
        self.stats.invalid += 1
        self._trace = []
        if self.explainer is None:
            parts, ok = self.random_split(group), True
            self._trace.append(SplitStep(group, self.problem.buffer(group), 0, parts=tuple(parts)))
        else:
            parts, ok = self._split(group, 0)
        self.last_trace = self._trace
        self.stats.rectified += ok
        self.stats.seconds += time.perf_counter() - t0
        return parts

    def split_once(self, group: Group) -> tuple[list[Group], bool] | str:
        """Algorithm 1 on ``group``: (parts, rectified), or ``UNFIXABLE`` for a one-op group."""
        if len(group) == 1 and not self.valid(group):
            return UNFIXABLE
        self._trace = []
        out = self._split(group, 0)
        self.last_trace = self._trace
        return out

    # ---- Algorithm 1 ------------------------------------------------------------------------
    def _split(self, group: Group, depth: int) -> tuple[list[Group], bool]:
        if self.valid(group):
            return [group], True
        if len(group) == 1:
            return [group], False
        hit = self._memo.get(group)
        if hit is not None:
            self.stats.memo_hits += 1
            parts, ok, steps = hit
            shift = depth - steps[0].depth if steps else 0
            self._trace += [replace(x, depth=x.depth + shift) for x in steps] if shift else steps
            return parts, ok
        if depth >= self.max_depth:
            parts = self.random_split(group)
            self._trace.append(SplitStep(group, self.problem.buffer(group), depth, how="rounds", parts=tuple(parts)))
            return parts, False
        t0 = time.perf_counter()
        n_edges = sum(1 for v in group for u in self.problem.preds[v] if u in group)
        k = max(1, min(self.top_k, round(self.top_frac * n_edges)))
        edges = self.explainer(self.problem, group, self.beta, k)
        self.stats.explanations += 1
        self.stats.explain_seconds += time.perf_counter() - t0
        step = SplitStep(group, self.problem.buffer(group), depth, tuple(edges))
        start = len(self._trace)
        self._trace.append(step)
        parts, ok = self._choose(group, candidate_cuts(self.problem, group, edges), depth, step)
        self._memo[group] = (parts, ok, self._trace[start:])
        return parts, ok

    def _choose(self, group: Group, cuts: list[list[Group]], depth: int,
                step: SplitStep) -> tuple[list[Group], bool]:
        """Algorithm 1's choice among the cuts of ``group``; ``step`` records it."""
        p = self.problem
        s1: list[list[Group]] = []
        s2: list[list[Group]] = []
        s3: list[list[Group]] = []
        for parts in cuts:
            ok = [self.valid(x) for x in parts]
            if all(ok):
                s1.append(parts)
            elif not s1:
                (s2 if any(ok) else s3).append(parts)
        if s1:  # preferred: every part valid, least DRAM
            self.stats.one_cut += depth == 0
            best1 = min(s1, key=p.total_dram)
            step.how, step.parts = "cut", tuple(best1)
            return best1, True
        if s2:  # the largest valid side, recurse on the rest
            def key(parts: list[Group]) -> tuple[int, float]:
                valid = [x for x in parts if self.valid(x)]
                return -max(len(x) for x in valid), p.total_dram(valid)

            parts = min(s2, key=key)
            step.how, step.parts = "largest", tuple(parts)
            out: list[Group] = []
            ok = True
            for x in parts:
                if self.valid(x):
                    out.append(x)
                else:
                    sub, sok = self._split(x, depth + 1)
                    out += sub
                    ok &= sok
            return out, ok
        if s3:  # recurse on both sides of the most promising cuts, keep the best
            ranked = sorted(s3, key=lambda parts: max(p.buffer(x) for x in parts))[: self.category3_cuts]
            best: tuple[list[Group], bool] | None = None
            kept: tuple[list[Group], list[SplitStep]] = ([], [])  # the best cut's parts and steps
            for parts in ranked:
                out, ok = [], True
                mark = len(self._trace)
                for x in parts:
                    sub, sok = self._split(x, depth + 1)
                    out += sub
                    ok &= sok
                steps = self._trace[mark:]
                del self._trace[mark:]  # only the kept cut's steps stay in the record
                if best is None or (ok, -p.total_dram(out)) > (best[1], -p.total_dram(best[0])):
                    best = (out, ok)
                    kept = (parts, steps)
            assert best is not None
            step.how, step.parts = "both", tuple(kept[0])
            self._trace += kept[1]
            return best
        out = self.random_split(group)  # the explanation gave no cut
        step.how, step.parts = "no-cut", tuple(out)
        return out, False

    # ---- the baseline -----------------------------------------------------------------------
    def random_split(self, group: Group) -> list[Group]:
        """Cut at random topological positions until every part is valid (one-op parts stay)."""
        out: list[Group] = []
        todo = [group]
        while todo:
            g = todo.pop()
            if len(g) == 1 or self.valid(g):
                out.append(g)
                continue
            pos = sorted(g)
            k = int(self.rng.integers(0, len(pos) - 1))
            a = frozenset(pos[: k + 1])
            todo += self.problem.components(a) + self.problem.components(g - a)
        out.sort(key=min)
        return out
