"""Train with a plan inside the user's own loop: ``step = plan_step(module, loss_fn, inputs, ...)``.

``plan_step`` captures the training step of ``module`` (forward, ``loss_fn(module, *inputs)`` and
backward, by the importer of :mod:`core.frontend`), finds a plan under a memory limit with the
M-Optimizer (MAGIS Algorithm 3, ``search.moptimizer.optimize``) or takes one from a plan file, and
generates the plan's code in memory (:func:`core.codegen.emit.generate_source`, compiled into a
module object: nothing is written but the plan cache).  ``loss = step(*batch)`` then runs the
plan's forward and backward on the module's own parameters and buffers and leaves the module as
``loss_fn(module, *batch).backward()`` would:

* every gradient is accumulated into ``.grad`` (created when it is None, added to otherwise);
* the buffers the graph updates (batch-norm running statistics, ``num_batches_tracked``) are
  written in place;
* the loss comes back as a tensor (detached: the backward pass has already run),

so any ``torch.optim`` optimizer steps the parameters unchanged.

A batch whose shapes differ from the planned ones (an epoch's last batch) is re-planned for its
shapes with the same limit -- captured, searched or read from the cache -- after a one-line
:class:`NewShapeWarning`; ``on_new_shape="eager"`` runs such a batch eagerly instead, and
``"error"`` refuses it.  So is a module switched between ``train()`` and ``eval()``: its graph
differs.

Plans are cached on disk (``$MAGIS_CACHE/plans``, default ``~/.cache/magis/plans``) under a key of
the graph's canonical hash (``search.wl_hash``), the limit, the device profile and the torch
device; a second construction for the same model, shapes, limit and device reads the plan from
there and does not search (``PlanStep.from_cache``).
"""

from __future__ import annotations

import hashlib
import json
import linecache
import math
import sys
import time
import types
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .codegen.emit import generate_source
from .codegen.runtime import torch_device
from .codegen.target import retarget
from .cost.devices import DEVICES
from .cost.measured import default_cache_dir
from .cost.model import AnalyticCost
from .fmt import format_bytes
from .frontend.workload import capture_workload
from .ir.graph import Graph
from .policy import CheckpointPlanPolicy, policy_of_step
from .search.limits import MemoryLimit
from .search.moptimizer import optimize
from .search.plan import Plan, PlanError, PlanFile, check_order, load_plans, save_plans
from .search.wl_hash import graph_hash
from .simulate import simulate

CACHE_VERSION = 1  # bump when the cache key or the cached file changes meaning
NEW_SHAPE = ("plan", "eager", "error")


class NewShapeWarning(UserWarning):
    """A batch whose shapes (or a module whose train/eval mode) the step has no plan for."""


class LimitWarning(UserWarning):
    """The search found no plan under the memory limit; the step runs the least peak found."""


Progress = Callable[[str], None]


class StderrLine:
    """The default progress: one line on stderr, rewritten in place (``\\r``) and ended by ``done``."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.width = 0

    def __call__(self, message: str) -> None:
        text = f"magis: {message}"
        pad = max(0, self.width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.width = len(text)

    def done(self) -> None:
        if self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


def _progress(progress: Progress | bool | None) -> Progress:
    if progress is True:
        return StderrLine()
    if progress is False or progress is None:
        return lambda _msg: None
    if not callable(progress):
        raise TypeError(f"progress must be a callable, True or False, not {type(progress).__name__}")
    return progress


def default_profile(device: torch.device) -> str:
    """The device profile a plan is made for on ``device``: ``cpu``, or the closest GPU profile by
    the CUDA device's name (H100, A100, else the RTX 3090 of the MAGIS paper)."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).upper()
    return "h100-sxm" if "H100" in name or "H200" in name else "a100-80gb" if "A100" in name else "rtx3090"


def plan_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, else ``plans/`` under ``$MAGIS_CACHE`` (default ``~/.cache/magis``)."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir() / "plans"


def cache_key(g: Graph, limit: MemoryLimit, profile: str, device: torch.device) -> str:
    """The cache key of a plan: the graph's canonical hash, the limit as given, the device profile
    and the torch device kind (a digest, hex)."""
    dev = device.type if device.type != "cuda" else f"cuda:{torch.cuda.get_device_name(device)}"
    text = json.dumps({"v": CACHE_VERSION, "graph": str(graph_hash(g)), "limit": str(limit),
                       "profile": profile, "device": dev}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _signature(batch: Sequence[Any], training: bool) -> tuple:
    return (training, *((tuple(t.shape), t.dtype, t.device.type) if isinstance(t, torch.Tensor) else
                        (type(t).__name__, t) for t in batch))


def _describe(sig: tuple) -> str:
    shapes = ", ".join("x".join(map(str, s[0])) or "scalar" for s in sig[1:] if isinstance(s[0], tuple))
    return f"({shapes}; {'train' if sig[0] else 'eval'})"


def compile_plan_source(src: str, name: str) -> types.ModuleType:
    """The generated script ``src`` as a module object, compiled in memory (its lines are
    registered with ``linecache`` so tracebacks show them)."""
    modname = f"magis_plan_{uuid.uuid4().hex[:12]}"
    filename = f"<magis plan {name} {modname}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    mod = types.ModuleType(modname)
    mod.__file__ = filename
    exec(compile(src, filename, "exec"), mod.__dict__)  # noqa: S102 -- code generated from the user's own model
    return mod


@dataclass
class CompiledPlan:
    """One plan ready to run: its graph (as captured), the chosen point, the code."""

    graph: Graph  # the captured training step (the plan's applications replay onto it)
    plan: Plan
    code: types.ModuleType  # the generated script, compiled in memory
    source: str
    simulated_peak: int
    eager_peak: int  # the captured graph's peak in its traced order
    limit_bytes: int | None
    from_cache: bool
    searched: bool
    cache_path: Path | None
    inputs: list[str] = field(default_factory=list)  # the script's input names (INPUTS)

    @property
    def reached(self) -> bool:
        return self.limit_bytes is None or self.simulated_peak <= self.limit_bytes


class PlanStep:
    """``loss = step(*batch)``: one training step of ``module`` run by a MAGIS plan (see the
    module docstring); build it with :func:`plan_step`."""

    def __init__(self, module: nn.Module, loss_fn: Callable[..., torch.Tensor], example_inputs: Sequence[Any], *,
                 memory_limit: MemoryLimit | str | float | None = None, plan: str | Path | PlanFile | None = None,
                 point: int | None = None, device: str | torch.device | None = None, profile: str | None = None,
                 time_budget: float = 10.0, cache: bool = True, cache_dir: str | Path | None = None,
                 on_new_shape: str = "plan", progress: Progress | bool | None = True,
                 name: str | None = None, fix_random_reads: bool = False) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"plan_step needs a torch.nn.Module, not {type(module).__name__}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be a function loss_fn(module, *inputs), not {type(loss_fn).__name__}")
        if memory_limit is None and plan is None:
            raise ValueError("give a memory limit (e.g. 0.5 of the peak, or 8GiB) or a plan file")
        if on_new_shape not in NEW_SHAPE:
            raise ValueError(f"on_new_shape must be one of {', '.join(NEW_SHAPE)}, not {on_new_shape!r}")
        if time_budget <= 0:
            raise ValueError("time_budget must be positive (seconds)")
        self.module = module
        self.loss_fn = loss_fn
        self.limit = None if memory_limit is None else MemoryLimit.parse(memory_limit)
        self.device = torch_device(device) if device is not None else _module_device(module)  # DeviceError first
        self.profile = profile or default_profile(self.device)
        if self.profile not in DEVICES:
            raise ValueError(f"unknown device profile {self.profile!r}; known: {', '.join(DEVICES)}")
        self.time_budget = float(time_budget)
        self.cache = cache
        self.cache_dir = plan_cache_dir(cache_dir)
        self.on_new_shape = on_new_shape
        self.name = name or type(module).__name__.lower()
        self.fix_random_reads = fix_random_reads  # as ``magis import --fix-random-reads`` (layer drop)
        self._say = _progress(progress)
        self._plan_file = plan
        self._point = point
        self._plans: dict[tuple, CompiledPlan] = {}
        self._eager_warned: set[tuple] = set()
        self.searches = 0  # searches this step ran (0 when every plan came from the cache or a file)
        self.last_memory: dict[str, Any] | None = None
        inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        sig = _signature(inputs, module.training)
        self.first = self._build(inputs, given=plan)
        self._plans[sig] = self.first

    # ---- what it runs -------------------------------------------------------------------------
    @property
    def from_cache(self) -> bool:
        """The first plan was read from the plan cache (no search)."""
        return self.first.from_cache

    @property
    def reached(self) -> bool:
        """The first plan's simulated peak is within the memory limit."""
        return self.first.reached

    @property
    def simulated_peak(self) -> int:
        return self.first.simulated_peak

    @property
    def plan(self) -> Plan:
        return self.first.plan

    @property
    def source(self) -> str:
        """The generated code of the first plan (for reading; it runs from memory)."""
        return self.first.source

    def plans(self) -> dict[str, CompiledPlan]:
        """Every plan this step holds, by its batch description."""
        return {_describe(k): v for k, v in self._plans.items()}

    def summary(self) -> str:
        c = self.first
        lim = f"limit {self.limit} = {format_bytes(c.limit_bytes)}" if c.limit_bytes is not None else "plan file"
        return (f"{c.graph.name}: simulated peak {format_bytes(c.simulated_peak)} "
                f"({c.simulated_peak / c.eager_peak:.3f}x of eager's {format_bytes(c.eager_peak)}), {lim}, "
                f"{len(c.plan.applications)} rule applications, "
                f"{'from the cache' if c.from_cache else 'searched' if c.searched else 'from the plan file'}")

    # ---- planning -----------------------------------------------------------------------------
    def _capture(self, inputs: tuple) -> Graph:
        w = types.SimpleNamespace(module=self.module, inputs=inputs, loss_fn=self.loss_fn, name=self.name)
        g = capture_workload(w, training=True, name=self.name, fix_random_reads=self.fix_random_reads,
                             progress=lambda m: self._say(f"capturing: {m}"))
        if self.device.type == "cuda":  # the kernels a CUDA run executes, not the CPU capture's
            self._say(f"capturing: retargeted to {retarget(g, 'cuda').summary()}")
        return g

    def _build(self, inputs: tuple, given: str | Path | PlanFile | None) -> CompiledPlan:
        try:
            c = self._plan_for(inputs, given)
        finally:
            if isinstance(self._say, StderrLine):
                self._say.done()
        if not c.reached:
            _warn(f"no plan found for {c.graph.name} reaches the memory limit {self.limit} "
                  f"({format_bytes(c.limit_bytes)}): running the least peak found, "
                  f"{format_bytes(c.simulated_peak)} ({c.simulated_peak / c.eager_peak:.3f}x of eager's "
                  f"{format_bytes(c.eager_peak)})", LimitWarning)
        return c

    def _plan_for(self, inputs: tuple, given: str | Path | PlanFile | None) -> CompiledPlan:
        say = self._say
        g = self._capture(inputs)
        cost = AnalyticCost(self.profile)
        if given is not None:
            pf = given if isinstance(given, PlanFile) else load_plans(given)
            pf.check_graph(g)
            return self._compile(g, pf, cost, from_cache=False, searched=False, path=None)
        limit = self.limit
        assert limit is not None
        path = self.cache_dir / f"{_safe(g.name)}-{cache_key(g, limit, self.profile, self.device)}.json.gz"
        if self.cache and path.exists():
            try:
                pf = load_plans(path, g)
            except PlanError as e:
                _warn(f"ignoring the cached plan {path}: {e}")
            else:
                say(f"plan for {g.name} read from the cache")
                return self._compile(g, pf, cost, from_cache=True, searched=False, path=path)
        pf = self._search(g, limit)
        if self.cache:
            try:
                save_plans(pf, path)
            except OSError as e:
                _warn(f"could not write the plan cache {path}: {e.strerror or e}")
        return self._compile(g, pf, cost, from_cache=False, searched=True, path=path if self.cache else None)

    def _search(self, g: Graph, limit: MemoryLimit) -> PlanFile:
        budget = self.time_budget
        last = [-1.0]

        def on_record(r: Any) -> None:
            if r.seconds - last[0] >= 0.25:
                last[0] = r.seconds
                self._say(f"searching {g.name} ({len(g)} nodes) for {limit}: {r.seconds:4.1f}/{budget:g} s, "
                          f"best peak {format_bytes(r.best_peak)}, {r.generated} states")

        self._say(f"searching {g.name} ({len(g)} nodes) for {limit}")
        self.searches += 1
        t0 = time.perf_counter()
        def on_stage(st: Any) -> None:
            self._say(f"searching {g.name} ({len(g)} nodes) for {limit}: {st.end:4.1f}/{budget:g} s, "
                      f"{st.name.lower()}, lowest peak within +10% {format_bytes(st.peak_at_10pct)}")

        pf = optimize(g, memory_limit=limit, time_budget=budget, device=self.profile, progress=on_record,
                      on_stage=on_stage)
        p = pf.points[0]
        self._say(f"searched {g.name} in {time.perf_counter() - t0:.1f} s: peak {format_bytes(p.peak)} "
                  f"({p.peak / max(1, pf.points[-1].peak):.3f}x), limit {format_bytes(pf.meta['limit_bytes'])}")
        return pf

    def _choose(self, pf: PlanFile, eager_peak: int) -> tuple[Plan, int | None]:
        """The point to run: ``point`` if given; with a limit, the fastest point within it (else
        the least peak); else point 0."""
        if self._point is not None:
            return pf.point(self._point), (self.limit.bytes(eager_peak) if self.limit else None)
        if self.limit is None:
            return pf.point(0), None
        lim = self.limit.bytes(eager_peak)
        pts = [p for p in pf.points if p.method != "eager"] or pf.points
        within = [p for p in pts if p.peak <= lim]
        best = (min(within, key=lambda p: (p.latency, p.peak)) if within else
                min(pts, key=lambda p: (p.peak, p.latency)))
        return best, lim

    def _compile(self, g: Graph, pf: PlanFile, cost: AnalyticCost, *, from_cache: bool, searched: bool,
                 path: Path | None) -> CompiledPlan:
        from .schedule import get_scheduler

        eager_peak = simulate(g, get_scheduler("traced").run(g).order, cost).peak
        plan, lim = self._choose(pf, int(eager_peak))
        h = plan.graph(g)
        check_order(h, plan.order)
        sim = simulate(h, plan.order, cost)
        src = generate_source(h, plan.order, schedule_name=f"{plan.method} {plan.label}".strip(), cost=cost,
                              sim=sim)
        code = compile_plan_source(src, g.name)
        c = CompiledPlan(g, plan, code, src, int(sim.peak), int(eager_peak), lim, from_cache, searched, path,
                         list(code.INPUTS))
        return c

    def _for(self, batch: tuple) -> CompiledPlan | None:
        sig = _signature(batch, self.module.training)
        c = self._plans.get(sig)
        if c is not None:
            return c
        if self.on_new_shape == "error":
            raise ValueError(f"no plan for a batch {_describe(sig)}: the step was planned for "
                             f"{_describe(next(iter(self._plans)))} (on_new_shape='error')")
        if self.on_new_shape == "eager":
            if sig not in self._eager_warned:
                self._eager_warned.add(sig)
                _warn(f"magis: no plan for a batch {_describe(sig)}; running it eagerly (no memory limit)",
                      NewShapeWarning)
            return None
        limit = self.limit
        if limit is None:  # a plan file only: keep its point's share of eager's peak
            f = self.first.simulated_peak / self.first.eager_peak
            limit = self.limit = MemoryLimit.parse(min(1.0, math.floor(f * 1e4) / 1e4))
        _warn(f"magis: new batch shape {_describe(sig)}: planning for it under {limit} "
              f"(cached for the next ones)", NewShapeWarning)
        c = self._build(batch, given=None)
        self._plans[sig] = c
        return c

    # ---- running ------------------------------------------------------------------------------
    def _tensors(self, c: CompiledPlan, batch: tuple) -> dict[str, torch.Tensor]:
        params = dict(self.module.named_parameters(remove_duplicate=False))
        buffers = dict(self.module.named_buffers(remove_duplicate=False))
        out: dict[str, torch.Tensor] = {}
        for n in c.graph.placeholders():
            kind, _, rest = n.target.partition(":")
            if kind == "const":
                continue
            key = f"input_{rest}" if kind == "input" else rest
            t = params.get(rest) if kind == "param" else buffers.get(rest) if kind == "buffer" else (
                batch[int(rest)] if rest.isdigit() and int(rest) < len(batch) else None)
            if t is None:
                raise ValueError(f"the module has no {kind} {rest!r} (was it changed after plan_step?)")
            out[key] = t.detach()
        return out

    def _apply(self, outputs: dict[str, torch.Tensor], passed: dict[str, torch.Tensor]) -> torch.Tensor:
        """Gradients into ``.grad`` (accumulated), updated buffers in place; returns the loss."""
        mine = {t.untyped_storage().data_ptr() for t in passed.values() if t.numel()}
        buffers = dict(self.module.named_buffers(remove_duplicate=False))
        with torch.no_grad():
            for name, p in self.module.named_parameters():
                g = outputs.get(f"grad:{name}")
                if g is None:
                    continue
                if p.grad is None:
                    if g.numel() and g.untyped_storage().data_ptr() in mine:
                        g = g.clone()  # never hand out a view of the caller's own tensors
                    p.grad = g
                else:
                    p.grad.add_(g)
            for key, v in outputs.items():
                if key.startswith("buffer:"):
                    b = buffers[key.removeprefix("buffer:")]
                    if v is not b:
                        b.copy_(v)
        return outputs["loss"]

    def _eager(self, batch: tuple) -> torch.Tensor:
        with torch.enable_grad():
            loss = self.loss_fn(self.module, *batch)
            loss.backward()
        return loss.detach()

    def __call__(self, *batch: Any) -> torch.Tensor:
        c = self._for(batch)
        if c is None:
            return self._eager(batch)
        tensors = self._tensors(c, batch)
        return self._apply(c.code.run(tensors, self.device), tensors)

    def measure(self, *batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """``self(*batch)`` with its memory measured like the simulator counts it: the live bytes
        of tensor storages on CPU (the script's ``LiveBytesTracker``, with the parameters, buffers,
        batch and existing ``.grad`` counted from the start), ``max_memory_allocated`` on CUDA.
        Returns the loss and ``measured_peak_bytes``, ``simulated_peak_bytes`` and the rest."""
        c = self._for(batch)
        if c is None:
            raise ValueError("no plan for this batch (on_new_shape='eager'): nothing to compare with")
        tensors = self._tensors(c, batch)
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        roots = [*tensors.values(), *c.code.CONSTANTS.values(), *grads]
        holder: dict[str, torch.Tensor] = {}

        def run(ts: dict[str, torch.Tensor], dev: torch.device) -> dict[str, torch.Tensor]:
            holder["loss"] = self._apply(c.code.run(ts, dev), ts)
            return {}

        _, mem = c.code.measure_memory(run, tensors, self.device, roots)
        tracker = mem.pop("_tracker", None)
        mem.update({"simulated_peak_bytes": c.simulated_peak, "eager_peak_bytes": c.eager_peak,
                    "limit_bytes": c.limit_bytes, "existing_grad_bytes": sum(g.untyped_storage().nbytes()
                                                                              for g in grads)})
        if tracker is not None:
            mem["step_bytes"] = list(tracker.step_bytes)
        self.last_memory = mem
        return holder["loss"], mem


def plan_step(module: nn.Module, loss_fn: Callable[..., torch.Tensor], example_inputs: Sequence[Any], *,
              memory_limit: MemoryLimit | str | float | None = None, plan: str | Path | PlanFile | None = None,
              device: str | torch.device | None = None, **options: Any) -> PlanStep:
    """A training step of ``module`` run by a MAGIS plan; ``loss = step(*batch)`` (module docstring).

    ``loss_fn(module, *inputs)``: the scalar loss (the model contract of ``magis import``);
    ``example_inputs``: a batch of the shapes to plan for.  ``memory_limit``: a fraction of the
    captured step's peak (``0.5``) or a size (``"8GiB"``), ``core.search.limits.MemoryLimit``;
    ``plan``: a plan file of this model's graph (``magis optimize -o``; a file of another graph is
    refused with ``PlanError``) instead of a search.  ``device``: where it runs (default: the
    module's).  Options: ``point`` (of a plan file), ``profile`` (the device profile of the cost
    model; default by ``device``), ``time_budget`` (seconds of search, default 10), ``cache`` /
    ``cache_dir``, ``on_new_shape`` ("plan", "eager" or "error"), ``progress`` (a callable taking
    a message, True for one updating line on stderr, False for none), ``name``, ``fix_random_reads``
    (a random draw the model branches on in Python -- layer drop -- is fixed so that no layer is
    dropped, as ``magis import --fix-random-reads``; the plan then always runs every layer).

    Raises ``ImportErrorMAGIS`` (the importer's one line) for a model that cannot be captured,
    ``TypeError`` for a non-module, ``ValueError`` for a bad limit, ``PlanError`` for a bad plan file,
    ``DeviceError`` (a ``ValueError``, before any capture) for a ``device`` this torch cannot run on
    (``"cuda"`` on a CPU-only torch, ``"cuda:x"``): ``core.codegen.runtime.torch_device``.
    """
    return PlanStep(module, loss_fn, example_inputs, memory_limit=memory_limit, plan=plan, device=device,
                    **options)


def _warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside this file (the user's loop)."""
    level, f = 2, sys._getframe(1)
    while f is not None and f.f_code.co_filename == __file__:
        level, f = level + 1, f.f_back
    warnings.warn(message, category, stacklevel=level)


def _module_device(module: nn.Module) -> torch.device:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:40] or "model"


__all__ = ["CompiledPlan", "LimitWarning", "NewShapeWarning", "PlanStep", "StderrLine", "cache_key",
           "compile_plan_source", "default_profile", "plan_cache_dir", "plan_step"]




def checkpoint_policy(module: nn.Module, loss_fn: Callable[..., torch.Tensor], inputs: Sequence[Any], *,
                      memory_limit: MemoryLimit | str | float, time_budget: float = 10.0,
                      device: str | torch.device | None = None, profile: str | None = None,
                      progress: Any = False, name: str | None = None, cache: bool = True,
                      cache_dir: Any = None, regions: str | Sequence[str] = "step") -> CheckpointPlanPolicy:
    """A MAGIS plan for the training step ``loss_fn(module, *inputs)`` under ``memory_limit`` (a
    fraction of the captured step's peak or a size, ``MemoryLimit``) as torch's selective-checkpoint
    policy (``core.policy``): pass its ``context_fn`` to ``torch.utils.checkpoint.checkpoint(...,
    use_reentrant=False, context_fn=...)``.  ``time_budget``: seconds of search; ``device``: where the
    step runs (default: the module's), ``profile``: its cost-model profile (default by ``device``).
    The plan is searched and cached as :func:`plan_step` does it (``cache``, ``cache_dir``).
    ``regions``: ``"step"`` (the whole step as one region, ``policy.checkpoint(loss_fn, module, *batch)``)
    or ``"blocks"`` / a list of module names (one region per block, ``policy.apply(module)``;
    ``core.policy.policy_of_step``).

    Raises what ``plan_step`` raises for a model it cannot capture or a bad limit or device."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"checkpoint_policy needs a torch.nn.Module, not {type(module).__name__}")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    step = PlanStep(module, loss_fn, inputs, memory_limit=memory_limit, device=device, profile=profile,
                    time_budget=time_budget, progress=progress, name=name, cache=cache, cache_dir=cache_dir)
    return policy_of_step(step, module, loss_fn, inputs, regions)
