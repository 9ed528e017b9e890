"""The measured curve of a real run (``app.measured_view``): the selected plan's exported script run
on the CPU gives live bytes per step equal to the simulated curve, step by step, on a tiny sample;
the background job and the figure built from it carry both curves and the peak ratio."""

from __future__ import annotations

import threading

import pytest

from app.measured_view import figure, measure_point, start_measure, status_line
from app.state import AppState

GID = "sample:fig6_ftree"  # its default point: fission and remat applications, 97 ops


@pytest.fixture(scope="module")
def state():
    s = AppState(time_budget=2)
    yield s
    s.shutdown()


def test_measured_curve_equals_the_simulated_one_step_by_step(state):
    f = state.plans.frontier(GID)
    for key in (f.default(), f.baseline()):
        v = state.plans.view(GID, key, wait=60)
        assert v is not None
        res = measure_point(f, v)
        assert len(res["simulated"]) == len(v.plan.order)
        assert res["measured"] == res["simulated"]
        assert res["measured_peak"] == res["simulated_peak"] == v.sim.peak == max(res["simulated"])
        assert res["peak_ratio"] == 1.0
    assert f.points[f.default()].applications, "the default point is a transformed graph, not the eager one"


def test_the_job_and_the_figure_overlay_both_curves(state):
    f = state.plans.frontier(GID)
    key = f.default()

    def view_of():
        return state.plans.view(GID, key, wait=60)

    view_of.key = key
    jobs, lock = {}, threading.Lock()
    job = start_measure(jobs, lock, f, view_of)
    assert start_measure(jobs, lock, f, view_of) is job  # one job per point
    job.worker.join(timeout=300)
    assert job.done and job.error is None, job.error
    fig = figure(job.result)
    sim, run = fig["data"]
    assert sim["name"].startswith("simulated") and run["name"].startswith("measured")
    assert sim["y"] == run["y"] == job.result["simulated"]  # a tiny graph: drawn without downsampling
    assert sim["x"] == run["x"] == list(range(len(job.result["simulated"])))
    assert "= 1.000" in fig["layout"]["title"]["text"]
    assert status_line(job.result).startswith(f"point {key}: peak ratio 1.000")
    assert status_line(job.result).endswith(f"{len(sim['y'])} of {len(sim['y'])} steps equal")
    assert figure(None)["data"] == []


def test_more_calls_than_ops_are_spread_over_the_steps():
    res = {"key": 0, "simulated": [10, 30, 20], "measured": [10, 15, 30, 25, 20], "measured_peak": 30,
           "simulated_peak": 30, "peak_ratio": 1.0}
    sim, run = figure(res)["data"]
    assert sim["x"] == [0, 1, 2] and run["x"] == [0, 0.5, 1, 1.5, 2] and run["y"] == res["measured"]
    assert "5 aten calls measured for 3 ops" in status_line(res)
