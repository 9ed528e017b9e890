"""Substitution rules (TASO's A-Trans and I-Trans): each rule on a module built for it, on the tiny
training workloads and on the NAS samples' forward graphs -- apply, lint, the exported script
against eager PyTorch at the simulated peak, and ``inverse(apply(G)) == G``; OCGGS's matching
conditions (boundary, induced, cycles) and refusals."""

from __future__ import annotations

import pytest
import torch

from core.codegen.verify import problems, verify_module
from core.errors import RuleNotApplicable
from core.frontend.torch_import import capture
from core.schedule import get_scheduler
from core.transform.registry import RULES, rules_of
from core.transform.rule import Application
from core.transform.substitution import FAMILY, SUBSTITUTE_RULES, SUBSTITUTIONS
from core.transform.substitution.rules import splits_only
from tests.subst_cases import CASES, build

BY = {r.name: r for r in SUBSTITUTE_RULES}


def _verify(module, inputs, h):
    res = verify_module(module, inputs, forward_fn=lambda m, *a: m(*a), training=False, graph=h,
                        order=get_scheduler("traced").run(h).order)
    assert problems(res) == [], problems(res)
    assert res["peak_ratio"] == 1.0
    return res


def test_every_rule_is_registered_and_has_a_case():
    assert set(rules_of(FAMILY)) == {s.name for s in SUBSTITUTIONS}
    assert set(CASES) == {s.name for s in SUBSTITUTIONS}  # a new rule comes with its module
    for s in SUBSTITUTIONS:
        assert s.kind in ("A-Trans", "I-Trans") and s.text.startswith(s.kind)
        assert RULES[s.name].family == FAMILY


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_on_its_module_matches_eager_and_inverts(rule):
    module, inputs, g = build(rule)
    r = BY[rule]
    apps = r.match(g)
    assert apps, f"{rule} does not match the module built for it"
    for app in apps:
        h = g.copy()
        log = r.apply(h, app)
        h.lint()
        assert not h.same_as(g)
        _verify(module, inputs, h)
        r.inverse(h, log)
        assert h.same_as(g)


def test_splits_only():
    assert splits_only((12, 10), (3, 4, 10))
    assert splits_only((12, 10), (12, 2, 5))
    assert splits_only((12, 10), (1, 12, 10, 1))
    assert not splits_only((12, 10), (120,))
    assert not splits_only((12, 10), (6, 20))
    assert not splits_only((4, 6), (3, 8))


def test_enlarge_then_merge_is_fig1():
    module, inputs, g = build("enlarge_conv")
    assert BY["merge_conv"].match(g) == []
    (app,) = BY["enlarge_conv"].match(g)
    assert app.params[-1] == 3  # pad the 1x1 filter to its sibling's 3x3
    BY["enlarge_conv"].apply(g, app)
    (merge,) = BY["merge_conv"].match(g)
    BY["merge_conv"].apply(g, merge)
    convs = [n for n in g.ops() if n.op == "aten.convolution.default"]
    assert len(convs) == 1 and convs[0].outputs[0].shape[1] == 16
    _verify(module, inputs, g)


def test_boundary_condition_an_inner_output_read_outside_refuses():
    """cat(relu(a), relu(b)) -> relu(cat(a, b)) only while the ReLUs' outputs are read by the
    concat alone (every edge leaving a match starts at a mapped output)."""
    mod, x, g = build("cat_relu")
    assert BY["cat_relu"].match(g)

    class Leaky(torch.nn.Module):
        def forward(self, x):
            r = torch.relu(x)
            return torch.cat([r, torch.relu(x * 2)], 1).sum() + r.sum()

    g2 = capture(Leaky(), (torch.randn(5, 8),), training=False, name="leaky")
    assert BY["cat_relu"].match(g2) == []
    relu, cat = [n.id for n in g2.ops() if n.op == "aten.relu.default"], g2.by_name("cat").id
    with pytest.raises(RuleNotApplicable):
        BY["cat_relu"].apply(g2, Application("cat_relu", (*relu, cat)))


def test_a_rewrite_that_would_close_a_cycle_is_refused():
    """mm(A, B1) and mm(A, B2) with B2 computed from the first product: merging them would make
    the merged matmul read its own result."""

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b1 = torch.nn.Parameter(torch.randn(6, 6))

        def forward(self, a):
            y1 = torch.mm(a, self.b1)
            b2 = torch.sin(y1[:, :6].t()[:6])
            return torch.mm(a, b2).sum() + y1.sum()

    g = capture(Chain(), (torch.randn(6, 6),), training=False, name="chain")
    apps = BY["merge_matmul"].match(g)
    assert len(apps) == 1
    h = g.copy()
    with pytest.raises(RuleNotApplicable, match="cycle"):
        BY["merge_matmul"].apply(h, apps[0])
    assert h.same_as(g)  # a refused application leaves the graph as it was


def test_bad_applications_are_one_line_refusals():
    _, _, g = build("merge_conv")
    ops = sorted(n.id for n in g.ops())
    with pytest.raises(RuleNotApplicable):
        BY["merge_conv"].apply(g, Application("merge_conv", (10**6, 10**6 + 1)))
    with pytest.raises(RuleNotApplicable):
        BY["merge_conv"].apply(g, Application("merge_conv", tuple(ops[:2])))
    (app,) = BY["merge_conv"].match(g)
    with pytest.raises(RuleNotApplicable):  # the symmetric match is found once: ids ascending
        BY["merge_conv"].apply(g, Application("merge_conv", app.params[::-1]))
    _, _, f = build("enlarge_conv")
    (en,) = BY["enlarge_conv"].match(f)
    with pytest.raises(RuleNotApplicable, match="not offered"):
        BY["enlarge_conv"].apply(f, Application("enlarge_conv", (*en.params[:-1], 5)))


def test_fold_bn_is_for_inference_graphs_only():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    g = capture(conv, (torch.randn(1, 3, 6, 6),), training=False, name="convbn")
    assert BY["fold_bn"].match(g)
    g.meta["mode"] = "train"  # the same ops on a training step: parameters' values are not constants
    assert BY["fold_bn"].match(g) == []


def test_from_text_names_the_source_ops():
    _, _, g = build("merge_conv")
    a, b = (n.name for n in g.ops() if n.op == "aten.convolution.default")
    app = BY["merge_conv"].from_text(g, f"{a},{b}")
    assert app.params == (g.by_name(a).id, g.by_name(b).id)
    with pytest.raises(ValueError, match="takes 2 node names"):
        BY["merge_conv"].from_text(g, a)


# ---- training steps and the NAS samples ----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_tiny", "resnet50_tiny", "vit_tiny", "gpt_neo_tiny"])
def test_rules_on_tiny_training_steps(name):
    """Every rule that matches a tiny training step: the step's loss and every gradient as eager
    (float64), at the simulated peak, and the inverse restores the graph."""
    from tests.workload_cases import Case

    case = Case(name, torch.float64)
    g = case.g
    applied = 0
    for r in SUBSTITUTE_RULES:
        for app in r.match(g)[:2]:
            h = g.copy()
            log = r.apply(h, app)
            res = case.verify(h, f"{r.name}")
            assert res["peak_ratio"] == 1.0
            r.inverse(h, log)
            assert h.same_as(g)
            applied += 1
    assert applied >= 2


@pytest.mark.slow
def test_merged_projections_and_their_weight_gradients_on_bert_tiny():
    """Q/K/V: the shared flatten merged, two projections merged into one linear layer, and on the
    backward the weight-gradient matmuls that share the activation merged too."""
    from tests.workload_cases import Case

    case = Case("bert_tiny", torch.float64)
    h = case.g.copy()
    for rule in ("cse_view", "cse_view", "merge_linear", "merge_matmul_rhs"):
        apps = BY[rule].match(h)
        assert apps, rule
        BY[rule].apply(h, apps[0])
    assert case.verify(h, "qkv")["peak_ratio"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["nasnet", "amoebanet", "darts"])
def test_rules_on_nas_forward_graphs(arch):
    from sample_graphs.nas import NASNetwork

    torch.manual_seed(0)
    net = NASNetwork(arch, "cifar").eval().double()
    x = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    g = capture(net, (x,), training=False, name=f"{arch}_cifar")
    seen = set()
    for r in SUBSTITUTE_RULES:
        for app in r.match(g)[:1]:
            h = g.copy()
            log = r.apply(h, app)
            _verify(net, (x,), h)
            r.inverse(h, log)
            assert h.same_as(g)
            seen.add(r.name)
    assert {"cse_relu", "add_comm"} <= seen


# ---- inside the M-Optimizer ------------------------------------------------------------------------
@pytest.mark.slow
def test_substitutions_as_moptimizer_rules_exact_deltas_and_plan_replays():
    """With ``substitutions`` the M-Optimizer matches TASO's rules at every state; each child is
    evaluated as a delta equal to a from-scratch simulation (matched next to the state's memory
    hot-spots, heuristic H2, within the search), and a state reached by substitutions
    and a Remat becomes a plan whose script matches eager PyTorch."""
    from core.search.moptimizer import SEARCH_SUBSTITUTIONS, MOptimizer
    from tests.test_delta_eval import assert_child_exact, assert_working_state_exact
    from tests.workload_cases import Case

    case = Case("bert_tiny", torch.float64)
    mo = MOptimizer(case.g, substitutions=True)
    ev = mo.ev
    assert set(SEARCH_SUBSTITUTIONS) <= set(ev.rules)
    hot = [k for k in ev.hotspots() if k.index >= 0][:6]
    near = {a for a in mo._applications() if a.rule in SEARCH_SUBSTITUTIONS}
    every = {a for r in SEARCH_SUBSTITUTIONS for a in ev.rules[r].match(ev.g)}
    assert near <= every
    assert all({p for p in a.params} & ({h.node for h in hot} | {u for h in hot for u in ev.g.readers(h)}
                                        | {p for h in hot for p in ev.g.preds(h.node)}) for a in near)
    for rule in ("cse_view", "cse_view", "merge_linear", "merge_matmul_rhs"):
        apps = ev.rules[rule].match(ev.g)  # every match (the search matches near its hot-spots)
        assert apps, rule
        c = ev.evaluate(apps[0])
        assert_child_exact(ev, c)
        s = ev.child_state(c)
        ev.commit(s)
        assert_working_state_exact(ev)
    remat = next(a for a in mo._applications() if a.rule in ("remat", "remat_chain"))
    s = ev.advance(remat)
    plan = mo.plan(s)
    assert [a.rule for a in plan.applications][:4] == ["cse_view", "cse_view", "merge_linear", "merge_matmul_rhs"]
    from core.search.plan import replay

    g = replay(case.g, plan.applications)
    case.verify_order(g, plan.order, "substituted plan")
    # the app's rule steps: each substitution with the nodes it replaced and created, its latency
    # before and after, and the imported ops it marks
    from app.plan_store import build_steps

    steps = build_steps(case.g, plan, "rtx3090", mo.order)
    assert [s.rule for s in steps] == [a.rule for a in plan.applications]
    merge = steps[2]
    assert merge.rule == "merge_linear" and len(merge.removed) == 2 and len(merge.added) == 4
    assert merge.latency[0] != merge.latency[1]
    assert set(merge.marks.values()) == {"substitution"}
    assert all(set(s.marks.values()) <= {"substitution"} for s in steps[:4])


def test_app_marks_substituted_ops_apart_from_fission():
    from app.plan_store import origins, plan_marks

    _, _, g = build("merge_conv")
    h = g.copy()
    (app,) = BY["merge_conv"].match(h)
    BY["merge_conv"].apply(h, app)
    marks = plan_marks(g, h, origins(g, h), [app])
    assert marks == {v: "substitution" for v in app.params}
    assert plan_marks(g, h, origins(g, h)) == {v: "fission" for v in app.params}  # erased by no substitution


@pytest.mark.slow
def test_optimize_cli_with_substitutions(tmp_path, capsys):
    import json

    from app.cli import main

    out = tmp_path / "plan.json"
    status = main(["optimize", "bert_tiny", "--pareto", "--substitutions", "--time-budget", "4", "-o", str(out),
                   "--json"])
    assert status == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["meta"]["substitutions"] is True


def test_the_pattern_memos_stay_bounded_and_answer_as_a_fresh_computation(monkeypatch):
    from core.transform.substitution import pattern

    pops = [p for s in SUBSTITUTIONS for p in s.source]
    want = [pattern._uses(p) for p in pops]
    monkeypatch.setattr(pattern, "MEMO_MAX", 3)
    monkeypatch.setattr(pattern, "_USES", {})
    for _ in range(2):
        assert [pattern._uses(p) for p in pops] == want
        assert 0 < len(pattern._USES) <= 3
