"""``magis sweep`` / ``core.search.sweep``: workloads x memory limits x devices, one ``optimize`` per
job in worker processes (or Ray tasks); rows, plan files and sweep.json; failing jobs, Ctrl-C, and
the command line's one-line errors.  Search budgets are 1-2 s per job."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from app.cli import main
from core.ir import io
from core.search.plan import check_order, load_plans
from core.search.sweep import LocalRunner, RayRunner, SweepError, run_sweep
from sample_graphs.store import graph_path

WORKLOADS = ("bert_tiny", "vit_tiny")
LIMITS = ("0.9", "1GiB")


def _sweep(out, runner, **kw):
    seen = []
    res = run_sweep([graph_path(w) for w in WORKLOADS], LIMITS, ["rtx3090"], out, time_budget=2, runner=runner,
                    progress=lambda row, done, total: seen.append((row["workload"], done, total)), **kw)
    return res, seen


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return out, *_sweep(out, LocalRunner(processes=2))


def _check_rows(res, out):
    """Every job has a row; each plan loads onto its graph and replays with a valid schedule; limits
    are resolved against each graph's own eager peak; reached means within the limit."""
    assert [(r["workload"], r["device"], r["limit"]) for r in res.rows] == [
        (f"{w}.train", "rtx3090", lim) for w in WORKLOADS for lim in LIMITS]
    assert not res.errors and not res.interrupted
    for r in res.rows:
        g = io.load(graph_path(r["workload"].removesuffix(".train")))
        assert r["graph"] == g.name and r["error"] is None
        assert r["plan"] == str(out / f"{r['workload']}.rtx3090.{r['limit']}.plan.json.gz")
        pf = load_plans(r["plan"], g)  # PlanError unless the plan belongs to g
        assert pf.device == "rtx3090" and pf.points[-1].method == "eager"
        plan = pf.point(0)
        check_order(plan.graph(g), plan.order)
        assert (r["peak_bytes"], r["eager_peak_bytes"]) == (plan.peak, pf.points[-1].peak)
        assert r["peak_ratio"] == pytest.approx(plan.peak / pf.points[-1].peak)
        expected = int(0.9 * r["eager_peak_bytes"]) if r["limit"] == "0.9" else 1 << 30
        assert r["limit_bytes"] == expected
        assert r["reached"] == (r["peak_bytes"] <= r["limit_bytes"])
        if r["reached"]:
            assert r["peak_bytes"] <= r["limit_bytes"]
        assert r["states"] > 0 and r["seconds"] > 0
    eager = {r["workload"]: r["eager_peak_bytes"] for r in res.rows}
    assert len(set(eager.values())) == 2  # two graphs, two eager peaks, two resolved 0.9 limits
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["status"] == "finished" and doc["jobs"] == 4 and doc["rows"] == res.rows
    assert doc["parameters"]["memory_limits"] == list(LIMITS) and doc["parameters"]["time_budget"] == 2


def test_local_sweep_rows_plans_and_limits(local):
    out, res, seen = local
    _check_rows(res, out)
    assert res.parameters["runner"] == "local, 2 processes"
    assert sorted(done for _, done, _ in seen) == [1, 2, 3, 4] and {t for _, _, t in seen} == {4}
    assert any(r["reached"] for r in res.rows)  # 1 GiB is far above these peaks


def test_failing_jobs_give_error_rows_and_the_others_finish(tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": "magis-graph", "version": 1, "nodes": 7}')
    res = run_sweep([tmp_path / "missing.json.gz", graph_path("fig6_ftree"), corrupt], ["0.9"], ["rtx3090"],
                    tmp_path / "out", time_budget=1, runner=LocalRunner(processes=2))
    rows = {r["workload"]: r for r in res.rows}
    assert list(rows) == ["missing", "fig6_ftree.train", "corrupt"] and not res.interrupted
    assert "missing.json.gz: no such file" in rows["missing"]["error"]  # refused before it was submitted
    assert rows["corrupt"]["error"].startswith("GraphError:")  # failed in its worker
    assert rows["corrupt"]["plan"] is None and rows["corrupt"]["peak_bytes"] is None
    good = rows["fig6_ftree.train"]
    assert good["error"] is None and load_plans(good["plan"], io.load(graph_path("fig6_ftree")))
    assert [r["workload"] for r in res.errors] == ["missing", "corrupt"]
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["rows"] == res.rows


def test_cancel_stops_submitting_and_keeps_the_finished_rows(tmp_path):
    cancel = threading.Event()
    res = run_sweep([graph_path("fig6_ftree")], ["0.9", "0.8", "0.7"], ["rtx3090"], tmp_path, time_budget=1,
                    runner=LocalRunner(processes=1), cancel=cancel, progress=lambda *_: cancel.set())
    assert res.interrupted and [r["limit"] for r in res.rows] == ["0.9"]
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["status"] == "interrupted" and doc["jobs"] == 3 and doc["rows"] == res.rows
    assert sorted(p.name for p in tmp_path.glob("*.plan.json.gz")) == ["fig6_ftree.train.rtx3090.0.9.plan.json.gz"]


@pytest.mark.parametrize("limits, devices, words", [
    (["lots"], ["rtx3090"], "'lots' is not a size"),
    (["-0.5"], ["rtx3090"], "is not a memory limit"),
    (["0.5", "1.5"], ["rtx3090"],
     "a fraction of the peak must be at most 1; for a size give units, e.g. 1.5GiB; or pareto for a "
     "frontier"),
    (["0.5"], ["v100"], "unknown device 'v100'"),
    ([], ["rtx3090"], "at least one workload, one memory limit and one device"),
])
def test_bad_sweeps_are_refused_before_anything_is_written(tmp_path, limits, devices, words):
    with pytest.raises(SweepError, match=words):
        run_sweep([graph_path("fig6_ftree")], limits, devices, tmp_path / "out", time_budget=1)
    assert not (tmp_path / "out").exists()


def test_ray_missing_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(SweepError, match=r"pip install 'magis-studio\[ray\]'"):
        RayRunner()
    assert main(["sweep", "fig6_ftree", "--memory-limits", "0.5", "--ray", "local", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "magis: error: Ray is not installed: pip install 'magis-studio[ray]'")


def test_ray_runner_on_a_local_instance(local, tmp_path):
    """The same sweep as Ray tasks on a local two-CPU instance: the same rows (jobs, graphs, eager
    peaks, resolved limits) and plans that load onto their graphs."""
    import ray  # a test dependency (the test extra installs it)

    _, base, _ = local
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        res, seen = _sweep(tmp_path, RayRunner())
    finally:
        ray.shutdown()
    _check_rows(res, tmp_path)
    assert res.parameters["runner"] == "ray, local instance" and len(seen) == 4
    keys = ("workload", "device", "limit", "limit_bytes", "graph", "eager_peak_bytes", "eager_latency_seconds")
    assert [[r[k] for k in keys] for r in res.rows] == [[r[k] for k in keys] for r in base.rows]


@pytest.mark.parametrize("args, words", [
    (["bert_tiny", "--memory-limits", "0.5,lots"], "--memory-limits 'lots' is not a size"),
    (["bert_tiny", "--memory-limits", "4096"],
     "--memory-limits '4096' is not a memory limit: a fraction of the peak must be at most 1; for a size give "
     "units, e.g. 4096B"),
    (["bert_tiny,no_such_model", "--memory-limits", "0.5"], "no sample or graph file named 'no_such_model'"),
    (["bert_tiny", "--memory-limits", "0.5", "--devices", "rtx3090,v100"], "--devices: unknown device 'v100'"),
    (["bert_tiny"], "give --memory-limits, --pareto or both"),
])
def test_bad_cli_sweeps_are_one_line(tmp_path, capsys, args, words):
    assert main(["sweep", *args, "--time-budget", "1", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("magis: error:") and words in err[0]
    assert not (tmp_path / "out").exists()


def test_cli_sweep_writes_sweep_json(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "fig6_ftree", "--memory-limits", "0.9", "--pareto", "--time-budget", "1",
                 "--processes", "2", "-o", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc == json.loads((out / "sweep.json").read_text())
    assert doc["status"] == "finished" and [r["limit"] for r in doc["rows"]] == ["0.9", "pareto"]
    assert doc["rows"][1]["reached"] is None and doc["rows"][1]["points"] >= 1
    progress = [line for line in cap.err.splitlines() if line.startswith("[")]
    assert len(progress) == 2 and all("fig6_ftree rtx3090" in line for line in progress)
    for r in doc["rows"]:
        load_plans(r["plan"], io.load(graph_path("fig6_ftree")))


def test_cli_sweep_exits_3_when_a_limit_is_not_reached(tmp_path, capsys):
    """The status of "plans written, a memory limit not reached" is 3, as for ``magis optimize``."""
    out = tmp_path / "out"
    assert main(["sweep", "fig6_ftree", "--memory-limits", "0.9,1KiB", "--time-budget", "1", "-o", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: warning: 1 of 2 memory limits not reached (fig6_ftree rtx3090 1KiB")
    doc = json.loads((out / "sweep.json").read_text())
    assert [r["reached"] for r in doc["rows"]] == [True, False]
    assert all(Path(r["plan"]).exists() for r in doc["rows"])
