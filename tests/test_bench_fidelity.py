"""``bench/fidelity.py --quick``: every point's exported script measured on the CPU against its
simulation under the three cost models, in one short run (two tiny workloads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_fidelity_run_reports_every_point_under_three_cost_models(tmp_path):
    out = tmp_path / "fidelity.json"
    env = dict(os.environ, MAGIS_CACHE=str(tmp_path / "home-cache"))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), "--quick", "--cache",
                        str(tmp_path / "cache"), "-o", str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert {x["workload"] for x in rows} == {"fig2_skip", "bert_tiny"}
    assert sum(x["aa"] for x in rows) == 2  # one eager-against-itself point per workload
    for x in rows:
        # peaks are exact: the script's measured live bytes are the simulated ones
        assert x["measured_peak"] == x["sim_peak"], (x["workload"], x["label"])
        assert set(x["sim_latency"]) == {"analytic", "calibrated", "measured"}
        assert all(v > 0 for v in x["sim_latency"].values())
    cal = doc["calibrated_profile"]
    assert cal["median_abs_rel_error_after"] < cal["median_abs_rel_error_before"]
    assert cal["median_abs_rel_error_held_out"] is not None and cal["op_fits"] > 0
    for c in ("analytic", "calibrated", "measured"):
        s = doc["summary"][c]
        assert s["overhead_points_within_30pct"] > 0 and s["spearman_latency_pooled"] is not None
    assert "calibrated" in r.stdout and "noise floor" in r.stdout
