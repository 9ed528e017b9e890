"""Every rule of the M-Optimizer together, end to end on every tiny workload: seeded random walks in
which F-Tree mutations and tensor rules (remat, remat chains, swap, late swaps and their inverses)
alternate through the search's own ``DeltaEvaluator`` (the rarer rules -- lift, disable, mutate, de-remat,
de-swap -- weighted up).  Each state must lint (no cycle; a recomputed copy's
original is in the graph) and its exported script must match eager PyTorch (loss and every gradient,
rtol 1e-4, float64) at the simulated peak; going back to the root restores the imported graph exactly.

Two walks by hand on resnet50_tiny pin what the random walks once found:

* a copy of the loss read by ``ones_like`` outside the classifier's S makes S non-convex (the
  path S -> copy -> ones_like -> S), so enabling S is refused instead of making a cycle;
* enabling an S that holds an original with a recomputed copy outside S makes that copy the
  original (F-Trans erases S's ops; the copy stays, and so does every lint of copies), and the
  exported script still matches eager; going back restores the original and its copy.

``pytest -s`` prints what each workload's walks did."""

from __future__ import annotations

import random

import pytest
import torch

from core.analysis.dgraph import SplitError
from core.ir.graph import GraphError
from core.search.moptimizer import MOptimizer
from core.transform.rule import Application
from tests.workload_cases import TINY, Case

WALKS = 8
STEPS = 8
FTREE = ("fission", "lift", "disable", "mutate")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=TINY)
def case(request) -> Case:
    return Case(request.param, torch.float64)


def test_random_walks_of_ftree_and_tensor_rules_together(case: Case):
    g = case.g
    mo = MOptimizer(g)
    ev = mo.ev
    used: dict[str, int] = {}
    done = refused = 0
    for seed in range(WALKS):
        rng = random.Random(seed)
        ev.goto(mo.root)
        for step in range(STEPS):
            apps = ev.applications()  # tensor rules on every hot-spot, not the search's few
            family = [a for a in apps if (a.rule in FTREE) == (step % 2 == 1)] or apps
            if not family:
                break
            app = rng.choices(family, [1 if a.rule in ("fission", "remat", "swap") else 3 for a in family])[0]
            try:
                ev.advance(app)
            except (ValueError, GraphError):
                refused += 1
                continue
            assert ev.g.lint_problems() == [], (seed, step, app)
            case.verify_order(ev.g, ev.order, f"walk {seed} step {step}: {app}")
            used[app.rule] = used.get(app.rule, 0) + 1
            done += 1
    ev.goto(mo.root)
    assert ev.g.same_as(g)
    assert done >= WALKS * STEPS // 2
    assert any(r in used for r in FTREE) and any(r not in FTREE for r in used)
    print(f"\n{g.name}: {done} states verified ({used}; {refused} applications refused), "
          f"worst peak ratio {case.worst_peak_ratio:.6f}")


@pytest.fixture(scope="module")
def resnet():
    case = Case("resnet50_tiny", torch.float64)
    mo = MOptimizer(case.g)
    return case, mo


def _op(g, op: str) -> int:
    (v,) = [n.id for n in g.nodes.values() if n.op == op]
    return v


def _enabling(mo: MOptimizer, member: int) -> Application:
    """The Enable application of the smallest F-Tree leaf holding ``member``."""
    apps = [a for a in mo._applications() if a.rule == "fission" and member in a.params[4:]]
    return min(apps, key=lambda a: len(a.params))


def test_a_copy_of_the_loss_under_ones_like_makes_the_classifier_not_convex(resnet):
    case, mo = resnet
    ev = mo.ev
    ev.goto(mo.root)
    g = ev.g
    loss, ones = _op(g, "aten.nll_loss_forward.default"), _op(g, "aten.ones_like.default")
    enable = _enabling(mo, loss)
    assert ones not in enable.params[4:]  # ones_like(loss) stays outside S: F-Trans rebuilds it
    ev.advance(Application("remat", (loss, ones)))  # ones_like now reads a copy of the loss
    state = ev.state
    with pytest.raises(SplitError, match="not convex"):
        ev.advance(enable)
    assert ev.state is state and g.lint_problems() == []
    case.verify_order(g, ev.order, "remat of the loss for ones_like")


def test_fission_of_an_original_with_a_copy_outside_s_hands_the_original_to_the_copy(resnet):
    case, mo = resnet
    ev = mo.ev
    ev.goto(mo.root)
    g = ev.g
    tried = 0
    for app in [a for a in ev.applications() if a.rule == "remat"]:
        a, b = app.params
        enable = next((e for e in ev.applications() if e.rule == "fission" and a in e.params[4:]
                       and b not in e.params[4:]), None)
        if enable is None:
            continue
        ev.advance(app)
        (copy,) = g.copies(a)
        ev.advance(enable)  # S holds the original a; its copy is outside S
        assert a not in g.nodes and copy in g.nodes
        assert g.nodes[copy].recompute_of is None and g.copies(copy) == []
        assert g.lint_problems() == []
        case.verify_order(g, ev.order, f"{app}, then {enable}")
        ev.goto(mo.root)
        assert g.same_as(case.g)
        ev.advance(app)
        assert g.copies(a) == [copy] and g.lint_problems() == []
        ev.goto(mo.root)
        tried += 1
        if tried == 3:
            return
    pytest.fail(f"only {tried} remats whose original an F-Tree leaf can split")
