"""The benches of the search's time (``bench/profile_search.py``, ``bench/plan_step_vs_dtr.py``,
``bench/long_graph.py``) on tiny inputs: each runs end to end, prints its table and writes the JSON
that ``bench/docs.py`` renders, with the fields the docs read."""

from __future__ import annotations

import json

import pytest


def test_profile_search_records_every_stage_with_the_archive_after_it(tmp_path, monkeypatch, capsys):
    import bench.profile_search as bench

    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    out = tmp_path / "p.json"
    assert bench.main(["--models", "resnet18", "--budgets", "2", "--tiny", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    names = [st["name"] for st in run["stages"]]
    assert names[0] == "evaluator" and names[-1] == "Pareto sweep (Algorithm 3)"
    assert all(0 < st["peak_at_10pct"] <= 1.0 for st in run["stages"])
    assert run["stages"][-1]["peak_at_10pct"] < 1.0  # the tiny ResNet-18's frontier goes below eager
    assert abs(sum(run["profile"].values()) - 1.0) < 0.01 and "DTR (seeds)" in run["profile"]
    text = capsys.readouterr().out
    assert "== resnet18" in text and "own time by part (cProfile)" in text


def test_plan_step_against_dtr_compares_at_no_more_latency(tmp_path, monkeypatch, capsys):
    import bench.plan_step_vs_dtr as bench

    out = tmp_path / "d.json"
    assert bench.main(["--models", "bert_tiny", "--limits", "0.6", "--time-budget", "4", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["rows"]
    assert r["model"] == "bert_tiny" and r["magis_peak"] < r["eager_peak"] and r["dtr_points"] >= 1
    if r["dtr_peak"] is not None:
        assert r["dtr_latency"] <= r["magis_latency"] * (1 + 1e-9)
        assert r["magis_at_or_below"] == (r["magis_peak"] <= r["dtr_peak"])
    assert "MAGIS at or below DTR at no more latency" in capsys.readouterr().out


@pytest.mark.slow
def test_the_long_graph_bench_runs_every_method_it_is_given(tmp_path, monkeypatch):
    import bench.long_graph as bench

    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    out = tmp_path / "l.json"
    assert bench.main(["--layers", "1", "--seq", "4", "--time-budget", "2", "--methods", "magis,eager,dtr",
                       "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["model"] == "mamba_130m" and d["ops"] > 100
    assert {r["method"] for r in d["rows"]} == {"magis", "eager", "dtr"}
