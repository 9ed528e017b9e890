"""GET's validity classifier (k-GNN) and its explainers; the splitting they guide on real graphs."""

from __future__ import annotations

import pytest
import torch

from core.ir import io
from core.search.fusion.gnn import (
    KGNN,
    N_FEATURES,
    ValidityModel,
    gnn_explainer,
    gradient_explainer,
    group_tensors,
    validity_model,
)
from core.search.fusion.problem import FusionProblem, check_plan
from core.search.fusion.search import run_search
from core.search.fusion.split import Splitter, group_edges
from sample_graphs.store import graph_path

KIB = 1024


@pytest.fixture(scope="module")
def mobilenet():
    return FusionProblem(io.load(graph_path("mobilenet_v2", "forward")), "lbdf")


def untrained() -> ValidityModel:
    torch.manual_seed(0)
    return ValidityModel(KGNN(), "lbdf", 0.0, 0.0, 0, 0.0, False)


def a_block(p: FusionProblem) -> frozenset[int]:
    """The first inverted residual with a skip: from the block's input to its add."""
    add = next(v for v in range(p.n) if p.kind[v] == "binary")
    start = min(p.preds[add])
    return frozenset(range(start, add + 1))


def test_features_and_the_unmasked_prediction(mobilenet):
    p = mobilenet
    group = a_block(p)
    x, ei, edges = group_tensors(p, group, 256 * KIB)
    assert x.shape == (len(group), N_FEATURES) and ei.shape == (2, len(edges))
    assert set(edges) == set(group_edges(p, group)) and len(edges) > len(group) - 1  # a skip edge too
    net = untrained().net
    b = torch.zeros(len(x), dtype=torch.long)
    assert torch.allclose(net(x, ei, b, 1), net(x, ei, b, 1, torch.ones(len(edges))))
    assert len(net.self_lin) == 4 and net.self_lin[0].out_features == 128


def test_explainers_return_edges_of_the_group(mobilenet):
    p = mobilenet
    group = a_block(p)
    m = untrained()
    for make in (gnn_explainer, gradient_explainer):
        ex = make(m)
        first = ex(p, group, 64 * KIB, 3)
        assert 0 < len(first) <= 3 and set(first) <= set(group_edges(p, group))
        assert ex(p, group, 64 * KIB, 3) == first  # deterministic


def test_classifier_is_cached_on_disk(mobilenet, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    a = validity_model([mobilenet], samples=80, epochs=1)
    b = validity_model([mobilenet], samples=80, epochs=1)
    assert not a.cached and b.cached and b.accuracy == a.accuracy and 0 <= a.accuracy <= 1
    group = a_block(mobilenet)
    assert a.logit(mobilenet, group, 128 * KIB) == pytest.approx(b.logit(mobilenet, group, 128 * KIB))


@pytest.mark.slow
def test_trained_classifier_and_guided_splitting(mobilenet, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    m = validity_model([mobilenet])
    assert m.accuracy >= 0.9 and m.accuracy > m.majority
    beta = 256 * KIB
    random_split = run_search(mobilenet, beta, "local", Splitter(mobilenet, beta), 200, seed=0)
    for ex in (gradient_explainer(m), gnn_explainer(m)):
        sp = Splitter(mobilenet, beta, ex)
        guided = run_search(mobilenet, beta, "local", sp, 200, seed=0)
        assert check_plan(mobilenet, guided.groups) == []
        assert guided.dram <= random_split.dram
        assert sp.stats.rectify_rate > 0.5
