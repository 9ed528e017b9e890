"""Fake-tensor builds of models nobody tuned for: ``torch.nn.init`` in ``__init__``, dtype conversion
in a factory, an fp32 MoE on ``torch._grouped_mm``; each builds on fake tensors, captures, and the
real build computes what it computes without MAGIS.  Errors stay one line (torch's log held for
``--verbose``), and their hints are never cut."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.init import trunc_normal_ as imported_trunc_normal_

from app.cli import error_line, main
from core.frontend.torch_import import ImportErrorMAGIS
from core.frontend.workload import build_fake, capture_workload, no_random_init_on_fake_tensors
from tests.modern_models import moe, sdpa_transformer


class ViTLike(nn.Module):
    """timm / torchvision style: initialisers called in ``__init__``, one imported by name."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.pos = nn.Parameter(torch.zeros(1, 4, 8))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.cls = nn.Parameter(torch.zeros(1, 1, 8))
        imported_trunc_normal_(self.cls, std=0.02)
        self.head = nn.Linear(8, 16)
        nn.init.orthogonal_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos
        return self.head(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1))


class W:
    def __init__(self, convert=lambda m: m) -> None:
        torch.manual_seed(0)
        self.module = convert(ViTLike())
        self.inputs = (torch.randint(0, 16, (2, 4)),)

    @staticmethod
    def loss_fn(m, ids):
        return m(ids).float().square().mean()


def test_nn_init_in_init_builds_on_fake_tensors_and_eager_is_unchanged():
    fake = build_fake(W)
    g = capture_workload(fake)
    assert len(g) > 10
    # the initialisers are themselves again, and a real build draws what it draws without MAGIS
    assert nn.init.trunc_normal_.__module__ == "torch.nn.init" and imported_trunc_normal_ is nn.init.trunc_normal_
    with no_random_init_on_fake_tensors():  # outside FakeTensorMode: a no-op
        a = W().module
    b = W().module
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(b.pos, torch.zeros_like(b.pos))  # trunc_normal_ ran for real


@pytest.mark.parametrize("convert,dtype", [(lambda m: m.to(torch.bfloat16), "bfloat16"),
                                           (lambda m: m.half(), "float16"),
                                           (lambda m: m.bfloat16(), "bfloat16")])
def test_dtype_conversion_in_a_factory(convert, dtype):
    fake = build_fake(lambda: W(convert))
    m = fake.module
    assert m.head.weight is m.emb.weight  # tied weights stay tied
    assert {str(p.dtype).removeprefix("torch.") for p in m.parameters()} == {dtype}
    g = capture_workload(fake)
    weights = [n.out.dtype for n in g.placeholders() if n.target.startswith("param:")]
    assert weights and set(weights) == {dtype}
    real = W(convert).module  # eager conversion unchanged
    assert real.head.weight is real.emb.weight and real.pos.dtype == getattr(torch, dtype)


def test_fp32_moe_on_grouped_mm_builds_captures_and_verifies():
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    from core.codegen.verify import problems, verify_workload
    from core.frontend.fake_kernels import capture_kernels

    def ours() -> list:
        return [c for c in fake_impls.op_implementations_checks if c[1].__name__ == "_fake_grouped_mm"]

    # installed while a capture traces, and only then; torch's own fake kernel rejects float32
    # (the real CPU kernel takes it)
    with capture_kernels():
        assert len(ours()) == 1
    assert ours() == []
    with pytest.raises(RuntimeError, match="BF16"), FakeTensorMode():
        torch._grouped_mm(torch.empty(16, 8), torch.empty(4, 8, 8),
                          offs=torch.tensor([4, 8, 12, 16], dtype=torch.int32))
    g = capture_workload(build_fake(moe))
    assert any(n.op == "aten._grouped_mm.default" and n.out.dtype == "float32" for n in g)
    res = verify_workload(moe(), details=True, rebuild=moe)
    assert problems(res) == [], problems(res)


BAD = '''
import torch
from torch import nn


class Bad(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.experts = nn.Parameter(torch.randn(4, 8, 8, dtype=torch.float16))

    def forward(self, x):
        offs = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
        return torch._grouped_mm(x @ self.w, self.experts.float().to(torch.float16), offs=offs)


class Workload:
    def __init__(self):
        self.module = Bad()
        self.inputs = (torch.randn(4, 8),)

    @staticmethod
    def loss_fn(m, x):
        return m(x).float().sum()


def build():
    return Workload()
'''


def test_a_failed_capture_is_one_line_and_torchs_log_waits_for_verbose(tmp_path, capfd):
    """torch's fake kernel logs its stack (about 20 lines) before raising: kept out of the line."""
    (tmp_path / "bad.py").write_text(BAD)
    spec = f"{tmp_path / 'bad.py'}:build"
    assert main(["import", spec, "-o", str(tmp_path / "g.json")]) == 2
    err = [ln for ln in capfd.readouterr().err.strip().splitlines() if not ln.startswith("[")]  # not progress
    assert len(err) == 1 and err[0].startswith("magis: error: could not capture the model"), err
    assert "hint: " in err[0]
    assert main(["import", spec, "-o", str(tmp_path / "g.json"), "--verbose"]) == 2
    err = capfd.readouterr().err
    assert "Traceback" in err and "torch logged:" in err and len(err.splitlines()) > 10
    assert err.strip().splitlines()[-1].startswith("magis: error: could not capture the model")


def test_the_hint_of_a_long_error_is_never_cut():
    hint = "capture runs on fake tensors that have shapes but no values; " * 4
    e = ImportErrorMAGIS("could not capture the model: " + "x" * 600 + "; hint: " + hint.strip())
    line = error_line(e)
    assert line.endswith(hint.strip()) and "..." in line and len(line) < 600
    assert error_line(ValueError("y" * 500)).endswith("...")  # no hint: cut at the limit
    assert error_line(ValueError("short; hint: keep")) == "short; hint: keep"


def test_the_tiny_sdpa_model_builds_on_fake_tensors():
    g = capture_workload(build_fake(sdpa_transformer))
    assert any("scaled_dot_product" in n.op for n in g)
