"""The F-Tree mutation rules (MAGIS section 5.1) and nested fission, on the hand-built MLP of
``test_fission`` (y = relu(x @ w1) @ w2, batch 8): which rule applies when, what each one makes
(compared with the graph made directly), exact inverses, and nested loops that compute the unsplit
result at the simulated peak."""

from __future__ import annotations

import pytest

from core.analysis.ftree import build_ftree
from core.ir import io
from core.ir.graph import NodeKind
from core.search.wl_hash import graph_hash
from core.transform.fission import Fission
from core.transform.ftree_rules import FTreeMutations
from core.transform.registry import get_rule
from core.transform.rule import Application
from tests.hand_graphs import mlp, run_mlp_script


def _tree():
    g, t = mlp()
    ft = build_ftree(g)
    batch = ft.dgraph.component((t["x"].node, 0, 0))
    along = {len(f.split.nodes): f for f in ft.nodes if ft.dgraph.component(f.split.comp) == batch}
    return g, t, ft, along[2], along[1]  # {r, y} and its child {y}, both along the batch


def _apply(g, app):
    return get_rule(app.rule).apply(g, app)


def _enable(f, n):
    return Fission.application(n, f.split.comp, f.split.nodes)


def _by_rule(apps, rule):
    return [a for a in apps if a.rule == rule]


def test_enable_applies_to_leaves_first_then_to_the_parent_of_an_enabled_node():
    g, t, ft, parent, child = _tree()
    assert child.parent == parent.id and not child.children
    mut = FTreeMutations(ft)
    leaves = {frozenset(f.split.nodes) for f in ft.nodes if not f.children}
    enables = _by_rule(mut.applications(g), "fission")
    assert {frozenset(a.params[4:]) for a in enables} == leaves  # no parent while no child is enabled
    assert all(a.params[0] == 2 for a in enables)  # the smallest divisor of the batch (8)
    assert not [a for a in mut.applications(g) if a.rule != "fission"]  # nothing is enabled yet

    _apply(g, _enable(child, 2))
    on = mut.enabled(g)
    assert set(on) == {child.id} and on[child.id].n == 2 and not on[child.id].nested
    apps = mut.applications(g)
    f = on[child.id].top
    target = (*child.split.comp, 1, t["y"].node)  # the F-Tree node: its component, |S| and min S
    assert _params(_by_rule(apps, "disable")) == [(f, *target)]
    assert _params(_by_rule(apps, "mutate")) == [(f, *target, 4)]  # 2 -> 4: the next divisor of 8
    (lift,) = _by_rule(apps, "lift")
    assert lift.params[0] == f and lift.params[1] == 2 and set(lift.params[5:]) == {t["r"].node, t["y"].node}
    batch = ft.dgraph.component(child.split.comp)
    parent_enable = [a for a in _by_rule(apps, "fission") if set(a.params[4:]) == {t["r"].node, f}
                     and ft.dgraph.component(a.params[1:4]) == batch]
    assert len(parent_enable) == 1  # the parent, with the enabled child inside as its fission node


def _params(apps):
    return [a.params for a in apps]


@pytest.mark.parametrize("rule", ["lift", "disable", "mutate"])
def test_each_rule_makes_the_graph_the_direct_enabling_makes_and_takes_back_exactly(rule):
    g, t, ft, parent, child = _tree()
    mut = FTreeMutations(ft)
    _apply(g, _enable(child, 2))
    before = g.copy()
    (app,) = _by_rule(mut.applications(g), rule)
    log = _apply(g, app)
    g.lint()
    expected, _ = mlp()
    if rule == "lift":
        _apply(expected, _enable(parent, 2))
    elif rule == "mutate":
        _apply(expected, _enable(child, 4))
    assert graph_hash(g) == graph_hash(expected)
    if rule == "disable":  # the original nodes are back, with their own ids
        assert {v: n.op for v, n in g.nodes.items()} == {v: n.op for v, n in expected.nodes.items()}
    on = mut.enabled(g)
    assert {k: v.n for k, v in on.items()} == {"lift": {parent.id: 2}, "disable": {}, "mutate": {child.id: 4}}[rule]
    get_rule(rule).inverse(g, log)
    assert g.same_as(before)


def test_nested_fission_runs_nested_loops_with_the_unsplit_result_at_the_simulated_peak(tmp_path):
    g, t, ft, parent, child = _tree()
    mut = FTreeMutations(ft)
    _apply(g, _enable(child, 2))
    batch = ft.dgraph.component(child.split.comp)
    nest = [a for a in _by_rule(mut.applications(g), "fission") if len(a.params) == 6
            and ft.dgraph.component(a.params[1:4]) == batch]
    _apply(g, nest[0])
    g.lint()
    on = mut.enabled(g)
    assert on[parent.id].n == 2 and not on[parent.id].nested and on[child.id].nested
    (top,) = [n for n in g.nodes.values() if n.kind == NodeKind.FISSION]
    inner = [n for n in top.fission.graph.nodes.values() if n.kind == NodeKind.FISSION]
    assert len(inner) == 1 and inner[0].outputs[0].shape == (4, 4)  # the child inside one part of 4 rows
    assert [n.outputs[0].shape for n in inner[0].fission.graph.ops()] == [(2, 4)]  # its parts: 2 rows
    src, measured, simulated = run_mlp_script(g, tmp_path)
    assert "for _k1 in range(2):" in src and "for _k2 in range(2):" in src
    assert measured == simulated

    # Disable reaches the nested child through its enabled parent; the parent stays enabled
    with pytest.raises(ValueError, match="enabled descendants"):
        _apply(g, Application("disable", (top.id, *parent.split.comp, len(parent.split.nodes),
                                          min(parent.split.nodes))))
    (dis,) = _by_rule(mut.applications(g), "disable")
    _apply(g, dis)
    assert {k: v.n for k, v in mut.enabled(g).items()} == {parent.id: 2}
    expected, _ = mlp()
    _apply(expected, _enable(parent, 2))
    assert graph_hash(g) == graph_hash(expected)


def test_a_graph_with_nested_fission_saves_loads_and_its_rules_still_apply(tmp_path):
    g, t, ft, parent, child = _tree()
    mut = FTreeMutations(ft)
    _apply(g, _enable(child, 2))
    batch = ft.dgraph.component(child.split.comp)
    _apply(g, [a for a in _by_rule(mut.applications(g), "fission") if len(a.params) == 6
               and ft.dgraph.component(a.params[1:4]) == batch][0])
    io.save(g, tmp_path / "g.json.gz")
    h = io.load(tmp_path / "g.json.gz")
    assert h.same_as(g) and graph_hash(h) == graph_hash(g)
    assert {k: v.n for k, v in mut.enabled(h).items()} == {parent.id: 2, child.id: 2}
    (mutate,) = [a for a in mut.applications(h) if a.rule == "mutate" and a.params[4] == 2]  # |S| = 2
    _apply(h, mutate)
    assert {k: v.n for k, v in mut.enabled(h).items()} == {parent.id: 4, child.id: 2}
    h.lint()
