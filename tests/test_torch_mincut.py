"""torch's min-cut partitioner as a peer at full strength (``core.search.peers.torch_mincut``): our
cost model as the knapsack's runtime estimator, the joint graph traced once per run, the fused
latency of recomputed pointwise ops."""

from __future__ import annotations

import pytest

from core.cost.model import AnalyticCost, CostModel
from core.ir.graph import Graph, Node
from core.search.methods import METHODS
from core.search.peers import torch_mincut
from core.search.peers.common import traced_order
from core.search.plan import replay
from core.simulate import simulate


class Heavier(CostModel):
    """``base``, with every op named ``op`` taking ``factor`` times as long."""

    def __init__(self, base: CostModel, op: str, factor: float = 1000.0) -> None:
        self.base, self.op, self.factor, self.device = base, op, factor, base.device

    def node_time(self, g: Graph, node: Node) -> float:
        t = self.base.node_time(g, node)
        return t * self.factor if node.op == self.op else t


@pytest.fixture(scope="module")
def bert_tiny():
    from sample_graphs.store import load_sample_graph

    return load_sample_graph("bert_tiny"), None


def _run(g, cost, model, **opts):
    run = METHODS["torch_mincut"].run(g, cost, time_budget=300, **opts)
    assert run.failures == []
    return run.plans


def test_default_budgets_are_0_to_1_in_steps_of_0_05():
    assert len(torch_mincut.BUDGETS) == 21
    assert torch_mincut.BUDGETS[0] == 1.0 and torch_mincut.BUDGETS[-1] == 0.0
    assert all(abs(a - b - 0.05) < 1e-9 for a, b in zip(torch_mincut.BUDGETS, torch_mincut.BUDGETS[1:], strict=False))


def test_budgets_run_coarse_to_fine_and_come_back_in_sweep_order(bert_tiny, monkeypatch):
    """A time budget that ends early must thin the sweep, not drop its low budgets: the partitioner
    is called at 1, 0, 0.5, 0.75, ... and the points and failures are listed from 1 down."""
    from core.search.peers.common import coarse_to_fine

    g, _ = bert_tiny
    asked = []
    real = torch_mincut.partition

    def spy(joint, budget, **kw):
        asked.append(budget)
        if budget in (0.5, 0.25):
            raise RuntimeError("no cut")
        return real(joint, budget, **kw)

    monkeypatch.setattr(torch_mincut, "partition", spy)
    budgets = (1.0, 0.75, 0.5, 0.25, 0.0)
    run = METHODS["torch_mincut"].run(g, AnalyticCost("rtx3090"), time_budget=300, budgets=budgets)
    assert asked == coarse_to_fine(list(budgets)) == [1.0, 0.0, 0.5, 0.75, 0.25]
    assert [p.stats["activation_memory_budget"] for p in run.plans] == [1.0, 0.75, 0.0]
    assert [f.label for f in run.failures] == ["budget 0.5", "budget 0.25"]
    assert all("torch's partitioner failed: RuntimeError: no cut" in f.reason for f in run.failures)


@pytest.mark.slow
def test_torch_recomputes_differently_when_our_cost_model_makes_an_op_expensive(bert_tiny):
    """At budget 0.5 torch's knapsack (timed by our cost model) recomputes two ``addmm``s; with
    ``addmm`` 1000 times as expensive it saves one of them (addmm_13; addmm_10 is recomputed by
    both).  The FLOP estimator ignores the cost model: its decision is
    the same under both."""
    g, model = bert_tiny
    cost = AnalyticCost("rtx3090")
    heavy = Heavier(cost, "aten.addmm.default")
    (ours,) = _run(g, cost, model, budgets=(0.5,))
    (expensive,) = _run(g, heavy, model, budgets=(0.5,))
    assert ours.stats["estimator"] == "ours" and "estimated_unmapped" not in ours.stats
    addmm = [{x for x in p.stats["recomputed_names"] if x.startswith("addmm")} for p in (ours, expensive)]
    assert ours.stats["recomputed_ops"]["addmm"] == len(addmm[0]) == 2
    assert addmm[1] < addmm[0] and addmm[0] - addmm[1] == {"addmm_13"}
    flops = [_run(g, c, model, budgets=(0.5,), estimator="flops")[0] for c in (cost, heavy)]
    assert flops[0].stats["recomputed_ops"] == flops[1].stats["recomputed_ops"] != ours.stats["recomputed_ops"]
    with pytest.raises(ValueError, match="estimator"):
        METHODS["torch_mincut"].run(g, cost, estimator="profile")


@pytest.mark.slow
def test_the_joint_graph_is_built_once_for_many_budgets(bert_tiny, monkeypatch):
    g, model = bert_tiny
    calls = []
    trace = torch_mincut.joint_from_graph

    def counted(*args, **kwargs):
        calls.append(args)
        return trace(*args, **kwargs)

    monkeypatch.setattr(torch_mincut, "joint_from_graph", counted)
    budgets = (1.0, 0.8, 0.5, 0.3, 0.0)
    plans = _run(g, AnalyticCost("rtx3090"), model, budgets=budgets)
    assert len(calls) == 1
    assert [p.stats["activation_memory_budget"] for p in plans] == list(budgets)
    # the copies are independent: budget 0 recomputes more than budget 1 on the one traced graph
    assert plans[-1].stats["recomputed_by_torch"] > plans[0].stats["recomputed_by_torch"]


@pytest.mark.slow
def test_fused_latency_drops_the_recomputed_pointwise_ops(bert_tiny):
    """``latency_fused`` is the plan's latency less the time of its recomputed copies of elementwise
    and copy ops (one stream: latency is the sum of the op times); budget 1 recomputes only views."""
    g, model = bert_tiny
    cost = AnalyticCost("rtx3090")
    eager = simulate(g, traced_order(g), cost)
    for p in _run(g, cost, model, budgets=(1.0, 0.5)):
        h = replay(g, p.applications)
        fusible = [h.nodes[v] for v in p.order if h.nodes[v].recompute_of is not None
                   and torch_mincut.ops_registry.get(h.nodes[v].op).category in torch_mincut.FUSIBLE]
        assert p.stats["fused_recomputations"] == len(fusible)
        assert p.stats["latency_fused"] == pytest.approx(p.latency - sum(cost.node_time(h, n) for n in fusible))
        assert p.stats["latency_fused"] <= p.latency
        if p.stats["activation_memory_budget"] == 1.0:
            assert p.latency == pytest.approx(eager.latency) and p.stats["latency_fused"] == pytest.approx(p.latency)
        else:
            assert p.stats["fused_recomputations"] > 0 and p.stats["latency_fused"] < p.latency


def test_the_joint_graph_is_built_from_the_graph_file_alone():
    """No model code: the fx joint graph calls our ops under our names, with the fake values torch's
    own trace of the model gives (shapes, strides, dtypes); the seed is the ``tangents_1`` input
    and the outputs are the loss, then the gradients."""
    import torch

    from app.specs import build_workload
    from core.frontend.torch_import import _trace, _TrainStep
    from core.frontend.workload import workload_fns
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("resnet50_tiny")
    gm, n_fwd, names = torch_mincut.joint_from_graph(g)
    nodes = {n.name: n for n in gm.graph.nodes}
    assert names == {n.name for n in g.ops()}
    assert [n.name for n in gm.graph.find_nodes(op="placeholder")][-1] == "tangents_1"
    assert "ones_like" not in nodes  # the seed became the tangent
    assert n_fwd == 1 + sum(k.startswith("buffer:") for k in g.outputs)  # batch-norm statistics, the loss
    w = build_workload("resnet50_tiny", 0)
    loss_fn, _ = workload_fns(w)
    traced, _ = _trace(_TrainStep(w.module, loss_fn), tuple(w.inputs), True)

    def sig(v):
        if isinstance(v, torch.Tensor):
            return tuple(v.shape), v.stride(), v.dtype
        return tuple(sig(x) for x in v) if isinstance(v, (list, tuple)) else None

    compared = 0
    for n in traced.graph.nodes:
        if n.op == "call_function" and n.name in nodes and "val" in n.meta:
            assert sig(nodes[n.name].meta["val"]) == sig(n.meta["val"]), n.name
            assert nodes[n.name].target == n.target
            compared += 1
    assert compared >= len(g.ops()) - 2  # all but the seed (and our summed tied gradients)


def test_torch_mincut_needs_no_model_and_refuses_a_transformed_graph():
    from core.search.plan import replay
    from sample_graphs.store import load_sample_graph

    assert "model" not in METHODS["torch_mincut"].needs
    g = load_sample_graph("resnet50_tiny")
    run = METHODS["torch_mincut"].run(g, AnalyticCost("rtx3090"), time_budget=300, budgets=(1.0, 0.0))
    assert run.failures == [] and len(run.plans) == 2
    h = replay(g, run.plans[1].applications)
    with pytest.raises(ValueError, match="imported graph"):
        torch_mincut.joint_from_graph(h)
