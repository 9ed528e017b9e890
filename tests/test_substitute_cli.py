"""``magis substitute``: the searched sequence applied and written, the graph verified against eager
through ``magis verify --graph``, and one-line errors with nothing written for bad input."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from core.frontend.torch_import import capture
from core.ir import io
from tests.subst_cases import module_fig1


def run(capsys, *argv):
    status = main(["substitute", *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def fig1_file(tmp_path):
    m, x = module_fig1()
    p = tmp_path / "fig1.json"
    io.save(capture(m, x, training=False, name="fig1"), p)
    return p


def test_substitute_writes_the_rewritten_graph(fig1_file, tmp_path, capsys):
    out_file = tmp_path / "out.json"
    status, out, err = run(capsys, str(fig1_file), "--method", "dpp", "--max-steps", "2", "-o", str(out_file), "--json")
    assert status == 0, err
    res = json.loads(out)
    assert [s["rule"] for s in res["sequence"]] == ["enlarge_conv", "merge_conv"]
    assert res["cost_after_ms"] < res["cost_before_ms"] and res["complete"] and res["fold_weights"]
    assert res["states"] > 0 and res["matches"] > 0
    assert len(res["peak_bytes"]) == 2 and len(res["latency_ms"]) == 2
    g = io.load(out_file)
    assert g.meta["transforms"] == [f"substitute {s['rule']} {','.join(s['replaced'])}" for s in res["sequence"]]
    assert sum(n.op == "aten.convolution.default" for n in g.ops()) == 1


def test_substitute_summary_and_unimprovable_graph(fig1_file, tmp_path, capsys):
    status, out, err = run(capsys, str(fig1_file), "--method", "greedy", "-o", str(tmp_path / "g.json"))
    assert status == 0, err
    assert "no sequence of at most 10 substitutions lowers the cost of fig1" in out
    assert io.load(tmp_path / "g.json").same_as(io.load(fig1_file))
    status, out, err = run(capsys, str(fig1_file), "--max-steps", "2", "-o", str(tmp_path / "s.json"))
    assert status == 0 and "1. enlarge_conv (I-Trans)" in out and "2. merge_conv (A-Trans)" in out
    assert "weight-only ops folded" in out


@pytest.mark.parametrize("argv, message", [
    (["--method", "magic"], "unknown substitution search 'magic'"),
    (["--max-steps", "0"], "--max-steps must be an integer from 1 to 100 (got 0)"),
    (["--max-steps", "1000"], "--max-steps must be an integer from 1 to 100"),
    (["--time-budget", "0"], "--time-budget must be a positive number of seconds"),
    (["--rules", "merge_conv,fuse_all"], "unknown substitution rule(s) fuse_all"),
    (["--device", "tpu9"], "--device:"),
])
def test_bad_options_are_one_line_and_write_nothing(fig1_file, tmp_path, capsys, argv, message):
    out_file = tmp_path / "out.json"
    status, out, err = run(capsys, str(fig1_file), *argv, "-o", str(out_file))
    assert status != 0 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_missing_graph_is_one_line(tmp_path, capsys):
    status, out, err = run(capsys, str(tmp_path / "nope.json"), "-o", str(tmp_path / "o.json"))
    assert status != 0 and "Traceback" not in err and not (tmp_path / "o.json").exists()


@pytest.mark.slow
def test_substituted_forward_sample_verifies_against_eager(tmp_path, capsys):
    """The SRU sample's gate projections merged (weights concatenated, one matmul, the result split):
    ``magis verify sru --graph`` runs it against eager PyTorch."""
    out_file = tmp_path / "sru.json"
    status, out, err = run(capsys, "sru", "--max-steps", "3", "--time-budget", "20", "-o", str(out_file), "--json")
    assert status == 0, err
    assert [s["rule"] for s in json.loads(out)["sequence"]] == ["merge_linear"] * 3
    status = main(["verify", "sru", "--graph", str(out_file), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert status == 0 and res["ok"] and res["peak_ratio"] == 1.0
