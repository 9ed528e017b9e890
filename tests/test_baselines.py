"""The baselines a user has (``core.search.peers.microbatch``, ``core.search.peers.offload``):
micro-batching an MLP's training step with peak and latency counted by hand, the saved activations
an offload moves, a batch-norm model refused with its reason, every point of both on the tiny
workloads replaying with its stored simulation, and (slow) their exported scripts against eager
PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from core.cost.model import AnalyticCost
from core.frontend.torch_import import capture
from core.ir.graph import Graph, Node, NodeKind
from core.search.methods import METHODS, PEER_FAMILIES, methods_of, run_method
from core.search.peers.offload import saved_activations
from core.search.plan import Plan, check_order
from core.simulate import simulate
from sample_graphs.store import load_sample_graph

B, IN, H, OUT = 64, 4, 256, 4  # float32: an activation B x H is 64 KiB, a weight 4 KiB


def mlp_step(batch: int = B) -> Graph:
    """The training step of y = relu(x @ w1.T) @ w2.T with an MSE loss (no biases), captured from
    PyTorch: forward mm, relu, mm_1, mse_loss; backward ones_like, mse_loss_backward, mm_2 (w2's
    gradient), mm_3, threshold_backward, mm_4 (w1's gradient); the rest are views."""
    torch.manual_seed(0)
    with FakeTensorMode(allow_non_fake_inputs=True):
        m = nn.Sequential(nn.Linear(IN, H, bias=False), nn.ReLU(), nn.Linear(H, OUT, bias=False))
        x, y = torch.randn(batch, IN), torch.randn(batch, OUT)
    return capture(m, (x, y), lambda m, x, y: nn.functional.mse_loss(m(x), y), forward_fn=lambda m, x, y: m(x),
                   training=True, name="mlp")


class KernelCost(AnalyticCost):
    """One second per kernel: an op that makes a new tensor takes 1 s, a view none (a fission node
    runs its sub-graph's kernels n times: ``AnalyticCost.node_time``)."""

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind == NodeKind.OP:
            return 0.0 if all(t.alias is not None for t in node.outputs) else 1.0
        return super().node_time(g, node)


def test_micro_batching_an_mlp_by_hand():
    g = mlp_step()
    cost = KernelCost("rtx3090")
    act, w = B * H * 4, H * IN * 4  # relu, mm_3, threshold_backward (mm is freed by relu); each weight
    loss = g.tensor(g.outputs["loss"]).nbytes  # mse_loss's scalar lives in its B x OUT buffer
    resident = 2 * w + 2 * B * IN * 4  # weights, x and y
    eager = METHODS["eager"].plans(g, cost)[0]
    # eager's peak is at threshold_backward: relu (read by it), its input mm_3 and its output, w2's
    # gradient (mm_2, a graph output) and the loss; 10 kernels
    assert eager.peak == resident + 3 * act + w + loss
    assert eager.latency == 10.0
    run = METHODS["microbatch"].run(g, cost)
    assert run.failures == []
    assert [p.label for p in run.plans] == ["k=2", "k=4", "k=8", "k=16", "k=32", "k=64"]
    for p in run.plans:
        k = p.stats["parts"]
        # before the loop: the seed (ones_like, 4 B); the fission node's full outputs: the summed
        # loss (4 B) and both weight gradients; during it one part's peak -- at its
        # threshold_backward (three activations of B/k rows, w2's partial gradient, its loss
        # buffer) or at its mm_4 (threshold_backward's output and both partial gradients)
        part = max(3 * act // k + w + loss // k, act // k + 2 * w + loss // k)
        assert p.peak == resident + 4 + 4 + 2 * w + part, p.label
        # every part runs the step's kernels but the seed (9) and the seed's scaling to the part
        # (``mse_loss_backward_grad_per_part``: the backward of a mean over the full batch); the
        # seed and the loss's division by the full count run once
        assert p.latency == 10 * k + 2, p.label
    k2 = run.plans[0]
    assert k2.peak - (resident + 8 + 3 * w + loss // 2) == 3 * act // 2  # k=2 halves the activations
    # the same part peak from PyTorch's own step at batch B/k (an independent capture)
    small = mlp_step(B // 4)
    small_resident = 2 * w + 2 * (B // 4) * IN * 4
    part = METHODS["eager"].plans(small, cost)[0].peak - small_resident
    assert run.plans[1].peak == resident + 8 + 2 * w + part


def test_offloading_an_mlp_moves_its_saved_activations():
    g = mlp_step()
    def names(vs):
        return sorted(g.nodes[v].name for v in vs)

    saved = {g.nodes[r.node].name: (names(late), names(remade)) for r, late, remade in saved_activations(g)}
    # relu is read by mm_2 and, through the forward's detach_1 (made again on the loaded copy) and
    # the backward's detach_2, by threshold_backward; mm_1 by mse_loss_backward
    assert saved == {"relu": (["detach_2", "mm_2", "threshold_backward"], ["detach_1"]),
                     "mm_1": (["mse_loss_backward"], [])}
    cost = AnalyticCost("rtx3090")
    run = METHODS["offload"].run(g, cost)
    labels = [p.label for p in run.plans]
    assert labels == ["all saved", ">= 1/2 of the largest"]  # mm_1 is 1/64 of relu
    every, half = run.plans
    assert every.stats["offloaded"] == 2 and every.metrics["host_bytes"] == B * H * 4 + B * OUT * 4
    assert half.stats["offloaded"] == 1 and half.metrics["host_bytes"] == B * H * 4
    for p in run.plans:
        _check(g, p, cost)


def _check(g: Graph, p: Plan, cost) -> Graph:
    h = p.graph(g)
    h.lint()
    check_order(h, p.order)
    sim = simulate(h, p.order, cost)
    assert (sim.peak, sim.latency) == (p.peak, pytest.approx(p.latency, rel=1e-12)), p.label
    return h


def test_batch_norm_is_a_reason_not_an_exception():
    g = load_sample_graph("resnet50_tiny")
    run = run_method("microbatch", g, AnalyticCost("rtx3090"))
    assert run.plans == [] and len(run.failures) == 1
    why = run.failures[0].reason
    assert why.startswith("the batch does not split: ") and "_native_batch_norm_legit_functional" in why
    assert run_method("offload", g, AnalyticCost("rtx3090")).plans  # offloading does not care


@pytest.mark.parametrize("name", ["bert_tiny", "unet_tiny"])
def test_every_baseline_point_replays(name):
    g = load_sample_graph(name)
    cost = AnalyticCost("rtx3090")
    eager = METHODS["eager"].plans(g, cost)[0]
    for m in ("microbatch", "offload"):
        run = run_method(m, g, cost)
        assert run.plans and not run.failures, (m, run.failures)
        for p in run.plans:
            _check(g, p, cost)
    mb = run_method("microbatch", g, cost).plans
    assert [p.label for p in mb] == ["k=2"]  # the tiny samples have a batch of 2
    off = run_method("offload", g, cost).plans
    assert min(p.peak for p in off) < eager.peak


def test_the_baselines_are_registered_and_in_the_bench_defaults():
    assert {"microbatch", "offload"} <= set(methods_of("baseline")) <= set(methods_of(*PEER_FAMILIES))
    for m in ("microbatch", "offload"):
        assert METHODS[m].label and METHODS[m].paper and METHODS[m].family == "baseline"
    import bench.pareto as pareto

    assert {"microbatch", "offload"} <= set(pareto.DEFAULT_METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_tiny", "unet_tiny"])
def test_every_baseline_plan_verifies_on_the_tiny_workloads(name):
    """Each point's exported script, run on real inputs, gives eager PyTorch's loss and gradients
    (``codegen.verify``) with the simulated peak measured.  Micro-batching sums the parts' gradients
    in another order, so it is checked in float64 (``workload_cases.Case``); offloading keeps every
    operation and is checked in float32."""
    from core.codegen.verify import problems, verify_graph
    from tests.workload_cases import Case

    cost = AnalyticCost("rtx3090")
    for method, dtype in (("microbatch", torch.float64), ("offload", None)):
        case = Case(name, dtype)
        run = run_method(method, case.g, cost)
        assert run.plans and not run.failures, (method, run.failures)
        for p in run.plans:
            h = _check(case.g, p, cost)
            res = verify_graph(h, p.order, case.tensors, case.ref, schedule=f"{method}_{p.label}", details=True)
            assert problems(res) == [], (method, p.label, problems(res))
            assert res["compared"] > 1
