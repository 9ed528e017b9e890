"""``bench/spike_steps.py --tiny``: DTR's plan of the tiny SD UNet, the Swap steps, then spike steps
from the Swap steps' states, in one short run: the spike steps' points come from the same archive,
so they are at or below the Swap steps' (within +10% and overall)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_run_reports_swaps_then_spike_steps_from_each_dtr_plan(tmp_path):
    out = tmp_path / "spike_steps.json"
    env = dict(os.environ, MAGIS_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "spike_steps.py"), "--tiny", "--budgets", "0.9,0.5",
                        "--swap-seconds", "2", "--spike-seconds", "3", "--json", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["model"] == "sd_unet" and doc["tiny"] and doc["from"] == [1.08, 1.09, 1.10]
    (row,) = doc["rows"]  # DTR cannot reach half of the tiny UNet's peak: said, not dropped
    assert row["budget"] == 0.9 and [f["budget"] for f in doc["failed"]] == [0.5]
    start = row["start"]["peak"]
    swaps, spikes = row["swaps"], row["spikes"]
    assert swaps["peak"] <= start and swaps["best_within_10pct"]["overhead"] <= 0.10
    assert spikes["from"] and all(p["overhead"] <= 0.10 + 1e-12 for p in spikes["from"])
    best = spikes["best_within_10pct"]
    assert best["overhead"] <= 0.10 and best["peak"] <= swaps["best_within_10pct"]["peak"]
    assert spikes["lowest"]["peak"] <= min(best["peak"], swaps["peak"])
    assert "then spike steps" in r.stdout and "infeasible" in r.stdout
