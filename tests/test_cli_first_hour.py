"""The command line as a new user first meets it (issue 27): verify a plan of one's own model file,
exit statuses that tell "limit not reached" and "verification failed" from bad input, verify's
summary, a mistyped sample name, and output piped into ``head``."""

from __future__ import annotations

import json

import pytest

import sample_graphs
from app.cli import main

MLP = '''
import torch
from torch import nn


class Workload:
    def __init__(self):
        self.module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.inputs = (torch.randn(3, 8),)

    @staticmethod
    def loss_fn(module, x):
        return module(x).square().mean()


def build():
    return Workload()
'''


@pytest.fixture
def mlp(tmp_path) -> str:
    (tmp_path / "mlp.py").write_text(MLP)
    return f"{tmp_path / 'mlp.py'}:build"


def test_verify_a_plan_of_a_model_file_imports_its_graph(tmp_path, capsys, mlp):
    """``magis verify FILE.py:build --plan P`` captures the model file's graph itself (as ``magis
    import`` does) and checks the plan against it."""
    graph, plan = tmp_path / "mlp.json.gz", tmp_path / "p.json.gz"
    assert main(["import", mlp, "-o", str(graph)]) == 0
    assert main(["optimize", str(graph), "--latency-limit", "1.5", "--time-budget", "1", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["verify", mlp, "--plan", str(plan)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["schedule"] == "plan magis" and res["peak_ratio"] == 1.0


def test_verify_a_plan_of_another_capture_of_a_model_file_says_to_pass_the_graph(tmp_path, capsys, mlp):
    graph, plan = tmp_path / "fwd.json.gz", tmp_path / "p.json"
    assert main(["import", mlp, "--forward", "-o", str(graph)]) == 0
    assert main(["optimize", str(graph), "--latency-limit", "1.5", "--time-budget", "1", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["verify", mlp, "--plan", str(plan)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error: the plan was made for graph 'build'")
    assert "pass its graph file with --graph" in err[-1]


@pytest.mark.parametrize("args, message", [
    (["info", "bret_tiny"], "no sample or graph file named 'bret_tiny'; did you mean bert_tiny? (samples: "),
    (["optimize", "vit_tyni", "--memory-limit", "0.5", "-o", "p.json"],
     "no sample or graph file named 'vit_tyni'; did you mean vit_tiny? (samples: "),
    (["sweep", "resnet_50", "--memory-limits", "0.5", "-o", "out"],
     "no sample or graph file named 'resnet_50'; did you mean resnet50? (samples: "),
    (["info", "zzz"], "no sample or graph file named 'zzz' (samples: "),
    (["import", "bret_tiny", "-o", "x.json"], "unknown sample 'bret_tiny'; did you mean bert_tiny? (samples: "),
    (["verify", "unet_tinny"], "unknown sample 'unet_tinny'; did you mean unet_tiny? (samples: "),
])
def test_a_mistyped_sample_name_names_the_samples(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"magis: error: {message}")
    assert ", ".join(sample_graphs.NAMES) in err[-1]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_missing_path_is_still_no_such_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "bert.json.gz")]) == 2
    assert capsys.readouterr().err.strip() == f"magis: error: {tmp_path / 'bert.json.gz'}: no such file"
