"""Tests of the ``sample_graphs`` model definitions (eager on CPU for small ones, fake tensors for big ones)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

import sample_graphs  # noqa: E402

SMALL = [n for n in sample_graphs.NAMES if n.endswith("_tiny") or n.startswith("fig")]
FULL = [n for n in sample_graphs.NAMES if n not in SMALL]

# expected parameter counts (unique parameters, tied weights counted once), in millions
FULL_PARAMS_M = {
    "resnet50": (25.0, 26.0),
    "bert_base": (108.0, 112.0),
    "vit_base": (85.0, 88.0),
    "unet": (30.0, 32.0),
    "unetpp": (8.5, 9.5),
    "gpt_neo_1_3b": (1250.0, 1400.0),
    "btlm_3b": (2550.0, 3000.0),
}


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_names() -> None:
    assert sample_graphs.NAMES == sorted(sample_graphs.NAMES)
    assert set(FULL) == set(FULL_PARAMS_M)
    assert {"fig2_skip", "fig6_ftree", "bert_tiny", "btlm_tiny"} <= set(SMALL)


def test_unknown_name() -> None:
    with pytest.raises(ValueError, match="resnet50"):
        sample_graphs.build("no_such_model")


@pytest.mark.parametrize("name", SMALL)
def test_small_sample_trains(name: str) -> None:
    s = sample_graphs.build(name)
    assert s.name == name and not s.full_size and s.dtype == torch.float32
    assert s.description and "\n" not in s.description
    assert s.module.training and all(m.training for m in s.module.modules())
    for m in s.module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            assert m.p == 0.0
    assert s.loss_fn is not None
    loss = s.loss_fn(s.module, *s.inputs)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    missing = [k for k, p in s.module.named_parameters() if p.grad is None]
    assert not missing, missing
    with torch.no_grad():
        out = s.forward_fn(s.module, *s.inputs)
    outs = (out,) if isinstance(out, torch.Tensor) else out
    assert outs and all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize("name", SMALL)
def test_build_is_deterministic(name: str) -> None:
    a, b = sample_graphs.build(name), sample_graphs.build(name)
    sa, sb = a.module.state_dict(), b.module.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert len(a.inputs) == len(b.inputs)
    for x, y in zip(a.inputs, b.inputs, strict=True):
        assert torch.equal(x, y)


def test_integer_inputs_in_range() -> None:
    for name in ["bert_tiny", "gpt_neo_tiny", "btlm_tiny"]:
        s = sample_graphs.build(name)
        vocab = s.module.config.vocab_size
        for t in s.inputs:
            assert t.dtype == torch.int64 and 0 <= int(t.min()) and int(t.max()) < vocab
    s = sample_graphs.build("unet_tiny")
    assert set(s.inputs[1].unique().tolist()) <= {0, 1}


def test_full_size_under_fake_mode() -> None:
    counts = {}
    for name in FULL:
        with FakeTensorMode():
            s = sample_graphs.build(name)
        assert s.full_size and s.module.training
        params = list(s.module.parameters())
        assert all(isinstance(p, FakeTensor) for p in params)
        assert all(isinstance(x, FakeTensor) for x in s.inputs)
        assert {p.dtype for p in params} == {s.dtype}
        assert s.dtype == (torch.bfloat16 if name in ("gpt_neo_1_3b", "btlm_3b") else torch.float32)
        counts[name] = _params(s.module)
        lo, hi = FULL_PARAMS_M[name]
        assert lo * 1e6 <= counts[name] <= hi * 1e6, (name, counts[name])
    print("\nparameter counts: " + ", ".join(f"{n}={c / 1e6:.2f}M" for n, c in counts.items()))


def test_bert_base_loss_under_fake_mode() -> None:
    with FakeTensorMode():
        s = sample_graphs.build("bert_base")
        assert tuple(s.inputs[0].shape) == (32, 512)
        loss = s.loss_fn(s.module, *s.inputs)
        logits = s.forward_fn(s.module, *s.inputs)
    assert isinstance(loss, FakeTensor) and loss.shape == () and loss.dtype == torch.float32
    assert tuple(logits.shape) == (32, 512, 30522)


@pytest.mark.parametrize("name", ["unet_tiny", "unetpp_tiny"])
def test_unets_split_along_the_batch_over_the_whole_step_unless_batch_norm(name: str) -> None:
    """The U-Net samples have no batch norm (as Ronneberger et al. and Zhou et al. wrote them): their
    F-Tree's largest region is the whole training step -- every op but the loss's value-free seed,
    dominated by the input -- split along the batch.  ``norm=True`` adds BatchNorm, which reduces over
    the batch, so every region stops at one (bench/unet_norm.py measures what that costs the search)."""
    from core.analysis.ftree import build_ftree
    from core.frontend.workload import capture_workload
    from core.ir.graph import NodeKind
    from sample_graphs.unet import build_unet
    from sample_graphs.unetpp import build_unetpp

    build = build_unet if name == "unet_tiny" else build_unetpp
    share = {}
    for norm in (True, False):
        torch.manual_seed(0)
        g = capture_workload(build(name, True, norm=norm), name=name)
        assert (sum("batch_norm" in n.op for n in g.ops()) > 0) == norm
        big = max(build_ftree(g).nodes, key=lambda f: len(f.split.nodes))
        assert big.split.length == 2  # the batch
        share[norm] = len(big.split.nodes) / len(list(g.ops()))
        if not norm:
            assert g[big.dominator].kind == NodeKind.PLACEHOLDER
            assert [n.op for n in g.ops() if n.id not in big.split.nodes] == ["aten.ones_like.default"]
    assert share[True] < 0.2
    assert sample_graphs.build(name).description == build(name, True).description
