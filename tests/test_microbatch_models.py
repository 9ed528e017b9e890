"""Micro-batching (``search.peers.microbatch``: gradient accumulation as the F-Trans of the whole
training step along the batch) on the models users train: the ops it needed dim links for, each
checked by brute force (``tests.op_bruteforce``) and in a small training step split along its batch,
exported and compared with eager PyTorch (float64: the parts' sums run in another order); the ops a
step builds from shapes alone (attention masks, position ids) run once before the parts; dropout
drawn per micro-batch, compared with a gradient-accumulation loop in eager PyTorch; a mixture of
experts routed per part (``analysis.routing``) and the routings it refuses; points no better than
eager dropped; and (slow) every language model of the zoo and held-out ``transformers`` models."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from core.codegen.emit import generate_source, per_part_draws
from core.codegen.verify import (
    capture_real,
    compare,
    eager_outputs,
    graph_inputs,
    load_script,
    problems,
    verify_graph,
)
from core.cost.model import AnalyticCost
from core.frontend.workload import workload_fns
from core.ir import ops
from core.ir.graph import Graph, NodeKind
from core.search.methods import METHODS, run_method
from core.search.peers.common import traced_order
from core.search.peers.microbatch import RANDOM_PER_PART, batch_split, drop_dominated, split_application
from core.search.plan import Plan, replay
from tests.op_bruteforce import build_node, check_op
from tests.test_ops_modern import r, splits  # the same small-tensor helpers

D = torch.float64
A = "aten."
LMS = ["opt", "gpt_neox", "falcon", "phi", "phi3", "gemma", "gemma2", "mixtral", "qwen2_moe", "t5"]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


class Step:
    """A training step captured on real tensors in float64, with its eager outputs: the reference of
    every split of it."""

    def __init__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], loss_fn, name: str = "step",
                 dtype: torch.dtype = D) -> None:
        torch.manual_seed(0)
        self.module = module.to(dtype)
        self.inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
        self.loss_fn, self.forward_fn, self.name = loss_fn, None, name
        self.g = capture_real(self, name=name)
        self.tensors = graph_inputs(self.g, self.module, self.inputs)
        torch.manual_seed(0)
        self.ref = eager_outputs(self.g, self.module, self.inputs, loss_fn, None)

    def verify(self, h: Graph, what: str) -> dict:
        h.lint()
        res = verify_graph(h, traced_order(h), self.tensors, self.ref, schedule=what, details=True)
        assert problems(res) == [], (what, problems(res))
        return res


def split_and_verify(step: Step, parts=(2, 4), micro_batch: bool | None = None) -> list[int]:
    """Micro-batching's split of ``step`` applied in each of ``parts`` (where they divide the batch),
    replayed from its application, exported and compared with eager; returns the parts verified."""
    split, why = batch_split(step.g, microbatching=True)
    assert split is not None, why
    if micro_batch is not None:
        assert split.micro_batch == micro_batch
    done = []
    for k in parts:
        if split.length % k:
            continue
        h = replay(step.g, [split_application(split, k)])
        res = step.verify(h, f"{step.name} k={k}")
        assert res["fission_nodes"] == 1 and res["compared"] > 1
        done.append(k)
    assert done
    return done


def mse(m, x, y):
    return F.mse_loss(m(x), y)


# ---- the registry's new links, by brute force ------------------------------------------------------
def test_copy_broadcasts_its_source():
    got = check_op(A + "copy.default", [r(4, 6), r(1, 6)])
    assert splits(got) == {((0, 0),), ((0, 1), (1, 1))}
    assert splits(check_op(A + "copy.default", [r(4, 6), r(4, 6)])) == {((0, 0), (1, 0)), ((0, 1), (1, 1))}


def test_index_put_splits_what_it_does_not_index_and_sums_accumulated_rows():
    idx = torch.tensor([0, 2, 3])
    got = check_op(A + "index_put.default", [r(4, 5, 6), [None, idx], r(4, 3, 6), False])
    assert splits(got) == {((0, 0), (2, 0)), ((0, 2), (2, 2))}
    acc = check_op(A + "index_put.default", [torch.zeros(4, 5, 6, dtype=D), [None, idx], r(4, 3, 6), True])
    assert ((1, 0), (2, 1)) in splits(acc)  # the index rows: a sum
    # values broadcast from the right (one row for every index): self alone splits along the batch
    got = check_op(A + "index_put.default", [torch.zeros(4, 5, 6, dtype=D), [None, idx], r(6), True])
    assert splits(got) == {((0, 0),), ((0, 2), (2, 0)), ((1, 0),)}  # (self is added once: ``ADDED_ONCE``)


def test_index_put_of_values_of_lower_rank_links_them_from_the_right():
    """self [2, 3, 4] indexed on dim 1 by idx [2]: self[indices] is [2, 2, 4]; values [2, 4] sit at
    its last two dims (the index dim and dim 2), so values' dim 0 is no batch dim."""
    idx = torch.tensor([0, 2])
    g, node, _, _ = build_node(A + "index_put.default", [r(2, 3, 4), [None, idx], r(2, 4), True])
    links = ops.dim_links(ops.ctx(node, g.tensor))
    vi = 2
    assert ops.DimLink(vi, 0, 0, 0) not in links and ops.DimLink(0, 0, 0, 0) in links
    assert ops.DimLink(vi, 1, 0, 2) in links
    check_op(A + "index_put.default", [torch.zeros(2, 3, 4, dtype=D), [None, idx], r(2, 4), True])


def test_as_strided_scatter_in_its_view_pattern():
    got = check_op(A + "as_strided_scatter.default", [torch.zeros(24, dtype=D), r(4, 6), [4, 6], [6, 1], 0])
    assert splits(got) == {((0, 0), (1, 0))}
    g, node, _, _ = build_node(A + "as_strided_scatter.default", [torch.zeros(24, dtype=D), r(4, 3), [4, 3], [6, 2], 0])
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []  # strided: no view of the whole


def test_repeat_splits_only_the_dims_it_does_not_tile():
    assert splits(check_op(A + "repeat.default", [r(4, 6), [1, 3]])) == {((0, 0),)}
    assert splits(check_op(A + "repeat.default", [r(4, 6), [2, 1, 1]])) == {((0, 0),), ((0, 1),)}


def test_routing_ops_split_the_dims_they_do_not_work_along():
    x = r(4, 6)
    assert splits(check_op(A + "topk.default", [x, 3])) == {((0, 0),)}
    assert splits(check_op(A + "topk.default", [x, 2, 0])) == {((0, 1),)}
    assert splits(check_op(A + "sort.default", [x])) == {((0, 0),)}
    assert splits(check_op(A + "sort.stable", [x], {"stable": True, "dim": 0})) == {((0, 1),)}
    assert splits(check_op(A + "floor_divide.default", [torch.arange(12).view(4, 3), 2])) == {((0, 0),), ((0, 1),)}
    assert splits(check_op(A + "softplus_backward.default", [r(4, 6), r(4, 6), 1.0, 20.0])) == \
        {((0, 0), (1, 0)), ((0, 1), (1, 1))}


def test_histc_is_a_sum_over_every_element_with_a_fixed_range():
    x = torch.randint(0, 4, (6, 8)).to(D)
    got = check_op(A + "histc.default", [x, 4, 0, 3])
    assert {tuple(c.outputs.items()) for c in got} == {((0, -1),), ((0, -2),)}
    g, node, _, _ = build_node(A + "histc.default", [x, 4])  # min = max: the range is the data's own
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []


def test_scatter_splits_where_its_index_spans_self():
    idx = torch.randint(0, 6, (4, 3))
    assert splits(check_op(A + "scatter.src", [r(4, 6), 1, idx, r(4, 3)])) == {((0, 0), (1, 0), (2, 0))}
    assert splits(check_op(A + "scatter.value", [r(4, 6), 1, idx, 2.0])) == {((0, 0), (1, 0))}
    assert splits(check_op(A + "scatter_add.default", [r(4, 6), 1, idx, r(4, 3)])) == {((0, 0), (1, 0), (2, 0))}
    short = torch.randint(0, 6, (2, 3))  # writes self's first two rows only
    g, node, _, _ = build_node(A + "scatter.src", [r(4, 6), 1, short, r(2, 3)])
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []


def test_grouped_matmul_splits_its_inner_and_outer_dims_not_its_rows():
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    x, w = r(6, 4), r(3, 4, 5)
    offs = torch.tensor([2, 4, 6], dtype=torch.int32)
    got = check_op("transformers.grouped_mm_fallback.default", [x, w, offs])
    assert {tuple(sorted(c.inputs.items())) for c in got} == {((0, 1), (1, 1)), ((1, 2),)}
    gout = r(6, 5)
    got = check_op("transformers.grouped_mm_fallback_backward.default", [x, w, offs, gout])
    assert splits(got) == {((0, 1), (1, 1)), ((1, 2), (3, 1))}  # K, N
    # torch._grouped_mm: float32 (or bfloat16), strides of 16 bytes
    f32, tol, offs = torch.float32, {"rtol": 1e-5, "atol": 1e-6}, torch.tensor([2, 6, 8], dtype=torch.int32)
    got = check_op(A + "_grouped_mm.default", [r(8, 8, dtype=f32), r(3, 8, 8, dtype=f32)], {"offs": offs}, **tol)
    assert splits(got) == {((0, 1), (1, 1)), ((1, 2),)}
    got = check_op(A + "_grouped_mm.default", [r(8, 8, dtype=f32), r(8, 8, dtype=f32)], {"offs": offs}, **tol)
    assert splits(got) == {((0, 0),), ((1, 1),)}  # [K, M] x [M, N] -> [E, K, N]: K and N


def test_new_zeros_of_another_size_links_nothing():
    g, node, _, _ = build_node(A + "new_zeros.default", [r(2, 6), [12]])
    assert ops.dim_links(ops.ctx(node, g.tensor)) == []
    g, node, _, _ = build_node(A + "new_zeros.default", [r(2, 6), [2, 6]])
    assert ops.dim_links(ops.ctx(node, g.tensor)) == [ops.DimLink(0, 0, 0, 0), ops.DimLink(0, 1, 0, 1)]


# ---- small training steps, split along the batch -------------------------------------------------
class Tiled(nn.Module):
    """repeat (the features tiled), copy into a buffer made like it, softplus (its backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(12, 3)

    def forward(self, x):
        h = F.softplus(self.a(x)).repeat(1, 2)
        buf = torch.empty_like(h)
        buf.copy_(h)
        return self.b(buf)


class Chosen(nn.Module):
    """topk and sort along the features, scatter of the top values, a column write (index_put),
    floor_divide of the top indices, and a gather from a table by batch ids (its backward an
    index_put accumulated into zeros: a sum over the batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)
        self.table = nn.Parameter(torch.randn(5, 8))

    def forward(self, x, ids):
        s = self.a(x) + self.table[ids]
        v, i = s.topk(3, dim=-1)
        srt, _ = s.sort(dim=-1)
        z = torch.zeros_like(s).scatter(-1, i, v) + srt
        z[:, torch.tensor([1, 5])] = v[:, :2] * 2  # index_put along the features
        return self.b(z * (1 + (i // 2).sum(-1, keepdim=True)))


class Strided(nn.Module):
    """An ``as_strided`` view of a fresh activation (its backward: ``new_zeros`` of the flat size and
    ``as_strided_scatter``, as Swin's window attention captures)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = self.a(x).contiguous()
        v = h.as_strided((x.shape[0], 2, 4), (8, 4, 1))
        return self.b(F.gelu(v).reshape(x.shape[0], 8))


class Counting(nn.Module):
    """A running histogram of its activations in a buffer (a load-balancing statistic): ``histc``
    of a fixed range, summed over the parts."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.register_buffer("counts", torch.zeros(4))

    def forward(self, x):
        h = self.a(x)
        self.counts += torch.histc(h.detach().clamp(-1, 1), bins=4, min=-1, max=1)
        return h


@pytest.mark.parametrize("make", [
    lambda: Step(Tiled(), (r(8, 4), r(8, 3)), mse, "tiled"),
    lambda: Step(Strided(), (r(8, 4), r(8, 3)), mse, "strided"),
    lambda: Step(Counting(), (r(8, 4), r(8, 8)), mse, "counting"),
], ids=["tiled", "strided", "counting"])
def test_small_steps_through_each_new_op_split_along_the_batch(make):
    step = make()
    assert split_and_verify(step, micro_batch=False) == [2, 4]


def test_topk_sort_scatter_index_put_and_a_table_gather_split_along_the_batch():
    step = Step(Chosen(), (r(8, 4), torch.randint(0, 5, (8,)), r(8, 3)),
                lambda m, x, ids, y: F.mse_loss(m(x, ids), y), "chosen")
    got = {n.op for n in step.g.ops()}
    assert {A + "topk.default", A + "sort.default", A + "scatter.src", A + "index_put.default",
            A + "floor_divide.default"} <= got
    split_and_verify(step, micro_batch=False)


class Masked(nn.Module):
    """An attention mask built from the input's shape, as ``transformers`` builds one when none is
    given: ``ones_like(ids)`` indexed by ``arange(batch)`` (OPT's, Phi's, Gemma's ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(10, 8), nn.Linear(8, 10)

    def forward(self, ids):
        b, s = ids.shape
        pad = torch.ones_like(ids).bool()
        keep = pad[torch.arange(b)[:, None, None], torch.arange(s)[None, None, :]]  # [b, 1, s]
        causal = torch.arange(s)[:, None] >= torch.arange(s)[None, :]
        mask = keep & causal[None]
        h = self.emb(ids)
        att = (h @ h.transpose(1, 2)).masked_fill(~mask, -1e9).softmax(-1)
        return self.out(att @ h)


def test_a_mask_built_from_the_input_shape_runs_once_before_the_parts():
    step = Step(Masked(), (torch.randint(0, 10, (4, 6)), torch.randint(0, 10, (4, 6))),
                lambda m, ids, y: F.cross_entropy(m(ids).flatten(0, 1), y.flatten()), "masked")
    split, _ = batch_split(step.g)
    assert split is not None and not split.micro_batch  # MAGIS's exact F-Trans
    index = next(n for n in step.g.ops() if n.op == A + "index.Tensor")
    assert index.id not in split.nodes
    made = [r for r, d in zip(split.inputs, split.in_dims, strict=True) if d is not None
            and step.g.nodes[r.node].kind != NodeKind.PLACEHOLDER]
    assert made  # the mask, sliced for each part
    split_and_verify(step)


# ---- dropout: drawn per micro-batch -------------------------------------------------------------
class Dropped(nn.Module):
    def __init__(self, p: float = 0.3) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 16), nn.Linear(16, 3)
        self.p = p

    def forward(self, x):
        h = F.dropout(F.relu(self.a(x)), self.p, self.training)
        keep = (torch.rand_like(h) > 0.2).to(h.dtype)  # a mask drawn by hand
        return self.b(h * keep)


def accumulated(module: nn.Module, inputs, loss_fn, k: int, keys) -> dict[str, torch.Tensor]:
    """A gradient-accumulation loop in eager PyTorch: k micro-batches, each loss weighted by its
    share of the batch, the gradients summed -- seeded as the exported script is."""
    module.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    total = 0.0
    chunks = [t.chunk(k) for t in inputs]
    for part in zip(*chunks, strict=True):
        loss = loss_fn(module, *part) * (part[0].shape[0] / inputs[0].shape[0])
        loss.backward()
        total = total + loss.detach()
    out = {"loss": total}
    out.update({f"grad:{n}": p.grad.detach().clone() for n, p in module.named_parameters()})
    module.zero_grad(set_to_none=True)
    return {k_: v for k_, v in out.items() if k_ in keys}


def test_dropout_draws_per_micro_batch_as_a_gradient_accumulation_loop_does(tmp_path):
    """MAGIS's F-Trans refuses random ops; micro-batching splits them, each part drawing its own
    masks at part size: the exported plan is a user's gradient-accumulation loop, draw for draw
    (same seed, same order of draws), and says that its outputs are not eager's single draw."""
    step = Step(Dropped(), (r(8, 4), r(8, 3)), mse, "dropped")
    g = step.g
    assert batch_split(g)[0] is None  # the exact F-Trans: random ops are not split
    split, why = batch_split(g, microbatching=True)
    assert split is not None and split.micro_batch, why
    for k in (2, 4):
        app = split_application(split, k)
        assert app.rule == "microbatch_fission"
        h = replay(g, [app])
        drawn = per_part_draws(h)
        assert set(drawn) == set(g.outputs)  # the loss and every gradient depend on the masks
        src = generate_source(h, traced_order(h))
        assert "Random ops draw per micro-batch" in src
        path = tmp_path / f"plan_{k}.py"
        path.write_text(src)
        mod = load_script(path)
        assert mod.META["random"] == RANDOM_PER_PART
        torch.manual_seed(0)
        got, _ = mod.measure(step.tensors, "cpu")
        ref = accumulated(step.module, step.inputs, mse, k, set(g.outputs))
        per = compare(got, ref, list(ref))
        assert len(per) == len(g.outputs) and all(v["allclose"] for v in per.values()), per
        # against eager's single draw: nothing compared value by value, the rest checked
        res = verify_graph(h, traced_order(h), step.tensors, step.ref, details=True)
        assert res["compared"] == 0 and res["not_bit_comparable"]["outputs"] == sorted(g.outputs)
        assert res["not_bit_comparable"]["malformed"] == [] and problems(res) == []


def test_the_micro_batching_method_records_per_part_draws():
    step = Step(Dropped(), (r(64, 4), r(64, 3)), mse, "dropped")
    run = run_method("microbatch", step.g, AnalyticCost("rtx3090"), parts=[2])
    (p,) = run.plans
    assert p.stats["random"] == RANDOM_PER_PART and p.stats["random_ops"]
    assert p.applications[-1].rule == "microbatch_fission"
    h = p.graph(step.g)  # replays by the rule's name
    assert per_part_draws(h)


def test_a_step_without_random_ops_keeps_magis_fission():
    step = Step(Tiled(), (r(64, 4), r(64, 3)), mse, "tiled")
    run = run_method("microbatch", step.g, AnalyticCost("rtx3090"), parts=[2])
    (p,) = run.plans
    assert p.applications[-1].rule == "fission" and "random" not in p.stats


# ---- a mixture of experts, routed per part --------------------------------------------------------
class RoutedMoE(nn.Module):
    """Top-k routing through a grouped matmul, as ``transformers`` captures it: the (token, expert)
    pairs sorted by expert, tokens gathered by ``perm // k``, block offsets from ``histc`` of the
    sorted experts, the order restored through the inverse permutation ``inv[perm] = arange``."""

    def __init__(self, d: int = 6, hidden: int = 10, experts: int = 4, top: int = 2) -> None:
        super().__init__()
        import transformers.integrations.moe  # noqa: F401  (transformers::grouped_mm_fallback)

        self.router = nn.Linear(d, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, d, hidden) / d ** 0.5)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, d) / hidden ** 0.5)
        self.experts, self.top = experts, top

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(-1, d)
        w, e = self.router(t).softmax(-1).topk(self.top, dim=-1)
        keys, perm = torch.sort(e.reshape(-1))
        rows = t[perm // self.top]
        offs = torch.cumsum(torch.histc(keys.float(), bins=self.experts, min=0, max=self.experts - 1), 0,
                            dtype=torch.int32)
        gmm = torch.ops.transformers.grouped_mm_fallback
        y = gmm(F.gelu(gmm(rows, self.w_in, offs)), self.w_out, offs) * w.reshape(-1)[perm].unsqueeze(-1)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel())
        return x + y[inv].view(b * s, self.top, d).sum(1).view(b, s, d)


def moe_step(module: nn.Module | None = None, batch: int = 8) -> Step:
    return Step(module or RoutedMoE(), (r(batch, 3, 6), r(batch, 3, 6)), mse, "moe")


def test_a_mixture_of_experts_routes_each_part_by_itself():
    """Sorting a part's tokens by expert is no part of the whole's sort: MAGIS's op-by-op F-Trans
    refuses it, micro-batching checks the routing as a whole (``analysis.routing``) and computes the
    step of the whole batch, part by part."""
    step = moe_step()
    assert batch_split(step.g)[0] is None
    assert split_and_verify(step, (2, 4, 8), micro_batch=True) == [2, 4, 8]


class NativeMoE(RoutedMoE):
    """The same routing through ``torch._grouped_mm`` (float32 and bfloat16 only): its backward
    groups the inner dim for the weights' gradient ([K, M] x [M, N] -> [E, K, N])."""

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(-1, d)
        w, e = self.router(t).softmax(-1).topk(self.top, dim=-1)
        keys, perm = torch.sort(e.reshape(-1))
        offs = torch.cumsum(torch.histc(keys.float(), bins=self.experts, min=0, max=self.experts - 1), 0,
                            dtype=torch.int32)
        h = F.gelu(torch._grouped_mm(t[perm // self.top], self.w_in, offs=offs))
        y = torch._grouped_mm(h, self.w_out, offs=offs) * w.reshape(-1)[perm].unsqueeze(-1)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel())
        return x + y[inv].view(b * s, self.top, d).sum(1).view(b, s, d)


def test_a_mixture_of_experts_on_torch_grouped_mm_routes_each_part_by_itself():
    f32 = torch.float32
    step = Step(NativeMoE(d=16, hidden=32), (r(8, 4, 16, dtype=f32), r(8, 4, 16, dtype=f32)), mse, "native_moe",
                dtype=f32)
    shapes = {len(step.g.tensor(n.inputs()[1]).shape) for n in step.g.ops() if n.op == A + "_grouped_mm.default"}
    assert shapes == {2, 3}  # rows (forward, input gradient) and inner groups (weight gradient)
    assert split_and_verify(step, (2, 4, 8), micro_batch=True) == [2, 4, 8]


@pytest.mark.slow
def test_micro_batching_a_mixture_of_experts_with_checkpointing_matches_eager():
    """Both methods' points, their plans replayed (``microbatch_fission``) and verified: recomputed
    copies of the routing (a second sort of the same experts) route as their originals do."""
    step = Step(RoutedMoE(d=16, hidden=64), (r(16, 8, 16), r(16, 8, 16)), mse, "moe")
    cost = AnalyticCost("rtx3090")
    for method in ("microbatch", "microbatch_ckpt"):
        run = run_method(method, step.g, cost, parts=[2])
        assert run.plans, run.failures
        for p in run.plans:
            assert p.applications[-1].rule == "microbatch_fission"
            h = p.graph(step.g)
            res = verify_graph(h, p.order, step.tensors, step.ref, details=True)
            assert problems(res) == [], (method, p.label, problems(res))
    assert any(p.stats["recomputed_per_part"] for p in run.plans)


class SortedAcross(nn.Module):
    """Keeps the half of the tokens it scores highest over the whole batch: a token's result depends
    on the others, so the batch does not split."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x.reshape(-1, x.shape[-1]))
        _, perm = torch.sort(h.detach().sum(-1))
        keep = perm[perm.numel() // 2:]
        return x + torch.zeros_like(h).index_put((keep,), h[keep]).view_as(x)


class MixedOrders(SortedAcross):
    """Adds each sorted score to the unsorted one at the same position: rows of two orders."""

    def forward(self, x):
        score = self.lin(x.reshape(-1, x.shape[-1])).sum(-1)
        srt, _ = torch.sort(score.detach())
        return x * (score + srt).view(*x.shape[:2], 1)


class TableByPositions(SortedAcross):
    """Gathers a table of 30 rows by the positions of a part's 24 tokens: they count the tokens,
    not the table's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(30, 6))

    def forward(self, x):
        h = self.lin(x.reshape(-1, x.shape[-1]))
        _, perm = torch.sort(h.detach().sum(-1))
        return x + (h + self.table[perm]).view_as(x)


@pytest.mark.parametrize("module,why", [
    (SortedAcross, "slice"),  # a part of the sorted positions: no part of the batch
    (MixedOrders, "rows in different orders"),
    (TableByPositions, "part's own row positions"),
])
def test_routings_that_mix_the_batch_are_refused(module, why):
    step = moe_step(module())
    split, reason = batch_split(step.g, microbatching=True)
    assert split is None and why in reason, reason


# ---- points no better than eager ---------------------------------------------------------------
def test_a_point_no_better_than_eager_in_peak_and_latency_is_a_failure():
    step = Step(Tiled(), (r(64, 4), r(64, 3)), mse, "tiled")
    cost = AnalyticCost("rtx3090")
    eager = METHODS["eager"].plans(step.g, cost)[0]
    worse = Plan("microbatch", [], eager.order, {"peak": eager.peak, "latency": eager.latency * 2}, "k=2")
    lower = Plan("microbatch", [], eager.order, {"peak": eager.peak - 1, "latency": eager.latency * 2}, "k=4")
    faster = Plan("microbatch", [], eager.order, {"peak": eager.peak * 2, "latency": eager.latency / 2}, "k=8")
    kept, dropped = drop_dominated(step.g, cost, [worse, lower, faster])
    assert [p.label for p in kept] == ["k=4", "k=8"]
    assert [f.label for f in dropped] == ["k=2"] and dropped[0].reason.startswith("no better than PyTorch eager")
    for name in ("microbatch", "microbatch_ckpt"):
        for p in run_method(name, step.g, cost).plans:
            assert p.peak < eager.peak or p.latency < eager.latency


# ---- the zoo's language models and held-out transformers models ----------------------------------
def _zoo(name: str, batch: int | None = None, seq: int | None = None):
    from sample_graphs import zoo

    def make():
        old = zoo.TINY_BATCH, zoo.TINY_SEQ
        zoo.TINY_BATCH, zoo.TINY_SEQ = batch or old[0], seq or old[1]
        try:
            return zoo.build(name, True)
        finally:
            zoo.TINY_BATCH, zoo.TINY_SEQ = old
    return make


@pytest.fixture
def fallback_grouped_mm(monkeypatch):
    """transformers' MoE kernel on its fallback grouped matmul (``torch._grouped_mm`` has no float64
    kernel): the op a capture on fake tensors records."""
    import transformers.integrations.moe as moe

    monkeypatch.setattr(moe, "_can_use_grouped_mm", lambda *a, **k: False)


@pytest.mark.slow
@pytest.mark.parametrize("name", LMS)
def test_every_zoo_language_model_gives_micro_batching_points(name, fallback_grouped_mm):
    """At a training batch (8 x 64 tokens; the tiny configs' weights), micro-batching and micro-
    batching with checkpointing each give points better than eager in peak or latency."""
    from core.frontend.workload import build_fake, capture_workload

    g = capture_workload(build_fake(_zoo(name, 8, 64)), name=name)
    cost = AnalyticCost("rtx3090")
    eager = METHODS["eager"].plans(g, cost)[0]
    for method in ("microbatch", "microbatch_ckpt"):
        run = run_method(method, g, cost)
        assert run.plans, (method, run.failures)
        assert all(p.peak < eager.peak for p in run.plans if p.stats["parts"] >= 4)
        for p in run.plans[:2]:
            p.graph(g).lint()  # replays


@pytest.mark.slow
@pytest.mark.parametrize("name", LMS)
def test_every_zoo_language_model_split_matches_eager(name, fallback_grouped_mm):
    """The tiny variant (batch 2) split in 2 micro-batches, exported, against eager in float64."""
    w = _zoo(name)()
    loss_fn, _ = workload_fns(w)
    step = Step(w.module, tuple(w.inputs), loss_fn, name)
    split_and_verify(step, (2,), micro_batch=name in ("mixtral", "qwen2_moe"))


def _held_out(name: str, **kw):
    from tests import heldout_models

    return functools.partial(heldout_models.BUILDERS[name], **kw)


@pytest.mark.slow
@pytest.mark.parametrize("name,kw", [("bloom", {}), ("whisper", {}), ("mamba", {}), ("bart", {"dropout": 0.0}),
                                     ("wav2vec2", {"dropout": 0.0})],
                         ids=["bloom", "whisper", "mamba", "bart", "wav2vec2"])
def test_held_out_models_split_and_match_eager(name, kw):
    """BLOOM (ALiBi built with ``repeat``), Whisper (positions by ``repeat``, their gradient an
    ``index_put`` into zeros), Mamba (``softplus_backward``), BART and wav2vec2 without dropout."""
    w = _held_out(name, **kw)()
    step = Step(w.module, tuple(w.inputs), w.loss_fn, name)
    split_and_verify(step, (2,), micro_batch=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bart", "wav2vec2"])
def test_held_out_models_with_dropout_draw_per_micro_batch(name):
    """With dropout on, the split is gradient accumulation's (``microbatch_fission``): its exported
    script draws per part, and verification compares none of the outputs with eager's single draw
    value by value, only their shapes, dtypes and finiteness."""
    w = _held_out(name)()
    step = Step(w.module, tuple(w.inputs), w.loss_fn, name)
    split, why = batch_split(step.g, microbatching=True)
    assert split is not None and split.micro_batch, why
    h = replay(step.g, [split_application(split, 2)])
    res = verify_graph(h, traced_order(h), step.tensors, step.ref, details=True)
    assert problems(res) == [] and res["not_bit_comparable"]["outputs"]
    assert set(res["not_bit_comparable"]["outputs"]) | set(res["per_tensor"]) == set(step.g.outputs)


@pytest.mark.slow
def test_segformer_is_refused_for_its_batch_norm_not_its_dropout():
    from core.frontend.workload import capture_workload

    g = capture_workload(_held_out("segformer")())
    run = run_method("microbatch", g, AnalyticCost("rtx3090"))
    assert run.plans == [] and "_native_batch_norm_legit_functional" in run.failures[0].reason
    assert "random" not in run.failures[0].reason
