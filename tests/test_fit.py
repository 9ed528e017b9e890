"""``magis fit`` (core.fit, app.fit_cmd): eager's breakdown against hand-computed bytes, the verdict
and its exit statuses for a memory that fits, one only a plan fits and one below the resident floor,
the JSON report, and one-line errors on bad input.  Memories are set relative to each graph's own
eager peak (``--device cpu``: judged on live bytes), so no test depends on a card's size."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from app.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FITS_WITH_PLAN, EXIT_OK, main
from app.fit_cmd import exact_size, parse_memory
from app.specs import load_graph
from core.analysis.lifetimes import resident_floor
from core.fit import PARTS, bounds, fit
from core.frontend.torch_import import capture
from core.search.plan import load_plans
from tests.model_files import MLP_FACTORY

# the MLP of MLP_FACTORY: Linear(8, 16) -> ReLU -> Linear(16, 4) on a 3 x 8 batch, float32
W = (16 * 8 + 16 + 4 * 16 + 4) * 4  # 848 B of weights
LAST_WEIGHT = 4 * 16 * 4  # 256 B: the second layer's weight, the last one Adam updates


@pytest.fixture(scope="module")
def mlp_adam():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return capture(module, (torch.randn(3, 8),), lambda m, x: m(x).square().mean(), adam_lr=1e-3, name="mlp")


def test_breakdown_of_an_mlp_with_adam_matches_hand_counts(mlp_adam):
    rep = fit(mlp_adam, "cpu", 1 << 20).report
    parts = rep["eager"]["breakdown"]
    assert rep["optimizer"] == "adam"
    # held all step: weights, Adam's two moments (2x the weights), the input batch
    assert parts["weights"] == {"at_peak": W, "total": W}
    assert parts["optimizer_state"] == {"at_peak": 2 * W, "total": 2 * W}
    assert parts["inputs"] == {"at_peak": 3 * 8 * 4, "total": 96}
    # kept to the end: one gradient per weight, the loss, and the update's new weights and moments
    assert parts["gradients"] == {"at_peak": W, "total": W}
    assert parts["outputs"] == {"at_peak": 4, "total": 4}
    assert parts["updated"]["total"] == 3 * W
    # the peak is in Adam's update of the last weight (sqrt(v) and its rescaled copy alive): that
    # weight's new value is not written yet, its new moments are
    assert rep["eager"]["peak_op"] == "adam_rms_2_weight"
    assert parts["updated"]["at_peak"] == 3 * W - LAST_WEIGHT
    assert parts["activations"] == {"at_peak": 2 * LAST_WEIGHT, "total": None}
    assert parts["backward"]["at_peak"] == 0
    peak = W + 2 * W + 96 + W + 4 + (3 * W - LAST_WEIGHT) + 2 * LAST_WEIGHT
    assert rep["eager"]["peak_bytes"] == peak == sum(p["at_peak"] for p in parts.values()) == 6292
    # the floor: everything held or kept, and it is the analysis' resident floor
    floor = W + 2 * W + 96 + W + 4 + 3 * W
    assert rep["floor"]["bytes"] == floor == resident_floor(mlp_adam)[0] == 6036
    assert sum(parts[k]["total"] for k in ("weights", "optimizer_state", "inputs", "gradients", "updated",
                                           "outputs")) == floor


def test_live_verdict_on_the_cpu_profile_and_reserved_on_a_gpu_profile(mlp_adam):
    at = fit(mlp_adam, "cpu", 6292).report
    assert at["status"] == "fits" and at["verdict"] == {"basis": "live", "bytes": 6292, "fits": True,
                                                        "headroom_bytes": 0}
    assert at["eager"]["reserved_bytes"] is None and at["plans"] == []
    # on rtx3090 the caching allocator reserves one 2 MiB small-pool segment for these sub-MiB tensors
    gpu = fit(mlp_adam, "rtx3090").report
    assert gpu["memory_bytes"] == 24 * 1024**3
    assert gpu["verdict"] == {"basis": "reserved", "bytes": 2 << 20, "fits": True,
                              "headroom_bytes": 24 * 1024**3 - (2 << 20)}
    assert fit(mlp_adam, "rtx3090", 2 << 20).report["verdict"]["fits"]


def test_bounds_name_the_floor_and_the_largest_op_above_the_memory():
    op = {"name": "mm", "bytes": 80}
    assert bounds(100, {"weight": 100}, 50, op, 140) == []
    assert bounds(100, {"weight": 100}, 50, op, 120) == [
        {"bound": "largest_op", "bytes": 130, "op": "mm", "op_bytes": 80, "held_bytes": 50}]
    assert [b["bound"] for b in bounds(100, {"weight": 100}, 50, op, 99)] == ["resident_floor", "largest_op"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["fit", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def eager_peak(name: str) -> int:
    return fit(load_graph(name), "cpu", 1 << 40).report["eager"]["peak_bytes"]


def test_fits_eagerly_exit_0_with_zero_headroom(capsys):
    peak = eager_peak("bert_tiny")
    status, out, _ = run(capsys, "bert_tiny", "--device", "cpu", "--memory", f"{peak}B")
    assert status == EXIT_OK
    assert "verdict: FITS eagerly" in out and "headroom 0 B" in out
    assert "plans that fit" not in out  # no method is run when eager fits


def test_only_a_plan_fits_exit_4_and_the_plan_file_holds_the_point(capsys, tmp_path):
    peak = eager_peak("gpt_neo_tiny")
    memory = int(peak * 0.88)
    plans = tmp_path / "plans.json"
    status, out, err = run(capsys, "gpt_neo_tiny", "--device", "cpu", "--memory", f"{memory}B", "--methods",
                           "dtr,sqrt_n", "--time-budget", "2", "-o", str(plans), "--json")
    assert status == EXIT_FITS_WITH_PLAN
    assert "magis: fits with a plan:" in err.strip().splitlines()[-1]
    rep = json.loads(out)
    assert rep["status"] == "fits_with_plan" and rep["verdict"]["fits"] is False
    assert rep["verdict"]["headroom_bytes"] == memory - peak
    assert rep["plans"], rep["no_plan"]
    lat = [p["latency_seconds"] for p in rep["plans"]]
    assert lat == sorted(lat)
    pf = load_plans(plans)
    for p in rep["plans"]:
        assert p["peak_bytes"] <= memory
        assert p["overhead"] == pytest.approx(p["latency_seconds"] / rep["eager"]["latency_seconds"] - 1)
        point = pf.points[p["point"]]
        assert (point.method, point.label, point.peak) == (p["method"], p["point_label"], p["peak_bytes"])
    best = rep["plans"][0]
    assert rep["commands"][0] == f"magis export gpt_neo_tiny --plan {plans} --point {best['point']} -o step.py"


def test_below_the_resident_floor_nothing_fits_exit_1_and_the_floor_is_the_bound(capsys):
    g = load_graph("gpt_neo_tiny")
    floor = resident_floor(g)[0]
    memory = floor - 1024
    status, out, err = run(capsys, "gpt_neo_tiny", "--device", "cpu", "--memory", f"{memory}B", "--methods",
                           "dtr,sqrt_n", "--time-budget", "1")
    assert status == EXIT_FAILED
    assert err.strip().splitlines()[-1].startswith("magis: does not fit:")
    assert "verdict: DOES NOT FIT eagerly" in out
    assert "no method found a plan that fits" in out
    from core.fmt import format_bytes

    assert f"bound: the resident floor {format_bytes(floor)} is above {format_bytes(memory)}" in out


def test_json_report_keys(capsys):
    peak = eager_peak("resnet50_tiny")
    status, out, _ = run(capsys, "resnet50_tiny", "--device", "cpu", "--memory", f"{peak + 1}B", "--json")
    assert status == EXIT_OK
    rep = json.loads(out)
    assert set(rep) >= {"graph", "nodes", "device", "memory_bytes", "memory_from", "optimizer", "eager", "floor",
                        "largest_op", "verdict", "status", "plans", "no_plan", "bounds", "commands", "output"}
    assert set(rep["eager"]) >= {"peak_bytes", "peak_step", "peak_op", "latency_seconds", "reserved_bytes",
                                 "breakdown"}
    assert set(rep["eager"]["breakdown"]) == set(PARTS)
    assert rep["verdict"] == {"basis": "live", "bytes": peak, "fits": True, "headroom_bytes": 1}
    assert (rep["status"], rep["memory_from"], rep["optimizer"]) == ("fits", "--memory", None)


def test_a_model_file_with_adam_prints_an_import_that_the_plan_file_matches(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlp.py").write_text(MLP_FACTORY)
    status, out, _ = run(capsys, "mlp.py:build", "--adam", "0.001", "--device", "cpu", "--memory", "6100B",
                         "--methods", "magis", "--time-budget", "1", "-o", "plans.json", "--json")
    rep = json.loads(out)
    assert rep["optimizer"] == "adam" and rep["eager"]["peak_bytes"] == 6292
    assert status == EXIT_FITS_WITH_PLAN, rep["no_plan"]
    assert rep["commands"][0] == "magis import mlp.py:build --adam 0.001 -o build.json.gz"
    for cmd in rep["commands"][:2]:  # import, then export point K of the plan file: both run
        assert main(cmd.split()[1:]) == EXIT_OK
    assert (tmp_path / "step.py").exists()


@pytest.mark.parametrize("argv, words", [
    (["bert_tiny", "--device", "tpu-v9"], "unknown device 'tpu-v9'"),
    (["bert_tiny", "--device", "cpu", "--memory", "24"], "give a unit"),
    (["bert_tiny", "--device", "cpu", "--memory", "lots"], "is not a size"),
    (["bert_tiny", "--device", "cpu", "--time-budget", "0"], "--time-budget must be positive"),
    (["bert_tiny", "--device", "cpu", "--methods", "magic"], "unknown method(s) magic"),
    (["no_such_model", "--device", "cpu"], "unknown sample 'no_such_model'"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, words):
    status, out, err = run(capsys, *argv)
    assert status == EXIT_BAD_INPUT
    lines = err.strip().splitlines()
    assert lines[-1].startswith("magis: error:") and words in lines[-1], err
    assert out == ""


def test_adam_on_a_graph_file_is_refused(capsys, tmp_path):
    from core.ir import io

    path = tmp_path / "g.json.gz"
    io.save(load_graph("bert_tiny"), path)
    status, _, err = run(capsys, str(path), "--adam", "0.001", "--device", "cpu")
    assert status == EXIT_BAD_INPUT and "is a graph file, captured already" in err


def test_sizes_parse_and_print_back_exactly():
    assert parse_memory("24GiB") == 24 * 1024**3
    assert parse_memory("1.5GB") == 1_500_000_000
    assert [exact_size(n) for n in (24 * 1024**3, 300 * 1024**2, 2048, 6100)] == ["24GiB", "300MiB", "2KiB", "6100B"]
    with pytest.raises(ValueError, match="at least 1 byte"):
        parse_memory("0B")
