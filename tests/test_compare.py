"""``magis compare``: every method on one graph, one plan file and the table of ``bench/pareto.py``;
a second run merges into the plan file (``merge_plans``), a plan file of another graph is refused."""

from __future__ import annotations

import json

import pytest

from core.metrics import metrics
from core.search.plan import Plan, PlanError, PlanFile, load_plans, merge_plans
from tests.test_cli import magis


def _p(method: str, peak: int, latency: float, label: str = "") -> Plan:
    return Plan(method, [], [], metrics(peak, latency), label)


def test_compare_writes_one_plan_file_and_the_table_rows(tmp_path):
    out = tmp_path / "p.json.gz"
    r = magis("compare", "fig2_skip", "--methods", "magis,eager,sqrt_n,dtr", "--time-budget", "2",
              "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    rows = {row["method"]: row for row in res["rows"]}
    assert list(rows) == ["magis", "eager", "sqrt_n", "dtr"]
    assert {"peak_at_5pct", "peak_at_10pct", "overhead_at_80pct", "overhead_at_40pct", "points",
            "failed", "seconds"} <= set(rows["magis"])
    pf = load_plans(out)
    assert pf.graph_name == "fig2_skip" and pf.points[-1].method == "eager"
    methods = {p.method for p in pf.points}
    for m, row in rows.items():
        assert (m in methods) == (row["points"] > 0)
    assert set(pf.meta["peer_failures"]) == {f["method"] for f in res["failures"]}
    assert "fig2_skip: dtr ..." in r.stderr  # progress per method, on stderr
    assert not res["merged"]

    # the table, and a second run merges into the plan file
    r2 = magis("compare", "fig2_skip", "--methods", "sqrt_n,rpo", "--time-budget", "2", "-o", str(out))
    assert r2.returncode == 0, r2.stderr
    assert "peak@<=5%" in r2.stdout and "rpo" in r2.stdout
    assert "merging into" in r2.stderr
    merged = load_plans(out)
    kinds = {p.method for p in merged.points}
    assert methods | {"rpo"} <= kinds and merged.points[-1].method == "eager"
    assert len([p for p in merged.points if p.method == "sqrt_n"]) <= len(
        [p for p in pf.points if p.method == "sqrt_n"])  # equal points are not doubled


def test_a_graph_file_alone_gets_torch_mincut(tmp_path):
    """No model code: torch's min-cut runs on the joint graph built from the file."""
    from core.ir import io
    from sample_graphs.store import load_sample_graph

    gfile = tmp_path / "g.json.gz"
    io.save(load_sample_graph("fig2_skip"), gfile)
    r = magis("compare", str(gfile), "--methods", "torch_mincut,eager", "--time-budget", "20",
              "-o", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    pf = load_plans(tmp_path / "p.json")
    assert "torch_mincut" not in pf.meta.get("peer_failures", {})
    mincut = [p for p in pf.points if p.method == "torch_mincut"]
    assert mincut and all(p.peak <= pf.points[-1].peak for p in mincut)


def test_a_plan_file_of_another_graph_is_refused(tmp_path):
    out = tmp_path / "p.json"
    assert magis("compare", "fig2_skip", "--methods", "eager", "--time-budget", "1", "-o", str(out)).returncode == 0
    before = out.read_bytes()
    r = magis("compare", "fig1_mlp", "--methods", "eager", "--time-budget", "1", "-o", str(out))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("magis: error:") and "fig2_skip" in r.stderr
    assert out.read_bytes() == before


def test_merge_plans_keeps_each_methods_front_and_eager_last():
    old = PlanFile("g", 7, "rtx3090", [_p("magis", 50, 1.2, "a"), _p("magis", 80, 1.0, "b"), _p("dtr", 60, 1.5),
                                        _p("eager", 100, 1.0)],
                   meta={"methods": ["magis", "dtr", "checkmate"],
                         "peer_failures": {"dtr": "old reason", "checkmate": "too big"}})
    new = PlanFile("g", 7, "rtx3090", [_p("magis", 40, 1.3, "c"), _p("magis", 50, 1.25, "d"),
                                        _p("sqrt_n", 70, 1.1), _p("eager", 100, 1.0)],
                   records=[{"iteration": 1}], meta={"methods": ["magis", "sqrt_n", "dtr"],
                                                     "peer_failures": {"sqrt_n": "budget 0.3: none"}})
    m = merge_plans(old, new)
    got = [(p.method, p.peak, p.latency) for p in m.points]
    # magis: (50, 1.25) is dominated by (50, 1.2) and dropped; the other method's point would not drop it
    assert got == [("magis", 40, 1.3), ("magis", 50, 1.2), ("magis", 80, 1.0), ("dtr", 60, 1.5),
                   ("sqrt_n", 70, 1.1), ("eager", 100, 1.0)]
    # dtr ran again without failing: its old reason goes; checkmate did not run: its reason stays
    assert m.meta["peer_failures"] == {"checkmate": "too big", "sqrt_n": "budget 0.3: none"}
    assert m.records == [{"iteration": 1}]
    with pytest.raises(PlanError, match="graph"):
        merge_plans(old, PlanFile("h", 8, "rtx3090", [_p("eager", 1, 1.0)]))
    with pytest.raises(PlanError, match="device"):
        merge_plans(old, PlanFile("g", 7, "a100-80gb", [_p("eager", 1, 1.0)]))


def test_magis_compare_reproduces_bench_pareto(tmp_path, monkeypatch):
    """Same graph, methods and budgets: ``magis compare`` prints the rows ``bench/pareto.py`` prints (the
    deterministic methods; MAGIS's search depends on the wall clock)."""
    import sys

    from core.search.peers import base

    monkeypatch.setattr(base, "REFINE_BY_DEFAULT", True)  # as in the ``magis compare`` process

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "bench"))
    import pareto as bench

    methods = "eager,microbatch,offload,sqrt_n,torch_mincut"
    js = tmp_path / "bench.json"
    assert bench.main(["--workloads", "bert_tiny", "--methods", methods, "--time-budget", "1", "--peer-budget",
                       "60", "--no-plots", "--json", str(js)]) == 0
    r = magis("compare", "bert_tiny", "--methods", methods, "--time-budget", "60", "-o",
              str(tmp_path / "p.json"), "--json")
    assert r.returncode == 0, r.stderr
    keys = ("method", "peak_at_5pct", "peak_at_10pct", "overhead_at_80pct", "overhead_at_40pct", "points")
    ours = [{k: row[k] for k in keys} for row in json.loads(r.stdout)["rows"]]
    theirs = [{k: row[k] for k in keys} for row in json.loads(js.read_text())["rows"]]
    assert ours == theirs and len(ours) == 5


def test_make_frontiers_can_rerun_some_peers_and_merge(tmp_path, monkeypatch):
    """``python -m sample_graphs.frontiers NAME --methods M`` runs only M again and merges its points
    into the sample's plan file: MAGIS's points and the other methods' stay."""
    import shutil

    from sample_graphs import frontiers

    shutil.copy(frontiers.plan_path("fig2_skip"), tmp_path / frontiers.plan_path("fig2_skip").name)
    before = load_plans(frontiers.plan_path("fig2_skip"))
    monkeypatch.setattr(frontiers, "PLAN_DIR", tmp_path)
    assert frontiers.main(["fig2_skip", "--methods", "microbatch"]) == 0
    after = load_plans(frontiers.plan_path("fig2_skip"))
    assert frontiers.plan_path("fig2_skip").parent == tmp_path
    key = lambda p: (p.method, p.peak, p.latency)  # noqa: E731
    assert {key(p) for p in before.points if p.method == "magis"} == {key(p) for p in after.points
                                                                      if p.method == "magis"}
    assert any(p.method == "microbatch" for p in after.points) and after.points[-1].method == "eager"
    with pytest.raises(SystemExit):
        frontiers.main(["fig2_skip", "--methods", "no_such_method"])


def test_a_point_no_better_than_eager_is_never_a_result(monkeypatch):
    """A method's plan whose peak and latency are both at least eager's (and not both equal) is never
    one of its points; a method left with none says so in one failure row."""
    from core.search import compare as cmp
    from core.search.methods import MethodRun
    from core.search.plan import Plan
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("fig6_ftree")
    eager = {"peak": 1000, "latency": 1.0}
    plans = [Plan("dtr", [], [], {"peak": 1200, "latency": 1.1}, "worse"),
             Plan("dtr", [], [], {"peak": 800, "latency": 1.2}, "lower peak")]
    monkeypatch.setattr(cmp, "run_method", lambda *a, **k: MethodRun("dtr", plans, []))
    r = cmp.run_peer("dtr", g, None, 1.0, eager)
    assert [p["label"] for p in r.points] == ["lower peak"] and r.plans == [plans[1]]
    assert r.failures == []
    plans.pop()
    r = cmp.run_peer("dtr", g, None, 1.0, eager)
    assert r.points == [] and r.failures == [("all", "no plan better than eager in peak or latency (1 plans; "
                                                     "the lowest peak 1.200x at latency 1.100x)")]


def test_the_reducible_share_is_measured_against_the_larger_lower_bound():
    """eager 100 B, resident floor 40 B, largest op beside the placeholders 60 B: 40 B are reducible;
    a point at 0.8x removes 20 of them, one at 0.5x (resident bytes moved to the host) more than all."""
    from core.search.compare import reducible_removed

    w = {"eager": {"peak": 100}, "bound": {"resident_floor": 40, "largest_op": 60, "bound": 60}}
    assert reducible_removed(0.8, w) == 0.5
    assert reducible_removed(0.4, w) == 1.5
    assert reducible_removed(None, w) is None
    assert reducible_removed(0.9, {"eager": {"peak": 100}, "bound": {"bound": 100}}) is None  # nothing reducible


def test_compare_under_the_compiled_cost_model(tmp_path):
    """``--cost compiled``: every method timed with Inductor's fusion (eager too, and faster than its
    eager kernels), the model recorded in the plan file; each row says the share of the budget used
    and of the reducible memory removed; a plan file of the other model is not merged into."""
    from core.analysis.lifetimes import lower_bound
    from core.search.peers.common import traced_order
    from core.simulate import simulate
    from sample_graphs.store import load_sample_graph

    out = tmp_path / "p.json"
    r = magis("compare", "bert_tiny", "--methods", "eager,dtr", "--time-budget", "3", "--cost", "compiled",
              "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    g = load_sample_graph("bert_tiny")
    from core.cost.model import AnalyticCost

    analytic = simulate(g, traced_order(g), AnalyticCost("rtx3090"))
    assert res["cost"] == "compiled" and res["eager"]["latency"] < analytic.latency
    assert res["eager"]["peak"] == analytic.peak  # memory is the simulator's, whatever the latency model
    assert res["bound"] == lower_bound(g, analytic.memory.resident)
    rows = {row["method"]: row for row in res["rows"]}
    for row in rows.values():
        assert row["budget_used"] == pytest.approx(row["seconds"] / 3, abs=0.01)
    dtr = rows["dtr"]
    assert dtr["peak_at_10pct"] is not None
    assert 0 < dtr["reducible_removed"] == pytest.approx(
            (1 - dtr["peak_at_10pct"]) * res["eager"]["peak"] / (res["eager"]["peak"] - res["bound"]["bound"]), abs=1e-3)
    assert load_plans(out).meta["cost"] == "compiled"
    again = magis("compare", "bert_tiny", "--methods", "eager", "--time-budget", "2", "-o", str(out))
    assert again.returncode != 0 and "compiled cost model" in again.stderr
