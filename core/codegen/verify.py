"""The round trip (docs/design.md, "the backbone test"): run a model eagerly with autograd, run its
exported script for a schedule on the same weights and inputs, compare every output, and compare
the script's measured peak of live storage bytes with the simulator's peak for that schedule.

``verify_module(module, inputs, loss_fn, ...)`` works on any model; ``verify_workload(w)`` on an
already-built workload (``core.frontend.workload``: a sample, or what a user's factory returns).
When the peaks differ, ``audit_ops`` tells why: it runs the graph op by op and lists every op whose
real outputs share storage differently from the graph's alias records, or whose storages have
other sizes; and ``problems(result)`` lists what keeps a result from being a clean round trip.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from ..cost.model import AnalyticCost, CostModel
from ..frontend.idioms import fixed_draws, sites_of
from ..frontend.torch_import import ImportErrorMAGIS, capture
from ..frontend.workload import Workload, build_fake, capture_workload, workload_fns
from ..ir.graph import Graph, NodeKind, TRef
from ..schedule.random_topo import random_topological_order
from ..simulate import simulate
from .emit import RANDOM_PER_PART, generate_source, is_constant, per_part_draws
from .release import ADAM_STATE, input_key

# Tolerances per dtype, as torch.testing.assert_close defines them (rtol, atol); integers and bools
# must be equal.  A tensor passes when |got - ref| <= atol + rtol * scale element-wise, scale = the
# largest finite |ref| of that tensor: rtol is relative to the tensor's magnitude, not each element's,
# so a gradient whose elements cancel (reduction noise of the float32 sums) is judged on its scale.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7), "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
RTOL: float | None = None  # None: the reference tensor's dtype decides (TOLERANCES)
ATOL: float | None = None


def tolerance(dtype: torch.dtype | str) -> tuple[float, float]:
    """(rtol, atol) of ``dtype`` (0, 0: exact, for integers and bools)."""
    name = str(dtype).removeprefix("torch.")
    return TOLERANCES.get(name, (0.0, 0.0))


def graph_dtype(g: Graph) -> str:
    """The dtype a graph computes in: the most common floating dtype of its weights (else of its
    inputs; float32 when it has none)."""
    from collections import Counter

    for kinds in (("param",), ("param", "buffer", "input")):
        c = Counter(n.out.dtype for n in g.placeholders()
                    if n.target.partition(":")[0] in kinds and n.out.dtype in TOLERANCES)
        if c:
            return c.most_common(1)[0][0]
    return "float32"

# ops whose products run in their output's dtype: under autocast these are the bfloat16 / float16 ones
_PRODUCT_OPS = ("mm.", "bmm.", "addmm.", "baddbmm.", "matmul.", "linear.", "convolution.", "scaled_dot_product")


def compute_dtype(g: Graph) -> str | None:
    """The lowest-precision floating dtype a matrix product, convolution or attention of ``g``
    computes in when it is below the weights' dtype (mixed precision: autocast's bfloat16 products
    over float32 weights), else None.  Outputs derived from such products -- the float32 loss and
    gradients included -- carry its rounding, so they are compared at its tolerance."""
    base = tolerance(graph_dtype(g))[0]
    low = None
    for n in g.ops():
        if not n.op.removeprefix("aten.").lstrip("_").startswith(_PRODUCT_OPS):
            continue
        for t in n.outputs:
            if t.dtype in TOLERANCES and tolerance(t.dtype)[0] > max(base, tolerance(low)[0] if low else 0.0):
                low = t.dtype
    return low


PEAK_TOL = 0.02  # measured vs simulated peak


# ---- schedules ------------------------------------------------------------------------------------
def resolve_schedule(g: Graph, schedule: str, seed: int = 0) -> list[int]:
    """A registered scheduler's order, or ``random`` / ``random:<seed>`` (a seeded random
    topological order of the ops, ``schedule.random_topo``, with the ops indexed by id)."""
    if schedule == "random" or schedule.startswith("random:"):
        s = schedule.partition(":")[2]
        ops = sorted(n.id for n in g.ops())
        index = {v: i for i, v in enumerate(ops)}
        preds = [[index[p] for p in g.preds(v) if p in index] for v in ops]
        succs = [[index[u] for u in g.users(v) if u in index] for v in ops]
        return [ops[i] for i in random_topological_order(preds, succs, random.Random(int(s) if s else seed))]
    from ..schedule import get_scheduler

    return get_scheduler(schedule).run(g).order


# ---- scripts ------------------------------------------------------------------------------------
def load_script(path: str | Path) -> ModuleType:
    """Import an exported script as a module (importlib; nothing is exec-ed from a string)."""
    name = f"magis_export_{uuid.uuid4().hex[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(name, None)
    return mod


def graph_inputs(g: Graph, module: nn.Module, inputs: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached copies of the module's parameters/buffers and the example inputs, keyed like the
    script's ``tensors`` argument.  Take them *before* an eager run mutates buffers."""
    params = dict(module.named_parameters(remove_duplicate=False))  # tied weights: every name
    buffers = dict(module.named_buffers(remove_duplicate=False))
    out: dict[str, torch.Tensor] = {}
    for n in g.placeholders():
        key = input_key(n)
        kind, _, rest = n.target.partition(":")
        if kind == "const":  # embedded in the script
            continue
        if kind == "param":
            t = params[rest]
        elif kind == "buffer":
            t = buffers[rest]
        elif kind == "input":
            t = inputs[int(rest)]
        elif kind in ADAM_STATE:  # a fresh torch.optim.Adam: its moments are zeros at the first step
            t = torch.zeros_like(params[rest])
        else:
            raise ValueError(f"placeholder {n.name!r} has an unknown target {n.target!r}")
        out[key] = t.detach().clone()
    return out


def eager_outputs(g: Graph, module: nn.Module, inputs: Sequence[torch.Tensor],
                  loss_fn: Callable[..., torch.Tensor] | None,
                  forward_fn: Callable[..., Any] | None) -> dict[str, torch.Tensor]:
    """The reference values of the graph's outputs from an eager PyTorch run (with autograd for a
    training graph: ``loss_fn`` then ``backward``).  Mutates buffers (batch-norm statistics).
    A graph captured with random draws fixed (``meta["fixed_random_reads"]``, layer drop) is
    compared with the eager step in which the same draws take the same value."""
    with fixed_draws(sites_of(g.meta)):
        return _eager_outputs(g, module, inputs, loss_fn, forward_fn)


def _eager_outputs(g: Graph, module: nn.Module, inputs: Sequence[torch.Tensor],
                   loss_fn: Callable[..., torch.Tensor] | None,
                   forward_fn: Callable[..., Any] | None) -> dict[str, torch.Tensor]:
    ref: dict[str, torch.Tensor] = {}
    training = g.meta.get("mode", "train") == "train"
    if training:
        module.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loss = loss_fn(module, *inputs)
            loss.backward()
        ref["loss"] = loss.detach()
        for name, p in module.named_parameters():
            if p.grad is not None:
                ref[f"grad:{name}"] = p.grad.detach().clone()
        module.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            out = forward_fn(module, *inputs) if forward_fn else module(*inputs)
        if isinstance(out, torch.Tensor):
            out = (out,)
        elif hasattr(out, "to_tuple"):
            out = out.to_tuple()
        for i, t in enumerate(x for x in out if isinstance(x, torch.Tensor)):
            ref[f"output_{i}"] = t.detach()
    for name, b in module.named_buffers():
        ref[f"buffer:{name}"] = b.detach().clone()
    lr = g.meta.get("sgd_lr")
    if lr is not None:
        for name, p in module.named_parameters():
            if f"grad:{name}" in ref:
                ref[f"param:{name}"] = p.detach() - lr * ref[f"grad:{name}"]
    adam = g.meta.get("adam")
    if adam:  # torch.optim.Adam's own first step on copies of the parameters, their gradients eager's
        names = [n for n, _ in module.named_parameters() if f"grad:{n}" in ref]
        copies = {n: p.detach().clone().requires_grad_(True) for n, p in module.named_parameters() if n in names}
        for n, c in copies.items():
            c.grad = ref[f"grad:{n}"].clone()
        opt = torch.optim.Adam(list(copies.values()), lr=adam["lr"], betas=tuple(adam["betas"]), eps=adam["eps"],
                               foreach=False)
        opt.step()
        for n, c in copies.items():
            ref[f"param:{n}"] = c.detach()
            ref[f"adam_m:{n}"] = opt.state[c]["exp_avg"]
            ref[f"adam_v:{n}"] = opt.state[c]["exp_avg_sq"]
    return ref


def compare(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], keys: Sequence[str],
            rtol: float | None = RTOL, atol: float | None = ATOL, floor: str | None = None
            ) -> dict[str, dict[str, Any]]:
    """Per output: max abs error, max relative error (max |got - ref| / max |ref|, i.e. relative to
    the tensor's scale), the tolerance used (``rtol`` / ``atol``, default: the reference's dtype's,
    :data:`TOLERANCES`) and ``allclose``: |got - ref| <= atol + rtol * max |ref| element-wise, the
    dtypes equal (equal infinities and NaN in both count as equal, as in
    ``torch.testing.assert_close(equal_nan=True)``).  ``floor``: a dtype whose tolerance floating
    tensors get at least (the products' dtype of a mixed-precision graph, :func:`compute_dtype`)."""
    res: dict[str, dict[str, Any]] = {}
    for k in keys:
        if k not in ref:
            continue
        a, b = got.get(k), ref[k]
        r_d, a_d = tolerance(b.dtype)
        if floor is not None and b.is_floating_point():
            r_d, a_d = max(r_d, tolerance(floor)[0]), max(a_d, tolerance(floor)[1])
        r_t = r_d if rtol is None else rtol
        a_t = a_d if atol is None else atol
        if a is None or tuple(a.shape) != tuple(b.shape):
            res[k] = {"max_abs": float("inf"), "max_rel": float("inf"), "allclose": False,
                      "rtol": r_t, "atol": a_t, "dtype": str(b.dtype).removeprefix("torch."),
                      "error": f"shape {None if a is None else tuple(a.shape)} vs {tuple(b.shape)}"}
            continue
        a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
        diff = (a64 - b64).abs()
        same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))  # equal, or NaN in both
        diff = torch.where(same, torch.zeros_like(diff), torch.nan_to_num(diff, nan=float("inf")))
        max_abs = float(diff.max()) if diff.numel() else 0.0
        finite = b64[torch.isfinite(b64)].abs()
        scale = float(finite.max()) if finite.numel() else 0.0
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        ok = bool(torch.all(same | (diff <= a_t + r_t * scale))) if diff.numel() else True
        res[k] = {"max_abs": max_abs, "max_rel": max_rel, "allclose": ok and a.dtype == b.dtype,
                  "rtol": r_t, "atol": a_t, "dtype": str(b.dtype).removeprefix("torch.")}
    return res


# ---- why peaks differ -----------------------------------------------------------------------------
def _storage_key(t: Any) -> int | None:
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return None
    return t.untyped_storage()._cdata


def audit_ops(g: Graph, order: Sequence[int], tensors: dict[str, torch.Tensor],
              device: str = "cpu") -> list[dict[str, Any]]:
    """Run the graph op by op and list the ops whose real outputs disagree with the graph's memory
    records: an output that shares an input's storage but is recorded as fresh (or the reverse),
    or a fresh output whose storage has a different byte size than the graph says."""
    from ..ir.torch_bridge import materialize, resolve_op

    env: dict[TRef, Any] = {}
    for n in g.placeholders():
        env[TRef(n.id, 0)] = (torch.tensor(n.kwargs["value"], dtype=getattr(torch, n.out.dtype))
                              if is_constant(n) else tensors[input_key(n)])
    problems: list[dict[str, Any]] = []
    with torch.no_grad():
        for nid in order:
            node = g[nid]
            if node.kind != NodeKind.OP:
                continue
            args = materialize(node.args, env.__getitem__, device)
            kwargs = materialize(node.kwargs, env.__getitem__, device)
            out = resolve_op(node.op)(*args, **kwargs)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            in_keys = {_storage_key(env[r]): r for r in node.inputs()}
            for j, t in enumerate(outs[:len(node.outputs)]):
                ref = TRef(nid, j)
                env[ref] = t
                meta = node.outputs[j]
                key = _storage_key(t)
                shared = in_keys.get(key) if key is not None else None
                if shared is not None and meta.alias is None:
                    problems.append({"node": node.name, "op": node.op, "output": j,
                                     "issue": f"shares the storage of input {g[shared.node].name} "
                                              f"but the graph records a fresh tensor"})
                elif shared is None and meta.alias is not None and isinstance(t, torch.Tensor):
                    problems.append({"node": node.name, "op": node.op, "output": j,
                                     "issue": "fresh storage but the graph records a view"})
                elif meta.alias is None and isinstance(t, torch.Tensor):
                    nb = int(t.untyped_storage().nbytes())
                    if nb != meta.nbytes:
                        problems.append({"node": node.name, "op": node.op, "output": j,
                                         "issue": f"storage has {nb} bytes, the graph says {meta.nbytes}"})
    return problems


# ---- the round trip -----------------------------------------------------------------------------
def verify_module(module: nn.Module, inputs: Sequence[torch.Tensor],
                  loss_fn: Callable[..., torch.Tensor] | None = None, *,
                  forward_fn: Callable[..., Any] | None = None, training: bool = True,
                  name: str = "model", schedule: str = "traced", order: Sequence[int] | None = None,
                  graph: Graph | None = None, seed: int = 0, rtol: float | None = RTOL, atol: float | None = ATOL,
                  peak_tol: float = PEAK_TOL, script_dir: str | Path | None = None,
                  audit: bool | None = None, details: bool = True,
                  cost: CostModel | None = None) -> dict[str, Any]:
    """Eager PyTorch vs the exported script of ``module`` for one schedule.

    ``graph``: a graph of this module captured elsewhere (else captured here on the real tensors);
    ``order``: an explicit schedule (else ``resolve_schedule(graph, schedule, seed)``).
    ``audit``: run :func:`audit_ops` (default: only when the peaks differ by more than ``peak_tol``).
    ``cost``: the cost model of the simulation (the device a plan was made for), which places the
    script's releases of swapped tensors and gives the simulated peak.
    Returns errors (overall worst and per tensor), measured and simulated peaks, their ratio, and
    ``ok`` (all outputs allclose and the peak within ``peak_tol``).
    """
    inputs = tuple(inputs)
    if graph is None:
        graph = capture(module, inputs, loss_fn, forward_fn, training=training, name=name)
    g = graph
    order = list(order) if order is not None else resolve_schedule(g, schedule, seed)
    tensors = graph_inputs(g, module, inputs)  # pre-run state (buffers change in the eager run)
    torch.manual_seed(seed)
    ref = eager_outputs(g, module, inputs, loss_fn, forward_fn)
    return verify_graph(g, order, tensors, ref, schedule=schedule, seed=seed, rtol=rtol, atol=atol,
                        peak_tol=peak_tol, script_dir=script_dir, audit=audit, details=details, cost=cost)


def verify_graph(g: Graph, order: Sequence[int], tensors: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
                 *, schedule: str = "custom", seed: int = 0, rtol: float | None = RTOL, atol: float | None = ATOL,
                 peak_tol: float = PEAK_TOL, script_dir: str | Path | None = None,
                 audit: bool | None = None, details: bool = True,
                 cost: CostModel | None = None, sim_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The exported script of ``g`` under ``order`` run on ``tensors`` (the graph's inputs by input
    key) against the eager outputs ``ref``: :func:`verify_module` once the reference exists, so
    many graphs of one model (transformed, rescheduled) share one eager run.  ``cost``: the cost
    model of the simulation (a plan's device; default: the default device's analytic model)."""
    order = list(order)
    cost = cost or AnalyticCost()
    opts = sim_options or {}  # a plan's (``search.plan.sim_options``): SwapAdvisor's streams and waits
    sim = simulate(g, order, cost, **opts)  # the script's release plan and the peak it is compared with
    src = generate_source(g, order, schedule_name=schedule, cost=cost, sim=sim, **opts)
    with tempfile.TemporaryDirectory(prefix="magis_verify_") as tmp:
        path = Path(script_dir or tmp) / f"{_safe(g.name)}_{_safe(schedule)}.py"
        path.write_text(src)
        mod = load_script(path)
    torch.manual_seed(seed)
    got, mem = mod.measure(tensors, "cpu")
    tracker = mem.pop("_tracker", None)

    keys = list(g.outputs)
    drawn = per_part_draws(g)  # random numbers drawn per micro-batch: not eager's values
    low = compute_dtype(g)  # mixed precision: the products' rounding decides the float tolerances
    per = compare(got, ref, [k for k in keys if k not in drawn], rtol, atol, floor=low)
    prof = sim.memory
    measured, simulated = int(mem["measured_peak_bytes"]), int(prof.peak)
    ratio = measured / simulated if simulated else float("nan")
    first_diff = None
    if tracker is not None and len(tracker.step_bytes) == len(order):
        for i, (m, s) in enumerate(zip(tracker.step_bytes, prof.step_bytes.tolist(), strict=True)):
            if m != s:
                node = g[order[i]]
                first_diff = {"step": i, "node": node.name, "op": node.op, "measured": m, "simulated": s}
                break
    dtype = graph_dtype(g)
    r_d, a_d = tolerance(dtype)
    res: dict[str, Any] = {
        "name": g.name, "schedule": schedule, "seed": seed, "ops": len(order), "dtype": dtype,
        "compute_dtype": low or dtype,
        "rtol": (max(r_d, tolerance(low)[0]) if low else r_d) if rtol is None else rtol,
        "atol": (max(a_d, tolerance(low)[1]) if low else a_d) if atol is None else atol,
        "tolerance": "per dtype (torch.testing), relative to each tensor's magnitude",
        "allclose": all(v["allclose"] for v in per.values()),
        "compared": len(per), "missing_reference": sorted(set(keys) - set(ref)), "what": compared_what(per),
    }
    if drawn:
        res["not_bit_comparable"] = _drawn_outputs(got, ref, drawn)
    if per:
        worst_abs = max(per, key=lambda k: per[k]["max_abs"])
        worst_rel = max(per, key=lambda k: per[k]["max_rel"])
        res.update({"max_abs_error": per[worst_abs]["max_abs"], "worst_abs_tensor": worst_abs,
                    "max_rel_error": per[worst_rel]["max_rel"], "worst_rel_tensor": worst_rel})
    if "loss" in per:
        res.update({"loss": float(ref["loss"]), "loss_abs_error": per["loss"]["max_abs"],
                    "loss_rel_error": per["loss"]["max_rel"]})
    res.update({
        "measured_peak_bytes": measured, "simulated_peak_bytes": simulated,
        "peak_ratio": ratio, "simulated_device": getattr(getattr(cost, "device", None), "name", None),
        "measured_resident_bytes": int(mem["measured_resident_bytes"]),
        "simulated_resident_bytes": int(prof.resident),
        "tracked_calls": len(tracker.step_bytes) if tracker is not None else None,
        "first_step_mismatch": first_diff,
        "script_bytes": len(src.encode()), "script_lines": src.count("\n"),
        "fission_nodes": sum(1 for v in order if g[v].kind == NodeKind.FISSION),
    })
    peak_ok = abs(ratio - 1.0) <= peak_tol
    if audit or (audit is None and not peak_ok):
        res["audit"] = audit_ops(g, order, tensors)
    res["ok"] = bool(res["allclose"] and peak_ok and not (drawn and res["not_bit_comparable"]["malformed"]))
    if details:
        res["per_tensor"] = per
    return res


def _drawn_outputs(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
                   drawn: dict[str, list[str]]) -> dict[str, Any]:
    """What verification says of the outputs a plan computes from random numbers drawn per
    micro-batch (``emit.per_part_draws``): not compared value by value with eager's single draw --
    only that each has eager's shape and dtype, and is finite where eager's is."""
    malformed = []
    for k in sorted(drawn):
        a, b = got.get(k), ref.get(k)
        if a is None or b is None:
            continue
        if a.shape != b.shape or a.dtype != b.dtype or (
                a.is_floating_point() and bool((~torch.isfinite(a) & torch.isfinite(b)).any())):
            malformed.append(k)
    return {"why": RANDOM_PER_PART, "outputs": sorted(drawn),
            "random_ops": sorted({o for v in drawn.values() for o in v}), "malformed": malformed}


def compared_what(keys) -> str:
    """What the compared tensors are, in words: "the loss and every gradient", with the updated
    weights (an optimizer's step) and Adam's moments when the graph has them, else "every output"."""
    keys = set(keys)
    if "loss" not in keys:
        return "every output"
    parts = ["the loss", "every gradient"] + [w for w, pre in (("the new weights", "param:"), ("Adam's moments", "adam_m:"))
                                             if any(k.startswith(pre) for k in keys)]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def problems(res: dict[str, Any], exact_steps: bool = True) -> list[str]:
    """Why a :func:`verify_module` result is not a clean round trip (empty list: it is).

    ``exact_steps``: also require the measured live bytes to equal the simulator's after every op
    (one tracked aten call per op), not only the peak within ``peak_tol``."""
    out = []
    per = res.get("per_tensor", {})
    if not res["allclose"]:
        bad = [k for k, v in per.items() if not v["allclose"]] if per else [res.get("worst_rel_tensor")]
        out.append(f"outputs differ (rtol={res['rtol']}, atol={res['atol']}): {bad[:5]}")
    if not res["compared"] and not res.get("not_bit_comparable"):
        out.append("no output compared")
    drawn = res.get("not_bit_comparable")
    if drawn and drawn["malformed"]:
        out.append(f"outputs drawn per micro-batch are not like eager's (shape, dtype or finiteness): "
                   f"{drawn['malformed'][:5]}")
    if res["missing_reference"]:
        out.append(f"no eager reference for {res['missing_reference'][:5]}")
    if not res["ok"] and res["allclose"]:
        out.append(f"peak {res['measured_peak_bytes']} measured vs {res['simulated_peak_bytes']} simulated "
                   f"(audit: {res.get('audit')})")
    if exact_steps and not res.get("fission_nodes"):  # a fission loop makes many calls of one step
        if res["tracked_calls"] != res["ops"]:
            out.append(f"{res['tracked_calls']} aten calls tracked for {res['ops']} ops")
        if res["first_step_mismatch"] is not None:
            out.append(f"live bytes differ first at {res['first_step_mismatch']}")
    if exact_steps and res["measured_resident_bytes"] != res["simulated_resident_bytes"]:
        out.append(f"resident {res['measured_resident_bytes']} measured vs "
                   f"{res['simulated_resident_bytes']} simulated")
    return out


def _safe(s: str, limit: int = 60) -> str:
    """``s`` as a file-name part: alphanumerics kept, the rest ``_``; a long one is cut to ``limit``
    characters and told apart by a digest of the whole."""
    out = "".join(c if c.isalnum() else "_" for c in s)
    if len(out) <= limit:
        return out
    return f"{out[:limit - 9]}_{hashlib.sha1(s.encode()).hexdigest()[:8]}"


def capture_real(w: Workload, *, name: str | None = None, training: bool = True,
                 rebuild: Callable[[], Workload] | None = None, fix_random_reads: bool = False) -> Graph:
    """Capture ``w`` on its real tensors.  If tracing real tensors fails and ``rebuild`` is given,
    capture what ``rebuild()`` returns when built on fake tensors (``build_fake``) instead -- an identical
    build (the builders are deterministic) whose tensors are fake.  ``fix_random_reads``: as
    ``capture``'s (the random draws the model branches on fixed)."""
    try:
        return capture_workload(w, training=training, name=name, fix_random_reads=fix_random_reads)
    except ImportErrorMAGIS:
        if rebuild is None:
            raise
        fake = build_fake(rebuild)
        loss_fn, forward_fn = workload_fns(w)
        g = capture(fake.module, tuple(fake.inputs), loss_fn, forward_fn, training=training,
                    name=name or getattr(w, "name", None) or "model", fix_random_reads=fix_random_reads)
        g.meta["captured_under"] = "FakeTensorMode (second build)"
        return g


def check_graph_matches(g: Graph, module: nn.Module, inputs: Sequence[torch.Tensor]) -> None:
    """ValueError unless every input of ``g`` is a parameter, buffer or example input of the model
    with the graph's shape and dtype (a graph file given for a model must be that model's)."""
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    for n in g.placeholders():
        kind, _, rest = n.target.partition(":")
        if kind == "const":
            continue
        src = {"param": params, "buffer": buffers, "adam_m": params, "adam_v": params}.get(kind)
        t = (src.get(rest) if src is not None else
             inputs[int(rest)] if kind == "input" and rest.isdigit() and int(rest) < len(inputs) else None)
        if t is None:
            raise ValueError(f"graph {g.name!r} does not belong to this model: it reads {n.target!r}, "
                             f"which the model does not have")
        want = n.out
        if tuple(t.shape) != want.shape or str(t.dtype).removeprefix("torch.") != want.dtype:
            raise ValueError(f"graph {g.name!r} does not belong to this model: {n.target!r} is "
                             f"{tuple(t.shape)} {t.dtype} in the model, {want.shape} {want.dtype} in the graph")


def verify_workload(w: Workload, schedule: str = "traced", seed: int = 0, *, name: str | None = None,
                    training: bool = True, rebuild: Callable[[], Workload] | None = None,
                    rtol: float | None = RTOL, atol: float | None = ATOL, details: bool = False,
                    graph: Graph | None = None, fix_random_reads: bool = False, **kwargs: Any) -> dict[str, Any]:
    """:func:`verify_module` on an already-built workload (the model really runs, on the CPU):
    captured by :func:`capture_real` (``rebuild``: its fallback; ``fix_random_reads``: as
    ``capture``'s) unless ``graph`` gives its graph (a graph file of this model, e.g. a transformed
    one); the result records the dtype the model computes in."""
    if graph is not None:
        check_graph_matches(graph, w.module, tuple(w.inputs))
        graph.lint()
    g = graph if graph is not None else capture_real(w, name=name, training=training, rebuild=rebuild,
                                                     fix_random_reads=fix_random_reads)
    loss_fn, forward_fn = workload_fns(w)
    res = verify_module(w.module, tuple(w.inputs), loss_fn, forward_fn=forward_fn, training=training,
                        name=g.name, schedule=schedule, graph=g, seed=seed, rtol=rtol, atol=atol,
                        details=details, **kwargs)
    return res  # res["dtype"]: what the graph computes in (``graph_dtype``)
