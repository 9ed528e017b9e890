"""core.policy: a MAGIS plan as torch's selective-checkpoint policy -- the calls it expects are the
calls torch shows a policy, training under it equals eager training, it recomputes exactly what it
says, a different function is refused, and torch.compile runs it; with one checkpoint region per
block it trains as eager, recomputes block by block, its measured peak is below eager's and as
``policy_peak`` predicts, and ``remove`` undoes ``apply``."""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import sample_graphs
from core.codegen.runtime import LiveBytesTracker
from core.policy import PolicyMismatch, find_blocks, forward_nodes, policy_graph, policy_of_step, record_calls
from core.train import PlanStep, checkpoint_policy

PLANS = Path(sample_graphs.__file__).parent / "plans"  # stored plans: the same policy on every run


def _policy(name: str, regions: str = "step"):
    s = sample_graphs.build(name)
    step = PlanStep(s.module, s.loss_fn, s.inputs, plan=PLANS / f"{name}.train.plan.json.gz", progress=False)
    return s, policy_of_step(step, s.module, s.loss_fn, tuple(s.inputs), regions)


@functools.cache
def _made(name: str):
    return _policy(name)


def test_checkpoint_policy_searches_a_plan():
    s = sample_graphs.build("gpt_neo_tiny")
    pol = checkpoint_policy(s.module, s.loss_fn, s.inputs, memory_limit=0.7, time_budget=1.0, cache=False,
                            regions="blocks")
    assert pol.plan is not None and pol.blocks == ["transformer.h.0", "transformer.h.1"]
    assert pol.calls == _per_block("gpt_neo_tiny")[1].calls  # the calls and their blocks do not depend on the plan
    assert [dataclasses.replace(c, region=None) for c in pol.calls] == _made("gpt_neo_tiny")[1].calls


def _live_calls(fn, *args) -> list[str]:
    seen: list[str] = []

    def record(ctx, op, *a, **k):
        seen.append(str(op))
        return CheckpointPolicy.PREFER_SAVE

    checkpoint(fn, *args, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, record))
    return seen


def test_recorded_calls_are_what_the_policy_sees():
    s, pol = _made("gpt_neo_tiny")
    live = _live_calls(s.loss_fn, s.module, *s.inputs)
    assert [c.op for c in pol.calls] == live
    assert "aten.detach.default" not in live  # torch never shows a policy a detach
    assert any(c.view for c in pol.calls) and "aten.t.default" in live  # views are shown
    # the captured graph has clones of the no-op dropouts that never run: left unmatched, not misaligned
    names = {pol.graph.nodes[v].op for v in pol.graph.nodes}
    assert "aten.clone.default" in names
    assert pol.matched >= len(pol.calls) - 4  # arange + 3 unsqueeze of the positions are constants there


def _train_like_eager(s, eager, mine, step_loss, steps: int = 5) -> None:
    """``steps`` SGD steps of ``eager`` (plain autograd) and ``mine`` (``step_loss()``, its loss under a
    policy): equal losses, gradients and buffers (batch-norm statistics updated once) at every step."""
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
    for _ in range(steps):
        le = s.loss_fn(eager, *s.inputs)
        le.backward()
        lm = step_loss()
        lm.backward()
        torch.testing.assert_close(lm, le, rtol=0, atol=1e-6)
        for (n, p), q in zip(eager.named_parameters(), mine.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=n)
        for b, c in zip(eager.buffers(), mine.buffers(), strict=True):
            torch.testing.assert_close(c, b)
        for opt in (opt_e, opt_m):
            opt.step()
            opt.zero_grad()


@pytest.mark.parametrize("name", ["gpt_neo_tiny", "resnet50_tiny"])
def test_training_under_the_policy_equals_eager(name):
    s, pol = _made(name)
    assert pol.plan_calls, "the plan recomputes some forward op"
    eager, mine = copy.deepcopy(s.module), copy.deepcopy(s.module)
    _train_like_eager(s, eager, mine, lambda: pol.checkpoint(s.loss_fn, mine, *s.inputs))


class _Recomputed(TorchDispatchMode):
    """The op calls run while the checkpointed function runs again in the backward."""

    def __init__(self, flag):
        super().__init__()
        self.flag, self.ops = flag, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.flag["again"] and func is not torch.ops.aten.detach.default:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["gpt_neo_tiny", "resnet50_tiny"])
def test_recomputes_exactly_the_calls_it_says(name):
    s, pol = _made(name)
    m = copy.deepcopy(s.module)
    flag = {"again": False, "runs": 0}

    def fn(mod, *b):
        flag["runs"] += 1
        flag["again"] = flag["runs"] > 1
        try:
            return s.loss_fn(mod, *b)
        finally:
            flag["again"] = False

    loss = pol.checkpoint(fn, m, *s.inputs)
    mode = _Recomputed(flag)
    with mode:
        loss.backward()
    said = [pol.calls[i].op for i in pol.recomputed_calls]
    # torch stops recomputing once every saved tensor is back: what ran is a prefix of what it says,
    # and it reaches the last call the plan recomputes
    assert mode.ops == said[:len(mode.ops)]
    last_plan = pol.recomputed_calls.index(pol.plan_calls[-1])
    assert len(mode.ops) > last_plan


def test_a_different_function_is_refused():
    s, pol = _made("gpt_neo_tiny")
    ids, labels = s.inputs
    with pytest.raises(PolicyMismatch, match=r"op call \d+ is aten\.\S+\[2, 8"):
        pol.checkpoint(s.loss_fn, s.module, ids[:, :8], labels[:, :8])  # other shapes
    with pytest.raises(PolicyMismatch, match=r"op call 0 is aten\.mul\.Tensor\[3\], but the policy was made for aten\."):
        pol.checkpoint(lambda x: x * 2, torch.ones(3, requires_grad=True))


def test_cpu_offload_is_recompute_in_eager_sac():
    """Why swaps are dropped: torch 2.13 has MUST_CPU_OFFLOAD, but eager SAC recomputes such an op."""
    assert hasattr(CheckpointPolicy, "MUST_CPU_OFFLOAD")

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sin = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.sin += func is torch.ops.aten.sin.default
            return func(*args, **(kwargs or {}))

    def sins_in_backward(decision):
        def pol(ctx, op, *a, **k):
            return decision if op is torch.ops.aten.sin.default else CheckpointPolicy.MUST_SAVE

        x = torch.randn(4, requires_grad=True)
        y = checkpoint(lambda t: torch.sin(t).cos(), x, use_reentrant=False,
                       context_fn=functools.partial(create_selective_checkpoint_contexts, pol))
        with Count() as c:
            y.sum().backward()
        return c.sin

    # cos's backward computes sin(u) once; a recomputed sin(x) is one more
    assert sins_in_backward(CheckpointPolicy.MUST_SAVE) == 1
    assert sins_in_backward(CheckpointPolicy.MUST_RECOMPUTE) == 2
    assert sins_in_backward(CheckpointPolicy.MUST_CPU_OFFLOAD) == 2


def test_under_torch_compile_losses_equal_eager():
    s, pol = _made("gpt_neo_tiny")
    eager, mine = copy.deepcopy(s.module), copy.deepcopy(s.module)
    torch._dynamo.reset()
    step = torch.compile(lambda m, *b: checkpoint(s.loss_fn, m, *b, use_reentrant=False, context_fn=pol.context_fn),
                         backend="aot_eager")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
    for _ in range(3):
        le = s.loss_fn(eager, *s.inputs)
        le.backward()
        lm = step(mine, *s.inputs)
        lm.backward()
        torch.testing.assert_close(lm, le, rtol=0, atol=1e-6)
        for opt in (opt_e, opt_m):
            opt.step()
            opt.zero_grad()


def test_counts_and_peaks_are_reported():
    s, pol = _made("gpt_neo_tiny")
    assert pol.expressed >= len(pol.plan_calls) > 0
    assert pol.dropped == sum(pol.dropped_by.values())
    assert pol.plan_peak < pol.eager_peak  # the full plan reaches below eager
    # one region recomputes everything at the start of the backward: no lower than eager's peak there
    assert pol.policy_peak >= pol.eager_peak * 0.99
    assert record_calls(s.module, s.loss_fn, s.inputs) == pol.calls


# ---- one checkpoint region per block -----------------------------------------------------------


@functools.cache
def _per_block(name: str):
    return _policy(name, "blocks")


def test_blocks_are_the_repeated_modules():
    assert find_blocks(sample_graphs.build("gpt_neo_tiny").module) == ["transformer.h.0", "transformer.h.1"]
    assert find_blocks(sample_graphs.build("resnet50_tiny").module) == [f"stages.{k}" for k in range(4)]
    with pytest.raises(ValueError, match="no nn.ModuleList"):
        find_blocks(torch.nn.Linear(2, 2))


def test_per_block_calls_are_the_step_calls_of_each_block():
    s, pol = _per_block("gpt_neo_tiny")
    assert pol.blocks == ["transformer.h.0", "transformer.h.1"]
    assert pol.regions, "some block recomputes"
    for name, reg in pol.regions.items():
        mine = [i for i, c in enumerate(pol.calls) if c.region == name]
        assert reg.calls == [pol.calls[i] for i in mine]  # one contiguous run of the step's calls
        assert mine == list(range(mine[0], mine[0] + len(mine)))
        assert reg.decisions == [pol.decisions[i] for i in mine]
        assert reg.plan_calls  # a block without a recomputation gets no region
    # the plan's recomputations outside the blocks (embeddings, ln_f, the loss) are not stated
    assert all(pol.calls[i].region is not None for i in pol.plan_calls)


@pytest.mark.parametrize("name", ["gpt_neo_tiny", "resnet50_tiny"])
def test_per_block_training_equals_eager(name):
    s, pol = _per_block(name)
    assert pol.regions
    eager, mine = copy.deepcopy(s.module), copy.deepcopy(s.module)
    pol.apply(mine)
    _train_like_eager(s, eager, mine, lambda: s.loss_fn(mine, *s.inputs))
    # every region ran its calls once per forward and saw exactly the calls it was made for
    for reg in pol.regions.values():
        assert reg._seen[-5:] == [len(reg.calls)] * 5


def test_per_block_recomputes_block_by_block():
    """Each checkpointed block runs again in the backward, once, the last block first."""
    s, pol = _per_block("gpt_neo_tiny")
    m = copy.deepcopy(s.module)
    runs: list[str] = []
    for name in pol.regions:
        block = m.get_submodule(name)
        inner = block.forward

        def counted(*a, _name=name, _inner=inner, **k):
            runs.append(_name)
            return _inner(*a, **k)

        block.forward = counted
    with pol.applied(m):
        loss = s.loss_fn(m, *s.inputs)
        assert runs == list(pol.regions)  # the forward: each block once, in order
        loss.backward()
    assert runs[len(pol.regions):] == list(reversed(pol.regions))  # the backward: the last block first


def _peak(step, module, batch) -> int:
    step()
    module.zero_grad(set_to_none=True)
    with LiveBytesTracker("cpu", [*module.parameters(), *module.buffers(), *batch]) as t:
        step()
    module.zero_grad(set_to_none=True)
    return t.peak_bytes


# measured - policy_peak on gpt_neo_tiny: one (2, 16, 128) float32 GELU gradient, +- 4 KiB (below)
PEAK_TOLERANCE = 2 * 16 * 128 * 4 + 4096


def test_per_block_peak():
    """The per-block policy's measured peak is below eager's, and ``policy_peak`` predicts it within
    ``PEAK_TOLERANCE`` (20 KiB, 5.4% of the prediction).

    The prediction runs the captured graph's backward in its traced order; torch's autograd engine
    runs each node's whole backward at once: at the measured peak, the backward of a GELU ``mul`` in
    a block's MLP, both of its 16 KiB input gradients are alive, where the traced order has one.
    With the stored plan: 392,456 bytes measured, 378,124 predicted (14,332 above: 16 KiB less 2 KiB
    of small tensors; over searched plans it was 14,332 or 18,428); eager shows the same kind of gap
    (425.8 KiB measured, 417.8 KiB predicted)."""
    s, pol = _per_block("gpt_neo_tiny")
    eager = copy.deepcopy(s.module)
    eager_peak = _peak(lambda: s.loss_fn(eager, *s.inputs).backward(), eager, s.inputs)
    mine = pol.apply(copy.deepcopy(s.module))
    mine_peak = _peak(lambda: s.loss_fn(mine, *s.inputs).backward(), mine, s.inputs)
    assert mine_peak < eager_peak
    assert pol.policy_peak < pol.eager_peak  # predicted below eager too
    assert abs(mine_peak - pol.policy_peak) <= PEAK_TOLERANCE, (mine_peak, pol.policy_peak)
    # the whole step as one region recomputes everything at once: it stays at eager's peak
    whole, one = copy.deepcopy(s.module), _made("gpt_neo_tiny")[1]
    whole_peak = _peak(lambda: one.checkpoint(s.loss_fn, whole, *s.inputs).backward(), whole, s.inputs)
    assert whole_peak >= eager_peak * 0.99


def test_policy_graph_recomputes_each_region_before_its_backward():
    """Recompute each block's MLP input projection (``c_fc``'s addmm): its copy, per block, runs
    after the whole forward, block 1's before block 0's, with block 1's backward in between."""
    s, pol = _per_block("gpt_neo_tiny")
    g = pol.graph
    fwd = forward_nodes(g)
    fc = {v for v in fwd if g.nodes[v].op == "aten.addmm.default" and g.nodes[v].module.endswith("mlp.c_fc")}
    assert {pol.node_region[v] for v in fc} == {"transformer.h.0", "transformer.h.1"} and len(fc) == 2
    h, order = policy_graph(g, fc, fwd, pol.node_region)
    assert sorted(order) == sorted(v for v in h.nodes if h.nodes[v].kind == g.nodes[fwd[0]].kind)  # every op once
    copies = [v for v in order if h.nodes[v].recompute_of is not None]
    regions = [pol.node_region[h.nodes[v].recompute_of] for v in copies]
    # the addmm and its views are copied; block 1's copies run together, then block 0's
    assert {h.nodes[v].recompute_of for v in copies} >= fc
    k = regions.count("transformer.h.1")
    assert regions == ["transformer.h.1"] * k + ["transformer.h.0"] * (len(regions) - k) and 0 < k < len(regions)
    at = [order.index(v) for v in copies]
    assert at[:k] == list(range(at[0], at[0] + k)) and at[k:] == list(range(at[k], at[k] + len(at) - k))
    assert at[0] > max(order.index(v) for v in fwd)  # after the forward
    between = order[at[k - 1] + 1:at[k]]  # block 1's backward
    assert between and all(h.nodes[v].recompute_of is None and v not in fwd for v in between)
    assert any(g.nodes[v].module.startswith("transformer.h.1") for v in between if v in g.nodes)
    # the copies are what the backward reads: the originals die in the forward
    for v in fc:
        assert all(u in fwd for u in h.users(v))


def test_apply_and_remove_restore_the_forwards():
    s, pol = _per_block("gpt_neo_tiny")
    m = copy.deepcopy(s.module)
    blocks = [m.get_submodule(n) for n in pol.regions]
    pol.apply(m)
    assert all("forward" in b.__dict__ for b in blocks)
    with pytest.raises(ValueError, match="already applied"):
        pol.apply(m)
    pol.remove(m)
    for b in blocks:
        assert "forward" not in b.__dict__  # the class's forward again
        assert b.forward.__func__ is type(b).forward
    with pytest.raises(ValueError, match="nothing to remove"):
        pol.remove(m)
    # a forward the instance already had comes back as it was
    own = blocks[0].forward
    blocks[0].forward = own
    with pol.applied(m):
        assert m.get_submodule(next(iter(pol.regions))).forward is not own
    assert blocks[0].__dict__["forward"] is own


def test_whole_step_policy_cannot_be_applied():
    s, pol = _made("gpt_neo_tiny")
    assert pol.regions == {} and pol.blocks == []
    with pytest.raises(ValueError, match="regions='blocks'"):
        pol.apply(copy.deepcopy(s.module))


def test_per_block_under_torch_compile_equals_eager():
    s, pol = _per_block("gpt_neo_tiny")
    eager, mine = copy.deepcopy(s.module), pol.apply(copy.deepcopy(s.module))
    torch._dynamo.reset()
    step = torch.compile(lambda m, *b: s.loss_fn(m, *b), backend="aot_eager")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
    for _ in range(2):
        le = s.loss_fn(eager, *s.inputs)
        le.backward()
        lm = step(mine, *s.inputs)
        lm.backward()
        torch.testing.assert_close(lm, le, rtol=0, atol=1e-6)
        for (n, p), q in zip(eager.named_parameters(), mine.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=n)
        for opt in (opt_e, opt_m):
            opt.step()
            opt.zero_grad()
