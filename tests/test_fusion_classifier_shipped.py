"""GET's shipped validity classifier (``make classifier``, ``core/search/fusion/weights``): each
shipped file loads without training and classifies its held-out groups with the accuracy recorded
at build time; a file of another training setup or graph is refused and the classifier retrained;
training reports its epochs with an estimate of the time left."""

from __future__ import annotations

import json

import pytest
import torch

from core.ir import io
from core.search.fusion import gnn
from core.search.fusion.gnn import (
    MANIFEST,
    WEIGHTS_DIR,
    _key,
    build_shipped,
    dataset,
    heldout_accuracy,
    shipped_path,
    training_setup,
    validity_model,
)
from core.search.fusion.problem import FusionProblem
from sample_graphs.store import graph_path

SHIPPED = json.loads((WEIGHTS_DIR / MANIFEST).read_text())
SMALL = {"samples": 120, "epochs": 2}  # a classifier trained in a second


@pytest.fixture(scope="module")
def mobilenet():
    return FusionProblem(io.load(graph_path("mobilenet_v2", "forward")), "lbdf")


def test_every_fusion_sample_and_scheme_is_shipped():
    assert {(e["graph_file"].split(".")[0], e["scheme"]) for e in SHIPPED} == {
        (n, s) for n in ("mobilenet_v2", "efficientnet_b3", "resnet152") for s in ("lbdf", "brr")}
    for e in SHIPPED:
        assert (WEIGHTS_DIR / e["weights"]).stat().st_size == e["bytes"] < 400_000


@pytest.mark.parametrize("entry", [e for e in SHIPPED if e["graph_file"].startswith("mobilenet_v2")],
                         ids=lambda e: e["scheme"])
def test_shipped_weights_load_and_keep_their_heldout_accuracy(entry, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))  # nothing from a local cache
    p = FusionProblem(io.load(graph_path("mobilenet_v2", "forward")), entry["scheme"])
    heard: list[str] = []
    m = validity_model([p], progress=heard.append)
    assert m.source == "shipped" and m.cached and m.seconds == 0.0 and not heard  # no training
    assert shipped_path(_key([p], 6000, 40, 0)).name == entry["weights"]
    assert m.accuracy == entry["accuracy"] and m.heldout == entry["heldout"]
    _train, test, _rng = dataset([p], 6000, 0)  # the held-out groups of the build, drawn again
    assert len(test) == entry["heldout"]
    acc, maj = heldout_accuracy(m.net, test)
    assert abs(acc - entry["accuracy"]) <= 2 / len(test)  # two groups of slack for another CPU's rounding
    assert acc > maj and acc >= 0.9
    assert not list(tmp_path.rglob("*.pt"))  # nothing trained, nothing cached


def test_a_stale_or_mismatched_file_is_refused_and_retrained(mobilenet, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gnn, "WEIGHTS_DIR", tmp_path / "weights")
    path, shipped = build_shipped([mobilenet], tmp_path / "weights", **SMALL)
    assert path == shipped_path(_key([mobilenet], SMALL["samples"], SMALL["epochs"], 0))
    m = validity_model([mobilenet], **SMALL)
    assert m.source == "shipped" and m.accuracy == shipped.accuracy

    blob = torch.load(path, weights_only=True)
    for stale in ({"setup": training_setup("lbdf", SMALL["samples"], SMALL["epochs"], 0) | {"version": 0}},
                  {"setup": {**blob["setup"], "scheme": "brr"}},
                  {"key": "0" * 20}):  # the file of another graph under this one's name
        torch.save(blob | stale, path)
        heard: list[str] = []
        m = validity_model([mobilenet], use_cache=False, progress=heard.append, **SMALL)
        assert m.source == "trained" and not m.cached and m.seconds > 0
        assert any("epoch 2/2" in h for h in heard)
    path.write_bytes(b"not a torch file")
    assert validity_model([mobilenet], use_cache=False, **SMALL).source == "trained"


def test_training_reports_epochs_with_the_time_left(mobilenet, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    monkeypatch.setattr(gnn, "WEIGHTS_DIR", tmp_path / "none")
    heard: list[str] = []
    m = validity_model([mobilenet], samples=120, epochs=3, progress=heard.append)
    assert m.source == "trained"
    epochs = [h for h in heard if "epoch" in h and "left" in h]
    assert [h.split("epoch ")[1].split(",")[0] for h in epochs] == ["1/3", "2/3", "3/3"]
    assert all("s left" in h or "min left" in h for h in epochs)
    again = validity_model([mobilenet], samples=120, epochs=3)
    assert again.source == "cache" and again.accuracy == m.accuracy
