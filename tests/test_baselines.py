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

from core.cost.model import AnalyticCost, fission_glue
from core.frontend.torch_import import capture
from core.ir.graph import Graph, Node, NodeKind
from core.search.methods import METHODS, PEER_FAMILIES, methods_of, run_method
from core.search.peers.offload import saved_activations
from core.search.plan import Plan, check_order, replay
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
        # seed and the loss's division by the full count run once; and the loop's own slicing and
        # summing of the parts (``fission_glue``, on the profile's roofline)
        (loop,) = [n for n in replay(g, p.applications).nodes.values() if n.kind == NodeKind.FISSION]
        assert p.latency == pytest.approx(10 * k + 2 + fission_glue(cost.device, loop), abs=1e-12), p.label
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
    run = METHODS["offload"].run(g, cost, refine=True)
    # mm_1 is 1/64 of relu: offloading relu alone has the peak and latency of offloading both (less
    # on the host), a point given once -- the first, coarsest one
    assert [p.label for p in run.plans] == ["all saved"] and run.extra["duplicates"] == 1
    assert run.extra["exhausted"] and run.extra["tried"] == 2
    (every,) = run.plans
    (half,) = METHODS["offload"].plans(g, cost, fractions=(2,))
    assert half.label == ">= 1/2 of the largest" and (half.peak, half.latency) == (every.peak, every.latency)
    assert every.stats["offloaded"] == 2 and every.metrics["host_bytes"] == B * H * 4 + B * OUT * 4
    assert half.stats["offloaded"] == 1 and half.metrics["host_bytes"] == B * H * 4
    for p in (every, half):
        _check(g, p, cost)


def _check(g: Graph, p: Plan, cost) -> Graph:
    h = p.graph(g)
    h.lint()
    check_order(h, p.order)
    sim = simulate(h, p.order, cost)
    assert (sim.peak, sim.latency) == (p.peak, pytest.approx(p.latency, rel=1e-12)), p.label
    return h


def test_micro_batching_with_checkpointing_an_mlp_by_hand():
    """Cheap-ops checkpointing of the MLP drops relu (memory-bound; the mms are matmuls) and each
    part recomputes it once, from mm, before mm_2 (w2's gradient) and threshold_backward read it: one
    kernel more per part than micro-batching, and the same peak -- mm (B/k x H) stays for the
    recomputation where relu (the same bytes) stayed for the backward.  sqrt(n) checkpoints drop
    only tensors no backward op reads here (mm, a transpose): nothing is recomputed, so that mode is
    a failure that says so rather than a copy of micro-batching's points."""
    g = mlp_step()
    cost = KernelCost("rtx3090")
    mb = {p.stats["parts"]: p for p in METHODS["microbatch"].plans(g, cost)}
    run = METHODS["microbatch_ckpt"].run(g, cost, checkpointing=("cheap", "sqrt n"))
    assert [f.label for f in run.failures] == ["sqrt n"] and "nothing is recomputed" in run.failures[0].reason
    assert [p.label for p in run.plans] == [f"k={k}, cheap ops" for k in (2, 4, 8, 16, 32, 64)]
    for p in run.plans:
        k = p.stats["parts"]
        _check(g, p, cost)
        # micro-batching's kernels and loop, and one recomputed kernel per part
        assert p.latency == pytest.approx(mb[k].latency + k, abs=1e-12) and p.peak == mb[k].peak, p.label
        assert [a.rule for a in p.applications][-1] == "fission"
        fission = p.applications[-1].params
        assert list(fission[4:]) != sorted(fission[4:])  # the part runs the checkpointed order
        h = p.graph(g)
        (f,) = [n for n in h.ops() if n.fission is not None]
        body = [n.name for n in f.fission.graph.ops()]
        relus = [i for i, x in enumerate(body) if x.startswith("relu")]
        # the second relu runs in the part's backward, right before mm_2 (a detach view between)
        assert len(relus) == 2 and body.index("mse_loss_backward") < relus[1]
        assert body[relus[1] + 1:body.index("mm_2")] == ["detach"]


def test_offloading_with_checkpointing_moves_what_checkpointing_keeps():
    g = load_sample_graph("unet_tiny")
    cost = AnalyticCost("rtx3090")
    run = run_method("offload_ckpt", g, cost, refine=True)
    assert run.plans and not run.failures
    for p in run.plans:
        h = _check(g, p, cost)
        assert p.stats["recomputed"] > 0 and p.stats["offloaded"] > 0 and p.metrics["host_bytes"] > 0
        assert {a.rule for a in p.applications} == {"remat", "swap_late"}
        # no recomputed copy is offloaded: what is offloaded is what the forward kept
        stored = [h.nodes[n.inputs()[0].node] for n in h.nodes.values() if n.kind == NodeKind.STORE]
        assert stored and all(x.recompute_of is None for x in stored)
    # the three modes' points, then the refinement's finer cheap-ops fractions
    from core.search.peers.offload_ckpt import MORE_MODES
    from core.search.peers.sqrt_n import checkpoint_modes

    more = {label for label, _ in checkpoint_modes(g, cost, MORE_MODES)}
    modes = {p.stats["checkpointing"] for p in run.plans}
    assert {"cheap ops", "cheap ops 25%", "sqrt n"} <= modes <= {"cheap ops", "cheap ops 25%", "sqrt n"} | more
    assert modes & more and run.extra["exhausted"]


def test_batch_norm_is_a_reason_not_an_exception():
    g = load_sample_graph("resnet50_tiny")
    run = run_method("microbatch", g, AnalyticCost("rtx3090"))
    assert run.plans == [] and len(run.failures) == 1
    why = run.failures[0].reason
    assert why.startswith("the batch does not split: ") and "_native_batch_norm_legit_functional" in why
    assert run_method("offload", g, AnalyticCost("rtx3090")).plans  # offloading does not care


@pytest.mark.parametrize("name", ["bert_tiny", "unet_tiny"])
def test_every_baseline_point_replays(name):
    """Every point replays with its stored simulation; a micro-batching point no better than eager
    in either peak or latency is a failure that says so (BERT tiny: its weights' gradients, summed
    over the parts, outweigh the activations a part saves)."""
    g = load_sample_graph(name)
    cost = AnalyticCost("rtx3090")
    eager = METHODS["eager"].plans(g, cost)[0]
    for m in ("microbatch", "offload", "microbatch_ckpt", "offload_ckpt"):
        run = run_method(m, g, cost)
        assert run.plans or m.startswith("microbatch"), (m, run.failures)
        assert all(f.reason.startswith("no better than PyTorch eager") for f in run.failures), (m, run.failures)
        for p in run.plans:
            _check(g, p, cost)
            assert p.peak < eager.peak or p.latency < eager.latency
    mb = run_method("microbatch", g, cost)
    assert [p.label for p in mb.plans] + [f.label for f in mb.failures] == ["k=2"]  # the tiny samples have a batch of 2
    off = run_method("offload", g, cost).plans
    assert min(p.peak for p in off) < eager.peak


def test_the_baselines_are_registered_and_in_the_bench_defaults():
    both = {"microbatch", "offload", "microbatch_ckpt", "offload_ckpt"}
    assert both <= set(methods_of("baseline")) <= set(methods_of(*PEER_FAMILIES))
    for m in both:
        assert METHODS[m].label and METHODS[m].paper and METHODS[m].family == "baseline"
    import bench.pareto as pareto
    from bench.plots import MPL_MARKERS

    assert both <= set(pareto.DEFAULT_METHODS)
    assert all(METHODS[m].symbol in MPL_MARKERS for m in both)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_tiny", "unet_tiny"])
def test_every_baseline_plan_verifies_on_the_tiny_workloads(name):
    """Each point's exported script, run on real inputs, gives eager PyTorch's loss and gradients
    (``codegen.verify``) with the simulated peak measured.  Micro-batching sums the parts' gradients
    in another order, so it is checked in float64 (``workload_cases.Case``); offloading keeps every
    operation and is checked in float32.  The same for each combined with checkpointing.  A
    micro-batching point no better than eager (BERT tiny's) is not reported; its split is verified
    all the same."""
    from core.codegen.verify import problems, verify_graph
    from core.search.peers.microbatch import batch_split, split_application
    from tests.workload_cases import Case

    cost = AnalyticCost("rtx3090")
    for method, dtype in (("microbatch", torch.float64), ("offload", None), ("microbatch_ckpt", torch.float64),
                          ("offload_ckpt", None)):
        case = Case(name, dtype)
        run = run_method(method, case.g, cost)
        assert run.plans or method.startswith("microbatch"), (method, run.failures)
        assert all(f.reason.startswith("no better than PyTorch eager") for f in run.failures), (method, run.failures)
        plans = [(p.label, _check(case.g, p, cost), p.order) for p in run.plans]
        if method == "microbatch" and not plans:
            split, _ = batch_split(case.g, microbatching=True)
            h = replay(case.g, [split_application(split, 2)])
            plans.append(("k=2 (not reported)", h, METHODS["eager"].plans(h, cost)[0].order))
        for label, h, order in plans:
            res = verify_graph(h, order, case.tensors, case.ref, schedule=f"{method}_{label}", details=True)
            assert problems(res) == [], (method, label, problems(res))
            assert res["compared"] > 1
