"""Attention on CUDA without a GPU: a CPU capture retargeted to the kernels torch's SDPA dispatcher
picks on CUDA (``core.codegen.target``), checked against torch's meta kernels (the CUDA kernels'
shape functions) and hand-computed bytes; the retargeted graph exports and verifies on the CPU
(the CUDA kernels' CPU stand-ins); and the runtime of a graph that still holds the CPU kernel runs a
fused kernel on CUDA (fake CUDA tensors, which dispatch to the same meta kernels)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from core.codegen import runtime  # noqa: E402
from core.codegen.target import (  # noqa: E402
    CPU_FWD,
    EFF_BWD,
    EFF_FWD,
    FLASH_BWD,
    FLASH_FWD,
    MATH_FWD,
    attention_kernels,
    retarget,
    target_device,
)
from core.codegen.verify import problems, verify_module  # noqa: E402
from core.frontend.workload import capture_workload  # noqa: E402
from core.ir.torch_bridge import resolve_op, torch_dtype  # noqa: E402
from core.schedule import get_scheduler  # noqa: E402
from core.simulate import simulate  # noqa: E402
from tests.modern_models import sdpa_transformer  # noqa: E402

VOCAB, BATCH, SEQ = 64, 2, 8
SDPA_NODES = {EFF_FWD, EFF_BWD, FLASH_FWD, FLASH_BWD}


class HF:
    def __init__(self, module, inputs, loss_fn):
        self.module, self.inputs, self.loss_fn = module.train(), inputs, loss_fn


def _ids():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def _mask():
    m = torch.ones(BATCH, SEQ, dtype=torch.long)
    m[1, -3:] = 0
    return m


def _lm_loss(model, input_ids):
    return model(input_ids=input_ids, labels=input_ids).loss


def _masked_loss(model, input_ids, attention_mask):
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids).loss


def bert_masked(dtype=torch.float32):
    cfg = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, attention_probs_dropout_prob=0.0)
    return HF(transformers.BertForMaskedLM(cfg).to(dtype), (_ids(), _mask()), _masked_loss)


def gpt2(dtype=torch.float32):
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=1, n_head=2, attn_pdrop=0.0,
                                  bos_token_id=0, eos_token_id=0)
    return HF(transformers.GPT2LMHeadModel(cfg).to(dtype), (_ids(),), _lm_loss)


def llama(dtype=torch.float32):
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
    return HF(transformers.LlamaForCausalLM(cfg).to(dtype), (_ids(),), _lm_loss)


def _capture(factory, dtype):
    torch.manual_seed(0)
    return capture_workload(factory(dtype), name=f"{factory.__name__}_{dtype}")


def _meta_outputs(g, node):
    """What torch's meta kernel returns for the node's inputs (tensors only; None / ints skipped)."""
    def meta(a):
        if hasattr(a, "node") and hasattr(a, "index"):
            t = g.tensor(a)
            return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device="meta")
        return a
    args = [meta(a) for a in node.args]
    kwargs = {k: meta(v) for k, v in node.kwargs.items()}
    return resolve_op(node.op)(*args, **kwargs)


# ---- the dispatcher's rules ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,q,k,mask,causal,kernel", [
    ("float32", (2, 4, 8, 16), (2, 4, 8, 16), False, False, "efficient"),
    ("bfloat16", (2, 4, 8, 16), (2, 4, 8, 16), False, True, "flash"),
    ("float16", (2, 4, 8, 16), (2, 2, 8, 16), False, False, "flash"),  # grouped-query heads
    ("bfloat16", (2, 4, 8, 16), (2, 4, 8, 16), True, False, "efficient"),  # a mask rules flash out
    ("bfloat16", (2, 4, 8, 16), (2, 4, 12, 16), False, True, "efficient"),  # causal, Lq != Lk
    ("bfloat16", (2, 4, 8, 264), (2, 4, 8, 264), False, False, "efficient"),  # head dim > 256
    ("float32", (2, 4, 8, 16), (2, 2, 8, 16), False, False, "math"),  # fp32 grouped-query
    ("float32", (2, 4, 8, 6), (2, 4, 8, 6), False, False, "math"),  # 6 % 4
    ("bfloat16", (2, 4, 8, 12), (2, 4, 8, 12), True, False, "math"),  # masked, 12 % 8
    ("float64", (2, 4, 8, 16), (2, 4, 8, 16), False, False, "math"),
])
def test_kernel_rules(dtype, q, k, mask, causal, kernel):
    assert runtime.sdpa_cuda_kernel(dtype, q, k, k, mask, causal)[0] == kernel


def test_bad_target_device_is_one_line():
    with pytest.raises(ValueError, match="unknown target device 'tpu'"):
        target_device("tpu")
    assert target_device("cuda:1") == "cuda"


# ---- retargeted models against the meta kernels ----------------------------------------------------------
@pytest.mark.parametrize("factory,dtype,kernel", [
    (bert_masked, torch.float32, "efficient"),
    (gpt2, torch.float32, "efficient"),
    (llama, torch.bfloat16, "flash"),
    (bert_masked, torch.bfloat16, "efficient"),
])
def test_every_call_maps_to_the_predicted_kernel_with_meta_kernel_outputs(factory, dtype, kernel):
    g = _capture(factory, dtype)
    n_cpu = len(g.nodes_of(CPU_FWD))
    assert n_cpu == 1
    rep = retarget(g, "cuda")
    assert rep.counts() == {kernel: n_cpu} and attention_kernels(g) == {kernel: n_cpu}
    assert not g.nodes_of(CPU_FWD) and not g.nodes_of(MATH_FWD)
    g.validate()
    checked = 0
    for node in g:
        if node.op not in SDPA_NODES:
            continue
        got = _meta_outputs(g, node)
        got = got if isinstance(got, tuple) else (got,)
        for j, want in enumerate(got):
            if isinstance(want, torch.Tensor):
                t = node.outputs[j]
                assert (t.shape, t.dtype) == (tuple(want.shape), str(want.dtype).removeprefix("torch.")), (node.op, j)
                checked += 1
    assert checked >= 5
    fwd = g[g.nodes_of(FLASH_FWD if kernel == "flash" else EFF_FWD)[0]]
    q = g.tensor(fwd.args[0])
    b, h, lq = q.shape[:3]
    lse = fwd.outputs[1]
    if kernel == "efficient":  # log-sum-exp padded along the queries to 32, float32; a mask expanded to [B, H, Lq, Lk]
        assert (lse.shape, lse.dtype) == ((b, h, 32), "float32")
        if factory is bert_masked:
            assert g.tensor(fwd.args[3]).shape == (b, h, lq, lq) and g[fwd.args[3].node].op == "aten.expand.default"
        bwd = g[g.nodes_of(EFF_BWD)[0]]
        assert bwd.args[10] == [True, True, True, False] and bwd.args[6] == TRefOf(fwd, 1)
    else:
        assert (lse.shape, lse.dtype) == ((b, h, lq), "float32")
        assert [(t.shape, t.dtype) for t in fwd.outputs[6:8]] == [((2,), "uint64"), ((), "uint64")]
        bwd = g[g.nodes_of(FLASH_BWD)[0]]
        assert bwd.args[8:10] == [lq, lq] and bwd.args[12:14] == [TRefOf(fwd, 6), TRefOf(fwd, 7)]


def TRefOf(node, i):  # noqa: N802
    return node.refs()[i]


def test_math_fallback_only_for_float32_grouped_query_heads():
    """Llama's grouped-query heads (4 query, 2 key/value heads): flash in bfloat16, math in float32 --
    whose S x S probabilities are an output of the graph's node, read by the backward."""
    assert attention_kernels(retarget_copy(llama, torch.bfloat16)) == {"flash": 1}
    g = _capture(llama, torch.float32)
    rep = retarget(g, "cuda")
    assert rep.counts() == {"math": 1} and "grouped-query heads 4/2" in rep.calls[0].reason
    fwd = g[g.nodes_of(MATH_FWD)[0]]
    probs = fwd.outputs[1]
    assert (probs.shape, probs.dtype) == ((BATCH, 4, SEQ, SEQ), "float32") and probs.nbytes == BATCH * 4 * SEQ * SEQ * 4
    assert g.readers(fwd.refs()[1])  # saved for the backward
    ss = [t for n in g if n.name.startswith(fwd.name.rsplit("_", 1)[0]) for t in n.outputs
          if t.shape[-2:] == (SEQ, SEQ) and t.alias is None]
    assert len(ss) >= 4  # probabilities, dP, dP - rowsum, dS: each counted


def retarget_copy(factory, dtype):
    g = _capture(factory, dtype)
    retarget(g, "cuda")
    return g


def test_cpu_target_leaves_the_graph_as_captured():
    g = _capture(bert_masked, torch.float32)
    before = g.copy()
    rep = retarget(g, "cpu")
    assert g.same_as(before) and rep.counts() == {"cpu": 1}


# ---- the bytes the memory model counts ----------------------------------------------------------------
class _QKV(nn.Module):
    def __init__(self, dtype=torch.float32, d=4):
        super().__init__()
        self.q, self.k, self.v = (nn.Parameter(torch.randn(1, 2, 8, d, dtype=dtype)) for _ in range(3))

    def forward(self, x):
        return F.scaled_dot_product_attention(self.q * x, self.k, self.v)


class _QKVWorkload:
    def __init__(self, dtype=torch.float32, d=4):
        torch.manual_seed(0)
        self.module, self.inputs, self.name = _QKV(dtype, d), (torch.ones(1, dtype=dtype),), "qkv"

    @staticmethod
    def loss_fn(m, x):
        return m(x).float().sum()


def _peak(g):
    return simulate(g, get_scheduler("traced").run(g).order).peak


def test_peak_counts_the_efficient_kernels_padded_log_sum_exp():
    """loss = sdpa(q * x, k, v).sum(), q/k/v [1, 2, 8, 4] float32 weights (256 B each), x one float.
    The peak is at the backward: weights 768 + x 4 + q*x 256 + output 256 + log-sum-exp + loss 4 +
    its gradient 4 + dq, dk, dv 768.  The CPU kernel's log-sum-exp is [1, 2, 8] (64 B): 2124 B; the
    memory-efficient kernel's is [1, 2, 32] (256 B) plus philox seed and offset (8 B each): 2332 B."""
    g = capture_workload(_QKVWorkload())
    assert _peak(g) == 768 + 4 + 256 + 256 + 64 + 4 + 4 + 768 == 2124
    assert retarget(g, "cuda").counts() == {"efficient": 1}
    assert _peak(g) == 768 + 4 + 256 + 256 + 256 + 8 + 8 + 4 + 4 + 768 == 2332


# ---- export and verify on the CPU -----------------------------------------------------------------------
@pytest.mark.parametrize("make,kernel", [
    (lambda: bert_masked(), "efficient"),
    (lambda: sdpa_transformer(seq=7, dtype=torch.bfloat16), "flash"),
])
def test_retargeted_graph_exports_and_verifies_exactly(make, kernel):
    torch.manual_seed(0)
    g = capture_workload(make())
    assert set(retarget(g, "cuda").counts()) == {kernel}
    torch.manual_seed(0)
    w = make()
    res = verify_module(w.module, w.inputs, w.loss_fn, graph=g)
    assert problems(res) == [], problems(res)
    assert res["peak_ratio"] == 1.0 and res["compared"] > 1


def test_math_fallback_exports_and_verifies():
    """The math path's composite nodes (matmul, repeat_interleave) run as several aten calls each, so
    the per-step comparison does not apply; values and peak do."""
    torch.manual_seed(0)
    g = capture_workload(llama())
    assert retarget(g, "cuda").counts() == {"math": 1}
    torch.manual_seed(0)
    w = llama()
    res = verify_module(w.module, w.inputs, w.loss_fn, graph=g)
    assert problems(res, exact_steps=False) == [], problems(res, exact_steps=False)
    assert res["peak_ratio"] == 1.0


def test_cpu_stand_in_of_efficient_attention_fills_the_padded_log_sum_exp():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    out, lse, seed, offset = runtime.efficient_attention_forward(q, k, v, None, True)
    ref_out, ref_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    assert lse.shape == (2, 3, 32) and lse.dtype == torch.float32
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse[..., :5], ref_lse)
    assert (seed.shape, seed.dtype, int(seed), int(offset)) == ((), torch.int64, 0, 0)
    with pytest.raises(NotImplementedError, match="philox"):
        runtime.efficient_attention_forward(q, k, v, None, True, 0.1)


# ---- the CPU kernel's runtime on a CUDA path -----------------------------------------------------------
class _Spy:
    """``runtime.aten`` recording which ops the runtime calls."""

    def __init__(self):
        self.called: list[str] = []

    def __getattr__(self, name):
        self.called.append(name)
        return getattr(torch.ops.aten, name)


@pytest.mark.parametrize("dtype,kernel", [(torch.float32, "_scaled_dot_product_efficient_attention"),
                                          (torch.bfloat16, "_scaled_dot_product_flash_attention")])
def test_cpu_kernel_stand_in_runs_the_fused_kernel(monkeypatch, dtype, kernel):
    """What the CPU kernel's stand-in runs on CUDA, on meta tensors (the CUDA kernels' meta
    kernels): the fused kernel, the output in the query's layout, the log-sum-exp [B, H, L] the graph
    records; memory-efficient attention's backward gets it padded back to 32."""
    spy = _Spy()
    monkeypatch.setattr(runtime, "aten", spy)
    q = torch.empty(2, 8, 4, 16, dtype=dtype, device="meta").transpose(1, 2)  # [B, H, L, D] laid out BLHD
    k = torch.empty(2, 4, 8, 16, dtype=dtype, device="meta")
    out, lse = runtime.fused_attention_forward(q, k, k, 0.0, True)
    assert out.shape == (2, 4, 8, 16) and out.stride() == q.stride()
    assert lse.shape == (2, 4, 8) and lse.dtype == torch.float32
    grads = runtime.fused_attention_backward(out, q, k, k, out, lse, 0.0, True)
    assert [g.shape for g in grads] == [q.shape, k.shape, k.shape]
    assert spy.called == [kernel, kernel + "_backward"]
    if "efficient" in kernel:
        assert runtime._pad_lse(lse).shape == (2, 4, 32)
    with pytest.raises(NotImplementedError, match="dropout"):
        runtime.fused_attention_forward(q, k, k, 0.1)


def test_cpu_kernel_on_a_cuda_tensor_goes_to_the_fused_path(monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "fused_attention_forward", lambda *a, **kw: calls.append("fwd"))
    monkeypatch.setattr(runtime, "fused_attention_backward", lambda *a, **kw: calls.append("bwd"))
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(1, 2, 8, 16, device="cuda")
        runtime.attention_forward(q, q, q)
        runtime.attention_backward(q, q, q, q, q, torch.empty(1, 2, 8, device="cuda"))
    assert calls == ["fwd", "bwd"]


def test_math_runs_on_cuda_only_where_no_fused_kernel_applies(monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "attention_forward_math", lambda *a, **kw: calls.append("math"))
    monkeypatch.setattr(runtime, "aten", _Spy())
    q = torch.empty(1, 4, 8, 16, device="meta")
    kv = torch.empty(1, 2, 8, 16, device="meta")  # float32 grouped-query heads
    runtime.fused_attention_forward(q, kv, kv)
    assert calls == ["math"]
    runtime.fused_attention_forward(q, q, q)
    assert calls == ["math"] and runtime.aten.called == ["_scaled_dot_product_efficient_attention"]
