"""core.policy: a MAGIS plan as torch's selective-checkpoint policy -- the calls it expects are the
calls torch shows a policy, training under it equals eager training, it recomputes exactly what it
says, a different function is refused, and torch.compile runs it."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import sample_graphs
from core.policy import PolicyMismatch, record_calls
from core.train import checkpoint_policy


@functools.cache
def _made(name: str):
    s = sample_graphs.build(name)
    pol = checkpoint_policy(s.module, s.loss_fn, s.inputs, memory_limit=0.7, time_budget=2.0, cache=False)
    return s, pol


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


@pytest.mark.parametrize("name", ["gpt_neo_tiny", "resnet50_tiny"])
def test_training_under_the_policy_equals_eager(name):
    s, pol = _made(name)
    assert pol.plan_calls, "the plan recomputes some forward op"
    eager, mine = copy.deepcopy(s.module), copy.deepcopy(s.module)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
    for _ in range(5):
        le = s.loss_fn(eager, *s.inputs)
        le.backward()
        lm = pol.checkpoint(s.loss_fn, mine, *s.inputs)
        lm.backward()
        torch.testing.assert_close(lm, le, rtol=0, atol=1e-6)
        for (n, p), q in zip(eager.named_parameters(), mine.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=n)
        for b, c in zip(eager.buffers(), mine.buffers(), strict=True):  # batch-norm statistics updated once
            torch.testing.assert_close(c, b)
        for opt in (opt_e, opt_m):
            opt.step()
            opt.zero_grad()


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
