"""The prepared GPU check (bench/gpu_check.py): its choices on hand cases, and its dry run on the
CPU -- the whole script, tiny workloads, the code paths a GPU run takes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


def test_spread_keeps_the_ends_and_spreads_the_rest():
    assert gpu_check.spread([1, 2, 3], 4) == [1, 2, 3]
    assert gpu_check.spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert gpu_check.spread(list(range(5)), 2) == [0, 4]


def test_best_point_is_the_lowest_peak_within_ten_percent_else_the_lowest_peak():
    pts = [{"peak_ratio": 0.5, "latency_ratio": 1.2}, {"peak_ratio": 0.7, "latency_ratio": 1.05},
           {"peak_ratio": 0.6, "latency_ratio": 1.10}]
    assert gpu_check.best_point(pts) == 2
    slow = [{"peak_ratio": 0.5, "latency_ratio": 1.3}, {"peak_ratio": 0.4, "latency_ratio": 1.6}]
    assert gpu_check.best_point(slow) == 1
    assert gpu_check.best_point([]) is None


def test_unknown_workload_is_refused_in_one_line():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--checks", "vgg"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "unknown workload(s) vgg" in p.stderr


@pytest.mark.slow
def test_dry_run_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "check.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run", "--budget", "1",
                        "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["tiny"] and res["device"] == "cpu"
    assert res["calibration"]["signatures"] > 100
    by = {}
    for r in res["plans"]:
        assert "error" not in r, r
        by.setdefault(r["workload"], []).append(r)
        # on the CPU the scripts count live storages as the simulator does: the same bytes
        assert r["measured_allocated"] == r["simulated_peak"], r["script"]
        assert r["predicted_reserved"] >= r["simulated_peak"]
        if r["method"] != "eager":
            assert r["compare"]["allclose"], r
    assert set(by) == {"bert_base", "gpt2_bf16", "resnet50"}
    for rows in by.values():
        methods = {r["method"] for r in rows}
        assert {"eager", "magis"} <= methods and len(methods) >= 4
        assert min(r["simulated_peak"] for r in rows if r["method"] == "magis") < rows[0]["simulated_peak"]
    ps = res["plan_step"]
    assert ps["cap"]["enforced"] is False  # nothing caps CPU memory, and the JSON says so
    assert ps["plan"]["reached"] and ps["losses_match"], ps
    assert "plan_step on gpt2_bf16" in p.stdout
