"""Device-neutral export: a graph captured on the CPU records the CPU attention kernel; the exported
script's steps call the device-neutral runtime functions instead (the CPU kernel on the CPU, the same
outputs in plain math elsewhere), and verify against eager PyTorch."""

from __future__ import annotations

import re

import pytest
import torch

from core.codegen import runtime
from core.codegen.emit import generate_source, runtime_source
from core.codegen.verify import problems, verify_workload
from core.frontend.workload import capture_workload
from core.ir import ops
from core.schedule import get_scheduler
from tests.modern_models import sdpa_transformer

# kernels that exist for one device only (torch's own names); an exported step names none of them
DEVICE_KERNELS = re.compile(r"_for_cpu|_efficient_attention|_flash_attention|_cudnn_attention|mkldnn|miopen|_cuda")


def _step_body(src: str) -> str:
    i = src.index("def _step(")
    return src[i:]


def test_exported_sdpa_model_names_no_device_kernel_and_matches_eager():
    w = sdpa_transformer()
    g = capture_workload(w)
    assert any(n.op.endswith("_for_cpu.default") for n in g)  # what a CPU capture records
    src = generate_source(g, get_scheduler("traced").run(g).order)
    body = _step_body(src)
    assert "attention_forward(" in body and "attention_backward(" in body
    called = set(re.findall(r"(?:aten|torch\.ops\.\w+)\.(\w+)\.\w+\(", body))
    assert called and not [c for c in called if DEVICE_KERNELS.search(c)], called
    # the device choice lives in the runtime: the only place a CPU kernel is named
    assert "_scaled_dot_product_flash_attention_for_cpu(" in runtime_source()
    res = verify_workload(sdpa_transformer(), details=True)
    assert problems(res) == [], problems(res)


def test_every_device_specific_kernel_a_capture_records_is_mapped():
    for op in ops.ops_modern.DEVICE_NEUTRAL:
        assert DEVICE_KERNELS.search(op) and ops.emit(op) != op


@pytest.mark.parametrize("causal,mask", [(False, False), (True, False), (False, True)])
def test_math_attention_equals_the_cpu_kernel(causal, mask):
    """What a non-CPU device runs: output (in the query's layout), log-sum-exp and gradients equal
    the CPU kernel's."""
    torch.manual_seed(0)
    d = torch.float64
    q = torch.randn(2, 5, 3, 4, dtype=d).transpose(1, 2)  # [B, H, L, D] laid out as [B, L, H, D]
    k, v = torch.randn(2, 3, 6, 4, dtype=d), torch.randn(2, 3, 6, 4, dtype=d)
    kw = {"attn_mask": torch.randn(2, 1, 5, 6, dtype=d)} if mask else {}
    out, lse = runtime.attention_forward(q, k, v, 0.0, causal, **kw)
    mo, ml = runtime.attention_forward_math(q, k, v, 0.0, causal, **kw)
    torch.testing.assert_close(mo, out)
    torch.testing.assert_close(ml.to(lse.dtype), lse)
    assert mo.stride() == out.stride()  # views the model takes of it work alike
    go = torch.randn_like(out)
    ref = runtime.attention_backward(go, q, k, v, out, lse, 0.0, causal, **kw)
    got = runtime.attention_backward_math(go, q, k, v, out, lse, 0.0, causal, **kw)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b)


def test_attention_dropout_off_the_cpu_is_refused_not_silently_different():
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(NotImplementedError, match="dropout"):
        runtime.attention_forward_math(q, q, q, 0.1)
