"""``bench/peak_fission.py --tiny``: DTR's plan of the tiny SD UNet, the Swap steps alone against
peak fission then Swap steps, in one short run; every column is at or below the plan it starts from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_run_reports_both_columns_from_each_dtr_plan(tmp_path):
    out = tmp_path / "peak_fission.json"
    env = dict(os.environ, MAGIS_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "peak_fission.py"), "--tiny", "--budgets", "0.9,0.5",
                        "--fission-seconds", "2", "--swap-seconds", "2", "--json", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["model"] == "sd_unet" and doc["tiny"]
    (row,) = doc["rows"]  # DTR cannot reach half of the tiny UNet's peak: said, not dropped
    assert row["budget"] == 0.9 and [f["budget"] for f in doc["failed"]] == [0.5]
    assert "infeasible" in doc["failed"][0]["reason"]
    start = row["start"]["peak"]
    assert start < 1.0
    assert row["fission"]["peak"] <= start
    for col in ("swaps_swaps", "fission_swaps"):
        assert row[col]["peak"] <= start
        best = row[col]["best_within_10pct"]
        assert best is not None and best["overhead"] <= 0.10 and best["peak"] <= start
    assert row["fission_swaps"]["peak"] <= row["fission"]["peak"]
    assert "Swap steps alone" in r.stdout and "infeasible" in r.stdout
