"""Every committed workload graph loads, validates and summarises; tiny ones match a fresh capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sample_graphs
from core.ir import io
from core.ir.graph import TensorKind
from core.summary import graph_info
from sample_graphs.store import graph_path

ROOT = Path(__file__).resolve().parents[1]
FULL = ["resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"]


@pytest.mark.parametrize("name", sample_graphs.NAMES)
def test_committed_graph_info(name):
    path = graph_path(name)
    assert path.exists(), f"missing {path}; run `make graphs`"
    g = io.load(path)
    info = graph_info(g, device="rtx3090")
    assert info["nodes"] > 50
    assert info["baseline_peak_bytes"] > info["weight_bytes"] > 0
    assert info["latency_seconds"] > 0
    assert info["hotspots"] and all(h["bytes"] > 0 for h in info["hotspots"])
    grads = [k for k in g.outputs if k.startswith("grad:")]
    assert grads and "loss" in g.outputs
    weights = {n.target.split(":", 1)[1] for n in g.placeholders() if n.target.startswith("param:")}
    assert {k.split(":", 1)[1] for k in grads} == weights


def test_full_size_workloads_are_the_papers():
    dtypes = {}
    for name in FULL:
        g = io.load(graph_path(name))
        inputs = [n for n in g.placeholders() if n.out.kind == TensorKind.INPUT]
        dtypes[name] = {n.out.dtype for n in g.placeholders() if n.out.kind == TensorKind.WEIGHT
                        and n.target.startswith("param:")}
        batch = inputs[0].out.shape[0]
        assert batch == {"resnet50": 64, "bert_base": 32, "vit_base": 64, "unet": 32, "unetpp": 16,
                         "gpt_neo_1_3b": 32, "btlm_3b": 32}[name]
    assert dtypes["gpt_neo_1_3b"] == {"bfloat16"} and dtypes["btlm_3b"] == {"bfloat16"}
    assert dtypes["resnet50"] == {"float32"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in sample_graphs.NAMES if n.endswith("_tiny") or n.startswith("fig")])
def test_committed_tiny_graphs_match_a_fresh_capture(name):
    from sample_graphs.capture import capture_sample

    fresh = io.graph_to_dict(capture_sample(name))
    committed = io.graph_to_dict(io.load(graph_path(name)))
    for d in (fresh, committed):
        d["meta"].pop("capture_seconds", None)
    assert fresh == committed, "committed graph is stale: run `make graphs`"


def test_magis_info_json_on_a_full_size_graph():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "app.cli", "info", str(graph_path("gpt_neo_1_3b")), "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["nodes"] > 4000 and info["weight_bytes"] > 2.5 * 1024**3
