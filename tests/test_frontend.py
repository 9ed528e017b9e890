"""PyTorch frontend on a small model: exact shapes, kinds, aliasing, names, module paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from core.frontend.torch_import import ImportErrorMAGIS, capture
from core.ir.graph import NodeKind, TensorKind


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(m(x), y)


def _capture(training: bool = True, fake: bool = True, sgd_lr=None, adam_lr=None):
    torch.manual_seed(0)
    ctx = FakeTensorMode(allow_non_fake_inputs=True) if fake else torch.no_grad()
    with ctx:
        m = Block()
        x = torch.randn(5, 8)
        y = torch.randint(0, 4, (5,))
    return m, capture(m, (x, y), _loss, forward_fn=lambda m, x, y: m(x), training=training, name="block",
                      sgd_lr=sgd_lr, adam_lr=adam_lr)


def test_training_graph_has_every_weight_gradient():
    m, g = _capture()
    names = [n for n, _ in m.named_parameters()]
    assert sorted(k for k in g.outputs if k.startswith("grad:")) == sorted(f"grad:{n}" for n in names)
    for n in names:
        p = dict(m.named_parameters())[n]
        t = g.tensor(g.outputs[f"grad:{n}"])
        assert t.shape == tuple(p.shape) and t.dtype == "float32"
    assert g.tensor(g.outputs["loss"]).shape == ()
    assert g.meta["mode"] == "train"


def test_placeholders_and_kinds():
    m, g = _capture()
    ph = {n.target: n for n in g.placeholders()}
    assert set(ph) == {f"param:{n}" for n, _ in m.named_parameters()} | {"input:0", "input:1"}
    assert ph["input:0"].name == "input_0" and ph["input:0"].out.shape == (5, 8)
    assert ph["input:1"].out.dtype == "int64"
    assert ph["param:fc1.weight"].out.kind == TensorKind.WEIGHT
    kinds = {t.kind for n in g.ops() for t in n.outputs}
    assert TensorKind.ACTIVATION in kinds and TensorKind.GRADIENT in kinds
    assert g.weight_bytes() == sum(p.numel() * 4 for p in m.parameters())


def test_views_alias_their_base():
    _, g = _capture()
    views = [n for n in g.ops() if n.op in ("aten.t.default", "aten.view.default", "aten.detach.default")]
    assert views
    for n in views:
        assert n.out.alias is not None and n.out.nbytes == 0
    # the transpose of a weight lives in the weight's storage
    t = next(n for n in views if n.op == "aten.t.default" and g[n.out.alias.node].kind == NodeKind.PLACEHOLDER)
    assert g[g.storage_root(t.refs()[0]).node].target.startswith("param:")


def test_module_paths_from_parameter_ownership():
    _, g = _capture()
    mods = {n.op: n.module for n in g.ops() if n.out.kind == TensorKind.ACTIVATION}
    assert mods["aten.addmm.default"] in ("fc1", "fc2")
    assert mods["aten.native_layer_norm.default"] == "norm"
    assert mods["aten.relu.default"] == "norm"  # reads only norm's output


def test_forward_graph_and_real_tensors():
    _, g = _capture(training=False, fake=False)
    assert g.meta["mode"] == "forward"
    assert list(g.outputs) == ["output_0"]
    assert g.tensor(g.outputs["output_0"]).shape == (5, 4)
    assert all(t.kind != TensorKind.GRADIENT for n in g.ops() for t in n.outputs)


def test_sgd_update_outputs_new_parameters():
    m, g = _capture(sgd_lr=0.1)
    for n, p in m.named_parameters():
        node = g[g.outputs[f"param:{n}"].node]
        assert node.op == "aten.add.Tensor" and node.kwargs["alpha"] == -0.1
        assert node.out.shape == tuple(p.shape)


def test_adam_update_reads_and_writes_resident_moments():
    m, g = _capture(adam_lr=1e-3)
    params = dict(m.named_parameters())
    assert g.meta["adam"] == {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "step": 1}
    for n, p in params.items():
        new = g[g.outputs[f"param:{n}"].node]
        assert new.op == "aten.addcdiv.default" and new.kwargs["value"] == pytest.approx(-1e-3 / (1 - 0.9))
        for which in ("m", "v"):
            ph = next(x for x in g.placeholders() if x.target == f"adam_{which}:{n}")
            assert ph.out.kind == TensorKind.OPTIMIZER_STATE and ph.out.shape == tuple(p.shape)
            assert g.tensor(g.outputs[f"adam_{which}:{n}"]).kind == TensorKind.OPTIMIZER_STATE
    # the resident floor: weights and both moments
    assert g.weight_bytes() == 3 * sum(p.numel() * p.element_size() for p in params.values())
    with pytest.raises(ImportErrorMAGIS, match="SGD or Adam"):
        _capture(sgd_lr=0.1, adam_lr=1e-3)


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.mix = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied, as in BERT / GPT heads


def _tied_loss(m: TiedLM, ids: torch.Tensor) -> torch.Tensor:
    return m.head(torch.tanh(m.mix(m.embed(ids)))).logsumexp(-1).mean()


def test_tied_weights_are_one_input_with_an_accumulated_gradient():
    from core.codegen.verify import verify_module

    torch.manual_seed(0)
    m = TiedLM()
    ids = torch.randint(0, 11, (3, 4))
    g = capture(m, (ids,), _tied_loss, name="tied")
    params = sorted(n.target for n in g.placeholders() if n.target.startswith("param:"))
    assert params == sorted(f"param:{n}" for n, _ in m.named_parameters())
    assert sorted(k for k in g.outputs if k.startswith("grad:")) == sorted(
        f"grad:{n}" for n, _ in m.named_parameters())
    acc = g[g.outputs["grad:embed.weight"].node]
    assert acc.op == "aten.add.Tensor" and acc.name.startswith("accumulate_grad_embed_weight")
    res = verify_module(m, (ids,), _tied_loss, graph=g)
    assert res["allclose"] and res["max_rel_error"] < 1e-5
    assert res["measured_peak_bytes"] == res["simulated_peak_bytes"]
