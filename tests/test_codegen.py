"""Code generation: exported scripts reproduce eager PyTorch and the simulator's memory.

The round trip (core.codegen.verify) compares every output with eager autograd at float32
tolerances rtol=1e-4, atol=1e-5 (element-wise |got - ref| <= atol + rtol |ref|), and the measured
live storage bytes with ``core.analysis.lifetimes`` after *every* op, not only at the peak.
The seven tiny workloads are in test_codegen_samples.py; the full-size export in
test_codegen_fullsize.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from core.analysis.lifetimes import memory_profile
from core.codegen import CodegenError, export_script, generate_source
from core.codegen.release import integer_ranges, sanitize
from core.codegen.runtime import LiveBytesTracker, Swapper, make_inputs
from core.codegen.verify import (
    capture_real,
    load_script,
    resolve_schedule,
    verify_module,
)
from core.frontend.torch_import import capture
from core.ir.builder import GraphBuilder
from core.ir.graph import Graph, GraphError, NodeKind, TensorMeta, TRef, map_refs

ROOT = Path(__file__).resolve().parents[1]
RTOL, ATOL = 1e-4, 1e-5


# ---- small models -------------------------------------------------------------------------------
class Mlp(nn.Module):
    """Embedding, LayerNorm, GELU, a tied-free classifier and a constant tensor made in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.emb(ids)) * torch.tensor([1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0])
        return self.fc2(nn.functional.gelu(self.fc1(h)))


def mlp_loss(m: nn.Module, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(m(ids).flatten(0, 1), y.flatten())


class ConvNet(nn.Module):
    """Conv + batch norm (running statistics are graph outputs) + a residual branch + pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv1(x)))
        h = h + self.conv2(h)
        return self.fc(nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))


def conv_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(m(x), y)


def _mlp():
    torch.manual_seed(0)
    return Mlp(), (torch.randint(0, 11, (3, 4)), torch.randint(0, 5, (3, 4))), mlp_loss


def _conv():
    torch.manual_seed(0)
    return ConvNet(), (torch.randn(2, 3, 6, 6), torch.randint(0, 4, (2,))), conv_loss


MODELS = {"mlp": _mlp, "conv": _conv}
_GRAPHS: dict[str, Graph] = {}


def model_and_graph(name: str):
    m, inputs, loss = MODELS[name]()
    if name not in _GRAPHS:
        _GRAPHS[name] = capture(m, inputs, loss, training=True, name=name)
    return m, inputs, loss, _GRAPHS[name]


def assert_round_trip(res: dict) -> None:
    """Outputs allclose, and the measured live bytes equal the simulator's after every op."""
    assert res["allclose"], {k: v for k, v in res.get("per_tensor", {}).items() if not v["allclose"]}
    assert res["compared"] > 0 and not res["missing_reference"]
    assert res["tracked_calls"] == res["ops"]
    assert res["first_step_mismatch"] is None, res["first_step_mismatch"]
    assert res["measured_peak_bytes"] == res["simulated_peak_bytes"]
    assert res["ok"]


# ---- round trips --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_round_trip_traced(name):
    m, inputs, loss, g = model_and_graph(name)
    res = verify_module(m, inputs, loss, graph=g, schedule="traced")
    assert_round_trip(res)
    assert res["max_abs_error"] <= 1e-5
    if name == "conv":  # batch-norm running statistics come back as graph outputs
        assert "buffer:bn.running_mean" in res["per_tensor"]


@pytest.mark.parametrize("schedule", ["rpo", "random:1", "random:7"])
def test_other_schedules_same_outputs_and_their_own_peak(schedule):
    m, inputs, loss, g = model_and_graph("conv")
    traced = resolve_schedule(g, "traced")
    order = resolve_schedule(g, schedule)
    assert order != traced
    res = verify_module(m, inputs, loss, graph=g, order=order, schedule=schedule)
    assert_round_trip(res)
    assert res["simulated_peak_bytes"] == memory_profile(g, order).peak


def test_schedules_with_different_peaks_are_each_measured_exactly():
    m, inputs, loss, g = model_and_graph("mlp")
    peaks = {}
    for seed in range(6):
        order = resolve_schedule(g, f"random:{seed}")
        res = verify_module(m, inputs, loss, graph=g, order=order, schedule=f"random:{seed}", details=False)
        assert_round_trip(res)
        peaks[seed] = res["measured_peak_bytes"]
    assert len(set(peaks.values())) > 1, peaks  # the orders really differ in memory


def test_forward_graph_and_sgd_update_round_trip():
    m, inputs, loss = _conv()
    fwd = lambda m, x, y: m(x)  # noqa: E731
    g = capture(m, inputs, loss, forward_fn=fwd, training=False, name="conv_forward")
    assert "output_0" in g.outputs
    res = verify_module(m, inputs, loss, forward_fn=fwd, graph=g, schedule="rpo")
    assert_round_trip(res)
    assert {"output_0", "buffer:bn.running_var"} <= set(res["per_tensor"])
    m, inputs, loss = _mlp()
    g = capture(m, inputs, loss, training=True, name="mlp_sgd", sgd_lr=0.1)
    res = verify_module(m, inputs, loss, graph=g, schedule="random:4")
    assert_round_trip(res)
    assert "param:fc1.weight" in res["per_tensor"]


def test_adam_update_round_trip_equals_torch_optim_adam():
    """The captured Adam step gives what ``torch.optim.Adam`` gives (new parameters and both moments),
    in any order and under a swap plan far below the peak, the moments read as fresh zeros."""
    from core.codegen.verify import eager_outputs, graph_inputs, verify_graph
    from core.cost.model import AnalyticCost
    from core.schedule.swap_planner import SwapProblem
    from core.search.methods import run_method
    from core.search.plan import replay, sim_options

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    inputs = (torch.randn(64, 8), torch.randint(0, 4, (64,)))

    def loss(m, x, y):
        return nn.functional.cross_entropy(m(x), y)

    g = capture(m, inputs, loss, training=True, name="mlp_adam", adam_lr=0.01)
    res = verify_module(m, inputs, loss, graph=g, schedule="random:4")
    assert_round_trip(res)
    n = len(dict(m.named_parameters()))
    assert res["compared"] == 1 + 4 * n  # the loss, and per parameter its gradient, new value, two moments
    assert {"param:0.weight", "adam_m:0.weight", "adam_v:4.bias"} <= set(res["per_tensor"])
    assert res["what"] == "the loss, every gradient, the new weights and Adam's moments"
    cost = AnalyticCost("rtx3090")
    p = SwapProblem.from_graph(g, cost)
    limit = (p.working_set() + memory_profile(g, resolve_schedule(g, "traced")).peak) // 2
    plan = run_method("odswap", g, cost, memory_limit=limit).plans[0]
    assert plan.peak <= limit and plan.stats["swap_ins"] > 0
    tensors = graph_inputs(g, m, inputs)
    res = verify_graph(replay(g, plan.applications), plan.order, tensors, eager_outputs(g, m, inputs, loss, None),
                       schedule="odswap", cost=cost, sim_options=sim_options(plan))
    assert_round_trip(res)
    assert res["measured_peak_bytes"] == plan.peak


# ---- the generated source -----------------------------------------------------------------------
def _step_lines(src: str) -> list[str]:
    body = src[src.index("def _step("):src.index('if __name__ == "__main__":')]
    return [ln.strip() for ln in body.splitlines()[1:] if ln.strip()]


def test_one_line_per_op_and_dels_after_last_use():
    _, _, _, g = model_and_graph("conv")
    order = resolve_schedule(g, "traced")
    src = generate_source(g, order, schedule_name="traced")
    compile(src, "exported.py", "exec")
    lines = _step_lines(src)
    calls = [ln for ln in lines if "aten." in ln and not ln.startswith("del ")]
    assert len(calls) == len(order)
    for ln, nid in zip(calls, order, strict=True):  # schedule order, one line each
        assert g[nid].op in ln
    assert any(ln.startswith("del ") for ln in lines)
    assert "exec(" not in src and "eval(" not in src
    # a multi-output op unpacks into names, an unused output into `_` which is deleted at once
    bn = next(ln for ln in calls if "_native_batch_norm_legit_functional" in ln)
    assert bn.split(" = ")[0].count(",") == 4
    conv_bwd = next(ln for ln in calls if "convolution_backward" in ln and ln.startswith("_,"))
    assert lines[lines.index(conv_bwd) + 1].startswith("del _")
    assert "# conv1" in src and "# bn" in src  # module comments
    # graph outputs are returned by name, never deleted
    ret = src[src.index("    return {"):]
    for key in g.outputs:
        assert repr(key) in ret


def test_names_are_sanitised_identifiers():
    assert sanitize("encoder.layer.0.weight") == "encoder_layer_0_weight"
    assert sanitize("0.weight") == "v_0_weight"
    assert sanitize("class") == "class_"
    assert sanitize("aten") == "aten_"
    assert sanitize("a-b c") == "a_b_c"
    _, _, _, g = model_and_graph("mlp")
    g = g.copy()
    g.name = 'odd """name\\'
    compile(generate_source(g, resolve_schedule(g, "traced"), schedule_name='s"""\n'), "odd.py", "exec")


def test_integer_input_ranges_are_inferred_and_used():
    _, _, _, g = model_and_graph("mlp")
    ranges = {g[nid].name: r for nid, r in integer_ranges(g).items()}
    assert ranges == {"input_0": (0, 11), "input_1": (0, 5)}  # embedding rows; classes of the loss
    src = generate_source(g, resolve_schedule(g, "traced"))
    assert "'range': [0, 11]" in src and "'range': [0, 5]" in src
    spec = {"ids": {"shape": [50], "dtype": "int64", "kind": "input", "range": [0, 11]},
            "free": {"shape": [4], "dtype": "int64", "kind": "input", "range": None},
            "running_var": {"shape": [3], "dtype": "float32", "kind": "buffer", "range": None}}
    t = make_inputs(spec, seed=3)
    assert int(t["ids"].min()) >= 0 and int(t["ids"].max()) < 11 and t["ids"].unique().numel() > 1
    assert int(t["free"].abs().sum()) == 0
    assert torch.equal(t["running_var"], torch.ones(3))


def test_constant_tensors_are_embedded():
    m, inputs, loss, g = model_and_graph("mlp")
    consts = [n for n in g.placeholders() if n.target.startswith("const:")]
    assert consts
    src = generate_source(g, resolve_schedule(g, "traced"))
    assert "CONSTANTS = {" in src and "torch.tensor([1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0]" in src
    mod_inputs = src[src.index("INPUTS = {"):src.index("CONSTANTS")]
    assert "_tensor_constant" not in mod_inputs  # the caller does not pass constants


# ---- errors ------------------------------------------------------------------------------------
def test_invalid_schedule_and_non_aten_graphs_are_clear_errors(tmp_path):
    _, _, _, g = model_and_graph("mlp")
    order = resolve_schedule(g, "traced")
    with pytest.raises(GraphError, match="before its input"):
        generate_source(g, order[::-1])
    b = GraphBuilder()
    x = b.input("x", 4)
    b.op("A", [x], 8, output=True)
    with pytest.raises(CodegenError, match="not an aten-style operator"):
        export_script(b.graph, resolve_schedule(b.graph, "traced"), tmp_path / "s.py")
    assert not list(tmp_path.iterdir())  # no half-written file


# ---- swap: Store / Load -----------------------------------------------------------------------
def insert_swap(g: Graph, order: list[int]) -> tuple[Graph, list[int], str]:
    """Swap out the forward activation with the longest idle gap before its last (backward) use:
    Store right after its second-to-last use, Load right before its last user, which is rewired
    to the loaded copy.  Returns the new graph, schedule and the swapped tensor's name."""
    g = g.copy()
    pos = {nid: i for i, nid in enumerate(order)}
    viewed = {g.storage_root(r) for n in g.ops() for r in n.refs() if n.outputs[r.index].alias is not None}
    best = None
    for n in g.ops():
        r = TRef(n.id, 0)
        if len(n.outputs) != 1 or n.out.alias is not None or n.out.nbytes == 0 or r in viewed:
            continue
        if r in g.output_refs():
            continue
        users = sorted(pos[u] for u in g.users(n.id))
        if len(users) < 2:
            continue
        gap = users[-1] - users[-2]
        if best is None or gap > best[0]:
            best = (gap, n, users)
    assert best is not None
    _, src, users = best
    last_user = g[order[users[-1]]]
    a = TRef(src.id, 0)
    meta = src.out
    store = g.add_node(name=f"store_{src.name}", op="store", kind=NodeKind.STORE, args=[a],
                       outputs=[TensorMeta(meta.shape, meta.dtype, meta.kind, device="host")],
                       module=src.module)
    load = g.add_node(name=f"load_{src.name}", op="load", kind=NodeKind.LOAD, args=[TRef(store.id, 0)],
                      outputs=[TensorMeta(meta.shape, meta.dtype, meta.kind)], module=last_user.module)
    swap_in = TRef(load.id, 0)
    last_user.args = map_refs(last_user.args, lambda r: swap_in if r == a else r)
    last_user.kwargs = map_refs(last_user.kwargs, lambda r: swap_in if r == a else r)
    g.invalidate()
    g.validate()
    new = list(order)
    new.insert(users[-2] + 1, store.id)
    new.insert(new.index(last_user.id), load.id)
    return g, new, src.name


def test_store_load_cpu_fallback_matches_outputs_and_simulated_peak():
    m, inputs, loss, g = model_and_graph("conv")
    order = resolve_schedule(g, "traced")
    g2, order2, swapped = insert_swap(g, order)
    src = generate_source(g2, order2, schedule_name="swap")
    assert f"= swap.store({swapped})" in src and "swap.wait(load_" in src and "swap.finish()" in src
    res = verify_module(m, inputs, loss, graph=g2, order=order2, schedule="swap")
    assert_round_trip(res)
    # the swapped tensor's device bytes are gone between Store and Load
    before, after = memory_profile(g, order), memory_profile(g2, order2)
    assert after.step_bytes.sum() < before.step_bytes.sum()


def test_swapper_cpu_store_is_host_memory_not_counted():
    x = torch.randn(256)
    with LiveBytesTracker("cpu", [x]) as tr:
        sw = Swapper("cpu")
        h = sw.store(x)
        assert tr.live_bytes == 1024  # the host copy is not device memory
        y = sw.wait(sw.load(h))
        assert tr.live_bytes == 2048
        sw.finish()
    assert torch.equal(x, y) and h.data_ptr() != x.data_ptr() != y.data_ptr()


def test_tracker_counts_storages_once_and_sees_frees():
    a = torch.randn(100)
    with LiveBytesTracker("cpu", [a]) as tr:
        b = torch.ops.aten.mul.Tensor(a, 2)
        v = torch.ops.aten.view.default(b, [10, 10])  # a view: no new bytes
        assert tr.live_bytes == 800
        del b
        c = torch.ops.aten.add.Tensor(v, 1)  # b's storage lives on through v
        assert tr.live_bytes == 1200
        del v
        d = torch.ops.aten.neg.default(c)  # b's storage is gone now
        assert tr.live_bytes == 1200
    assert tr.peak_bytes == 1200 and tr.resident_bytes == 400 and len(tr.step_bytes) == 4
    del c, d


# ---- the script as a program --------------------------------------------------------------------
def _run_script(path: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH="")  # the script needs only torch
    p = subprocess.run([sys.executable, str(path), "--device", "cpu", *args], capture_output=True,
                       text=True, timeout=120, env=env, cwd=path.parent)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_main_runs_as_a_subprocess_and_prints_json(tmp_path):
    m, inputs, loss, g = model_and_graph("conv")
    order = resolve_schedule(g, "traced")
    path = export_script(g, order, tmp_path / "conv_traced.py", schedule_name="traced")
    out = _run_script(path, "--repeat", "2", "--seed", "1")
    assert out["simulated_peak_bytes"] == memory_profile(g, order).peak
    assert out["measured_peak_bytes"] == out["simulated_peak_bytes"] and out["peak_ratio"] == 1.0
    assert out["measured_resident_bytes"] == out["simulated_resident_bytes"]
    assert out["ops"] == len(order) and out["outputs_finite"] and out["measured_seconds"] > 0
    assert out["simulated_latency_seconds"] > 0 and out["device"] == "cpu"


def test_main_loads_inputs_and_saves_outputs(tmp_path, capsys):
    """The script's command line, in-process (the subprocess path is tested above)."""
    m, inputs, loss, g = model_and_graph("mlp")
    path = export_script(g, resolve_schedule(g, "rpo"), tmp_path / "mlp_rpo.py", schedule_name="rpo")
    mod = load_script(path)
    tensors = make_inputs(mod.INPUTS, seed=5)
    torch.save(tensors, tmp_path / "in.pt")
    argv = ["--device", "cpu", "--inputs", str(tmp_path / "in.pt"), "--save-outputs", str(tmp_path / "out.pt"),
            "--repeat", "0"]
    assert mod.main(mod.run, mod.measure, mod.META, mod.INPUTS, argv) == 0
    out = json.loads(capsys.readouterr().out)
    saved = torch.load(tmp_path / "out.pt", weights_only=True)
    direct = mod.run(tensors, "cpu")
    assert set(saved) == set(direct) == set(g.outputs)
    for k in saved:
        torch.testing.assert_close(saved[k], direct[k], rtol=0, atol=0)
    assert out["loss"] == pytest.approx(float(direct["loss"])) and out["peak_ratio"] == 1.0
    del tensors["fc1.weight"]
    torch.save(tensors, tmp_path / "bad.pt")
    argv = ["--device", "cpu", "--inputs", str(tmp_path / "bad.pt")]
    assert mod.main(mod.run, mod.measure, mod.META, mod.INPUTS, argv) == 2
    assert "missing inputs: fc1.weight" in capsys.readouterr().err


def test_cli_export(tmp_path, capsys):
    from app.cli import main as magis
    from core.ir import io

    _, _, _, g = model_and_graph("conv")
    io.save(g, tmp_path / "conv.json.gz")
    assert magis(["export", str(tmp_path / "conv.json.gz"), "--schedule", "rpo", "-o", str(tmp_path / "conv.py"),
                  "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    mod = load_script(tmp_path / "conv.py")
    assert mod.META["schedule"] == "rpo"
    assert mod.META["simulated_peak_bytes"] == info["simulated_peak_bytes"]
    _, mem = mod.measure(make_inputs(mod.INPUTS), "cpu")
    assert mem["measured_peak_bytes"] == info["simulated_peak_bytes"]


# ---- the two toy graphs of the sample set -------------------------------------------------------
_TOYS: dict[str, tuple] = {}


def _toy(name):
    import sample_graphs

    if name not in _TOYS:
        s = sample_graphs.build(name)
        _TOYS[name] = (s, capture_real(s, name=name, rebuild=lambda: sample_graphs.build(name)))
    return _TOYS[name]


@pytest.mark.parametrize("name", ["fig2_skip", "fig6_ftree"])
def test_toy_graphs_outputs_and_exact_peak(name):
    """The toys end in aten.mse_loss, whose 0-dim result keeps a storage of the unreduced size
    (the registry's storage rule); with it the measured peak is the simulated one exactly."""
    s, g = _toy(name)
    loss = g.tensor(g.outputs["loss"])
    assert loss.shape == () and loss.nbytes > loss.logical_bytes
    for schedule in ("traced", "rpo", "random:3"):
        res = verify_module(s.module, s.inputs, s.loss_fn, graph=g, schedule=schedule, audit=True)
        assert res["allclose"] and res["max_abs_error"] <= 1e-5
        assert res["audit"] == []
        assert res["measured_peak_bytes"] == res["simulated_peak_bytes"]


def test_a_long_schedule_name_makes_a_short_distinct_script_name():
    from core.codegen.verify import _safe

    long_a, long_b = "lift(" + ", ".join(map(str, range(200))) + ")", "lift(" + ", ".join(map(str, range(201))) + ")"
    assert _safe("traced order") == "traced_order"
    a, b = _safe(long_a), _safe(long_b)
    assert len(a) == len(b) == 60 and a != b and a.startswith("lift_0__1__2")
