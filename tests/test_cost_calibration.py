"""Measured cost (the op-time cache), calibration of the roofline's constants, and the choice of a
cost model (``--cost``) on the command line."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest
import torch

from app.cli import main
from core.cost import AnalyticCost, get_device
from core.cost.calibrate import (
    calibrate,
    effective,
    fit,
    held_out_errors,
    load_calibrated,
    predict,
    profile_path,
    to_profile,
)
from core.cost.choice import COST_MODELS, check_cost, cost_device, make_cost
from core.cost.devices import profile_from_dict, profile_to_dict
from core.cost.measured import MeasuredCost
from core.cost.model import op_features
from core.ir.graph import NodeKind
from core.simulate import simulate
from core.transform.registry import get_rule
from core.transform.rule import Application
from tests.hand_graphs import mlp

TRUE = {"c0": 8e-6, "compute": 40e9, "vector": 4e9, "bandwidth": 6e9, "view": 1.5e-6, "host_bandwidth": 5e9}


def synthetic(consts: dict[str, float], n: int = 40, seed: int = 0) -> list[dict]:
    """Ops spread over the overhead-, compute- and bandwidth-bound regimes, timed by ``consts``."""
    rng = random.Random(seed)
    recs = []
    for cls in ("compute", "memory"):
        for _ in range(n):
            f, b = 10 ** rng.uniform(2, 9), 10 ** rng.uniform(2, 8.5)
            recs.append({"cls": cls, "flops": f, "bytes": b, "t": predict(consts, cls, f, b)})
    return recs


def test_fit_recovers_known_constants_from_synthetic_timings():
    base = get_device("cpu")
    recs = synthetic(TRUE) + [{"cls": "view", "flops": 0.0, "bytes": 0.0, "t": t} for t in (1e-6, 4e-6)]
    consts, report = fit(recs, base)
    for k in ("c0", "compute", "vector", "bandwidth"):
        assert consts[k] == pytest.approx(TRUE[k], rel=1e-3), k
    assert consts["view"] == pytest.approx(2e-6, rel=1e-9)  # log-space least squares: the geometric mean
    assert report["records"] == {"compute": 40, "memory": 40, "view": 2, "copy": 0}
    assert report["rms_log_error_after"] < 0.5 < report["rms_log_error_before"]


def test_hand_case_three_ops():
    """c0 = 10 us, P = 1 TFLOP/s (matmul), W = 1 GB/s: a 1e6-FLOP matmul on 1e3 bytes takes 11 us, a
    1e6-byte copy 1010 us, a 0-FLOP 0-byte op 10 us -- and the fit finds those constants again."""
    true = {"c0": 1e-5, "compute": 1e12, "vector": 1e9, "bandwidth": 1e9, "view": 0.0, "host_bandwidth": 1e9}
    assert predict(true, "compute", 1e6, 1e3) == pytest.approx(11e-6)
    assert predict(true, "memory", 0.0, 1e6) == pytest.approx(1010e-6)
    recs = [{"cls": "compute", "flops": f, "bytes": 1e3, "t": predict(true, "compute", f, 1e3)} for f in (1e6, 1e7, 1e8)]
    recs += [{"cls": "memory", "flops": 0.0, "bytes": b, "t": predict(true, "memory", 0.0, b)} for b in (1e3, 1e5, 1e7)]
    recs += [{"cls": "memory", "flops": f, "bytes": 1e2, "t": predict(true, "memory", f, 1e2)} for f in (1e5, 1e7)]
    consts, _ = fit(recs, get_device("cpu"))
    for k in ("c0", "compute", "vector", "bandwidth"):
        assert consts[k] == pytest.approx(true[k], rel=1e-3), k


def test_calibrated_profile_is_what_the_analytic_model_uses():
    """The fitted constants, written into a profile, give the analytic model's node times."""
    base = get_device("cpu")
    prof = to_profile(base, dict(TRUE))
    assert prof.name == "cpu-calibrated" and prof.half_time == 0.0
    assert effective(prof)["compute"] == pytest.approx(TRUE["compute"])
    assert effective(prof)["bandwidth"] == pytest.approx(TRUE["bandwidth"])
    g, _ = mlp()
    cost = AnalyticCost(prof)
    for node in g.ops():
        cls, f, b = op_features(g, node)
        assert cost.node_time(g, node) == pytest.approx(predict(TRUE, cls, f, b), rel=1e-9)
    assert profile_from_dict(json.loads(json.dumps(profile_to_dict(prof)))) == prof


def _op_records(op: str, cls: str, pair: tuple[float, float], n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        f, b = 10 ** rng.uniform(3, 9), 10 ** rng.uniform(3, 8)
        out.append({"op": op, "cls": cls, "flops": f, "bytes": b, "t": predict(TRUE, cls, f, b, pair)})
    return out


def test_per_op_pairs_are_fitted_where_one_roofline_is_off_by_a_factor():
    """A convolution 3x slower than the roofline with a 30 us fixed cost, a max-pool 10x slower, and
    ops the roofline describes: one roofline for all misses by a wide margin; with a (c0, s) pair per
    op fitted together with it, every op is timed right again (only the products s / P and s / W are
    determined, so the test compares times, not constants)."""
    conv, pool = (30e-6, 3.0), (TRUE["c0"], 10.0)
    recs = synthetic(TRUE, n=60)
    recs = [dict(r, op="aten.add.Tensor" if r["cls"] == "memory" else "aten.mm.default") for r in recs]
    recs += _op_records("aten.convolution.default", "compute", conv, 20, 1)
    recs += _op_records("aten.max_pool2d_with_indices.default", "memory", pool, 20, 2)
    flat, flat_report = fit(recs, get_device("cpu"), per_op=False)
    consts, report = fit(recs, get_device("cpu"))
    assert "op_fits" not in flat
    fits = consts["op_fits"]
    assert set(fits) == {"aten.add.Tensor", "aten.mm.default", "aten.convolution.default",
                         "aten.max_pool2d_with_indices.default", "category:elementwise", "category:matmul",
                         "category:conv", "category:pool"}  # the categories' pairs time their ops never timed
    for r in recs:
        got = predict(consts, r["cls"], r["flops"], r["bytes"], fits[r["op"]])
        assert got == pytest.approx(r["t"], rel=0.02), r["op"]
    assert fits["aten.convolution.default"][0] == pytest.approx(30e-6, rel=0.02)
    assert report["rms_log_error_after"] < 0.01 and flat_report["rms_log_error_after"] > 0.3
    assert report["op_fits"] == len(fits)


def test_an_op_is_timed_by_its_own_pair_else_its_category_else_the_global_constants():
    base = get_device("cpu")
    consts = dict(TRUE, op_fits={"aten.mm.default": (20e-6, 2.0), "category:elementwise": (1e-6, 0.5)})
    prof = to_profile(base, consts)
    assert prof.op_fit("aten.mm.default", "matmul") == (20e-6, 2.0)
    assert prof.op_fit("aten.relu.default", "elementwise") == (1e-6, 0.5)  # untimed op, timed category
    assert prof.op_fit("aten.convolution.default", "conv") == (TRUE["c0"], 1.0)  # neither: global
    g, _ = mlp()  # two matmuls and a relu
    cost = AnalyticCost(prof)
    pairs = {"aten.mm.default": (20e-6, 2.0), "aten.relu.default": (1e-6, 0.5)}
    for node in g.ops():
        cls, f, b = op_features(g, node)
        assert cost.node_time(g, node) == pytest.approx(predict(TRUE, cls, f, b, pairs[node.op]), rel=1e-9)
    assert profile_from_dict(json.loads(json.dumps(profile_to_dict(prof)))) == prof


def test_held_out_error_predicts_each_signature_from_the_others():
    """Every record predicted once, by a fit that did not see it; on timings the model describes
    exactly, the held-out error is as small as the in-sample one."""
    recs = [dict(r, op="aten.mm.default" if r["cls"] == "compute" else "aten.add.Tensor") for r in synthetic(TRUE)]
    held = held_out_errors(recs, get_device("cpu"))
    assert len(held) == len(recs)
    assert float(abs(held).max()) < 0.01


def test_a_constant_the_timings_cannot_see_stays_at_the_base_profile():
    base = get_device("cpu")
    recs = [{"cls": "memory", "flops": 0.0, "bytes": 1e3, "t": 1e-5}] * 3  # overhead-bound only
    consts, _ = fit(recs, base)
    assert consts["compute"] == pytest.approx(effective(base)["compute"], rel=0.05)
    assert consts["c0"] == pytest.approx(1e-5, rel=0.05)


def test_measured_cache_round_trips_and_is_not_measured_again(tmp_path, monkeypatch):
    g, _ = mlp()
    m = MeasuredCost(cache_dir=tmp_path, fallback="cpu", repeats=2)
    times = {n.id: m.node_time(g, n) for n in g.ops()}
    assert m.measured == 3 and m.fallbacks == 0  # two matmuls of other shapes and a relu
    assert all(t > 0 for t in times.values())
    m.save()
    recs = {r["op"]: r for r in m.records()}
    assert recs["aten.mm.default"]["cls"] == "compute" and recs["aten.relu.default"]["cls"] == "memory"

    def boom(*_a, **_k):
        raise AssertionError("measured again")

    monkeypatch.setattr(MeasuredCost, "_measure", boom)
    again = MeasuredCost(cache_dir=tmp_path, fallback="cpu")
    assert {n.id: again.node_time(g, n) for n in g.ops()} == times
    assert again.measured == 0 and again.timed == m.timed


def test_ops_that_cannot_be_timed_fall_back_to_the_analytic_model_and_are_counted(tmp_path):
    g, _ = mlp()
    m = MeasuredCost(cache_dir=tmp_path, fallback="cpu", max_bytes=1)  # nothing is small enough
    analytic = AnalyticCost("cpu")
    for n in g.ops():
        assert m.node_time(g, n) == analytic.node_time(g, n)
    assert m.fallbacks == len(list(g.ops())) and m.measured == 0
    assert set(m.failures) == {"aten.mm.default", "aten.relu.default"}
    assert "MemoryError" in m.failures["aten.mm.default"]
    m.save()
    again = MeasuredCost(cache_dir=tmp_path, fallback="cpu")  # the failure is cached: not retried
    again._measure = None  # calling it would raise TypeError
    for n in g.ops():
        again.node_time(g, n)
    assert again.fallbacks == len(list(g.ops()))


def test_swaps_and_fission_are_measured_too(tmp_path):
    g, r = mlp()
    a = r["a"].node
    swapped = g.copy()
    get_rule("swap").apply(swapped, Application("swap", (a, 0, r["r"].node)))
    m = MeasuredCost(cache_dir=tmp_path, fallback="cpu", repeats=2)
    copies = [n for n in swapped.ops() if n.kind in (NodeKind.STORE, NodeKind.LOAD)]
    assert len(copies) == 2
    assert all(m.node_time(swapped, n) > 0 for n in copies)
    assert {x["cls"] for x in m.records()} >= {"copy"}
    sim = simulate(swapped, _order(swapped), m)
    assert sim.latency > 0


def _order(g):
    from core.schedule import get_scheduler

    return get_scheduler("traced").run(g).order


def test_calibrate_saves_a_profile_that_make_cost_loads(tmp_path):
    g, _ = mlp()
    prof, report = calibrate("cpu", [g], cache_dir=tmp_path, host=True)
    assert profile_path("cpu", tmp_path).exists() and report["host_copy"]["pageable"] > 0
    assert load_calibrated("cpu", tmp_path) == prof
    cost = make_cost("calibrated", "cpu", cache_dir=tmp_path)
    assert isinstance(cost, AnalyticCost) and cost.device == prof
    assert prof.host_bandwidth == (report["host_copy"]["pinned"] or report["host_copy"]["pageable"])


def test_cost_choice_names_and_devices():
    assert set(COST_MODELS) == {"analytic", "compiled", "calibrated", "measured"}
    with pytest.raises(ValueError, match="unknown cost model 'roofline'; known: analytic, compiled, calibrated, measured"):
        check_cost("roofline")
    assert cost_device("analytic", "h100-sxm") == "h100-sxm"
    assert cost_device("measured") == "cpu"  # this machine (no GPU)
    with pytest.raises(ValueError, match="this machine, whose profile is 'cpu', not 'rtx3090'"):
        cost_device("calibrated", "rtx3090")


def _plan_meta(path):
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())


@pytest.mark.parametrize("cost", ["analytic", "compiled", "calibrated", "measured"])
def test_cli_optimize_records_the_cost_model(tmp_path, monkeypatch, capsys, cost):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "p.json"
    rc = main(["optimize", "fig2_skip", "--pareto", "--time-budget", "1", "--cost", cost, "-o", str(out)])
    assert rc == 0
    d = _plan_meta(out)
    assert d["meta"]["cost"] == cost
    assert d["device"] == ("rtx3090" if cost in ("analytic", "compiled") else "cpu")
    assert d["meta"]["cost_profile"] == {"analytic": "rtx3090", "compiled": "rtx3090", "calibrated": "cpu-calibrated",
                                         "measured": "cpu"}[cost]
    if cost == "calibrated":
        assert profile_path("cpu", tmp_path / "cache").exists()
        assert "calibrated cpu" in capsys.readouterr().err


@pytest.mark.parametrize("args, words", [
    (["--cost", "roofline"], "--cost: unknown cost model 'roofline'; known: analytic, compiled, calibrated, measured"),
    (["--cost", "measured", "--device", "rtx3090"], "whose profile is 'cpu', not 'rtx3090'"),
])
def test_cli_bad_cost_is_one_line_exit_2(tmp_path, capsys, args, words):
    out = tmp_path / "p.json"
    assert main(["optimize", "fig2_skip", "--pareto", "--time-budget", "1", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("magis: error:") and words in err[0]
    assert not out.exists()


def test_cli_sweep_bad_cost_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", "fig6_ftree", "--pareto", "--cost", "nope", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cost: unknown cost model 'nope'" in err[0]


def test_cli_sweep_calibrated_records_the_cost_in_rows_and_plans(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert main(["sweep", "fig6_ftree", "--pareto", "--cost", "calibrated", "--time-budget", "1",
                 "--processes", "1", "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["cost"] == "calibrated" and doc["parameters"]["devices"] == ["cpu"]
    (row,) = doc["rows"]
    assert row["cost"] == "calibrated" and row["device"] == "cpu" and ".cpu.calibrated." in row["plan"]
    meta = _plan_meta(Path(row["plan"]))["meta"]
    assert meta["cost"] == "calibrated" and meta["cost_profile"] == "cpu-calibrated"
    assert not math.isnan(row["latency_seconds"])


def test_app_optimize_job_uses_and_records_the_chosen_cost_model(tmp_path, monkeypatch):
    import time

    from app.state import AppState

    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path / "cache"))
    st = AppState()
    try:
        gid = "sample:fig6_ftree"
        job = st.plans.start_optimize(gid, 2.0, "cpu", "calibrated")
        t0 = time.time()
        while not job.done and time.time() - t0 < 60:
            time.sleep(0.2)
        assert job.done and job.error is None, job.error
        f = st.plans.frontier(gid)
        assert "calibrated cost" in f.source
        assert f.plans.meta["cost"] == "calibrated" and f.plans.device == "cpu"
        assert profile_path("cpu", tmp_path / "cache").exists()
    finally:
        st.shutdown()


def test_app_optimize_controls_offer_every_cost_model():
    from app.optimizer_view import pareto_tab

    def find(c, id_):
        if getattr(c, "id", None) == id_:
            return c
        kids = getattr(c, "children", None)
        for k in kids if isinstance(kids, list) else [kids] if kids is not None else []:
            hit = find(k, id_)
            if hit is not None:
                return hit
        return None

    dd = find(pareto_tab(), "opt-cost")
    assert dd is not None and dd.value == "analytic"
    assert [o["value"] for o in dd.options] == ["analytic", "compiled", "calibrated", "measured"]


def _unet_tiny_and_its_micro_batches():
    from core.search.plan import load_plans
    from sample_graphs.frontiers import plan_path
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph("unet_tiny")  # batch 2
    plan = next(p for p in load_plans(plan_path("unet_tiny"), g).points if p.method == "microbatch")
    (loop,) = [n for n in plan.graph(g).ops() if n.kind == NodeKind.FISSION]
    return g, loop.fission.graph  # the loop's body: the step at batch 1


def test_kernel_variant_is_the_convolution_backend_torch_picks():
    """torch runs a small single-sample convolution with its own kernel and batch 2 with oneDNN: the
    variant of every convolution of unet_tiny changes when micro-batching splits its batch of 2."""
    from collections import Counter

    from core.cost.variants import kernel_variant

    g, body = _unet_tiny_and_its_micro_batches()
    full = Counter(kernel_variant(g, n) for n in g.ops() if "convolution" in (n.op or ""))
    half = Counter(kernel_variant(body, n) for n in body.ops() if "convolution" in (n.op or ""))
    # 13 convolutions (2 transposed), forward and backward: oneDNN at batch 2 -- but for the 1x1 one
    # when torch runs one thread (its rule) -- and torch's own kernels at batch 1
    assert full["Mkldnn"] == (22 if torch.get_num_threads() > 1 else 20) and full["MkldnnTranspose"] == 4
    assert half == {"Slow2d": 22, "SlowTranspose2d": 4}
    assert all(kernel_variant(g, n) is None for n in g.ops() if "convolution" not in (n.op or ""))


def test_a_variant_gets_its_own_pair_and_the_analytic_model_uses_it():
    """oneDNN 40 us slower than torch's own kernel on the same convolutions: the fit gives each
    variant its pair, and a calibrated profile times each node of unet_tiny by its variant."""
    from core.cost.variants import kernel_variant

    rng = random.Random(3)
    recs = [dict(r, op="aten.add.Tensor" if r["cls"] == "memory" else "aten.mm.default") for r in synthetic(TRUE)]
    for variant, c0 in (("Slow2d", 10e-6), ("Mkldnn", 50e-6)):
        for _ in range(12):
            f, b = 10 ** rng.uniform(5, 8), 10 ** rng.uniform(4, 6)
            recs.append({"op": "aten.convolution.default", "variant": variant, "cls": "compute", "flops": f,
                         "bytes": b, "t": predict(TRUE, "compute", f, b, (c0, 1.0))})
    consts, report = fit(recs, get_device("cpu"))
    fits = consts["op_fits"]
    assert {"aten.convolution.default[Slow2d]", "aten.convolution.default[Mkldnn]"} <= set(fits)
    for r in recs[-24:]:
        pair = fits[f"aten.convolution.default[{r['variant']}]"]
        assert predict(consts, "compute", r["flops"], r["bytes"], pair) == pytest.approx(r["t"], rel=0.03)
    assert report["rms_log_error_after"] < 0.02
    prof = to_profile(get_device("cpu"), consts)
    assert prof.fits_variants("aten.convolution.default") and not prof.fits_variants("aten.mm.default")
    g, body = _unet_tiny_and_its_micro_batches()
    cost = AnalyticCost(prof)
    for graph in (g, body):
        for n in graph.ops():
            if n.op == "aten.convolution.default":
                cls, f, b = op_features(graph, n)
                pair = fits[f"aten.convolution.default[{kernel_variant(graph, n)}]"] \
                    if f"aten.convolution.default[{kernel_variant(graph, n)}]" in fits else fits["aten.convolution.default"]
                assert cost.node_time(graph, n) == pytest.approx(predict(consts, cls, f, b, pair), rel=1e-9)


def test_measured_timings_record_the_variant(tmp_path):
    g, body = _unet_tiny_and_its_micro_batches()
    m = MeasuredCost(cache_dir=tmp_path, fallback="cpu", repeats=1, min_sample=0.0)
    conv = next(n for n in body.ops() if n.op == "aten.convolution.default")
    m.node_time(body, conv)
    (rec,) = m.records()
    assert rec["variant"] == "Slow2d" and rec["op"] == "aten.convolution.default"
