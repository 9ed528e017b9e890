"""Round trip of the convolutional tiny workloads (ResNet-50 with batch norm in training mode; U-Net and
U-Net++ without, as the samples have them, and U-Net with BatchNorm): the exported script, run on the
sample's real weights and inputs, reproduces eager PyTorch's loss, every gradient and the new running
statistics (float32, element-wise |got - ref| <= 1e-5 + 1e-4 |ref|), and its live storage bytes equal
the simulator's after every op, for the traced order, reverse post-order and a seeded random
topological order.

Capturing a tiny workload with AOTAutograd takes seconds, so these are marked slow (they still run).
The transformer workloads are in test_codegen_samples_lm.py.
"""

from __future__ import annotations

import pytest

import sample_graphs
from core.codegen.verify import capture_real, problems, verify_module

pytestmark = pytest.mark.slow

SCHEDULES = ("traced", "rpo", "random:1")


def _build(name: str, norm: bool | None):
    if norm is None:
        return sample_graphs.build(name)
    import torch

    from sample_graphs.unet import build_unet

    torch.manual_seed(0)
    return build_unet(name, True, norm=norm)


@pytest.mark.parametrize(("name", "norm"), [("resnet50_tiny", None), ("unet_tiny", None), ("unetpp_tiny", None),
                                            ("unet_tiny", True)])
def test_tiny_workload_round_trip(name, norm):
    s = _build(name, norm)
    assert s.dtype == __import__("torch").float32
    g = capture_real(s, name=name, rebuild=lambda: _build(name, norm))
    batch_norm = any("batch_norm" in n.op for n in g.ops())
    assert batch_norm == (name == "resnet50_tiny" or bool(norm))
    for schedule in SCHEDULES:
        res = verify_module(s.module, s.inputs, s.loss_fn, graph=g, schedule=schedule)
        assert not problems(res), (schedule, problems(res))
        assert res["max_abs_error"] <= 1e-5 and res["loss_abs_error"] <= 1e-6
        assert any(k.startswith("buffer:") and k.endswith("running_mean") for k in res["per_tensor"]) == batch_norm
