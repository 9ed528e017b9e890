"""Does a training step fit a device's memory?  Eager's breakdown, the verdict, and the plans that fit.

:func:`fit` answers the question a user asks first, for a captured graph and a device profile
(``cost.devices``) or a memory size given in its place:

1. *Eager's step* -- PyTorch's own order (the "eager" method), simulated (``simulate``): its peak
   of live tensor bytes split by what the bytes are (:func:`breakdown`: weights, optimizer state
   and inputs held all step; the gradients, the optimizer update's new tensors and the loss the step
   keeps; the activations and backward temporaries alive at the peak), its predicted latency and
   the resident floor (``analysis.lifetimes.resident_floor``).
2. *The verdict* -- eager's peak against the memory.  On a GPU profile the bytes judged are the
   CUDA caching allocator's predicted reserved bytes (``analysis.allocator``: rounding, pools and
   segments beside the live bytes), replayed with the card's memory as its capacity, so that an
   allocation the allocator serves only after releasing its cache (an OOM retry) still fits; on the
   ``cpu`` profile, which has no caching allocator, the live peak.  :func:`predicted_reserved` is
   the one place that knows the allocator.
3. *If eager does not fit* -- every method of ``search.compare.compare`` within its time budget,
   and per method the fastest of its points that fits (live peak <= memory, then the same
   allocator check on a GPU profile), with its predicted overhead over eager.  When none fits,
   :func:`bounds` says which bound explains it: the resident floor, or the largest op's working
   set beside the bytes held all step.

Every byte count and latency is a prediction of the analytic cost model and the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .analysis.lifetimes import largest_op, lower_bound, resident_floor, storage_table
from .cost.devices import DEVICES
from .cost.model import AnalyticCost
from .fmt import format_bytes
from .ir.graph import Graph, TensorKind
from .search.methods import METHODS
from .search.plan import Plan, sim_options
from .simulate import SimResult, simulate

# the parts of eager's peak, in the order they are listed, and what each is called
PARTS: dict[str, str] = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "updated": "updated weights and state",
    "inputs": "inputs",
    "outputs": "outputs (loss)",
    "activations": "activations",
    "backward": "backward temporaries",
}
HELD = ("weights", "optimizer_state", "inputs")  # placeholders: held by the caller for the whole step
KEPT = ("gradients", "updated", "outputs")  # graph outputs: kept from their op to the end of the step
HOST_PROFILES = ("cpu",)  # profiles without a CUDA caching allocator: judged on the live peak
REFERENCES = ("eager", "ideal")  # reference points of compare (PyTorch's own run, unbounded memory), not plans
RESERVED_TRIES = 4  # per method: points (fastest first) whose allocator replay is tried before giving up


@dataclass
class Pick:
    """The fastest point of one method that fits, or why none does."""

    method: str
    label: str  # the method's label ("MAGIS", "DTR", ...)
    plan: Plan | None = None
    reserved: int | None = None  # its predicted reserved peak (GPU profiles)
    why_not: str = ""  # when ``plan`` is None
    lowest_peak: int | None = None  # the lowest live peak among the method's points


@dataclass
class FitResult:
    """:func:`fit`'s answer: ``report`` (JSON data, as ``magis fit --json`` prints it), the method
    runs behind it (``compare``'s result, None when eager fits) and each method's pick."""

    report: dict[str, Any]
    compared: dict | None = None
    picks: list[Pick] = field(default_factory=list)


def optimizer_of(g: Graph) -> str | None:
    """The optimizer update the importer appended to ``g``: "adam", "sgd" or None."""
    keys = list(g.outputs)
    if any(k.startswith("adam_m:") for k in keys):
        return "adam"
    return "sgd" if any(k.startswith("param:") for k in keys) else None


def part_of(kind: str, placeholder: bool, kept: bool) -> str:
    """Which part of the breakdown a storage is (``PARTS``), from its tensor kind and whether a
    placeholder owns it or a graph output lives in it."""
    if placeholder:
        return {TensorKind.WEIGHT.value: "weights", TensorKind.OPTIMIZER_STATE.value: "optimizer_state"}.get(
            kind, "inputs")
    if kept:
        if kind == TensorKind.GRADIENT.value:
            return "gradients"
        if kind in (TensorKind.WEIGHT.value, TensorKind.OPTIMIZER_STATE.value):
            return "updated"
        return "outputs"
    return "backward" if kind == TensorKind.GRADIENT.value else "activations"


def breakdown(g: Graph, sim: SimResult) -> dict[str, dict[str, int | None]]:
    """Eager's peak by part: ``{part: {"at_peak": bytes alive at the first peak step, "total": bytes
    of the part in the whole step (None for activations and backward temporaries, which come and
    go)}}``.  The ``at_peak`` values sum to the peak; the totals of the held and kept parts sum to
    the resident floor."""
    info = {s.root: s for s in storage_table(g).storages if s.device == "device"}
    out: dict[str, dict[str, int | None]] = {
        p: {"at_peak": 0, "total": 0 if p in HELD + KEPT else None} for p in PARTS}
    for s in info.values():
        if s.nbytes > 0 and (s.placeholder or s.kept):
            out[part_of(s.kind, s.placeholder, s.kept)]["total"] += s.nbytes
    steps = sim.memory.peak_steps
    if steps:
        for st in sim.memory.live_at(steps[0]):
            s = info.get(st.root)
            part = part_of(st.kind, s.placeholder, s.kept) if s is not None and not st.scratch else "activations"
            out[part]["at_peak"] += st.nbytes
    return out


def judged_on_reserved(device: str) -> bool:
    """Whether the verdict on ``device`` uses the caching allocator's reserved bytes (a GPU profile)
    rather than the live peak."""
    return device not in HOST_PROFILES


def predicted_reserved(g: Graph, order: Sequence[int], cost: AnalyticCost, memory: int,
                       **sim_opts: Any) -> dict[str, Any]:
    """The CUDA caching allocator's predicted behaviour for ``(g, order)`` (its exported script):
    ``reserved_bytes`` (``max_memory_reserved`` on a card with room to spare) and, replayed with
    ``memory`` as its capacity, ``fits`` (no allocation fails, OOM retries allowed), ``oom_retries``
    and ``failure`` (torch's out-of-memory message)."""
    from .analysis.allocator import replay
    from .simulate import predict_reserved

    pr = predict_reserved(g, order, cost, **sim_opts)
    bounded = pr.replay if pr.reserved_peak <= memory else replay(pr.events, memory)
    return {"reserved_bytes": int(pr.reserved_peak), "fits": bounded.ok, "oom_retries": int(bounded.oom_retries),
            "failure": bounded.failure}


def _plan_reserved(g: Graph, plan: Plan, cost: AnalyticCost, memory: int) -> dict[str, Any]:
    return predicted_reserved(plan.graph(g), plan.order, cost, memory, **sim_options(plan))


def pick(g: Graph, method: str, plans: Sequence[Plan], memory: int, cost: AnalyticCost) -> Pick:
    """The fastest of ``plans`` (one method's points) that fits ``memory``: live peak <= memory,
    and on a GPU profile the allocator's replay with that capacity succeeds (the fastest
    ``RESERVED_TRIES`` such points are tried)."""
    out = Pick(method, METHODS[method].label if method in METHODS else method)
    if not plans:
        out.why_not = "no point"
        return out
    out.lowest_peak = int(min(p.peak for p in plans))
    live = sorted((p for p in plans if p.peak <= memory), key=lambda p: (p.latency, p.peak))
    if not live:
        out.why_not = f"its lowest peak is {format_bytes(out.lowest_peak)}"
        return out
    if not judged_on_reserved(cost.device.name):
        out.plan = live[0]
        return out
    for p in live[:RESERVED_TRIES]:
        r = _plan_reserved(g, p, cost, memory)
        if r["fits"]:
            out.plan, out.reserved = p, r["reserved_bytes"]
            return out
    out.why_not = (f"its {len(live)} point(s) under the memory by live bytes run out of memory in the caching "
                   f"allocator (the fastest {min(len(live), RESERVED_TRIES)} tried)")
    return out


def bounds(floor: int, floor_by_kind: dict[str, int], held: int, op: dict[str, Any] | None,
           memory: int) -> list[dict[str, Any]]:
    """The lower bounds on a plan's peak that ``memory`` is below: the resident floor (no plan that
    keeps the weights, gradients and optimizer state on the device goes below it) and the largest
    op's working set beside the ``held`` bytes of the placeholders (no plan that runs the op whole
    and keeps the placeholders on the device goes below that)."""
    out = []
    if floor > memory:
        out.append({"bound": "resident_floor", "bytes": int(floor), "by_kind": dict(floor_by_kind)})
    if op is not None and held + op["bytes"] > memory:
        out.append({"bound": "largest_op", "bytes": int(held + op["bytes"]), "op": op["name"],
                    "op_bytes": op["bytes"], "held_bytes": int(held)})
    return out


def check_memory(memory: int) -> int:
    """``memory`` as a byte count of at least 1 (ValueError otherwise)."""
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 1:
        raise ValueError(f"memory {memory!r}: a size of at least 1 byte")
    return memory


def fit(g: Graph, device: str, memory: int | None = None, *, methods: list[str] | None = None,
        time_budget: float = 30.0, progress: Callable[[str], None] | None = None,
        compare_fn: Callable[..., dict] | None = None) -> FitResult:
    """Does the training step ``g`` fit ``device`` (a profile of ``cost.devices``; ``memory``
    bytes in place of its own)?  See the module docstring; ``methods`` and ``time_budget`` (seconds
    per method) go to ``search.compare.compare`` (``compare_fn``) when eager does not fit.

    ``report["status"]``: "fits" (eagerly), "fits_with_plan" or "does_not_fit"."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; known: {', '.join(sorted(DEVICES))}")
    if not time_budget > 0:
        raise ValueError("the time budget must be positive")
    memory = check_memory(DEVICES[device].memory_bytes if memory is None else memory)
    say = progress or (lambda _m: None)
    cost = AnalyticCost(device)
    say(f"simulating eager's step ({len(g)} nodes, PyTorch's order) on {device}")
    base = METHODS["eager"].run(g, cost).plans[0]
    sim = simulate(g, base.order, cost)
    parts = breakdown(g, sim)
    floor, floor_by_kind = resident_floor(g)
    op = largest_op(g)
    step = sim.memory.peak_steps[0] if sim.memory.peak_steps else None
    on_reserved = judged_on_reserved(device)
    reserved = None
    if on_reserved:
        say("replaying eager's allocations through the caching allocator")
        reserved = predicted_reserved(g, base.order, cost, memory)
    judged = reserved["reserved_bytes"] if reserved is not None else int(sim.peak)
    fits = reserved["fits"] if reserved is not None else sim.peak <= memory
    report: dict[str, Any] = {
        "graph": g.name, "nodes": len(g), "mode": g.meta.get("mode", "unknown"), "optimizer": optimizer_of(g),
        "device": device, "memory_bytes": memory, "device_memory_bytes": DEVICES[device].memory_bytes,
        "eager": {"peak_bytes": int(sim.peak), "peak_step": step, "steps": len(base.order),
                  "peak_op": g.nodes[base.order[step]].name if step is not None else None,
                  "latency_seconds": float(sim.latency),
                  "reserved_bytes": reserved["reserved_bytes"] if reserved is not None else None,
                  "oom_retries": reserved["oom_retries"] if reserved is not None else None,
                  "breakdown": parts},
        "floor": {"bytes": int(floor), "by_kind": floor_by_kind},
        "largest_op": op,
        "verdict": {"basis": "reserved" if on_reserved else "live", "bytes": judged, "fits": bool(fits),
                    "headroom_bytes": memory - judged},
        "status": "fits" if fits else "does_not_fit",
        "plans": [], "no_plan": [], "bounds": [], "best_peak": None,
    }
    if fits:
        return FitResult(report)
    if compare_fn is None:
        from .search.compare import compare as compare_fn
    say(f"eager does not fit {memory} B; running the methods ({time_budget:g} s each)")
    w = compare_fn(g, device=device, methods=methods, time_budget=time_budget, progress=say)
    picks = [pick(g, m, r.plans, memory, cost) for m, r in w["results"].items() if m not in REFERENCES]
    for p in picks:
        if p.plan is not None:
            report["plans"].append({
                "method": p.method, "label": p.label, "point_label": p.plan.label, "peak_bytes": int(p.plan.peak),
                "reserved_bytes": p.reserved, "latency_seconds": float(p.plan.latency),
                "overhead": float(p.plan.latency / sim.latency - 1) if sim.latency else 0.0})
        else:
            reasons = "; ".join(dict.fromkeys(why for _, why in w["results"][p.method].failures))
            report["no_plan"].append({"method": p.method, "label": p.label, "lowest_peak_bytes": p.lowest_peak,
                                      "why": p.why_not if p.lowest_peak is not None else (reasons or p.why_not)})
    report["plans"].sort(key=lambda r: (r["latency_seconds"], r["peak_bytes"]))
    lows = [p.lowest_peak for p in picks if p.lowest_peak is not None]
    report["best_peak"] = min(lows) if lows else None
    if report["plans"]:
        report["status"] = "fits_with_plan"
    else:
        report["bounds"] = bounds(floor, floor_by_kind, sim.memory.resident, op, memory)
    return FitResult(report, w, picks)


__all__ = ["FitResult", "HELD", "KEPT", "PARTS", "Pick", "bounds", "breakdown", "check_memory", "fit",
           "judged_on_reserved", "largest_op", "lower_bound", "optimizer_of", "part_of", "pick", "predicted_reserved"]
