"""The NAS workloads: genotypes build, RandWire graphs are seeded DAGs, and a small captured NAS
network is scheduled by HMCOS at Serenity's optimum, never above RPO."""

from __future__ import annotations

import random

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from core.frontend.torch_import import capture
from core.schedule import get_scheduler
from sample_graphs.nas import NAS_MEMORY_MODEL, NAS_NAMES, NASNetwork, RandWire, build_nas, ws_graph


def test_nas_names_and_builders():
    assert len(NAS_NAMES) == 9
    with FakeTensorMode(allow_non_fake_inputs=True):
        module, (x,) = build_nas("darts_imagenet")
        assert tuple(module(x).shape) == (1, 1000)
        net = NASNetwork("amoebanet", "cifar")
        assert len(net.cells) == 20
        assert tuple(net(torch.randn(1, 3, 32, 32)).shape) == (1, 10)


def test_ws_graph_is_a_seeded_dag():
    a = ws_graph(32, 4, 0.75, random.Random(1))
    b = ws_graph(32, 4, 0.75, random.Random(1))
    c = ws_graph(32, 4, 0.75, random.Random(2))
    assert a == b and a != c
    assert all(p < v for v, ps in enumerate(a) for p in ps)
    assert sum(len(p) for p in a) == 32 * 4 // 2  # WS keeps the edge count n * k / 2


def test_small_randwire_hmcos_is_optimal():
    with FakeTensorMode(allow_non_fake_inputs=True):
        module = RandWire(3, channels=8, nodes=10).eval()
        x = torch.randn(1, 3, 64, 64)
    g = capture(module, (x,), training=False, name="randwire_small")
    rpo = get_scheduler("rpo").run(g).order
    from core.analysis.lifetimes import memory_profile

    p_rpo = memory_profile(g, rpo, **NAS_MEMORY_MODEL).peak
    ser = get_scheduler("serenity", **NAS_MEMORY_MODEL).run(g)
    hm = get_scheduler("hmcos", **NAS_MEMORY_MODEL).run(g)
    assert ser.info["exact"]
    assert hm.peak == ser.peak <= p_rpo
