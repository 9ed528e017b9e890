"""The prepared GPU check: exported plans and the step API on CUDA, measured against the predictions.

Two phases, so that a lent GPU's minutes are spent on measuring only:

    python bench/gpu_check.py prepare DIR [--budget S]       # here (CPU): capture, search, export
    python bench/gpu_check.py run DIR --json OUT.json          # on the GPU: torch, numpy, scipy only
    python bench/gpu_check.py --dry-run [--json OUT.json]      # both phases on the CPU, tiny sizes

``prepare`` captures three mid-size training steps that fit a 24-80 GiB card (BERT-base, a GPT-2
language model with SDPA under bfloat16 autocast, ResNet-50), rewrites their attention into the
kernels a CUDA run executes (``core.codegen.target``), runs MAGIS and every peer on each
(``core.search.compare``) and exports, per workload, PyTorch's eager order, MAGIS's frontier
points (at most ``--magis-points``, spread over the frontier) and each peer's best point (its
lowest peak at <= 10% predicted overhead, else its lowest peak) as standalone scripts, with the
predictions next to them in ``DIR/manifest.json``: the simulated (live-bytes) peak, the predicted
``max_memory_reserved`` of the caching-allocator model, the analytic latency on the ``--profile``
device.

``run`` needs the repository's ``core`` (torch, numpy, scipy), nothing else:

1. calibration: every op signature of the workloads' plans timed on the device
   (``core.cost.measured.MeasuredCost``) and the profile's constants fitted to them
   (``core.cost.calibrate.fit``); each plan re-simulated with the calibrated profile;
2. every exported script run on the device (a fresh process each, ``--save-outputs``): measured
   ``max_memory_allocated`` / ``max_memory_reserved`` against the simulated peak and the predicted
   reserved bytes, the measured step time and overhead over eager against the predicted (analytic
   and calibrated), and every output against the eager script's on the same inputs;
3. ``core.train.plan_step`` training one model for ``--steps`` steps under
   ``torch.cuda.set_per_process_memory_fraction`` at a cap eager does not fit in (checked: eager's
   step is run under the cap and must fail), its losses against eager's uncapped run.

It prints one table per part and writes everything to ``--json``.  ``--dry-run`` runs both phases
in a temporary folder on the CPU with the tiny variants of the same workloads and the same code
paths (on the CPU the allocator has no reserved bytes and the memory cap is not enforced, which the
output says), so a device's minutes are never spent on a Python error; CI runs it
(``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

PROFILE = "h100-sxm"
MIB = 2**20


# ---- the workloads --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One workload of the check: a builder of (module, loss_fn, inputs) on a torch device, at
    full or tiny size, and whether its step runs under bfloat16 autocast."""

    name: str
    build: Callable[[bool, str], tuple[torch.nn.Module, Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]]
    autocast: bool = False
    description: str = ""


def _sample(name: str) -> Callable[[bool, str], tuple]:
    def build(tiny: bool, device: str) -> tuple:
        import sample_graphs

        s = sample_graphs.build(f"{name}_tiny" if tiny else name, device=device)
        return s.module, s.loss_fn, tuple(s.inputs)

    return build


def _gpt2(tiny: bool, device: str) -> tuple:
    import transformers

    from sample_graphs.transformers_models import causal_lm_loss

    if tiny:
        cfg = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
        batch, seq = 2, 32
    else:  # GPT-2 small at b8 x 1024
        cfg = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
        batch, seq = 8, 1024
    conf = transformers.GPT2Config(**cfg, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.GPT2LMHeadModel(conf).train()
        ids = torch.randint(0, conf.vocab_size, (batch, seq))
    return model, causal_lm_loss, (ids, ids.clone())


CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("bert_base", _sample("bert"), description="BERT-base masked LM, float32"),
    Check("gpt2_bf16", _gpt2, autocast=True, description="GPT-2 small causal LM, SDPA, bf16 autocast"),
    Check("resnet50", _sample("resnet50"), description="ResNet-50 classifier, float32"),
)}


def autocast_loss(loss_fn: Callable[..., torch.Tensor], device: str) -> Callable[..., torch.Tensor]:
    """``loss_fn`` with its forward under bfloat16 autocast on ``device``'s type (weights stay
    float32; matmuls and attention run in bfloat16)."""

    def loss(module: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            return loss_fn(module, *inputs)

    loss.__name__ = f"{getattr(loss_fn, '__name__', 'loss')}_bf16"
    return loss


def check_loss(c: Check, loss_fn: Callable[..., torch.Tensor], device: str) -> Callable[..., torch.Tensor]:
    return autocast_loss(loss_fn, device) if c.autocast else loss_fn


# ---- prepare (CPU) ---------------------------------------------------------------------------------
def capture_check(c: Check, tiny: bool) -> Any:
    """The training graph of ``c`` (captured on fake tensors), retargeted to CUDA's kernels."""
    from core.frontend.torch_import import capture
    from core.frontend.workload import build_fake

    module, loss_fn, inputs = build_fake(lambda: c.build(tiny, "cpu"))
    g = capture(module, inputs, check_loss(c, loss_fn, "cpu"), name=f"{c.name}{'_tiny' if tiny else ''}")
    return retarget_cuda(g)


def retarget_cuda(g: Any) -> Any:
    """``g`` with its attention rewritten into the kernels a CUDA run executes."""
    from core.codegen.target import retarget

    retarget(g, "cuda")  # in place; its report: attention_kernels(g)
    return g


def spread(ks: list[int], n: int) -> list[int]:
    """At most ``n`` of ``ks`` (ordered), evenly spread, the first and the last kept."""
    if len(ks) <= n:
        return list(ks)
    return sorted({ks[round(i * (len(ks) - 1) / (n - 1))] for i in range(n)})


def best_point(points: list[dict]) -> int | None:
    """The index of a peer's point to run: its lowest peak at <= 10% overhead, else its lowest peak."""
    if not points:
        return None
    ok = [k for k, p in enumerate(points) if p["latency_ratio"] <= 1.10]
    pool = ok or range(len(points))
    return min(pool, key=lambda k: (points[k]["peak_ratio"], points[k]["latency_ratio"]))


def reserved_peak(g: Any, order: list[int], sim: Any) -> int:
    """The caching-allocator model's predicted ``max_memory_reserved`` of the exported plan."""
    from core.simulate import predict_reserved

    return predict_reserved(g, order, sim=sim).reserved_peak


def prepare(out: Path, *, tiny: bool, budget: float, profile: str, magis_points: int,
            checks: list[str], methods: list[str] | None = None) -> Path:
    from core.codegen import export_script
    from core.cost import AnalyticCost
    from core.ir import io
    from core.search.compare import REFERENCES, compare, default_methods
    from core.simulate import simulate

    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"profile": profile, "tiny": tiny, "budget_s": budget, "workloads": []}
    cost = AnalyticCost(profile)
    for name in checks:
        c = CHECKS[name]
        t0 = time.perf_counter()
        print(f"[prepare] {name}: capturing ...", flush=True)
        g = capture_check(c, tiny)
        graph_file = io.save(g, out / f"{name}.json.gz").name
        ms = methods or default_methods()
        w = compare(g, name=name, device=profile, methods=ms, time_budget=budget,
                    progress=lambda s: print(f"[prepare]   {s}", flush=True))
        picks: list[tuple[str, Any, dict]] = [("eager", w["eager_plan"], {"label": "eager"})]
        for m, r in w["results"].items():
            if m in REFERENCES or not r.points:  # eager is the first pick; "ideal" is no plan
                continue
            ks = (spread(sorted(range(len(r.points)), key=lambda k: r.points[k]["peak_ratio"]), magis_points)
                  if m == "magis" else [best_point(r.points)])
            picks += [(m, r.plans[k], r.points[k]) for k in ks if k is not None and k < len(r.plans)]
        rows = []
        for i, (m, plan, point) in enumerate(picks):
            pg = plan.graph(g)
            sim = simulate(pg, plan.order, cost, validate=False)
            script = f"{name}_{i:02d}_{m}.py"
            export_script(pg, plan.order, out / script, schedule_name=f"{m} {point.get('label', '')}".strip(),
                          cost=cost, sim=sim)
            plan_graph = io.save(pg, out / f"{name}_{i:02d}_{m}.json.gz").name
            (out / f"{name}_{i:02d}_{m}.order.json").write_text(json.dumps(list(plan.order)))
            rows.append({"method": m, "label": point.get("label", ""), "script": script, "graph": plan_graph,
                         "order": f"{name}_{i:02d}_{m}.order.json", "ops": len(plan.order),
                         "simulated_peak": int(sim.peak), "predicted_reserved": reserved_peak(pg, plan.order, sim),
                         "simulated_latency": float(sim.latency)})
            print(f"[prepare]   {script}: simulated peak {sim.peak / MIB:.1f} MiB, "
                  f"latency {sim.latency * 1e3:.2f} ms ({profile})", flush=True)
        from core.codegen.target import attention_kernels

        manifest["workloads"].append({"name": name, "description": c.description, "graph": graph_file,
                                      "attention_kernels": attention_kernels(g),
                                      "nodes": len(g), "eager": w["eager"], "plans": rows,
                                      "failures": {m: r.failures[:3] for m, r in w["results"].items() if r.failures},
                                      "seconds": round(time.perf_counter() - t0, 1)})
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path


# ---- run (the device) -----------------------------------------------------------------------------
def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def calibrate_on(d: Path, man: dict, device: str, profile: str) -> tuple[Any, dict[str, Any]]:
    """Time every op signature of the manifest's plan graphs on ``device`` and fit ``profile``'s
    constants to them: (the calibrated profile, the fit's report)."""
    from core.cost.calibrate import fit, held_out_errors, median_rel_error, to_profile
    from core.cost.devices import get_device
    from core.cost.measured import MeasuredCost
    from core.ir import io

    base = get_device(profile)
    m = MeasuredCost(device=device, cache_dir=d / "op-times", fallback=base, repeats=3)
    seen: set[str] = set()
    t0 = time.perf_counter()
    for w in man["workloads"]:
        for r in w["plans"]:
            if r["graph"] in seen:
                continue
            seen.add(r["graph"])
            m.measure_graph(io.load(d / r["graph"]))
    m.save()
    consts, report = fit(m.records(), base)
    held = held_out_errors(m.records(), base)
    report = {k: v for k, v in report.items() if not isinstance(v, (list, dict))}
    report.update({"signatures": m.timed, "failed": len(m.failures), "seconds": round(time.perf_counter() - t0, 1),
                   "median_abs_rel_error_held_out": median_rel_error(held)})
    return to_profile(base, consts), report


def run_script(d: Path, script: str, device: str, repeat: int, warmup: int) -> dict[str, Any]:
    outp = d / (script[:-3] + ".out.pt")
    p = subprocess.run([sys.executable, str(d / script), "--device", device, "--repeat", str(repeat),
                        "--warmup", str(warmup), "--save-outputs", str(outp)], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": ((p.stderr or p.stdout).strip().splitlines() or ["no output"])[-1][:300]}
    rep = json.loads(p.stdout[p.stdout.index("{"):])
    rep["outputs"] = str(outp)
    return rep


def compare_outputs(a_path: str, b_path: str, rtol: float) -> dict[str, Any]:
    a, b = torch.load(a_path), torch.load(b_path)
    worst, ok = 0.0, set(a) == set(b)
    for key in sorted(set(a) & set(b)):
        x, y = a[key].double(), b[key].double()
        if x.numel():
            worst = max(worst, float(((x - y).abs() / (y.abs() + 1e-5)).max()))
        ok = ok and torch.allclose(x, y, rtol=rtol, atol=1e-5)
    return {"tensors": len(set(a) & set(b)), "max_rel_err": worst, "allclose": bool(ok)}


def run_plans(d: Path, man: dict, device: str, calibrated: Any, repeat: int, warmup: int) -> list[dict]:
    from core.cost import AnalyticCost
    from core.ir import io
    from core.simulate import simulate

    cal_cost = AnalyticCost(calibrated) if calibrated is not None else None
    rows = []
    for w in man["workloads"]:
        eager_row: dict | None = None
        for r in w["plans"]:
            print(f"[run] {r['script']} ...", flush=True)
            rep = run_script(d, r["script"], device, repeat, warmup)
            row = {"workload": w["name"], **{k: v for k, v in r.items() if k not in ("graph", "order")}}
            if cal_cost is not None:
                g = io.load(d / r["graph"])
                order = json.loads((d / r["order"]).read_text())
                row["calibrated_latency"] = float(simulate(g, order, cal_cost, validate=False).latency)
            if "error" in rep:
                row["error"] = rep["error"]
            else:
                row.update({"measured_allocated": rep.get("measured_peak_bytes"),
                            "measured_reserved": rep.get("measured_reserved_bytes"),
                            "measured_seconds": rep.get("measured_seconds_min"),
                            "outputs_finite": rep.get("outputs_finite"), "outputs": rep["outputs"]})
            if r["method"] == "eager":
                eager_row = row
            elif eager_row is not None and "outputs" in row and "outputs" in eager_row:
                # bf16 plans may order reductions differently from the eager script's
                row["compare"] = compare_outputs(row["outputs"], eager_row["outputs"],
                                                 rtol=2e-2 if "bf16" in w["name"] else 1e-4)
            rows.append(row)
        for row in rows:
            if row["workload"] != w["name"] or eager_row is None:
                continue
            for key in ("simulated_latency", "calibrated_latency", "measured_seconds"):
                if row.get(key) and eager_row.get(key):
                    row[f"{key}_overhead"] = row[key] / eager_row[key] - 1
    return rows


def cap_memory(device: str, cap_bytes: int) -> dict[str, Any]:
    """Cap the caching allocator of ``device`` at ``cap_bytes`` (``set_per_process_memory_fraction``);
    on the CPU nothing caps memory, which the answer says."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return {"enforced": False, "why": f"no memory cap on {dev.type}"}
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / total), dev)
    return {"enforced": True, "fraction": cap_bytes / total, "total_bytes": total}


def uncap_memory(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.set_per_process_memory_fraction(1.0, torch.device(device))
    _empty_cache(device)


def _peaks(device: str) -> dict[str, int | None]:
    if torch.device(device).type != "cuda":
        return {"allocated": None, "reserved": None}
    return {"allocated": int(torch.cuda.max_memory_allocated()), "reserved": int(torch.cuda.max_memory_reserved())}


def _reset_peaks(device: str) -> None:
    _empty_cache(device)
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _train(module: torch.nn.Module, step_loss: Callable[[], torch.Tensor], device: str,
           steps: int) -> dict[str, Any]:
    """``steps`` SGD steps, ``step_loss()`` running one step's forward and backward: the losses, the
    median step time (the first step left out) and the allocator's peaks."""
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    losses, times = [], []
    _reset_peaks(device)
    for _ in range(steps):
        _sync(device)
        t0 = time.perf_counter()
        loss = step_loss()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return {"losses": losses, "step_seconds": statistics.median(times[1:] or times), **_peaks(device)}


def train_eager(c: Check, tiny: bool, device: str, steps: int) -> dict[str, Any]:
    """``steps`` eager steps (SGD, the same seeds as :func:`train_planned`): losses, peaks, time."""
    module, loss_fn, inputs = c.build(tiny, device)
    loss_fn = check_loss(c, loss_fn, device)

    def step_loss() -> torch.Tensor:
        loss = loss_fn(module, *inputs)
        loss.backward()
        return loss

    return _train(module, step_loss, device, steps)


def eager_fits(c: Check, tiny: bool, device: str) -> dict[str, Any]:
    """One eager step under the cap in force: did it run?"""
    module, loss_fn, inputs = c.build(tiny, device)
    try:
        check_loss(c, loss_fn, device)(module, *inputs).backward()
        _sync(device)
        return {"fits": True}
    except torch.OutOfMemoryError as e:
        return {"fits": False, "error": str(e).splitlines()[0][:200]}
    finally:
        del module
        _empty_cache(device)


def _empty_cache(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def train_planned(c: Check, tiny: bool, device: str, steps: int, limit: int, budget: float) -> dict[str, Any]:
    """``steps`` steps of ``core.train.plan_step`` under ``limit`` live bytes (SGD)."""
    from core.train import plan_step

    module, loss_fn, inputs = c.build(tiny, device)
    t0 = time.perf_counter()
    step = plan_step(module, check_loss(c, loss_fn, device), inputs, memory_limit=limit, time_budget=budget,
                     cache=False, progress=False)
    plan_seconds = time.perf_counter() - t0
    return {**_train(module, lambda: step(*inputs), device, steps), "plan_seconds": plan_seconds,
            "simulated_peak": int(step.simulated_peak), "reached": bool(step.reached)}


def run_plan_step(c: Check, tiny: bool, device: str, steps: int, budget: float) -> dict[str, Any]:
    """plan_step against eager under a cap eager does not fit: eager uncapped first (its peak and
    losses), then the cap at 80% of eager's reserved peak, eager's step tried under it, then the plan
    (its limit 60% of eager's allocated peak; on the CPU, 0.8 of the simulated eager peak) trained under the
    same cap."""
    eager = train_eager(c, tiny, device, steps)
    ref = eager["reserved"] or eager["allocated"]
    res: dict[str, Any] = {"workload": c.name, "steps": steps, "eager": eager}
    if ref is None:  # the CPU: no allocator peaks; the limit is relative to the simulated eager peak, at
        limit: Any = "0.8"  # the tiny sizes' reach in the dry run's seconds (weights and gradients are most of it)
        res["cap"] = cap_memory(device, 0)
    else:
        limit = int(0.6 * eager["allocated"])
        res["cap"] = {**cap_memory(device, int(0.8 * ref)), "cap_bytes": int(0.8 * ref)}
    res["eager_under_cap"] = eager_fits(c, tiny, device) if res["cap"]["enforced"] else {"fits": None}
    try:
        res["plan"] = train_planned(c, tiny, device, steps, limit, budget)
    except torch.OutOfMemoryError as e:
        res["plan"] = {"error": str(e).splitlines()[0][:200]}
    finally:
        uncap_memory(device)
    if "losses" in res["plan"]:
        tol = 2e-2 if c.autocast else 1e-4
        diffs = [abs(a - b) / max(abs(b), 1e-6) for a, b in zip(res["plan"]["losses"], eager["losses"], strict=True)]
        res["max_loss_rel_diff"] = max(diffs)
        res["losses_match"] = max(diffs) <= tol
        res["loss_tolerance"] = tol
    return res


def run(d: Path, *, device: str, steps: int, repeat: int, warmup: int, plan_step_check: str,
        plan_budget: float, calibrate: bool = True) -> dict[str, Any]:
    from core.codegen.runtime import torch_device

    torch_device(device)  # one line and exit 2 if the device is not there
    man = json.loads((d / "manifest.json").read_text())
    name = torch.cuda.get_device_name() if torch.device(device).type == "cuda" else device
    result: dict[str, Any] = {"device": name, "torch": torch.__version__, "profile": man["profile"],
                              "tiny": man["tiny"], "prepare_budget_s": man["budget_s"]}
    calibrated = None
    if calibrate:
        print("[run] calibrating ...", flush=True)
        calibrated, result["calibration"] = calibrate_on(d, man, device, man["profile"])
    result["plans"] = run_plans(d, man, device, calibrated, repeat, warmup)
    if plan_step_check:
        print(f"[run] plan_step on {plan_step_check} ...", flush=True)
        result["plan_step"] = run_plan_step(CHECKS[plan_step_check], man["tiny"], device, steps, plan_budget)
    return result


# ---- tables ----------------------------------------------------------------------------------------
def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / MIB:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.3f}"


def format_tables(res: dict[str, Any]) -> str:
    lines = [f"device {res['device']} (torch {res['torch']}); predictions on the {res['profile']} profile"
             f"{' -- TINY dry-run sizes' if res['tiny'] else ''}", ""]
    cal = res.get("calibration")
    if cal:
        lines.append(f"calibration: {cal.get('signatures')} op signatures timed in {cal.get('seconds')} s; "
                     "median |relative error| of the analytic model before / after the fit / held out: "
                     + " / ".join(_pct(cal.get(k)).lstrip("+") for k in ("median_abs_rel_error_before",
                                                                          "median_abs_rel_error_after",
                                                                          "median_abs_rel_error_held_out")))
        lines.append("")
    head = (f"{'script':<28}{'sim MiB':>10}{'resv pred':>10}{'alloc meas':>11}{'resv meas':>10}{'alloc/sim':>10}"
            f"{'resv/pred':>10}{'ovh pred':>9}{'ovh cal':>9}{'ovh meas':>9}  outputs")
    lines += [head, "-" * len(head)]
    for r in res["plans"]:
        if "error" in r:
            lines.append(f"{r['script']:<28} failed: {r['error']}")
            continue
        c = r.get("compare")
        cmp = ("(reference)" if r["method"] == "eager" else
               f"{c['tensors']} tensors, max rel {c['max_rel_err']:.1e} {'ok' if c['allclose'] else 'DIFFER'}" if c else "-")
        lines.append(f"{r['script']:<28}{_mib(r['simulated_peak']):>10}{_mib(r['predicted_reserved']):>10}"
                     f"{_mib(r['measured_allocated']):>11}{_mib(r['measured_reserved']):>10}"
                     f"{_ratio(r['measured_allocated'], r['simulated_peak']):>10}"
                     f"{_ratio(r['measured_reserved'], r['predicted_reserved']):>10}"
                     f"{_pct(r.get('simulated_latency_overhead')):>9}{_pct(r.get('calibrated_latency_overhead')):>9}"
                     f"{_pct(r.get('measured_seconds_overhead')):>9}  {cmp}")
    ps = res.get("plan_step")
    if ps:
        e, p = ps["eager"], ps["plan"]
        lines += ["", f"plan_step on {ps['workload']}, {ps['steps']} steps: cap {ps['cap']}; "
                      f"eager under the cap fits: {ps['eager_under_cap'].get('fits')}"]
        lines.append(f"  eager : allocated {_mib(e['allocated'])} MiB, reserved {_mib(e['reserved'])} MiB, "
                     f"step {e['step_seconds'] * 1e3:.2f} ms")
        if "error" in p:
            lines.append(f"  plan  : failed: {p['error']}")
        else:
            lines.append(f"  plan  : allocated {_mib(p['allocated'])} MiB, reserved {_mib(p['reserved'])} MiB, "
                         f"simulated {_mib(p['simulated_peak'])} MiB, step {p['step_seconds'] * 1e3:.2f} ms, "
                         f"planned in {p['plan_seconds']:.1f} s; losses match eager: {ps.get('losses_match')} "
                         f"(max rel diff {ps.get('max_loss_rel_diff', float('nan')):.1e})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", nargs="?", choices=("prepare", "run"), help="omit with --dry-run")
    ap.add_argument("dir", nargs="?", type=Path, help="the folder of scripts and manifest.json")
    ap.add_argument("--dry-run", action="store_true", help="prepare and run on the CPU, tiny sizes, temporary folder")
    ap.add_argument("--device", default="cuda", help="torch device of run (default cuda)")
    ap.add_argument("--json", type=Path, default=None, help="write the run's results here")
    ap.add_argument("--budget", type=float, default=None, help="seconds per method in prepare (default 60; dry 2)")
    ap.add_argument("--profile", default=PROFILE, help=f"device profile of the predictions (default {PROFILE})")
    ap.add_argument("--checks", default=",".join(CHECKS), help="workloads (default all)")
    ap.add_argument("--methods", default=None, help="methods of prepare (default MAGIS and every peer)")
    ap.add_argument("--magis-points", type=int, default=4, help="MAGIS frontier points exported per workload")
    ap.add_argument("--steps", type=int, default=20, help="plan_step training steps")
    ap.add_argument("--plan-step", default="gpt2_bf16", help="the workload plan_step trains ('' for none)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args(argv)
    checks = [c for c in a.checks.split(",") if c]
    bad = [c for c in checks + ([a.plan_step] if a.plan_step else []) if c not in CHECKS]
    if bad:
        ap.error(f"unknown workload(s) {', '.join(bad)}; known: {', '.join(CHECKS)}")
    methods = a.methods.split(",") if a.methods else None
    if a.dry_run:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            d = Path(tmp)
            prepare(d, tiny=True, budget=a.budget or 2.0, profile=a.profile, magis_points=a.magis_points,
                    checks=checks, methods=methods)
            res = run(d, device="cpu", steps=min(a.steps, 3), repeat=1, warmup=0, plan_step_check=a.plan_step,
                      plan_budget=5.0)
    elif a.phase == "prepare" and a.dir:
        print(prepare(a.dir, tiny=False, budget=a.budget or 60.0, profile=a.profile, magis_points=a.magis_points,
                      checks=checks, methods=methods))
        return 0
    elif a.phase == "run" and a.dir:
        res = run(a.dir, device=a.device, steps=a.steps, repeat=a.repeat, warmup=a.warmup,
                  plan_step_check=a.plan_step, plan_budget=10.0)
    else:
        ap.error("give prepare DIR, run DIR, or --dry-run")
    print()
    print(format_tables(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
