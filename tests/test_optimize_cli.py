"""``magis optimize`` / ``export --plan`` / ``verify --plan`` end to end, and every tiny workload
optimised at three memory limits with its plan verified against eager PyTorch (slow)."""

from __future__ import annotations

import json

import pytest
import torch

from app.cli import main
from core.fmt import format_bytes
from core.search.moptimizer import optimize
from core.search.plan import check_order, load_plans
from sample_graphs.store import load_sample_graph
from tests.workload_cases import TINY, Case


def test_optimize_export_and_verify_a_plan(tmp_path, capsys):
    out = tmp_path / "p.json.gz"
    assert main(["optimize", "bert_tiny", "--latency-limit", "1.1", "--time-budget", "4", "-o", str(out),
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["method"] for p in res["points"]] == ["magis", "eager"]
    assert res["points"][0]["latency_ratio"] <= 1.1 and res["points"][0]["peak_ratio"] <= 1.0
    assert main(["export", "bert_tiny", "--plan", str(out), "-o", str(tmp_path / "s.py"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ops"] > 0
    assert main(["verify", "bert_tiny", "--plan", str(out)]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["ok"] and v["peak_ratio"] == 1.0


@pytest.mark.parametrize("args, words", [
    (["bert_tiny", "--memory-limit", "1KiB"], "no plan reaches the memory limit 1.00 KiB: the best peak found is"),
    (["bert_tiny", "--memory-limit", "lots"], "is not a size"),
    (["bert_tiny", "--memory-limit", "1.5"],
     "--memory-limit '1.5' is not a memory limit: a fraction of the peak must be at most 1; for a size give "
     "units, e.g. 1.5GiB"),
    (["bert_tiny", "--latency-limit", "0.5"], "at least 1"),
])
def test_bad_optimize_requests_are_one_line(tmp_path, capsys, args, words):
    assert main(["optimize", *args, "--time-budget", "1", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and words in err[-1]
    assert not any("Traceback" in line for line in err)
    if "is not" in words:  # refused before any search: nothing written
        assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("limit, resolve", [("0.5", lambda eager: int(0.5 * eager)),
                                            ("8GiB", lambda eager: 8 << 30)])
def test_the_plan_file_records_the_limit_as_given_and_the_bytes_used(tmp_path, capsys, limit, resolve):
    """A fraction resolves against the imported (eager) peak, a size is itself; the plan file's meta
    keeps both, and the command's verdict ("no plan reaches ...", exit status 2) uses those bytes."""
    out = tmp_path / "p.json"
    rc = main(["optimize", "fig2_skip", "--memory-limit", limit, "--time-budget", "1", "-o", str(out),
               "--json"])
    cap = capsys.readouterr()
    pf = load_plans(out, load_sample_graph("fig2_skip"))
    meta, eager = pf.meta, pf.points[-1].peak
    assert (meta["mode"], meta["limit"], meta["limit_bytes"]) == ("memory", limit, resolve(eager))
    assert json.loads(cap.out)["meta"] == meta
    reached = pf.points[0].peak <= meta["limit_bytes"]
    assert rc == (0 if reached else 2)
    if not reached:
        assert f"no plan reaches the memory limit {format_bytes(meta['limit_bytes'])}" in cap.err


def test_an_unwritable_plan_path_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["optimize", "fig2_skip", "--memory-limit", "0.9", "--time-budget", "1",
                 "-o", str(tmp_path / "f" / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and "File exists" in err[-1]


def test_a_plan_of_another_graph_is_one_line(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["optimize", "bert_tiny", "--pareto", "--time-budget", "2", "-o", str(out)]) == 0
    capsys.readouterr()
    for cmd in (["verify", "vit_tiny", "--plan", str(out)], ["export", "vit_tiny", "--plan", str(out), "-o",
                                                                str(tmp_path / "s.py")]):
        assert main(cmd) == 2
        assert "the plan was made for graph 'bert_tiny', not for 'vit_tiny'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_tiny_workloads_optimised_at_three_memory_limits_verify(name):
    case = Case(name, torch.float64)
    g = case.g
    got = []
    for limit in (0.95, 0.85, 0.7):
        pf = optimize(g, memory_limit=limit, time_budget=4)
        plan = pf.points[0]
        h = plan.graph(g)
        check_order(h, plan.order)
        res = case.verify_order(h, plan.order, f"{name} limit {limit}")
        got.append((limit, round(plan.peak / pf.points[-1].peak, 3), round(plan.latency / pf.points[-1].latency, 3),
                    len(plan.applications), res["peak_ratio"]))
    print(f"\n{name}: (limit, peak ratio, latency ratio, applications, measured/simulated) {got}")
