"""The command line as a new user first meets it (issue 27): verify a plan of one's own model file,
exit statuses that tell "limit not reached" and "verification failed" from bad input, verify's
summary, a mistyped sample name, and output piped into ``head``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sample_graphs
from app.cli import main
from core.ir import io
from core.ir.builder import GraphBuilder
from core.search.plan import load_plans
from tests.model_files import MLP_FACTORY

ROOT = Path(__file__).resolve().parents[1]


# a Python side effect (how often forward ran) that capture bakes into the graph as a constant, so
# the exported script cannot reproduce a later eager run: a verification that really fails
COUNTED = '''
import torch
from torch import nn


class Counted(nn.Module):
    calls = 0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        Counted.calls += 1
        return self.lin(x) * Counted.calls


class Workload:
    def __init__(self):
        self.module = Counted()
        self.inputs = (torch.randn(3, 8),)

    @staticmethod
    def loss_fn(module, x):
        return module(x).square().mean()


def build():
    return Workload()
'''


@pytest.fixture
def mlp(tmp_path) -> str:
    (tmp_path / "mlp.py").write_text(MLP_FACTORY)
    return f"{tmp_path / 'mlp.py'}:build"


def test_a_limit_not_reached_writes_the_plan_warns_and_exits_3_and_verify_imports_the_model_file(
        tmp_path, capsys, mlp):
    """``magis optimize`` with an unreachable limit writes a usable plan: status 3 and a warning, not
    the bad-input status 2 and "error:"; ``magis verify FILE.py:build --plan P`` captures the model
    file's graph itself (as ``magis import`` does) and checks the plan against it."""
    graph, plan = tmp_path / "mlp.json.gz", tmp_path / "p.json.gz"
    assert main(["import", mlp, "-o", str(graph)]) == 0
    capsys.readouterr()
    # the weights alone are larger than 64 bytes: no plan can reach it
    assert main(["optimize", str(graph), "--memory-limit", "64B", "--time-budget", "1", "-o", str(plan)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: warning: no plan reaches the memory limit 64 B: the best peak found is ")
    assert err[-1].endswith(f"its plan is point 0 of {plan}")
    assert not any("error" in line for line in err)
    assert len(load_plans(plan, io.load(graph)).points) >= 2

    assert main(["verify", mlp, "--plan", str(plan)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok: build, schedule plan magis (") and "reproduces eager PyTorch" in out[0]
    assert main(["verify", mlp, "--plan", str(plan), "--json"]) == 0
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


def test_verify_prints_a_summary_and_json_on_request(capsys, mlp):
    assert main(["verify", mlp]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3, out
    assert out[0].startswith(f"ok: {mlp}, schedule traced (") and "float32, seed 0" in out[0]
    assert out[1].startswith("  outputs  5 tensors (the loss and every gradient): max abs error ")
    # float32: torch.testing's tolerance, rtol relative to each tensor's scale
    assert "tolerance rtol 1.3e-06 of each tensor's scale, atol 1e-05" in out[1] and "outside" not in out[1]
    assert out[2].startswith("  peak     ") and "measured (CPU run)" in out[2]
    assert "simulated (rtx3090 profile): ratio 1.0000" in out[2]
    assert main(["verify", mlp, "--json", "--device", "a100-80gb"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["simulated_device"] == "a100-80gb"


def test_a_failed_verification_exits_1_with_its_summary(tmp_path, capsys):
    (tmp_path / "counted.py").write_text(COUNTED)
    spec = f"{tmp_path / 'counted.py'}:build"
    assert main(["verify", spec]) == 1
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    assert out[0].startswith(f"FAILED: {spec}, schedule traced (") and "does not reproduce" in out[0]
    assert out[1].endswith("-- outside it")
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("magis: verification failed: outputs differ (rtol=1.3e-06")
    assert main(["verify", spec, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


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


def test_output_piped_into_head_ends_quietly(tmp_path):
    """``magis info FILE | head -1``: the reader leaves early; magis stops without a word on stderr and
    exits 141 (128 + SIGPIPE, as a shell reports a process the signal ended).  The summary is larger
    than a pipe's buffer, so the write after ``head`` exits always fails."""
    b = GraphBuilder("fan")
    x = b.input("x", 16)
    b.op("B", [b.op(f"A{i}", [x], 64) for i in range(5000)], 8, output=True)
    path = tmp_path / "fan.json.gz"
    io.save(b.graph, path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    magis = subprocess.Popen([sys.executable, "-m", "app.cli", "info", str(path), "--top", "100000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    head = subprocess.run(["head", "-1"], stdin=magis.stdout, capture_output=True, text=True, timeout=120)
    magis.stdout.close()  # head holds the only reader now
    err = magis.stderr.read().decode()
    assert magis.wait(timeout=120) == 141, err
    assert head.stdout == "fan: 5001 ops (synthetic), device rtx3090\n"
    assert err == ""


def test_the_apps_verify_job_reads_the_json_report(tmp_path, capsys):
    """The app's *verify* button runs ``magis verify --json`` in a subprocess and shows its report."""
    import time

    from app.plan_store import PlanStore

    plan = tmp_path / "p.json"
    assert main(["optimize", "fig2_skip", "--latency-limit", "1.2", "--time-budget", "1", "-o", str(plan)]) == 0
    capsys.readouterr()
    job = PlanStore(lambda gid: None).start_verify("sample:fig2_skip", "fig2_skip", plan.read_bytes(), 0)
    deadline = time.monotonic() + 120
    while not job.done and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.done and job.error is None, job.error
    assert job.result["ok"] and job.result["schedule"] == "plan magis"
