"""Fission end to end on every tiny workload and both toy graphs: each F-Tree candidate enabled alone
at n = 2 and n = 4 where they divide (else the smallest divisor), then seeded random combinations of disjoint candidates; each
transformed graph is exported, run, and compared with eager PyTorch (loss and every gradient, rtol
1e-4) and the measured peak with the simulated one (within 2%; it is exact).  The workloads run in
float64 (``workload_cases.Case``): splitting changes the order of floating-point sums.  Applying and
taking back an F-Trans restores the graph exactly.

``pytest -s`` prints the cases each workload ran and the worst peak ratio."""

from __future__ import annotations

import random

import pytest
import torch

from core.analysis.dgraph import DGraph, SplitError, plan_split
from core.analysis.ftree import build_ftree
from core.transform.fission import Fission
from tests.workload_cases import TINY, Case

COMBINATIONS = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=TINY + ["fig2_skip", "fig6_ftree"])
def case(request) -> Case:
    return Case(request.param, torch.float64)


def test_every_ftree_candidate_alone(case: Case):
    g = case.g
    ft = build_ftree(g)
    assert ft.nodes, "the F-Tree is empty"
    runs = 0
    for f in ft.nodes:  # n = 2 and 4 where they divide the split dims, else their smallest divisor
        for n in [k for k in (2, 4) if f.split.length % k == 0] or f.split.divisors()[:1]:
            h = g.copy()
            log = Fission().apply(h, Fission.application(n, f.split.comp, f.split.nodes))
            res = case.verify(h, f"ftree node {f.id} n={n}")
            assert res["fission_nodes"] == 1
            Fission().inverse(h, log)
            assert h.same_as(g)
            runs += 1
    assert runs >= len(ft.nodes)
    print(f"\n{g.name}: {len(ft.nodes)} F-Tree nodes, {runs} single fissions verified, "
          f"worst peak ratio {case.worst_peak_ratio:.6f}")


def test_random_combinations_of_disjoint_candidates(case: Case):
    g = case.g
    ft = build_ftree(g)
    done = 0
    for seed in range(COMBINATIONS):
        rng = random.Random(seed)
        h = g.copy()
        picks = rng.sample(ft.nodes, min(len(ft.nodes), rng.randint(2, 4)))
        used: set[int] = set()
        applied = 0
        for f in picks:
            nodes = set(f.split.nodes)
            if nodes & used:
                continue
            n = rng.choice(f.split.divisors()[:3])
            try:  # earlier fissions may make this one non-convex: then it is skipped
                plan_split(h, DGraph(h), nodes, f.split.comp)
            except SplitError:
                continue
            Fission().apply(h, Fission.application(n, f.split.comp, nodes))
            used |= nodes
            applied += 1
        if applied:
            res = case.verify(h, f"combination {seed}")
            assert res["fission_nodes"] == applied
            done += 1
    assert done >= COMBINATIONS // 2
    print(f"\n{g.name}: {done} combinations verified, worst peak ratio {case.worst_peak_ratio:.6f}")
