"""Mixed precision end to end on the CPU: a training step under bf16 autocast (``torch.autocast("cpu",
dtype=torch.bfloat16)`` around the forward and the loss, in the user's ``loss_fn``) imports on fake
tensors with bfloat16 matmuls over float32 master weights and float32 gradients, optimizes below
eager's peak, exports, verifies against eager autocast PyTorch, and trains under ``plan_step`` like
eager autocast.

Tolerance: bfloat16's of torch.testing (``verify.TOLERANCES["bfloat16"]``: rtol 1.6e-2 of each tensor's
largest magnitude, atol 1e-5), applied to the float32 loss and gradients too.  They are float32 tensors
but carry bfloat16 rounding: bfloat16 keeps 8 significant bits (unit roundoff 2**-9, 2.0e-3), and a plan
that splits a matmul (fission) adds its bfloat16 partial products in another order than eager, which
moves a gradient by a few roundoffs of its scale (measured: up to 8.6e-3 on the Llama below, 0 where
the plan splits nothing).  float32's 1.3e-6 would call that rounding an error.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from app.cli import main
from app.specs import build_workload, capture_spec
from core.codegen.verify import TOLERANCES, verify_workload
from core.cost.model import AnalyticCost
from core.frontend.workload import capture_workload
from core.ir.graph import Graph
from core.schedule import get_scheduler
from core.search.moptimizer import optimize
from core.search.wl_hash import graph_hash
from core.simulate import simulate
from core.train import plan_step

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "bf16_autocast.py"
RTOL, ATOL = TOLERANCES["bfloat16"]  # (1.6e-2, 1e-5): see the module docstring
PROFILE = "cpu"

# per model: (factory of examples/bf16_autocast.py, parameters, parameters autocast casts to bfloat16,
# {op: count} of the bfloat16 matmuls and convolutions) -- counted by hand from the model:
# * Llama, 2 layers: embedding + 2 x (q, k, v, o, gate, up, down + 2 RMSNorms) + final norm + LM head = 21
#   parameters; the 15 linear weights (no biases) are cast; 15 forward mm + 2 x 15 backward mm = 45 mm.
# * CNN: 2 convs, 2 batch norms and a linear layer, each with weight and bias = 10 parameters; convs and
#   linear cast weight and bias = 6; 2 convolutions and their 2 backwards, the head's addmm and its 2
#   backward mm.
MODELS = {
    "llama": ("build", 21, 15, {"mm": 45}),
    "cnn": ("build_cnn", 10, 6, {"convolution": 2, "convolution_backward": 2, "addmm": 1, "mm": 2}),
}
MATMULS = ("mm", "addmm", "bmm", "convolution", "convolution_backward")


def spec(name: str) -> str:
    return f"{EXAMPLE}:{MODELS[name][0]}"


def op_name(op: str) -> str:
    return op.split(".")[1]  # aten.mm.default -> mm


@pytest.fixture(scope="module", params=sorted(MODELS))
def captured(request) -> tuple[str, Graph]:
    """The training step as ``magis import`` captures it: built and traced on fake tensors."""
    return request.param, capture_spec(spec(request.param))


@pytest.fixture(scope="module")
def planned(captured):
    """The M-Optimizer's plan file at 0.6 of the step's peak (a 3 s search) and eager's peak."""
    name, g = captured
    pf = optimize(g, memory_limit=0.6, time_budget=3.0, device=PROFILE)
    eager = simulate(g, get_scheduler("traced").run(g).order, AnalyticCost(PROFILE)).peak
    return name, g, pf, int(eager)


def test_the_graph_computes_in_bfloat16_over_float32_weights_and_gradients(captured):
    name, g = captured
    _, n_params, n_cast, matmuls = MODELS[name]
    params = {n.id: n for n in g.placeholders() if n.target.startswith("param:")}
    assert len(params) == n_params and {n.out.dtype for n in params.values()} == {"float32"}
    # autocast's casts of the weights: one bfloat16 copy per cast weight (autocast caches it)
    casts = [n for n in g.ops() if op_name(n.op) == "_to_copy" and any(r.node in params for r in n.inputs())]
    assert len(casts) == n_cast and {n.out.dtype for n in casts} == {"bfloat16"}
    # every matmul and convolution, forward and backward, computes in bfloat16
    found = Counter(op_name(n.op) for n in g.ops() if op_name(n.op) in MATMULS)
    assert found == Counter(matmuls)
    for n in g.ops():
        if op_name(n.op) in MATMULS:  # (a convolution_backward's unneeded input gradient is a placeholder)
            assert {o.dtype for o in n.outputs if o.shape != (0,)} == {"bfloat16"}, n.name
    # the master gradients: one float32 gradient per parameter, of its shape
    grads = {k.removeprefix("grad:"): g[r.node].outputs[r.index] for k, r in g.outputs.items()
             if k.startswith("grad:")}
    assert len(grads) == n_params
    for p in params.values():
        t = grads[p.target.removeprefix("param:")]
        assert (t.dtype, t.shape) == ("float32", p.out.shape)
    loss = g.outputs["loss"]
    assert g[loss.node].outputs[loss.index].dtype == "float32"  # autocast computes the loss in float32


def test_the_fake_capture_is_the_real_one(captured):
    """``magis import`` traces on fake tensors, ``plan_step`` on the module's own: one graph, so a plan
    file of the import runs in the step API.  The CNN's batch norms take bfloat16 activations with
    float32 weights and save their mean and inverse std in float32, as the real kernel does (torch's
    fake kernel says bfloat16)."""
    name, g = captured
    real = capture_workload(build_workload(spec(name)))
    assert graph_hash(real) == graph_hash(g)
    norms = [n for n in g.ops() if op_name(n.op) == "_native_batch_norm_legit_functional"]
    assert len(norms) == (2 if name == "cnn" else 0)
    for n in norms:
        assert [o.dtype for o in n.outputs] == ["bfloat16", "float32", "float32", "float32", "float32"]


def test_a_plan_below_eagers_peak_verifies_against_eager_autocast(planned):
    name, g, pf, eager = planned
    point = pf.points[0]
    assert point.method == "magis" and point.applications and point.peak < eager
    h = point.graph(g)
    assert any(op_name(n.op) in MATMULS and n.out.dtype == "bfloat16" for n in h.ops())
    res = verify_workload(build_workload(spec(name)), graph=h, order=point.order, schedule="plan magis",
                          rtol=RTOL, atol=ATOL, cost=AnalyticCost(PROFILE), details=True)
    assert res["ok"], res.get("per_tensor")
    # the loss, a gradient per parameter, and the CNN's 2 batch norms' running mean, var and batch count
    assert res["compared"] == 1 + MODELS[name][1] + (2 * 3 if name == "cnn" else 0)
    assert res["max_rel_error"] <= RTOL and res["peak_ratio"] == pytest.approx(1.0, abs=0.02)
    assert res["measured_peak_bytes"] < eager


def test_plan_step_trains_three_steps_like_eager_autocast(planned):
    name, _, pf, _ = planned
    w = build_workload(spec(name))
    model, reference = copy.deepcopy(w.module), copy.deepcopy(w.module)
    # the plan file of this step's graph (captured here on the real tensors, under autocast): no search
    step = plan_step(model, w.loss_fn, tuple(w.inputs), plan=pf, progress=False)
    assert step.plan.method == "magis" and step.simulated_peak == pf.points[0].peak < step.first.eager_peak
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for k in range(3):
        batch = tuple(t.roll(k, 0) for t in w.inputs)
        opt.zero_grad()
        loss, mem = step.measure(*batch)
        opt_ref.zero_grad()
        ref = w.loss_fn(reference, *batch)
        ref.backward()
        assert loss.dtype == ref.dtype == torch.float32
        torch.testing.assert_close(loss, ref.detach(), rtol=RTOL, atol=ATOL)
        for (pn, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            scale = float(q.grad.abs().max())  # relative to the gradient's scale, as verify compares
            assert float((p.grad - q.grad).abs().max()) <= ATOL + RTOL * scale, pn
        assert mem["measured_peak_bytes"] <= mem["simulated_peak_bytes"] == step.simulated_peak
        opt.step()
        opt_ref.step()


def test_the_documented_commands_import_optimize_and_verify_the_llama(tmp_path, capsys):
    graph, plan = tmp_path / "llama_bf16.json.gz", tmp_path / "llama_bf16.plan.json"
    assert main(["import", spec("llama"), "-o", str(graph)]) == 0
    assert main(["optimize", str(graph), "--memory-limit", "0.6", "--time-budget", "2", "-o", str(plan)]) == 0
    capsys.readouterr()
    # no --rtol: verify reads the products' bfloat16 in the graph and compares at its tolerance
    assert main(["verify", spec("llama"), "--plan", str(plan), "--json"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{"):])
    assert res["ok"] and res["rtol"] == RTOL and res["atol"] == 1e-5 and res["compared"] == 22
    assert (res["dtype"], res["compute_dtype"]) == ("float32", "bfloat16")
    # a tolerance given wins: float32's calls the bfloat16 rounding of the split matmuls an error
    assert main(["verify", spec("llama"), "--plan", str(plan), "--rtol", "1.3e-6", "--json"]) == 1


def test_compute_dtype_is_the_products_dtype_below_the_weights(captured):
    from core.codegen.verify import compute_dtype
    from sample_graphs.store import load_sample_graph

    assert compute_dtype(captured[1]) == "bfloat16"
    assert compute_dtype(load_sample_graph("gpt_neo_tiny")) is None  # float32 products over float32 weights
    assert compute_dtype(load_sample_graph("gpt_neo_1_3b")) is None  # bfloat16 weights and products: not mixed


def test_verify_refuses_a_negative_tolerance(capsys):
    assert main(["verify", spec("cnn"), "--rtol", "-0.1"]) == 2
    assert capsys.readouterr().err.strip() == "magis: error: --rtol -0.1: a tolerance is a number at least 0"


def test_disable_refuses_a_defission_that_breaks_a_recomputed_copy():
    """A search path on the CNN's step (Remat, swaps, a RematChain, two fissions of neighbouring
    recomputed regions) whose last Disable restored a recomputed convolution reading the neighbour
    fission node's output where its original reads the op: Disable refuses it, and the graph stays
    as it was (and lints)."""
    import re

    from core.transform.registry import get_rule
    from core.transform.rule import Application, RuleNotApplicable

    g = capture_spec(spec("cnn"))
    path = ["remat(20, 73)", "swap(21, 0, 72)", "swap(19, 0, 73)", "swap_output(68, 0)", "swap(28, 0, 67)",
            "swap_output(58, 0)", "swap_output(66, 1)", "swap_output(66, 2)", "swap_output(59, 0)",
            "remat_chain(2, 67, 70, 20, 21, 23, 24, 26)", "swap(67, 2, 69)", "fission(2, 21, 0, 0, 21)",
            "deswap(84)", "fission(2, 20, 0, 2, 20)"]
    apps = [Application(m[1], tuple(int(x) for x in m[2].split(", ")))
            for m in (re.match(r"(\w+)\((.*)\)", s) for s in path)]
    h = g.copy()
    for a in apps:
        get_rule(a.rule).apply(h, a)
    h.lint()
    before = {k: (n.op, n.args) for k, n in h.nodes.items()}
    with pytest.raises(RuleNotApplicable, match="reading other values than its original"):
        get_rule("disable").apply(h, Application("disable", (100, 21, 0, 0, 1, 21)))
    assert {k: (n.op, n.args) for k, n in h.nodes.items()} == before
    h.lint()
