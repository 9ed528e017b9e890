"""``bench/pareto.py``: the headline numbers and the "within 1%" time on hand-made data, and the
harness end to end on a tiny workload with second-long budgets (rows per method, failures as rows
not exceptions, the JSON, the figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.pareto import (
    format_table,
    main,
    run_peer,
    seconds_to_within,
    summarise,
)
from bench.plots import frontier
from core.cost.model import AnalyticCost
from sample_graphs.store import load_sample_graph

ROOT = Path(__file__).resolve().parents[1]


def test_summarise_on_hand_made_points():
    # (peak ratio, latency ratio)
    pts = [(1.0, 1.0), (0.9, 1.02), (0.7, 1.05), (0.5, 1.08), (0.35, 1.20), (0.3, 1.5), (0.85, 0.99)]
    s = summarise(pts)
    # <= 5% overhead: 1.0, 0.9, 0.7, 0.85 -> 0.7; <= 10%: 0.5 joins -> 0.5
    assert s["peak_at_5pct"] == 0.7 and s["peak_at_10pct"] == 0.5
    # peak <= 0.8: 0.7 (+5%), 0.5 (+8%), 0.35 (+20%), 0.3 (+50%) -> +5%; peak <= 0.4: 0.35, 0.3 -> +20%
    assert s["overhead_at_80pct"] == pytest.approx(0.05) and s["overhead_at_40pct"] == pytest.approx(0.20)
    # a point faster than eager under the limit: a negative overhead, not clamped
    assert summarise([(0.8, 0.97)])["overhead_at_80pct"] == pytest.approx(-0.03)
    # nothing qualifies: None (the table's "-")
    assert summarise([(0.95, 1.3)]) == {"peak_at_5pct": None, "peak_at_10pct": None,
                                        "overhead_at_80pct": None, "overhead_at_40pct": None}


def test_seconds_to_within_one_percent_on_hand_made_records():
    recs = [{"wall_seconds": t, "best_peak": p} for t, p in
            [(1.0, 1000), (2.0, 800), (3.0, 605), (4.0, 600), (5.0, 610)]]
    # final best 600; within 1%: <= 606 -> first at 3 s (605), not 4 s (the exact best)
    assert seconds_to_within(recs) == 3.0
    assert seconds_to_within(recs, tol=0.0) == 4.0
    assert seconds_to_within([]) is None


def test_frontier_keeps_the_non_dominated_points_by_peak():
    assert frontier([(1.0, 1.0), (0.5, 1.2), (0.6, 1.3), (0.5, 1.1), (0.9, 1.0)]) == [(0.5, 1.1), (0.9, 1.0)]


def test_a_peer_that_cannot_run_is_a_failure_row():
    g = load_sample_graph("fig2_skip")
    cost = AnalyticCost("rtx3090")
    eager = {"peak": 1, "latency": 1.0}
    r = run_peer("checkmate", "fig2_skip", g, cost, 5.0, eager, checkmate_max_vars=0)
    assert r.points == [] and r.failures[0][0] == "all" and r.failures[0][1].startswith("not attempted")


def test_the_harness_end_to_end_on_a_tiny_workload(tmp_path, capsys):
    out = tmp_path / "plots"
    js = tmp_path / "pareto.json"
    # MAGIS's sweep gets what its warm start and seeds leave (about 6% of the budget): 8 s leaves it
    # half a second for the records this reads (5 s left none once on a machine running three jobs)
    assert main(["--workloads", "bert_tiny", "--methods", "magis,eager,sqrt_n,dtr", "--time-budget", "8",
                 "--peer-budget", "2", "--plots", str(out), "--json", str(js)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(js.read_text())
    rows = {r["method"]: r for r in doc["rows"]}
    assert list(rows) == ["magis", "eager", "sqrt_n", "dtr"]
    assert rows["eager"]["peak_at_5pct"] == 1.0 and rows["eager"]["overhead_at_80pct"] is None
    assert rows["magis"]["seconds_to_1pct"] is not None and rows["magis"]["points"] >= 1
    assert rows["sqrt_n"]["points"] >= 1 and rows["dtr"]["points"] >= 1
    (w,) = doc["workloads"]
    assert w["extra"]["magis"]["eager_matches"]
    for m in ("sqrt_n", "dtr"):  # ratios are of the same run's eager plan
        for p in w["points"][m]:
            assert p["peak_ratio"] == pytest.approx(p["peak"] / w["eager"]["peak"])
            assert p["peak"] < w["eager"]["peak"]
    assert w["records"] and all("wall_seconds" in r for r in w["records"])
    # DTR's infeasible budgets on bert_tiny are listed under the table
    assert any(f["method"] == "dtr" and "infeasible" in f["reason"] for f in doc["failures"])
    assert "failures (method, workload, point: reason):" in text and "paper (MAGIS)" in text
    for stem in ("bert_tiny_pareto", "bert_tiny_convergence"):
        png = (out / f"{stem}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000
        assert 'src="plotly.min.js"' in (out / f"{stem}.html").read_text()
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    # the table again from the JSON, without running anything
    assert format_table(doc["rows"], doc["failures"]).splitlines()[2].startswith("bert_tiny     magis")


def test_merge_orders_the_paper_workloads_and_a_later_part_overrides_a_workload(tmp_path, capsys):
    """Two parts of one run, then a rerun of one workload merged over them: that workload's rows,
    failures and points come from the rerun, every other from the run, in the paper's order."""
    from bench.pareto import PAPER, merge

    run = [json.loads((ROOT / "bench" / "results" / f"pareto_part{k}.json").read_text()) for k in (1, 2)]
    parts = []
    for k, doc in enumerate(reversed(run)):  # the part with btlm_3b first: the order is the paper's anyway
        parts.append(tmp_path / f"part{k}.json")
        parts[-1].write_text(json.dumps(doc))
    rerun = {**run[0], "workloads": [w for w in run[0]["workloads"] if w["workload"] == "unet"],
             "rows": [{**r, "peak_at_10pct": 0.123} for r in run[0]["rows"] if r["workload"] == "unet"],
             "failures": [{"workload": "unet", "method": "dtr", "label": "budget 0.3", "reason": "rerun"}]}
    parts.append(tmp_path / "rerun.json")
    parts[-1].write_text(json.dumps(rerun))
    merge(parts, tmp_path / "merged.json")
    doc = json.loads((tmp_path / "merged.json").read_text())
    names = [w["workload"] for w in doc["workloads"]]
    assert names == PAPER
    assert [r["workload"] for r in doc["rows"]] == sorted((r["workload"] for r in doc["rows"]), key=PAPER.index)
    unet = [r for r in doc["rows"] if r["workload"] == "unet"]
    assert unet and all(r["peak_at_10pct"] == 0.123 for r in unet)
    assert [f for f in doc["failures"] if f["workload"] == "unet"] == rerun["failures"]
    assert len([f for f in doc["failures"] if f["workload"] != "unet"]) == sum(
        1 for d in run for f in d["failures"] if f["workload"] != "unet")
    assert doc["part_of"]["unet"] == str(parts[-1]) and doc["part_of"]["btlm_3b"] == str(parts[0])
    assert "rerun" in capsys.readouterr().out  # the printed table lists the rerun's failure
