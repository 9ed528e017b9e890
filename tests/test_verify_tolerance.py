"""Verify's comparison: torch.testing's tolerance per dtype, rtol relative to each tensor's magnitude;
the dtype a model computes in reported as it is; ``magis verify`` exits 1 when it fails."""

from __future__ import annotations

import json

import pytest
import torch
from torch.testing._comparison import default_tolerances

from app.cli import main
from core.codegen.verify import TOLERANCES, compare, tolerance

BF16_MODEL = '''
import torch
from torch import nn


class Workload:
    def __init__(self):
        torch.manual_seed(0)
        self.module = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to(torch.bfloat16)
        self.inputs = (torch.randn(3, 8, dtype=torch.bfloat16),)

    @staticmethod
    def loss_fn(module, x):
        return module(x).float().square().mean()


def build():
    return Workload()
'''


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.complex64, torch.complex128, torch.int64, torch.bool])
def test_tolerances_are_torch_testings(dtype):
    assert tolerance(dtype) == default_tolerances(torch.empty(0, dtype=dtype))


def test_rtol_is_relative_to_the_tensors_magnitude():
    ref = torch.tensor([100.0, 1e-3])
    noisy = ref + torch.tensor([0.0, 5e-5])  # reduction noise on an element that cancelled
    with pytest.raises(AssertionError):  # element-wise, torch.testing rejects it ...
        torch.testing.assert_close(noisy, ref)
    r = compare({"g": noisy}, {"g": ref}, ["g"])["g"]
    assert r["allclose"] and (r["rtol"], r["atol"]) == TOLERANCES["float32"]  # ... on its scale it is noise
    assert r["max_rel"] == pytest.approx(5e-5 / 100, rel=1e-3)
    # the allowance is atol + rtol * 100 = 1.4e-4: twice that is not noise
    assert not compare({"g": ref + torch.tensor([0.0, 2.8e-4])}, {"g": ref}, ["g"])["g"]["allclose"]


def test_bfloat16_gets_bfloat16_tolerance_and_dtypes_must_match():
    ref = torch.tensor([1.0, 2.0, 4.0], dtype=torch.bfloat16)
    got = ref * (1 + 2 ** -7)  # one bf16 ulp near 1
    assert compare({"x": got}, {"x": ref}, ["x"])["x"]["allclose"]
    assert not compare({"x": got.float()}, {"x": ref.float()}, ["x"])["x"]["allclose"]  # float32: too far
    assert not compare({"x": ref.float()}, {"x": ref}, ["x"])["x"]["allclose"]  # another dtype
    assert not compare({"x": ref + 1}, {"x": ref}, ["x"], rtol=0.0, atol=0.5)["x"]["allclose"]  # explicit


def test_a_bfloat16_model_verifies_and_is_reported_as_bfloat16(tmp_path, capsys):
    (tmp_path / "m.py").write_text(BF16_MODEL)
    spec = f"{tmp_path / 'm.py'}:build"
    assert main(["verify", spec, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["dtype"] == "bfloat16" and res["rtol"] == 1.6e-2


def test_verify_exits_1_when_outputs_differ(tmp_path, capsys):
    # the loss grows with each call: the script (traced at call 1) differs from eager (a later call)
    src = BF16_MODEL.replace("class Workload:", "CALLS = [0]\n\n\nclass Workload:").replace(
        "return module(x).float().square().mean()",
        "CALLS[0] += 1\n        return module(x).float().square().mean() * CALLS[0]")
    (tmp_path / "m.py").write_text(src)
    assert main(["verify", f"{tmp_path / 'm.py'}:build"]) == 1
    assert "magis: verification failed: outputs differ" in capsys.readouterr().err
