"""Fission end to end on every tiny workload and both toy graphs: each F-Tree candidate enabled alone
at n = 2 and n = 4 where they divide (else the smallest divisor), then seeded random walks of the
F-Tree mutation rules (nested fission included); each transformed graph is exported, run, and compared with eager PyTorch (loss and every gradient, rtol
1e-4) and the measured peak with the simulated one (within 2%; it is exact).  The workloads run in
float64 (``workload_cases.Case``): splitting changes the order of floating-point sums.  Applying and
taking back an F-Trans restores the graph exactly.

``pytest -s`` prints the cases each workload ran and the worst peak ratio."""

from __future__ import annotations

import random

import pytest
import torch

from core.analysis.dgraph import SplitError
from core.analysis.ftree import build_ftree
from core.transform.fission import Fission
from core.transform.ftree_rules import FTreeMutations
from core.transform.registry import get_rule
from tests.workload_cases import TINY, Case

COMBINATIONS = 20  # random walks
STEPS = 5  # rule applications per walk

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


def test_random_walks_of_the_ftree_mutation_rules(case: Case):
    """From the imported graph, seeded random walks of Enable / Lift / Disable / Mutate (section 5.1;
    Lift and Mutate weighted up, so that enabled nodes nest): every state is verified, and the walk
    taken back step by step restores the graph exactly.  An application may be refused (SplitError:
    e.g. a nested part whose dim became 1 no longer links like the full one); refusals are counted."""
    g = case.g
    mut = FTreeMutations(build_ftree(g))
    done = nested = refused = 0
    used: dict[str, int] = {}
    for seed in range(COMBINATIONS):
        rng = random.Random(seed)
        h = g.copy()
        walk = []
        for step in range(STEPS):
            apps = mut.applications(h)
            if not apps:
                break
            app = rng.choices(apps, [3 if a.rule in ("lift", "mutate") else 1 for a in apps])[0]
            try:
                log = get_rule(app.rule).apply(h, app)
            except (SplitError, ValueError):
                refused += 1
                continue
            walk.append((app, log))
            used[app.rule] = used.get(app.rule, 0) + 1
            nested += any(e.nested for e in mut.enabled(h).values())
            case.verify(h, f"walk {seed} step {step}: {app.rule}")
            done += 1
        for app, log in reversed(walk):
            get_rule(app.rule).inverse(h, log)
        assert h.same_as(g)
    assert done >= COMBINATIONS and refused <= done // 4
    if case.g.name in TINY:
        assert nested > 0 and set(used) >= {"fission", "disable"}
    print(f"\n{g.name}: {done} states of {COMBINATIONS} walks verified ({used}; {nested} with nested "
          f"fission, {refused} applications refused), worst peak ratio {case.worst_peak_ratio:.6f}")
