"""Rules and methods describe themselves, and every table of them is derived from the registries
(issue: structure).  A toy rule (``tests/toy_rule.py``) and a toy method (``tests/toy_method.py``),
one file each plus one registry line each, appear in the CLI's help, in plan files, in the app's
rule steps and in the Pareto legend; no other file names them.  A rule that fails in any other way
than ``RuleNotApplicable`` makes a search fail loudly."""

from __future__ import annotations

import pytest

from app.cli import main
from core.cost import AnalyticCost
from core.errors import RuleNotApplicable
from core.ir.graph import GraphError
from core.search.methods import METHODS, run_method
from core.search.plan import load_plans, save_plans
from core.search.wl_hash import graph_hash
from core.simulate import simulate
from core.transform.registry import RULES, get_rule, register_rule, rules_of
from core.transform.remat import Remat
from sample_graphs.store import load_sample_graph
from tests.toy_method import ToyOrder
from tests.toy_rule import ToyClone


@pytest.fixture
def toys():
    # the registry lines of the toy rule and the toy method, for the test's duration
    with RULES.temporarily("toy_clone", ToyClone()), METHODS.temporarily("toy_order", ToyOrder()):
        yield


def test_the_toy_rule_is_an_option_of_magis_transform_and_applies(toys, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["transform", "--help"])
    helptext = capsys.readouterr().out
    assert "--toy-clone TENSOR:USER" in helptext and "USER reads a clone of TENSOR" in helptext
    g = load_sample_graph("fig2_skip")
    a, b = next((n, u) for n in g.ops() for u in g.users(n.id) if g.nodes[u].kind.value == "op")
    out = tmp_path / "t.json.gz"
    res = main(["transform", "fig2_skip", "--toy-clone", f"{a.name}:{g.nodes[b].name}", "-o", str(out), "--json"])
    assert res == 0
    assert capsys.readouterr().out.count("toy_clone") >= 1


def test_the_toy_method_and_rule_in_a_plan_file_the_steps_and_the_pareto_legend(toys, tmp_path):
    from app.optimizer_view import pareto_figure
    from app.plan_store import Frontier, build_steps, build_view
    from app.steps_view import step_details
    from core.search.plan import PlanFile

    g = load_sample_graph("fig2_skip")
    cost = AnalyticCost("rtx3090")
    run = run_method("toy_order", g, cost)
    (p,) = run.plans
    eager = run_method("eager", g, cost).plans[0]
    # a plan file with the toy method's point and the toy rule's application round-trips and replays
    path = save_plans(PlanFile(g.name, graph_hash(g), "rtx3090", [p, eager]), tmp_path / "p.plan.json.gz")
    back = load_plans(path, g).points[0]
    assert back.method == "toy_order" and [a.rule for a in back.applications] == ["toy_clone"]
    h = back.graph(g)
    assert simulate(h, back.order, cost).peak == back.peak
    # the app: the rule step says what the rule says of itself; the graph marks count its family
    steps = build_steps(g, back, "rtx3090", eager.order)
    assert [s.rule for s in steps] == ["toy_clone"] and steps[0].added
    assert build_view(g, back, 0, "rtx3090").counts["toy"] == 0  # a clone replaces no imported op
    assert "Toy clone: a reader reads a clone of the tensor" in str(step_details(steps[0], 1))
    # the Pareto legend: the method's label, colour and marker
    fig = pareto_figure(Frontier("x", PlanFile(g.name, graph_hash(g), "rtx3090", [back, eager]), "test"), None)
    toy = next(t for t in fig["data"] if t.get("name") == "Toy order")
    assert toy["marker"]["color"] == "#123456" and toy["marker"]["symbol"] == "cross"


def test_the_registries_are_the_tables():
    assert set(rules_of("remat")) == {"remat", "remat_chain", "deremat"}
    assert all(r.family and r.text for r in RULES.values())
    assert {"magis", "eager", "sqrt_n", "dtr", "checkmate", "torch_mincut", "rpo", "serenity", "hmcos"} <= set(METHODS)
    assert all(m.label and m.colour.startswith("#") for m in METHODS.values())
    with pytest.raises(ValueError, match="new name"):
        register_rule(Remat())


def test_a_method_that_needs_the_model_says_so_on_a_graph_alone():
    from toy_method import ToyOrder

    given = []

    class NeedsModel(ToyOrder):
        name = "toy_needs_model"
        label = "Toy needing the model"
        colour = "#654321"
        needs = ("model",)

        def _run(self, g, cost, *, time_budget, progress, model=None, **options):
            given.append(model)
            return [], []

    g = load_sample_graph("fig2_skip")
    with METHODS.temporarily("toy_needs_model", NeedsModel()):
        run = run_method("toy_needs_model", g)
        assert run.plans == [] and "traces the model again" in run.failures[0].reason
        model = object()
        assert run_method("toy_needs_model", g, model=model).failures == [] and given == [model]
    assert "toy_needs_model" not in METHODS
    run = run_method("checkmate", g, max_vars=0)
    assert run.plans == [] and run.failures[0].reason.startswith("not attempted")


class Faulty(Remat):
    """A rule with a bug: its edit raises something that is not RuleNotApplicable."""

    name = "faulty"
    family = "remat"
    text = "a rule with a bug"

    def edit(self, g, app):
        raise KeyError("a bug in the rule")


class Refusing(Remat):
    name = "refusing"
    family = "remat"
    text = "a rule that never applies"

    def edit(self, g, app):
        raise RuleNotApplicable("never here")


def test_a_faulty_rule_makes_the_search_fail_loudly_and_a_refusal_does_not():
    from core.search.moptimizer import MOptimizer

    g = load_sample_graph("bert_tiny")  # hot-spots with several readers: Remat matches
    with RULES.temporarily("refusing", Refusing()):
        m = MOptimizer(g, rules=("refusing",))
        res = m.search("memory", 1, time_budget=30)
        assert res.records and res.records[-1].filtered > 0  # refused, counted, the search went on
    with RULES.temporarily("faulty", Faulty()):
        m = MOptimizer(g, rules=("faulty",))
        with pytest.raises(KeyError, match="a bug in the rule"):
            m.search("memory", 1, time_budget=30)
    assert get_rule("remat") and "faulty" not in RULES
    assert not isinstance(KeyError(), GraphError)


def test_a_frontier_over_any_two_named_metrics():
    """By hand: four plans; over (peak, latency) the host-heavy swap plan is on the frontier, over
    (peak, host_bytes) the plan that swaps nothing at the same peak wins, and over all three the
    non-dominated set is the union's survivors."""
    from core.metrics import metrics
    from core.search.pareto import front_of, non_dominated
    from core.search.plan import Plan

    def p(label, peak, latency, host):
        return Plan("x", [], [], metrics(peak, latency, host_bytes=host), label)

    pts = [p("eager", 100, 1.0, 0), p("remat", 60, 1.3, 0), p("swap", 60, 1.1, 40), p("both", 50, 1.4, 40)]
    assert [x.label for x in front_of(pts)] == ["both", "swap", "eager"]
    assert [x.label for x in front_of(pts, ("peak", "host_bytes"))] == ["both", "remat"]
    three = non_dominated(pts, lambda x: (x.peak, x.latency, x.metrics["host_bytes"]))
    assert [x.label for x in three] == ["both", "swap", "remat", "eager"]
    assert [x.label for x in front_of(pts, ("latency", "peak"))] == ["eager", "swap", "both"]


def test_schedulers_are_methods_with_points_on_the_pareto_figure():
    """HMCOS and reverse post-order give one plan each (the untransformed graph in their order, its
    simulated metrics), drawn with their own label and colour; Serenity's DP refuses a graph above
    its size cap and says so."""
    from app.optimizer_view import pareto_figure
    from app.plan_store import Frontier
    from core.search.plan import PlanFile

    g = load_sample_graph("bert_tiny")
    cost = AnalyticCost("rtx3090")
    pts = [run_method(m, g, cost).plans[0] for m in ("hmcos", "rpo", "eager")]
    for p in pts:
        assert p.applications == [] and p.peak == simulate(g, p.order, cost).peak
    fig = pareto_figure(Frontier("x", PlanFile(g.name, graph_hash(g), "rtx3090", pts), "test"), None)
    names = {t.get("name"): t for t in fig["data"]}
    assert names["HMCOS"]["marker"]["color"] == METHODS["hmcos"].colour and "reverse post-order" in names
    big = load_sample_graph("resnet50")
    run = run_method("serenity", big, cost)
    assert run.plans == [] and "not run on" in run.failures[0].reason


def test_every_method_has_its_own_marker_and_colour():
    """The Pareto figure tells methods apart by marker and colour: no two registered methods share
    either."""
    assert len({m.symbol for m in METHODS.values()}) == len(METHODS)
    assert len({m.colour.lower() for m in METHODS.values()}) == len(METHODS)
