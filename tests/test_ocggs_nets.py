"""The graph-substitution benchmark models (``sample_graphs/ocggs_nets.py``): each registered name
builds on fake tensors and captures as a forward graph with the operator counts its architecture
gives (counted by hand below), and the scaling stacks run eagerly on real tensors."""

from __future__ import annotations

import collections
import functools

import pytest
import torch

import sample_graphs
from core.frontend.torch_import import capture
from core.frontend.workload import build_fake
from sample_graphs import ocggs_nets

CONV = "aten.convolution.default"
BN = "aten._native_batch_norm_legit_no_training.default"
MATMULS = ("aten.addmm.default", "aten.mm.default")
T, B, H = ocggs_nets.SEQ, ocggs_nets.BATCH, ocggs_nets.HIDDEN

# Inception-v3: stem 5 + InceptionA 3x7 + InceptionB 4 + InceptionC 4x10 + InceptionD 6 + InceptionE 2x9
INCEPTION_CONVS = 5 + 3 * 7 + 4 + 4 * 10 + 6 + 2 * 9
# ResNeXt-50: stem 1 + 16 blocks x 3 + 4 projection shortcuts
RESNEXT_CONVS = 1 + (3 + 4 + 6 + 3) * 3 + 4

EXPECTED = {
    # name: (output shape, convolutions, addmm, mm)
    "inception_v3": ((1, 1000), INCEPTION_CONVS, 1, 0),
    "resnext50": ((1, 1000), RESNEXT_CONVS, 1, 0),
    # per layer and step: W_f x + b_f, W_r x + b_r (addmm) and W x (mm, no bias)
    "sru": ((T, B, H), 0, 2 * T * 2, 2 * T * 1),
    # per step: 8 leaves of W_i x (+ bias: addmm) and U_i h (no bias: mm)
    "nasrnn": ((T, B, H), 0, 8 * T, 8 * T),
}


@functools.cache
def graph(name: str):
    s = build_fake(lambda: sample_graphs.build(name))
    s.module.eval()
    return capture(s.module, s.inputs, forward_fn=s.forward_fn, training=False, name=name)


def test_the_hand_counts():
    assert INCEPTION_CONVS == 94 and RESNEXT_CONVS == 53


def test_forward_names_list_the_benchmark_models():
    assert {"inception_v3", "resnext50", "sru", "nasrnn"} <= set(sample_graphs.FORWARD_NAMES)
    assert set(ocggs_nets.OCGGS_NAMES) <= set(sample_graphs.FORWARD_NAMES)
    assert not set(sample_graphs.FORWARD_NAMES) & set(sample_graphs.NAMES)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_captures_as_a_forward_graph_with_the_architecture_counts(name):
    shape, convs, addmm, mm = EXPECTED[name]
    g = graph(name)
    ops = collections.Counter(n.op for n in g)
    assert [g.tensor(r).shape for r in g.outputs.values()] == [shape]
    assert all(g.tensor(r).dtype == "float32" for r in g.outputs.values())
    assert ops[CONV] == convs
    assert (ops["aten.addmm.default"], ops["aten.mm.default"]) == (addmm, mm)
    # BatchNorm is kept (as inference batch norm) after every convolution; no training-mode BN
    assert ops[BN] == convs
    assert not any("batch_norm" in op and op != BN for op in ops)
    assert not any(op.startswith("aten.convolution_backward") for op in ops)


def test_rnn_projections_are_separate_matmuls_sharing_their_input():
    """What a "merge matmuls with a shared input" rewrite looks for: per step the SRU's three
    projections read the same x_t, the NAS cell's 8 x-side linears the same x_t and its 8 h-side
    linears the same h_{t-1}."""
    for name, group in (("sru", 3), ("nasrnn", 8)):
        g = graph(name)
        readers = collections.Counter()
        for n in g:
            if n.op in MATMULS:
                a = n.args[1] if n.op == "aten.addmm.default" else n.args[0]
                readers[a] += 1
        assert readers and set(readers.values()) == {group}, name


def test_scaling_stacks_run_eagerly():
    torch.manual_seed(0)
    s = ocggs_nets.resnet_blocks(2)
    assert s.name == "resnet_blocks_2" and not s.module.training
    with torch.no_grad():
        y = s.forward_fn(s.module, *s.inputs)
    assert y.shape == (1, 64, 56, 56) and torch.isfinite(y).all() and (y >= 0).all()
    assert sum(isinstance(m, torch.nn.Conv2d) for m in s.module.modules()) == 1 + 2 * 2

    s = ocggs_nets.inception_e_blocks(1)
    assert s.name == "inception_e_blocks_1" and s.inputs[0].shape == (1, 1280, 8, 8)
    with torch.no_grad():
        y = s.forward_fn(s.module, *s.inputs)
    assert y.shape == (1, 2048, 8, 8) and torch.isfinite(y).all()
    assert sum(isinstance(m, torch.nn.Conv2d) for m in s.module.modules()) == 9
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in ocggs_nets.inception_e_blocks(2).module.modules()) == 18


def test_sru_layer_is_the_published_recurrence():
    """A small SRU layer, checked step by step against c_t = f c_{t-1} + (1 - f) W x_t and
    h_t = r tanh(c_t) + (1 - r) x_t."""
    torch.manual_seed(0)
    layer = ocggs_nets.SRULayer(8)
    xs = list(torch.randn(4, 2, 8).unbind(0))
    with torch.no_grad():
        hs = layer(xs)
        c = torch.zeros(2, 8)
        for x, h in zip(xs, hs, strict=True):
            f = torch.sigmoid(x @ layer.w_f.weight.T + layer.w_f.bias)
            r = torch.sigmoid(x @ layer.w_r.weight.T + layer.w_r.bias)
            c = f * c + (1 - f) * (x @ layer.w.weight.T)
            torch.testing.assert_close(h, r * torch.tanh(c) + (1 - r) * x)
