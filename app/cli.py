"""``magis`` command line.

    magis import SPEC -o FILE [--forward] [--sgd LR | --adam LR]   capture a sample or path/to/file.py:factory
    magis info FILE [--device NAME] [--json]           nodes, weights, baseline peak, latency, hot-spots
    magis schedule FILE --method NAME [--json]         peak bytes of a scheduler's order and its run time
    magis export FILE [--schedule NAME] -o script.py   runnable PyTorch script of a graph + schedule
    magis transform FILE --remat T:U --swap T:U -o OUT apply rules by hand, write the new graph
    magis verify SPEC [--schedule NAME] [--graph FILE] eager PyTorch vs exported script: errors and peaks
    magis sweep W1,W2 --memory-limits 0.8,8GiB -o DIR  optimize workloads x limits x devices in parallel
    magis compare FILE [--methods M,...] -o PLAN       every method on one graph: one plan file, one table
    magis fit SPEC --device NAME [--memory SIZE]       does the training step fit the card? eager, then plans
    magis fuse FILE --buffer 256KiB -o PLAN            layer fusion under an on-chip buffer (GET)
    magis app [FILE] [--sample NAME] [--port N]        the web app (127.0.0.1 by default)

Errors a user can cause print as one line on stderr (exit status 2), never a traceback.  Exit
statuses: 0 done; 1 ``verify``'s comparison failed, or nothing ``fit`` tried fits; 2 bad input or usage;
3 ``optimize`` wrote its plan but no plan reaches the memory limit; 4 the step ``fit`` judged fits only
with a plan (eagerly it does not); 130 interrupted; 141 stdout closed early (``magis info F | head``).

The command line is an entry point of the product, like the web app: it wires core to the samples
and to user files (``app.specs`` resolves what the user names), so it lives here and not in core.
``python -m app.cli`` runs it without the installed ``magis`` script.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sample_graphs
from core.fmt import format_bytes, plural, terminal_safe
from core.ir import io
from core.ir.graph import GraphError

from .specs import capture_spec, load_graph, sweep_workload, verify_spec

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LIMIT_NOT_REACHED = 0, 1, 2, 3
EXIT_FITS_WITH_PLAN = 4  # ``magis fit``: eager's step does not fit the memory, a plan does
EXIT_INTERNAL = 70  # a bug of MAGIS Studio's own (sysexits' EX_SOFTWARE), never the user's input
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE, as a shell reports them


class Outcome(Exception):
    """The command did its work (printed its result, wrote its output) but the result falls short:
    ``main()`` prints ``magis: LABEL: message`` on stderr and exits with ``status``.  Not a
    ValueError: the input was fine."""

    status = EXIT_FAILED
    label = "failed"


class CheckFailed(Outcome):
    """``magis verify``: the exported script does not reproduce eager PyTorch (exit status 1)."""

    status = EXIT_FAILED
    label = "verification failed"


class LimitNotReached(Outcome):
    """``magis optimize``: the plan file is written, but no plan in it reaches the memory limit (exit
    status 3; a warning, not an error)."""

    status = EXIT_LIMIT_NOT_REACHED
    label = "warning"


class InternalError(Exception):
    """The optimizer failed on input that was accepted: a bug of ours, not bad input (exit status 70,
    where bad input is 2).  ``main()`` says so in one line; ``--verbose`` adds the traceback."""


@contextlib.contextmanager
def optimizer_errors(what: str) -> Iterator[None]:
    """Around work on input already validated (a loaded graph, a parsed limit): any exception from it
    but an interrupt is the optimizer's own failure, reported as ``InternalError``."""
    try:
        yield
    except (KeyboardInterrupt, BrokenPipeError, InternalError):
        raise
    except Exception as e:  # noqa: BLE001 -- whatever it is, the input was accepted
        raise InternalError(f"{what} failed on an accepted graph: {type(e).__name__}: {e}") from e


class Progress:
    """Stage messages on stderr, each with the seconds since the start (``[  12.3 s] ...``); while
    a stage runs longer than ``every`` seconds (tracing a multi-billion-parameter model takes a
    minute or more) it repeats that the stage is still running."""

    def __init__(self, every: float = 15.0, stream: Any = None) -> None:
        self.t0 = time.perf_counter()
        self.every = every
        self.stream = stream
        self._stage = ""
        self._since = self.t0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _print(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}", file=self.stream or sys.stderr, flush=True)

    def __call__(self, msg: str) -> None:
        with self._lock:
            self._stage, self._since = msg, time.perf_counter()
            self._print(msg)

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            with self._lock:
                if self._stage and time.perf_counter() - self._since >= self.every:
                    self._print(f"... still {self._stage[0].lower()}{self._stage[1:]}")


def cmd_import(a: argparse.Namespace) -> dict[str, Any]:
    """``magis import``: capture a model spec, write its graph file and print its summary."""
    from core.summary import graph_info

    t0 = time.perf_counter()
    with Progress() as progress:
        progress(f"importing {a.spec} ({'forward pass' if a.forward else 'training step'})")
        g = capture_spec(a.spec, training=not a.forward, sgd_lr=a.sgd, progress=progress, adam_lr=a.adam,
                         fix_random_reads=a.fix_random_reads, max_nodes=a.max_nodes)
        from core.codegen.target import retarget

        retargeted = retarget(g, a.target)
        if a.target != "cpu":
            progress(f"retargeted to {retargeted.summary()}")
        progress(f"writing {a.output}")
        io.save(g, a.output)
        progress("summarising (traced order, analytic latency)")
        info = graph_info(g, device=a.device, top=3)
    res = {"output": str(a.output), "nodes": len(g), "seconds": round(time.perf_counter() - t0, 2),
           "traced_as": g.meta.get("traced_as", "eager"), "target": a.target,
           "attention_kernels": retargeted.counts(),
           **{k: info[k] for k in ("name", "mode", "device", "weight_bytes", "baseline_peak_bytes",
                                   "latency_seconds")}}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"wrote {a.output}: {info['name']}, {info['nodes']} ops ({info['mode']}) in {res['seconds']} s")
        print(f"  weights          {format_bytes(info['weight_bytes'])}")
        print(f"  baseline peak    {format_bytes(info['baseline_peak_bytes'])}  (traced order, free after last use)")
        print(f"  est. latency     {info['latency_seconds'] * 1e3:.2f} ms on {info['device']}")
        if retargeted.calls:
            print(f"  attention        {retargeted.summary()}")
        for h in info["hotspots"]:
            print(f"  hot-spot {format_bytes(h['bytes']):>12}  {h['kind']:<10} {h['name']}  {h['shape']}  [{h['module']}]")
    return res


def cmd_info(a: argparse.Namespace) -> dict[str, Any]:
    """``magis info``: the graph summary (``core.summary``), as text or JSON."""
    from core.summary import floor_line, graph_info

    g = load_graph(a.file)
    cost = None
    if a.measured:
        from core.cost.measured import MeasuredCost

        print("timing ops on this machine (cached for later runs) ...", file=sys.stderr)
        cost = MeasuredCost()
    info = graph_info(g, device=a.device, top=a.top, cost=cost)
    if cost is not None:
        cost.save()
    from core.cost import AnalyticCost
    from core.schedule.baselines import TracedOrder
    from core.simulate import predict_reserved

    pr = predict_reserved(g, TracedOrder().order(g), cost or AnalyticCost(a.device)).replay
    from core.codegen.target import attention_kernels

    info["attention_kernels"] = attention_kernels(g)
    info.update({"baseline_reserved_peak_bytes": pr.reserved_peak, "baseline_allocated_peak_bytes": pr.allocated_peak,
                 "reserved_segments": pr.segments_peak, "reserved_fragmentation": round(pr.fragmentation, 4)})
    if a.json:
        print(json.dumps(info, indent=1))
    else:
        t = terminal_safe  # names come from the file: never raw escape sequences on the terminal
        print(f"{t(info['name'])}: {info['nodes']} ops ({t(info['mode'])}), device {info['device']}")
        print(f"  weights          {format_bytes(info['weight_bytes'])}")
        print(f"  baseline peak    {format_bytes(info['baseline_peak_bytes'])}  (traced order, free after last use)")
        print(f"  reserved peak    {format_bytes(info['baseline_reserved_peak_bytes'])}  (predicted for PyTorch's CUDA "
              f"caching allocator: {plural(info['reserved_segments'], 'segment')}, "
              f"{info['reserved_fragmentation']:.1%} of it unallocated at its peak)")
        print(f"  {floor_line(info['resident_floor_bytes'], info['resident_floor_by_kind'], info['baseline_peak_bytes'])}")
        print(f"  est. latency     {info['latency_seconds'] * 1e3:.2f} ms")
        print("  top hot-spots:")
        for h in info["hotspots"]:
            print(f"    {format_bytes(h['bytes']):>12}  {h['kind']:<10} {t(h['name'])}  {h['shape']}  "
                  f"[{t(h['module'])}]")
        if info["ops_without_dim_links"]:
            print(f"  ops without dim links (block fission): {t(', '.join(info['ops_without_dim_links']))}")
        if info["attention_kernels"]:
            print("  attention        " + ", ".join(f"{k} {n}" for k, n in info["attention_kernels"].items())
                  + f"  (target {g.meta.get('target', 'cpu')})")
    return info


def cmd_schedule(a: argparse.Namespace) -> dict[str, Any]:
    """``magis schedule``: one scheduler's peak and run time."""
    from core.schedule import get_scheduler

    g = load_graph(a.file)
    kwargs = {"time_budget": a.time_budget} if a.time_budget is not None else {}
    try:
        sched = get_scheduler(a.method, **kwargs)
    except TypeError:
        sched = get_scheduler(a.method)
    s = sched.run(g)
    res = {"graph": g.name, "method": a.method, "peak_bytes": s.peak, "seconds": round(s.seconds, 4),
           **{k: v for k, v in s.info.items() if isinstance(v, (int, float, str, bool))}}
    print(json.dumps(res) if a.json else
          f"{terminal_safe(a.method)}: peak {format_bytes(s.peak)} ({s.peak} B), scheduled in {s.seconds:.3f} s")
    return res


def _plan_graph(g, plan_file: Path, point: int | None):
    """The graph, the plan and the device profile of point ``point`` of a plan file made for ``g``
    (PlanError: one line)."""
    from core.search.plan import check_order, load_plans

    pf = load_plans(plan_file, g)
    plan = pf.point(point)
    h = plan.graph(g)
    check_order(h, plan.order)
    return h, plan, pf.device


def _cost_device(cost: str, device: str | None) -> str:
    """The device profile of ``--cost`` and ``--device`` (``core.cost.choice.cost_device``)."""
    from core.cost.choice import check_cost, cost_device

    try:
        check_cost(cost)
    except ValueError as e:
        raise ValueError(f"--cost: {e}") from None
    try:
        return cost_device(cost, device)
    except ValueError as e:
        raise ValueError(f"--device: {e}") from None


def _cost(a: argparse.Namespace, plan_device: str | None = None):
    """The analytic cost model of ``--device`` when given (it wins), else of the device the plan file
    was made for, else of the default device."""
    from core.cost import DEFAULT_PROFILE, AnalyticCost

    try:
        return AnalyticCost(a.device or plan_device or DEFAULT_PROFILE)
    except ValueError as e:
        hint = ("; --device names the cost model's device profile, not a torch device (the exported script "
                "takes --device cuda)" if str(a.device).partition(":")[0] in ("cuda", "mps") else "")
        raise ValueError(f"--device: {e}{hint}") from None


def cmd_export(a: argparse.Namespace) -> dict[str, Any]:
    """``magis export``: the runnable PyTorch script of a graph under a schedule, or of a plan."""
    from core.codegen import export_script
    from core.schedule import get_scheduler
    from core.simulate import simulate

    if a.device is not None:
        _cost(a)  # an unknown --device is refused before any work
    from core.search.plan import sim_options

    g = load_graph(a.file)
    plan_device = None
    opts: dict[str, Any] = {}
    if a.plan is not None:
        g, plan, plan_device = _plan_graph(g, a.plan, a.point)
        order, name = plan.order, f"plan {plan.method} {plan.label}".strip()
        opts = sim_options(plan)  # SwapAdvisor's three streams and waits
    else:
        order, name = get_scheduler(a.schedule).run(g).order, a.schedule
    cost = _cost(a, plan_device)
    sim = simulate(g, order, cost, **opts)  # the script's release points and its header's numbers
    path = export_script(g, order, a.output, schedule_name=name, cost=cost, sim=sim, **opts)
    res = {"output": str(path), "bytes": Path(path).stat().st_size, "ops": len(order),
           "device": cost.device.name, "simulated_peak_bytes": sim.peak,
           "simulated_latency_seconds": sim.latency}
    print(json.dumps(res) if a.json else f"wrote {path} ({res['bytes']} bytes, {len(order)} ops)")
    return res


def transform_options() -> dict[str, Any]:
    """``magis transform``'s options: option flag -> the rule that declares it (``Rule.option``)."""
    from core.transform.registry import RULES

    return {r.option.flag: r for r in RULES.values() if r.option is not None}


class _Step(argparse.Action):
    """Collects rule options in command-line order (``--remat a:b --swap c:d`` applies remat first)."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = list(getattr(namespace, "steps", None) or [])
        steps.append((transform_options()[option_string].name, values))
        namespace.steps = steps


def cmd_transform(a: argparse.Namespace) -> dict[str, Any]:
    """``magis transform``: apply rules by hand (node names from ``magis info`` / the app) and write
    the transformed graph; peak and latency before and after, traced order with placed copies."""
    from core.schedule import get_scheduler
    from core.simulate import simulate
    from core.transform.manual import apply_by_names
    from core.transform.registry import get_rule

    if not a.steps:
        raise ValueError(f"nothing to apply: give {', '.join(transform_options())}")
    g = load_graph(a.file)
    before = simulate(g, get_scheduler("traced").run(g).order)
    ftree = None
    if any(get_rule(rule).needs_ftree for rule, _ in a.steps):
        from core.analysis.ftree import build_ftree

        ftree = build_ftree(g)  # node ids refer to the F-Tree of the input graph (`magis ftree`)
    done = []
    for rule, value in a.steps:
        where = None
        if get_rule(rule).needs_schedule:  # e.g. the readers after the peak of the traced order as it stands
            from core.transform.rule import Where

            order = get_scheduler("traced").run(g).order
            where = Where({v: i for i, v in enumerate(order)}, tuple(simulate(g, order).memory.peak_steps))
        app, desc = apply_by_names(g, rule, value, ftree, where)
        done.append({"rule": rule, "spec": value, "application": str(app), "change": desc})
        if not a.json:
            print(f"{rule} {value}: {desc}", file=sys.stderr)
    g.lint()
    g.meta["transforms"] = list(g.meta.get("transforms", [])) + [f"{d['rule']} {d['spec']}" for d in done]
    after = simulate(g, get_scheduler("traced").run(g).order)
    io.save(g, a.output)
    res = {"output": str(a.output), "applied": done, "nodes": len(g),
           "peak_bytes": [before.peak, after.peak], "latency_seconds": [before.latency, after.latency],
           "host_peak_bytes": after.memory.host_peak, "compute_wait_seconds": after.compute_wait}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"wrote {a.output}: {plural(len(done), 'rule application')}, {len(g)} nodes")
        print(f"  peak     {format_bytes(before.peak)} -> {format_bytes(after.peak)}  (traced order)")
        print(f"  latency  {before.latency * 1e3:.3f} ms -> {after.latency * 1e3:.3f} ms"
              f"  (compute waits {after.compute_wait * 1e3:.3f} ms for loads)")
        if after.memory.host_peak:
            print(f"  host     {format_bytes(after.memory.host_peak)} swapped out at most")
    return res


def cmd_ftree(a: argparse.Namespace) -> dict[str, Any]:
    """``magis ftree``: the F-Tree of a graph (MAGIS Algorithm 1) -- the fission candidates."""
    from core.analysis.ftree import build_ftree

    g = load_graph(a.file)
    ft = build_ftree(g, levels=a.levels)
    rows = [{"id": f.id, "parent": f.parent, "dimension": ft.dgraph.describe(f.split.comp),
             "ops": len(f.split.nodes), "heat_bytes": f.heat, "score": f.score, "level": f.level, "n": f.n,
             "length": f.split.length, "divisors": f.split.divisors()[:8],
             "outputs": [f"{c[0]} {c[1]}" if c[1] is not None else c[0] for c in f.split.combine],
             "first_op": g[f.split.nodes[0]].name} for f in ft.nodes]
    res = {"graph": g.name, "nodes": rows, "rejected": ft.rejected}
    if a.json:
        print(json.dumps(res, indent=1))
        return res
    print(f"{g.name}: F-Tree of {len(rows)} candidates ({ft.rejected} picked sub-graphs were not valid "
          f"splits); enable one with `magis transform FILE --enable ID[:N] -o OUT`")
    print(f"{'id':>4} {'parent':>6} {'ops':>5} {'heat':>11} {'score':>11} {'lvl':>3} {'len':>5}  dimension / first op")
    for r in rows:
        parent = "-" if r["parent"] is None else str(r["parent"])
        print(f"{r['id']:>4} {parent:>6} {r['ops']:>5} {format_bytes(r['heat_bytes']):>11} "
              f"{format_bytes(max(0, int(r['score']))):>11} {r['level']:>3} {r['length']:>5}  "
              f"{r['dimension']} / {r['first_op']}")
    return res


def _model_graph(spec: str, fix_random_reads: bool = False):
    """The imported graph of a model spec, the graph a plan of it was made for: a sample's committed
    graph, or a ``file.py:factory`` captured as ``magis import`` captures it (training step)."""
    if spec in sample_graphs.NAMES:
        return load_graph(spec)
    with Progress() as progress:
        progress(f"importing {spec} (training step, as `magis import` does) to replay the plan on")
        return capture_spec(spec, progress=progress, fix_random_reads=fix_random_reads)


def cmd_verify(a: argparse.Namespace) -> dict[str, Any]:
    """``magis verify``: eager PyTorch vs the exported script of a model spec (or of a graph file
    of it, or of a plan for it)."""
    if a.device is not None:
        _cost(a)  # an unknown --device is refused before any work
    for flag, v in (("--rtol", a.rtol), ("--atol", a.atol)):
        if v is not None and not 0.0 <= v < float("inf"):
            raise ValueError(f"{flag} {v}: a tolerance is a number at least 0")
    graph = load_graph(a.graph) if a.graph else None
    kwargs: dict[str, Any] = {}
    plan_device = None
    if a.plan is not None:
        from core.search.plan import PlanError

        base = graph if graph is not None else _model_graph(a.spec, a.fix_random_reads)
        try:
            graph, plan, plan_device = _plan_graph(base, a.plan, a.point)
        except PlanError as e:
            hint = ("; for a plan of another capture (--forward, --sgd) pass its graph file with --graph"
                    if a.graph is None and a.spec not in sample_graphs.NAMES else "")
            raise ValueError(f"{e}{hint}") from None
        kwargs = {"order": plan.order, "schedule": f"plan {plan.method}"}
    kwargs["cost"] = _cost(a, plan_device)
    if a.fix_random_reads and graph is None:
        kwargs["fix_random_reads"] = True  # a graph file says itself which draws it fixed
    kwargs.update({k: v for k, v in (("rtol", a.rtol), ("atol", a.atol)) if v is not None})
    res = verify_spec(a.spec, **({"schedule": a.schedule} | kwargs), seed=a.seed, graph=graph)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print("\n".join(verify_lines(res)))
    if not res["ok"]:
        from core.codegen.verify import problems

        raise CheckFailed("; ".join(problems(res, exact_steps=False)) or "the script differs from eager PyTorch")
    return res


def verify_lines(res: dict[str, Any]) -> list[str]:
    """``magis verify``'s summary of a verification report (``core.codegen.verify.verify_graph``):
    the verdict, the largest errors against eager PyTorch, and the measured vs simulated peak."""
    from core.codegen.verify import PEAK_TOL

    t = terminal_safe
    ok = bool(res["ok"])
    lines = [f"{'ok' if ok else 'FAILED'}: {t(res['name'])}, schedule {t(res['schedule'])} ({res['ops']} ops, "
             f"{res.get('dtype', 'float32')}, seed {res['seed']}): the exported script "
             f"{'reproduces' if ok else 'does not reproduce'} eager PyTorch"]
    what = res.get("what") or ("the loss and every gradient" if "loss" in res else "every output")
    if res["compared"]:
        def worst(kind: str) -> str:  # the error and the tensor that has it (none when it is 0)
            err = res[f"max_{kind}_error"]
            return f"{err:.3g}" + (f" ({t(res[f'worst_{kind}_tensor'])})" if err else "")

        lines.append(f"  outputs  {res['compared']} tensors ({what}): max abs error {worst('abs')}, max rel error "
                     f"{worst('rel')}; tolerance rtol {res['rtol']:g} of each tensor's scale, atol {res['atol']:g}"
                     + ("" if res["allclose"] else " -- outside it"))
    else:
        lines.append("  outputs  none compared")
    drawn = res.get("not_bit_comparable")
    if drawn:  # a micro-batching plan whose dropout draws per part (``codegen.emit.per_part_draws``)
        more = ", ..." if len(drawn["random_ops"]) > 3 else ""
        lines.append(f"  random   {len(drawn['outputs'])} outputs not compared value by value: {drawn['why']} "
                     f"({', '.join(t(o) for o in drawn['random_ops'][:3])}{more}); shape, dtype and finiteness "
                     + ("as eager's" if not drawn["malformed"] else f"differ: {', '.join(map(t, drawn['malformed'][:3]))}"))
    ratio = res["peak_ratio"]
    lines.append(f"  peak     {format_bytes(res['measured_peak_bytes'])} measured (CPU run), "
                 f"{format_bytes(res['simulated_peak_bytes'])} simulated ({res['simulated_device']} profile): "
                 f"ratio {ratio:.4f}" + ("" if abs(ratio - 1.0) <= PEAK_TOL else f" -- off by more than {PEAK_TOL:g}"))
    return lines


def cmd_optimize(a: argparse.Namespace) -> dict[str, Any]:
    """``magis optimize``: the M-Optimizer's search; progress on stderr, Ctrl-C keeps the best found."""
    import signal

    from core.analysis.lifetimes import resident_floor
    from core.cost.choice import make_cost
    from core.search.limits import MemoryLimit
    from core.search.moptimizer import optimize
    from core.search.plan import save_plans
    from core.summary import floor_note

    device = _cost_device(a.cost, a.device)  # an unknown --cost or --device is refused before any work
    memory = None
    if a.memory_limit is not None:
        try:
            memory = MemoryLimit.parse(a.memory_limit)
        except ValueError as e:
            raise ValueError(f"--memory-limit {e}") from None
    reserved = getattr(a, "limit_kind", "live") == "reserved"
    if reserved and memory is None:
        raise ValueError("--limit-kind reserved: give --memory-limit (the limit it applies to)")
    if reserved and getattr(a, "optimize_method", "magis") != "magis":
        raise ValueError(f"--limit-kind reserved works with --method magis only, not {a.optimize_method}")
    g = load_graph(a.file)
    if a.latency_limit is not None and not a.latency_limit >= 1.0:
        raise ValueError(f"--latency-limit {a.latency_limit}: a factor of the imported latency, at least 1")
    if a.time_budget <= 0:
        raise ValueError("--time-budget must be positive")
    cancel = threading.Event()
    last = [0.0]
    started = time.perf_counter()

    def progress(r) -> None:
        now = time.perf_counter() - started
        if now - last[0] >= 1.0:
            last[0] = now
            print(f"  {now:6.1f} s  iteration {r.iteration:5d}  best {format_bytes(r.best_peak)} "
                  f"{r.best_latency * 1e3:.2f} ms  states {r.generated} ({r.deduplicated} duplicates)",
                  file=sys.stderr, flush=True)

    eager_peak: list[int] = []

    def on_stage(st) -> None:
        """One line per stage of the search as it ends: the lowest peak within +10% so far."""
        ratio = f" ({st.peak_at_10pct / eager_peak[0]:.3f}x)" if eager_peak else ""
        print(f"  {time.perf_counter() - started:6.1f} s  {st.name}: lowest peak within +10% latency "
              f"{format_bytes(st.peak_at_10pct)}{ratio}, {st.states} states", file=sys.stderr, flush=True)

    cost = make_cost(a.cost, device, graphs=[g], say=lambda m: print(m, file=sys.stderr, flush=True))
    if getattr(a, "optimize_method", "magis") != "magis":
        return _optimize_with(a, g, cost, device, memory)
    old = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        print(f"optimizing {g.name} ({len(g)} nodes) for {a.time_budget:g} s on {device} ({a.cost} cost) "
              f"(Ctrl-C stops and keeps the best found)", file=sys.stderr, flush=True)
        with optimizer_errors("the M-Optimizer"):
            # a reserved-bytes limit: the frontier is searched on live bytes, then filtered by the
            # predicted reserved peak of each of its points (``_select_reserved``)
            pf = optimize(g, memory_limit=None if reserved else memory, latency_limit=a.latency_limit,
                          pareto=a.pareto or reserved, time_budget=a.time_budget, device=device,
                          progress=progress, cancel=cancel, cost=cost, cost_name=a.cost,
                          substitutions=a.substitutions, on_stage=on_stage,
                          on_start=lambda m: eager_peak.append(max(1, m.root.peak)))
        if hasattr(cost, "save"):
            cost.save()
    finally:
        signal.signal(signal.SIGINT, old)
    if reserved:
        _select_reserved(pf, g, memory)
    save_plans(pf, a.output, graph=g)
    base = pf.points[-1]
    res = _report_points(a, pf, f"({pf.meta['stopped']}, {pf.meta['states']} states)")
    rows = res["points"]
    if not a.json:
        floor, by_kind = resident_floor(g)
        note = floor_note(pf.points[0].peak, floor, by_kind, base.peak)
        if note:
            print(note)
    if memory is not None and reserved:
        limit = pf.meta["limit_bytes"]
        if pf.points[0].reserved_peak > limit:
            raise LimitNotReached(f"no plan reaches the reserved-memory limit {format_bytes(limit)}: the least "
                                  f"predicted reserved peak found is {format_bytes(pf.points[0].reserved_peak)}; "
                                  f"its plan is point 0 of {a.output}")
    elif memory is not None:
        limit = pf.meta["limit_bytes"]
        if pf.points[0].peak > limit:
            raise LimitNotReached(f"no plan reaches the memory limit {format_bytes(limit)}: the best peak "
                                  f"found is {format_bytes(pf.points[0].peak)} ({rows[0]['peak_ratio']:.3f}x); "
                                  f"its plan is point 0 of {a.output}")
    return res


def _select_reserved(pf, g, memory) -> None:
    """``--limit-kind reserved``: the limit applies to each point's predicted reserved peak
    (``core.analysis.allocator``).  The searched points are reordered in place: those within the limit
    first, fastest first, then the rest by reserved peak; PyTorch's eager point stays last."""
    from core.search.plan import fill_reserved_peaks

    fill_reserved_peaks(pf, g)
    eager = pf.points[-1]
    limit = memory.bytes(eager.peak)
    found = sorted(pf.points[:-1], key=lambda p: (p.reserved_peak > limit,
                                                  p.latency if p.reserved_peak <= limit else p.reserved_peak))
    pf.points = found + [eager]
    pf.meta.update({"mode": "memory", "limit": str(memory), "limit_bytes": limit, "limit_kind": "reserved"})


def _report_points(a: argparse.Namespace, pf, note: str = "") -> dict[str, Any]:
    """``magis optimize``'s result: a row per point of the written plan file (ratios against its last
    point, PyTorch's eager order), printed as JSON or as lines."""
    base = pf.points[-1]
    rows = [{"point": k, "method": p.method, "label": p.label, "peak_bytes": p.peak, "latency_seconds": p.latency,
             "peak_ratio": p.peak / base.peak if base.peak else 1.0,
             "latency_ratio": p.latency / base.latency if base.latency else 1.0,
             "reserved_peak_bytes": p.reserved_peak,
             "applications": len(p.applications), "seed": p.stats.get("seed"),
             "seed_steps": p.stats.get("seed_steps")} for k, p in enumerate(pf.points)]
    res = {"output": str(a.output), "points": rows, "meta": pf.meta}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"wrote {a.output}: {len(rows)} point(s){' ' + note if note else ''}")
        for r in rows:
            reserved = "" if r["reserved_peak_bytes"] is None else f" reserved {format_bytes(r['reserved_peak_bytes'])}"
            print(f"  [{r['point']}] {r['method']:6s} peak {format_bytes(r['peak_bytes'])} ({r['peak_ratio']:.3f}x){reserved}  "
                  f"latency {r['latency_seconds'] * 1e3:.2f} ms ({r['latency_ratio']:.3f}x)  "
                  f"{plural(r['applications'], 'rule application')}  {r['label']}"
                  + (f"  (from the seed {r['seed']}, {plural(r['seed_steps'], 'step')} of MAGIS's own after it)"
                     if r["seed"] else ""))
    return res


def _optimize_with(a: argparse.Namespace, g, cost, device: str, memory) -> dict[str, Any]:
    """``magis optimize --method NAME --memory-limit X``: another method (SwapAdvisor, say) at one
    memory limit; the plan file holds its point and PyTorch's eager order (last)."""
    from core.search.methods import get_method, run_method
    from core.search.peers.base import eager_peak
    from core.search.plan import PlanFile, save_plans
    from core.search.wl_hash import graph_hash

    name = a.optimize_method
    m = get_method(name)
    if memory is None:
        raise ValueError(f"--method {name}: give --memory-limit (only MAGIS sweeps --latency-limit and --pareto)")
    limit = memory.bytes(eager_peak(g, cost))
    print(f"optimizing {g.name} ({len(g)} nodes) with {m.label} for {a.time_budget:g} s on {device}, "
          f"memory limit {format_bytes(limit)}", file=sys.stderr, flush=True)
    with optimizer_errors(m.label):
        run = run_method(name, g, cost, time_budget=a.time_budget, memory_limit=limit,
                         progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    if not run.plans:
        raise LimitNotReached("; ".join(f.reason for f in run.failures) or f"{m.label} gave no plan")
    eager = run_method("eager", g, cost).plans
    points = sorted(run.plans, key=lambda p: (p.peak > limit, p.latency)) + eager
    pf = PlanFile(g.name, graph_hash(g), device, points, [], {"method": name, "limit_bytes": limit,
                                                           "seconds": round(run.seconds, 3)})
    save_plans(pf, a.output, graph=g)
    res = _report_points(a, pf)
    if points[0].peak > limit:
        raise LimitNotReached(f"no plan reaches the memory limit {format_bytes(limit)}: the best peak found is "
                              f"{format_bytes(points[0].peak)}; its plan is point 0 of {a.output}")
    return res


def _split(values: list[str] | None) -> list[str]:
    """Comma-separated lists, as one or more arguments: ``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def _sweep_cells(r: dict[str, Any]) -> list[str]:
    """A sweep row as the table's cells (workload, device, limit, peak, ratio, latency, ratio,
    reached, states, seconds)."""
    head = [terminal_safe(r["workload"]), r["device"], terminal_safe(r["limit"])]
    if r["error"]:
        return [*head, "error", "", "", "", "", "", f"{r['seconds']:.1f}"]
    reached = "-" if r["reached"] is None else "yes" if r["reached"] else "no"
    if r["stopped"] == "cancelled":
        reached += " (cancelled)"
    return [*head, format_bytes(r["peak_bytes"]), f"{r['peak_ratio']:.3f}x", f"{r['latency_seconds'] * 1e3:.3f} ms",
            f"{r['latency_ratio']:.3f}x", reached, str(r["states"]), f"{r['seconds']:.1f}"]


SWEEP_COLUMNS = ["workload", "device", "limit", "peak", "x eager", "latency", "x eager", "reached", "states", "s"]


def cmd_sweep(a: argparse.Namespace) -> dict[str, Any]:
    """``magis sweep``: the M-Optimizer over workloads x memory limits x devices, each run in its own
    process (or Ray task); one progress line per finished job on stderr, a table at the end; Ctrl-C
    stops submitting and keeps the finished rows."""
    import signal

    from core.cost.devices import DEFAULT_PROFILE, get_device
    from core.search.sweep import PARETO, LocalRunner, RayRunner, SweepError, parse_limit, run_sweep

    texts = list(dict.fromkeys(_split(a.memory_limits) + ([PARETO] if a.pareto else [])))
    if not texts:
        raise ValueError("give --memory-limits, --pareto or both")
    try:
        limits = [parse_limit(t) for t in texts]
    except SweepError as e:
        raise ValueError(f"--memory-limits {e}") from None
    _cost_device(a.cost, None)
    try:
        devices = [get_device(d).name for d in _split(a.devices or [DEFAULT_PROFILE if a.cost in ("analytic", "compiled")
                                                                    else _cost_device(a.cost, None)])]
        devices = [_cost_device(a.cost, d) for d in devices]
    except ValueError as e:
        raise ValueError(f"--devices: {str(e).removeprefix('--device: ')}") from None
    if not devices:
        raise ValueError("--devices: give at least one device")
    if a.time_budget <= 0:
        raise ValueError("--time-budget must be positive")
    names = list(dict.fromkeys(_split(a.workloads)))
    if not names:
        raise ValueError("give at least one workload")
    workloads = [sweep_workload(n) for n in names]
    runner = RayRunner(a.ray) if a.ray is not None else LocalRunner(a.processes)
    cancel = threading.Event()

    def interrupt(*_: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("stopping: no new jobs; the running ones keep their best so far (Ctrl-C again quits now)",
              file=sys.stderr, flush=True)

    def progress(r: dict[str, Any], done: int, total: int) -> None:
        cells = _sweep_cells(r)
        frontier = r["limit"] == PARETO
        if r["error"]:
            what = f"error: {error_line(r['error'])}"
        else:
            what = (f"{'frontier of ' + str(r['points']) + ' point(s), lowest peak' if frontier else 'peak'} "
                    f"{cells[3]} ({cells[4]})  latency {cells[5]} ({cells[6]})  "
                    f"{'' if frontier else 'reached ' + cells[7] + '  '}{r['states']} states")
        print(f"[{done:>{len(str(total))}}/{total}] {cells[0]} {cells[1]} {cells[2]}: {what}  {r['seconds']:.1f} s",
              file=sys.stderr, flush=True)

    jobs = len(workloads) * len(devices) * len(limits)
    print(f"sweeping {len(workloads)} workload(s) x {len(limits)} limit(s) x {len(devices)} device(s) = {jobs} "
          f"job(s), {a.time_budget:g} s each, {runner.describe()} (Ctrl-C stops and keeps the finished rows)",
          file=sys.stderr, flush=True)
    old = signal.signal(signal.SIGINT, interrupt)
    try:
        res = run_sweep(workloads, limits, devices, a.output, time_budget=a.time_budget, runner=runner,
                        progress=progress, cancel=cancel, cost=a.cost)
    finally:
        signal.signal(signal.SIGINT, old)
    doc = res.to_dict()
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        table = [SWEEP_COLUMNS] + [_sweep_cells(r) for r in res.rows]
        widths = [max(len(row[c]) for row in table) for c in range(len(SWEEP_COLUMNS))]
        for row in table:
            print("  ".join(cell.ljust(w) if c < 3 else cell.rjust(w)
                            for c, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        print(f"wrote {res.path} ({len(res.rows)} of {res.jobs} jobs) and the plan files next to it")
    if res.interrupted:
        raise KeyboardInterrupt
    if res.errors:
        first = res.errors[0]
        raise ValueError(f"{len(res.errors)} of {res.jobs} jobs failed ({first['workload']} {first['device']} "
                         f"{first['limit']}: {first['error']}); the rows are in {res.path}")
    short = [r for r in res.rows if r.get("reached") is False]
    if short:
        first = short[0]
        raise LimitNotReached(f"{len(short)} of {res.jobs} memory limits not reached ({first['workload']} "
                              f"{first['device']} {first['limit']}; the reached column says which); the rows "
                              f"and plan files are in {res.path}")
    return doc


def _compare_model(spec: str):
    """(graph, model builder or None) of ``magis compare``'s FILE: a graph file alone gives no model
    (the methods that trace the model again then say why they were not run); a sample or a model
    spec gives its model too, built under fake tensors."""
    from .specs import build_workload

    if Path(spec).exists():
        return load_graph(spec), None
    if spec in sample_graphs.NAMES:
        return load_graph(spec), lambda: build_workload(spec, fake=True)
    if ":" in spec and spec.rpartition(":")[0].endswith(".py"):
        with Progress() as progress:
            g = capture_spec(spec, progress=progress)
        return g, lambda: build_workload(spec, fake=True)
    return load_graph(spec), None  # names the samples for a mistyped one


def cmd_compare(a: argparse.Namespace) -> dict[str, Any]:
    """``magis compare``: MAGIS and every peer and baseline on one graph, each within the time budget;
    one plan file of every method's points (merged into an existing one of the same graph) and the
    side-by-side table."""
    from core.cost.devices import DEVICES
    from core.search.compare import compare, default_methods, failures_of, format_table, plan_file_of, rows_of
    from core.search.methods import METHODS
    from core.search.plan import PlanError, load_plans, merge_plans, save_plans
    from core.search.wl_hash import graph_hash

    methods = _split([a.methods]) if a.methods else default_methods()
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    if a.device not in DEVICES:
        raise ValueError(f"unknown device {a.device!r}; known: {_names(DEVICES)}")
    _cost_device(a.cost, a.device)
    if not a.time_budget > 0:
        raise ValueError("--time-budget must be positive")
    g, model = _compare_model(a.file)
    old = None
    if a.output.exists():
        old = load_plans(a.output)
        if old.graph_hash != graph_hash(g):
            raise PlanError(f"{a.output} holds plans of graph {old.graph_name!r}, not of {g.name!r} (the graphs "
                            f"differ); write to another file")
        if old.device != a.device:
            raise PlanError(f"{a.output} was made for device {old.device!r}, not {a.device!r}; write to another "
                            f"file or pass --device {old.device}")
        if old.meta.get("cost", "analytic") != a.cost:
            raise PlanError(f"{a.output} holds latencies of the {old.meta.get('cost', 'analytic')} cost model, not "
                            f"of {a.cost}; write to another file")
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    say(f"comparing {len(methods)} methods on {g.name} ({len(g)} nodes), {a.time_budget:g} s each, on {a.device} "
        f"({a.cost} cost model)"
        + (f"; merging into {a.output} ({len(old.points)} points)" if old else ""))
    with optimizer_errors("magis compare"):
        w = compare(g, device=a.device, methods=methods, time_budget=a.time_budget, model=model, progress=say,
                    cost=a.cost)
    pf = plan_file_of(w, g)
    if old is not None:
        pf = merge_plans(old, pf)
    save_plans(pf, a.output)
    say(f"wrote {a.output}: {len(pf.points)} points" + (" (merged with the points already there)" if old else ""))
    rows, failures = rows_of(w), failures_of(w)
    res = {"graph": g.name, "nodes": len(g), "device": a.device, "cost": a.cost, "time_budget": a.time_budget,
           "eager": w["eager"], "bound": w["bound"], "rows": rows, "failures": failures, "output": str(a.output),
           "points": len(pf.points), "merged": old is not None}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"{a.device}, {a.cost} cost model; each method {a.time_budget:g} s; ratios against PyTorch eager of "
              f"the same run")
        print(format_table(rows, failures))
    return res


class FitsWithPlan(Outcome):
    """``magis fit``: eager's step does not fit the memory, a method's plan does (exit status 4)."""

    status = EXIT_FITS_WITH_PLAN
    label = "fits with a plan"


class DoesNotFit(Outcome):
    """``magis fit``: neither eager's step nor any method's plan fits the memory (exit status 1)."""

    status = EXIT_FAILED
    label = "does not fit"


def cmd_fit(a: argparse.Namespace) -> dict[str, Any]:
    """``magis fit``: does the training step fit the card (``core.fit``)?  Eager's breakdown and
    verdict; when it does not fit, every method's fastest plan that does (``app.fit_cmd``)."""
    from core.cost.devices import DEVICES
    from core.fit import fit
    from core.search.compare import plan_file_of
    from core.search.methods import METHODS
    from core.search.plan import save_plans

    from .fit_cmd import fit_graph, fit_json, fit_lines, next_commands, parse_memory, point_of

    if a.device not in DEVICES:
        raise ValueError(f"--device: unknown device {a.device!r}; known: {_names(DEVICES)}")
    memory = parse_memory(a.memory) if a.memory is not None else None
    methods = _split([a.methods]) if a.methods else None
    unknown = [m for m in methods or [] if m not in METHODS]
    if unknown:
        raise ValueError(f"--methods: unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    if not a.time_budget > 0:
        raise ValueError("--time-budget must be positive")
    with Progress() as progress:
        inp = fit_graph(a.spec, a.adam, a.sgd, progress)
        with optimizer_errors("magis fit"):
            res = fit(inp.graph, a.device, memory, methods=methods, time_budget=a.time_budget, progress=progress)
    points: dict[str, int] = {}
    if a.output is not None and res.compared is not None:
        pf = plan_file_of(res.compared, inp.graph)
        save_plans(pf, a.output)
        points = point_of(res, pf.points)
        progress(f"wrote {a.output}: {len(pf.points)} points")
    memory_from = "--memory" if memory is not None else "the device's memory"
    commands = next_commands(res, inp, a.output if points else None, points, a.time_budget)
    out = fit_json(res, commands, a.output if points else None, points, memory_from)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print("\n".join(fit_lines(res, commands, memory_from)))
    status = res.report["status"]
    if status == "fits_with_plan":
        best = res.report["plans"][0]
        raise FitsWithPlan(f"eager's step does not fit {format_bytes(res.report['memory_bytes'])}; "
                           f"{best['label']}'s plan does, at a predicted {100 * best['overhead']:+.1f}% latency")
    if status == "does_not_fit":
        raise DoesNotFit(f"neither eager's step nor any plan found fits {format_bytes(res.report['memory_bytes'])}")
    return out


def cmd_app(a: argparse.Namespace) -> None:
    """``magis app``: serve the web app (imported here: the other commands never load Dash)."""
    from .main import serve

    serve(graph_file=a.file, sample=a.sample, host=a.host, port=a.port, debug=a.debug)


def _names(names: Any) -> str:
    return ", ".join(sorted(names))


def _cost_option(s: argparse.ArgumentParser) -> None:
    """--cost of optimize and sweep: the cost model's name (``core.cost.choice.COST_MODELS``)."""
    from core.cost.choice import COST_MODELS, DEFAULT_COST

    s.add_argument("--cost", default=DEFAULT_COST, metavar="NAME",
                   help="latency model: " + "; ".join(f"{k}: {v}" for k, v in COST_MODELS.items())
                        + " (default: %(default)s; recorded in the plan file)")


def _plan_options(s: argparse.ArgumentParser, what: str) -> None:
    """--plan, --point and --device (which defaults to the plan file's device) of export and verify."""
    from core.cost.devices import DEFAULT_PROFILE, DEVICES

    s.add_argument("--plan", type=Path, default=None, metavar="PLAN", help=what)
    s.add_argument("--point", type=int, default=None, metavar="K", help="which point of the plan file (default: 0)")
    s.add_argument("--device", default=None, metavar="NAME",
                   help=f"device profile of the simulation that places the script's releases of swapped "
                        f"tensors and gives its simulated peak and latency: {_names(DEVICES)}. Default: the "
                        f"device the --plan file was made for, else {DEFAULT_PROFILE}; --device wins over the "
                        f"plan file's")


def _substitution_graph(spec: str):
    """A graph file, a forward sample (``FORWARD_NAMES``), a NAS network of the HMCOS evaluation
    (its inference graph) or a training sample."""
    if not Path(spec).exists():
        if spec in sample_graphs.FORWARD_NAMES:
            from sample_graphs.store import load_sample_graph

            return load_sample_graph(spec, "forward")
        from sample_graphs.nas import NAS_NAMES, nas_graph

        if spec in NAS_NAMES:
            return nas_graph(spec).copy()
    return load_graph(spec)


def cmd_substitute(a: argparse.Namespace) -> dict[str, Any]:
    """``magis substitute``: the best sequence of at most K graph substitutions (TASO's rules) found
    by an OCGGS search, applied; the graph written to ``-o`` with the substitutions in
    ``meta.transforms``."""
    from core.schedule import get_scheduler
    from core.search import ocggs
    from core.simulate import simulate

    ocggs.check_options(a.subst_method, a.max_steps, a.time_budget)
    rules = [r.strip() for r in a.rules.split(",") if r.strip()] if a.rules else None
    ocggs.search_rules(rules)  # unknown names refused before any work
    cost = _cost(a)
    g = _substitution_graph(a.file)
    if not a.json:
        print(f"{g.name}: {len(g)} nodes; searching ({a.subst_method}, K = {a.max_steps}, "
              f"{a.time_budget:g} s budget)", file=sys.stderr, flush=True)
    res, h = ocggs.substitute(g, a.subst_method, max_steps=a.max_steps, time_budget=a.time_budget, rules=rules, cost=cost)
    before = simulate(g, get_scheduler("traced").run(g).order, cost)
    after = simulate(h, get_scheduler("traced").run(h).order, cost)
    io.save(h, a.output)
    out = {"output": str(a.output), "graph": g.name, "device": cost.device.name, "method": a.subst_method,
           "rules": rules or sorted(ocggs.search_rules()), **res.summary(),
           "latency_ms": [before.latency * 1e3, after.latency * 1e3], "peak_bytes": [int(before.peak), int(after.peak)],
           "nodes": [len(g), len(h)], "fold_weights": g.meta.get("mode") == "forward", "sequence": res.trace}
    if a.json:
        print(json.dumps(out, indent=1))
        return out
    t = terminal_safe
    if not res.sequence:
        print(f"no sequence of at most {a.max_steps} substitutions lowers the cost of {t(g.name)} "
              f"({res.states} graphs evaluated, {res.matches} matches, {res.seconds:.1f} s"
              f"{'' if res.complete else ', stopped by the time budget'}); wrote it unchanged to {t(a.output)}")
        return out
    for k, s in enumerate(res.trace, 1):
        print(f"{k:>3}. {t(s['rule'])} ({s['kind']}): {t(', '.join(s['replaced']))} -> {len(s['created'])} ops, "
              f"cost {s['cost_ms']:.4f} ms, peak {format_bytes(s['peak_bytes'])}")
    fold = " (weight-only ops folded, as at inference)" if out["fold_weights"] else ""
    print(f"wrote {t(a.output)}: {plural(len(res.sequence), 'substitution')}, {len(g)} -> {len(h)} nodes")
    print(f"  cost     {res.cost_before * 1e3:.4f} ms -> {res.cost_after * 1e3:.4f} ms{fold}, "
          f"{res.speedup:.3f}x (analytic model, {cost.device.name})")
    print(f"  peak     {format_bytes(before.peak)} -> {format_bytes(after.peak)}  (traced order)")
    print(f"  search   {res.states} graphs, {res.matches} matches, {res.seconds:.1f} s"
          f"{'' if res.complete else ' (stopped by the time budget: the best found so far)'}")
    return out


def cmd_fuse(a: argparse.Namespace) -> dict[str, Any]:
    """``magis fuse``: a layer-fusion plan under an on-chip buffer (``core.search.fusion``), written to
    ``-o`` and printed as a summary or JSON."""
    from core.fmt import parse_bytes
    from core.search.fusion import fuse

    if not Path(a.file).exists() and a.file in sample_graphs.FORWARD_NAMES:
        from sample_graphs.store import load_sample_graph

        g = load_sample_graph(a.file, "forward")
    else:
        g = load_graph(a.file)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    plan = fuse(g, parse_bytes(a.buffer), a.scheme, a.search, a.explainer, a.plans, seed=a.seed,
                second=a.objective, strict=a.strict, progress=None if a.json else say)
    res = plan.to_json()
    tmp = a.output.with_name(f".{a.output.name}.tmp")
    try:
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, a.output)
    finally:
        tmp.unlink(missing_ok=True)
    if a.json:
        shown = {k: v for k, v in res.items() if k not in ("groups", "split_steps")}  # both are in the file
        print(json.dumps(shown | {"output": str(a.output)}, indent=1))
    else:
        for line in plan.summary().splitlines():
            print(terminal_safe(line))
        print(f"wrote {terminal_safe(a.output)}")
    return res


def build_parser() -> argparse.ArgumentParser:
    """The ``magis`` argument parser; each sub-command sets ``fn`` to its ``cmd_*`` function.  The
    valid names of ``--device``, ``--method`` and ``--schedule`` come from their registries."""
    from core.cost.devices import DEFAULT_PROFILE, DEVICES
    from core.schedule.registry import SCHEDULERS
    from core.search import fusion
    from core.search.methods import METHODS

    devices = f"device profile for the latency estimate: {_names(DEVICES)} (default: %(default)s)"
    schedules = _names(SCHEDULERS)
    timed = [n for n, cls in SCHEDULERS.items() if "time_budget" in inspect.signature(cls).parameters]
    p = argparse.ArgumentParser(prog="magis", description="MAGIS Studio: memory optimizer for PyTorch graphs")
    p.add_argument("--verbose", action="store_true",
                   help="on an error, also print its traceback and what torch logged (before or after COMMAND)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("import", help="capture a PyTorch model as a graph file",
                       description="Capture a model's training step (or forward pass) on fake tensors "
                                   "and write its graph file; progress goes to stderr, the summary to stdout.")
    s.add_argument("spec", metavar="SPEC",
                   help="a sample name or path/to/file.py:factory (factory() returns an object with "
                        "module, inputs and loss_fn; see the README)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="FILE",
                   help="graph file to write (.json, or .json.gz to compress)")
    s.add_argument("--forward", action="store_true", help="forward pass only (default: training step)")
    s.add_argument("--sgd", type=float, default=None, metavar="LR",
                   help="append a plain SGD update of every weight with learning rate LR")
    s.add_argument("--adam", type=float, default=None, metavar="LR",
                   help="append torch.optim.Adam's first update (learning rate LR, default betas and eps); "
                        "its two moments per weight are inputs and outputs of the graph, resident like the weights")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("--target", default="cpu", choices=("cpu", "cuda"),
                   help="the torch device the plan will run on: cuda rewrites each attention call into the "
                        "fused kernel a CUDA run picks (flash / memory-efficient / math) with its real saved "
                        "tensors; cpu (default) keeps the graph as captured")
    s.add_argument("--fix-random-reads", action="store_true",
                   help="a random draw the model branches on in Python (layer drop: `torch.rand([]) < "
                        "config.layerdrop`) is fixed at 1.0 -- no layer dropped -- instead of failing; "
                        "the graph records which draws")
    s.add_argument("--max-nodes", type=int, default=None, metavar="N",
                   help="refuse, while tracing, a model file whose graph would have more than N nodes (default: "
                        "the capture's bound, sized to the 32 MiB a graph file holds; a recurrent scan unrolled "
                        "over every token passes it quickly)")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    s.set_defaults(fn=cmd_import)

    s = sub.add_parser("info", help="summary of a graph file")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("--top", type=int, default=5, metavar="N", help="hot-spots to list (default: %(default)s)")
    s.add_argument("--measured", action="store_true",
                   help="latency from timing each op on this machine (CPU or CUDA), cached on disk")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("schedule", help="run a scheduler on a graph file")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--method", default="traced", metavar="NAME",
                   help=f"scheduler: {schedules} (default: %(default)s)")
    s.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help=f"time limit of the schedulers that take one: {_names(timed)}")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("export", help="write a runnable PyTorch script for a graph + schedule")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    s.add_argument("--schedule", default="traced", metavar="NAME",
                   help=f"order of the ops in the script: {schedules} (default: %(default)s)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="SCRIPT", help="the .py file to write")
    _plan_options(s, "export a plan (from `magis optimize`) of FILE instead of a schedule")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("optimize", help="search plans that trade memory for latency (the M-Optimizer)",
                       description="MAGIS's best-first search over F-Tree mutations, rematerialization and "
                                   "swapping, each state rescheduled incrementally; writes a plan file "
                                   "(point 0: the answer; the last point: PyTorch's eager order).")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (its committed graph)")
    lim = s.add_mutually_exclusive_group(required=True)
    lim.add_argument("--memory-limit", metavar="SIZE|FRACTION",
                     help="least latency with a peak at most SIZE (with a unit: 8GiB, 512MiB, 4096B) or "
                          "FRACTION (0 < FRACTION <= 1) of the imported peak; a bare number above 1 is "
                          "refused")
    lim.add_argument("--latency-limit", type=float, metavar="FACTOR",
                     help="least memory with a latency at most FACTOR times the imported one (e.g. 1.1)")
    lim.add_argument("--pareto", action="store_true", help="the memory/latency frontier (a sweep of memory limits)")
    s.add_argument("--limit-kind", choices=("live", "reserved"), default="live",
                   help="what --memory-limit bounds: live tensor bytes (default), or the reserved memory predicted "
                        "for PyTorch's CUDA caching allocator (rounding, pools, segments, fragmentation); with "
                        "reserved, the search sweeps the live-bytes frontier and then offers the points whose "
                        "predicted reserved peak is within the limit (a filter at the end of the search)")
    s.add_argument("--time-budget", type=float, default=60.0, metavar="SECONDS",
                   help="search time (default: %(default)s); the best found so far is kept")
    s.add_argument("--device", default=None, metavar="NAME",
                   help=f"device profile for the latency estimate: {_names(DEVICES)} (default: {DEFAULT_PROFILE}; "
                        f"with --cost calibrated or measured, this machine's profile: cpu without a GPU)")
    s.add_argument("--substitutions", action="store_true",
                   help="TASO's substitution rules (merge matmuls / convolutions sharing an input, ...) among "
                        "the search's rules")
    _cost_option(s)
    s.add_argument("--method", dest="optimize_method", default="magis", metavar="NAME",
                   help=f"the method: {_names(METHODS)} (default: magis; another one with --memory-limit, "
                        f"e.g. swapadvisor)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="PLAN",
                   help="plan file to write (.json, or .json.gz to compress)")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_optimize)

    s = sub.add_parser("sweep", help="optimize many workloads x memory limits x devices in parallel",
                       description="One `magis optimize` run per workload, memory limit and device, each in "
                                   "its own process (or a task on a Ray cluster). Writes one plan file per job "
                                   "(DIR/WORKLOAD.DEVICE.LIMIT.plan.json.gz) and DIR/sweep.json (the parameters "
                                   "and a row per finished job); progress goes to stderr, a table to stdout. "
                                   "Ctrl-C stops submitting jobs and keeps the finished rows.")
    s.add_argument("workloads", nargs="+", metavar="WORKLOAD[,WORKLOAD...]",
                   help="graph files or sample names (their committed graphs), comma-separated or as "
                        "separate arguments")
    s.add_argument("--memory-limits", action="append", metavar="LIMIT[,LIMIT...]",
                   help="memory limits: a SIZE with a unit (8GiB, 512MiB, 4096B) or a FRACTION "
                        "(0 < FRACTION <= 1) of each graph's own eager peak, or `pareto` for a frontier run "
                        "(repeatable)")
    s.add_argument("--pareto", action="store_true", help="also a frontier run per workload and device")
    s.add_argument("--devices", action="append", metavar="NAME[,NAME...]",
                   help=f"device profiles for the latency estimate: {_names(DEVICES)} (default: {DEFAULT_PROFILE})")
    _cost_option(s)
    s.add_argument("--time-budget", type=float, default=60.0, metavar="SECONDS",
                   help="search time of each job (default: %(default)s)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--processes", type=int, default=None, metavar="N",
                       help=f"jobs at a time on this machine (default: one per CPU, {os.cpu_count()} here)")
    where.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="run the jobs on the Ray cluster at ADDRESS (auto, HOST:PORT or ray://HOST:10001; "
                            "`local` starts a local instance); needs pip install 'magis-studio[ray]' here and "
                            "magis-studio on the cluster")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="DIR",
                   help="directory for the plan files and sweep.json")
    s.add_argument("--json", action="store_true", help="print sweep.json's content instead of the table")
    s.set_defaults(fn=cmd_sweep)

    s = sub.add_parser("compare", help="MAGIS, the peers and the baselines side by side on one graph",
                       description="Run each method within the time budget on one graph, write one plan file of "
                                   "every method's points (PyTorch's eager order last; into an existing plan "
                                   "file of the same graph, merged: each method's dominated points drop out) "
                                   "and print the table of bench/pareto.py; a method that gives no point says "
                                   "why under it. Progress goes to stderr.")
    s.add_argument("file", metavar="FILE",
                   help="a graph file, a sample name, or path/to/file.py:factory (a sample or a model file "
                        "also gives the model to the methods that trace it again: torch's min-cut)")
    s.add_argument("--methods", default=None, metavar="M1,M2,...",
                   help="methods to run (default: magis and every peer and baseline; the schedulers when "
                        f"named): {', '.join(METHODS)}")
    s.add_argument("--time-budget", type=float, default=60.0, metavar="SECONDS",
                   help="seconds for each method, MAGIS's search included (default: %(default)s)")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("-o", "--output", required=True, type=Path, metavar="PLAN",
                   help="plan file to write (.json, or .json.gz to compress); an existing one of the same "
                        "graph is merged into")
    _cost_option(s)
    s.add_argument("--json", action="store_true", help="print the table's rows and the failures as JSON")
    s.set_defaults(fn=cmd_compare)

    s = sub.add_parser("fit", help="does the training step fit the card? eager's breakdown, then the plans that fit",
                       description="Simulate PyTorch's eager order of the training step on a device profile: "
                                   "weights, gradients, optimizer state and activations at its peak, the "
                                   "resident floor and the verdict against the card's memory (on a GPU profile "
                                   "judged on the CUDA caching allocator's predicted reserved bytes). When eager "
                                   "does not fit, run the methods and show each one's fastest plan that fits. "
                                   "Every figure is a prediction of the cost model and the simulator. Exit "
                                   "status: 0 fits eagerly; 4 fits only with a plan; 1 nothing fits (the bound "
                                   "that explains it is printed); 2 bad input.")
    s.add_argument("spec", metavar="SPEC",
                   help="a graph file, a sample name or path/to/file.py:factory (as `magis import` takes it)")
    s.add_argument("--device", required=True, metavar="NAME",
                   help=f"device profile whose memory and speed are judged: {_names(DEVICES)}")
    s.add_argument("--memory", default=None, metavar="SIZE",
                   help="the memory to fit in, in place of the device's (with a unit: 24GiB, 512MiB, 4096B)")
    opt = s.add_mutually_exclusive_group()
    opt.add_argument("--adam", type=float, default=None, metavar="LR",
                     help="capture the step with torch.optim.Adam's update (its two moments per weight resident)")
    opt.add_argument("--sgd", type=float, default=None, metavar="LR",
                     help="capture the step with a plain SGD update of every weight")
    s.add_argument("--methods", default=None, metavar="M1,M2,...",
                   help=f"methods to try when eager does not fit (default: magis and every peer and baseline): "
                        f"{', '.join(METHODS)}")
    s.add_argument("--time-budget", type=float, default=30.0, metavar="SECONDS",
                   help="seconds for each method (default: %(default)s)")
    s.add_argument("-o", "--output", type=Path, default=None, metavar="PLAN",
                   help="write the methods' plans to this plan file (for `magis export FILE --plan PLAN --point K`)")
    s.add_argument("--json", action="store_true", help="print the report as one JSON object")
    s.set_defaults(fn=cmd_fit)

    s = sub.add_parser("ftree", help="the F-Tree of a graph: its fission candidates (MAGIS Algorithm 1)")
    s.add_argument("file", help="graph file or sample name")
    s.add_argument("--levels", type=int, default=4, metavar="L", help="score levels L (default: %(default)s)")
    s.add_argument("--json", action="store_true", help="print the tree as JSON")
    s.set_defaults(fn=cmd_ftree)

    s = sub.add_parser("transform", help="apply rules by hand (fission, rematerialization, swapping) to a graph file",
                       description="Apply rule applications in command-line order and write the new graph. "
                                   "TENSOR is a node name (NAME#J for output J of a multi-output op), USER a "
                                   "node reading it; node names as `magis info` and the app show them.")
    s.add_argument("file", help="graph file or sample name")
    for flag, rule in transform_options().items():
        s.add_argument(flag, action=_Step, dest="steps", metavar=rule.option.metavar, default=[],
                       help=f"{rule.option.help} (repeatable)")
    s.add_argument("-o", "--output", required=True, type=Path, help="the transformed graph file")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(fn=cmd_transform)

    s = sub.add_parser("verify", help="compare eager PyTorch with the exported script",
                       description="Run the model eagerly and its exported script on the same weights and "
                                   "inputs (on the CPU): loss and every gradient, and the measured vs the "
                                   "simulated peak.")
    s.add_argument("spec", metavar="SPEC", help="a sample name or path/to/file.py:factory")
    s.add_argument("--schedule", default="traced", metavar="NAME",
                   help=f"order of the ops in the script: {schedules}, or random:SEED for a seeded "
                        f"random topological order (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed for the weights and inputs (default: %(default)s)")
    s.add_argument("--graph", default=None, metavar="FILE",
                   help="verify this graph file of the model (e.g. from `magis transform`) instead of a "
                        "fresh capture")
    s.add_argument("--rtol", type=float, default=None, metavar="R",
                   help="relative tolerance, a share of each tensor's largest magnitude (default: torch.testing's "
                        "for the tensor's dtype, 1.3e-6 for float32); 1.6e-2 (bfloat16's) for a step computed "
                        "under bf16 autocast, whose float32 gradients carry bfloat16 rounding")
    s.add_argument("--atol", type=float, default=None, metavar="A",
                   help="absolute tolerance (default: torch.testing's for the tensor's dtype, 1e-5 for float32)")
    _plan_options(s, "verify a plan (from `magis optimize`) of the model's graph (a sample's graph, or a "
                     "model file's training step captured as `magis import` does; or --graph)")
    s.add_argument("--fix-random-reads", action="store_true",
                   help="a random draw the model branches on in Python (layer drop: `torch.rand([]) < "
                        "config.layerdrop`) is fixed at 1.0 -- no layer dropped -- instead of failing; "
                        "the eager run fixes the same draws (a --graph file records its own)")
    s.add_argument("--json", action="store_true", help="print the full report as JSON instead of the summary")
    s.set_defaults(fn=cmd_verify)

    s = sub.add_parser("substitute", help="graph substitutions (TASO's rules) chosen by an OCGGS search",
                       description="Find the sequence of at most K graph substitutions (merge matmuls / convs "
                                   "sharing an input, enlarge a kernel, fold batch norm, algebraic identities) "
                                   "that lowers the graph's predicted latency most, apply it and write the graph. "
                                   "On a forward graph, ops that read only weights are folded (as at inference).")
    s.add_argument("file", metavar="FILE", help="a graph file, or a sample name (training samples, forward "
                                                f"samples: {', '.join(sample_graphs.FORWARD_NAMES)}; NAS networks)")
    s.add_argument("--method", dest="subst_method", default="sampling", metavar="NAME",
                   help="search: sampling, dpp, pruning, taso, metaflow, enu, greedy (default: %(default)s)")
    s.add_argument("--max-steps", type=int, default=10, metavar="K",
                   help="at most K substitutions, 1 to 100 (default: %(default)s)")
    s.add_argument("--time-budget", type=float, default=60.0, metavar="S",
                   help="seconds of search; the best sequence found so far when it runs out (default: %(default)s)")
    s.add_argument("--rules", default=None, metavar="A,B",
                   help="substitution rules to search with (default: every rule but add_comm and mul_comm)")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("-o", "--output", required=True, type=Path, metavar="OUT", help="the rewritten graph file")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(fn=cmd_substitute)

    s = sub.add_parser("fuse", help="layer fusion under an on-chip buffer, splits guided by graph explanations (GET)",
                       description="Partition an inference graph into fusion groups whose on-chip need fits "
                                   "the buffer, least DRAM traffic; invalid groups are split where an explainer "
                                   "of a GNN validity classifier points (GET). Writes the plan as JSON.")
    s.add_argument("file", metavar="FILE", help="a graph file (a forward graph: `magis import X --forward`), or "
                                                f"a sample name ({', '.join(sample_graphs.FORWARD_NAMES)})")
    s.add_argument("--buffer", required=True, metavar="SIZE", help="on-chip buffer, e.g. 256KiB")
    s.add_argument("--scheme", default="lbdf", metavar="NAME",
                   help=f"fusion scheme: {_names(fusion.SCHEMES)} (branch requirement reduction, line-buffer "
                        "depth-first) (default: %(default)s)")
    s.add_argument("--search", default="local", metavar="NAME",
                   help=f"plan search: {_names(fusion.SEARCHES)} (default: %(default)s)")
    s.add_argument("--explainer", default="grad", metavar="NAME",
                   help=f"how invalid groups are split: {_names(fusion.SPLITTERS)} (GNNExplainer, gradient "
                        "saliency, a random split without explanation, F_beta itself, random edges) "
                        "(default: %(default)s)")
    s.add_argument("--plans", type=int, default=1000, metavar="N", help="plan budget (default: %(default)s)")
    s.add_argument("--objective", default="groups", metavar="NAME",
                   help="NSGA-II's second objective: groups or latency (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    s.add_argument("--strict", action="store_true",
                   help="fail when a single op does not fit the buffer (default: leave it unfused, listed)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="PLAN", help="the plan file to write (JSON)")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object (groups in PLAN)")
    s.set_defaults(fn=cmd_fuse)

    s = sub.add_parser("app", help="launch the web app")
    s.add_argument("file", nargs="?", default=None, metavar="FILE", help="a graph file to open")
    s.add_argument("--sample", default=None, metavar="NAME",
                   help=f"a sample to open: {', '.join(sample_graphs.NAMES)}; forward samples (layer fusion): "
                        f"{', '.join(n for n in sample_graphs.FORWARD_NAMES if n not in sample_graphs.NAMES)}")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8050, help="port to listen on (default: %(default)s)")
    s.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, error overlay)")
    s.set_defaults(fn=cmd_app)
    return p


HINT = "; hint: "


def error_line(e: BaseException, limit: int = 400) -> str:
    """One terminal-safe line for an error a user caused (newlines and escapes written out), at
    most ``limit`` characters -- except its hint (after ``; hint: ``), which is never cut: a long
    message is shortened before the hint."""
    text = terminal_safe(" ".join(str(e).split("\n")))
    if len(text) <= limit:
        return text
    head, sep, hint = text.rpartition(HINT)
    if not sep:
        return text[: limit - 3] + "..."
    room = max(limit - len(sep) - len(hint), 60)
    return (head if len(head) <= room else head[: room - 3] + "...") + sep + hint


def error_detail(e: BaseException) -> str:
    """What ``--verbose`` adds to an error's one line: the traceback, and what torch logged while
    it happened (``ImportErrorMAGIS.detail``)."""
    import traceback

    parts = ["".join(traceback.format_exception(e))]
    detail = getattr(e, "detail", "")
    if detail:
        parts.append("torch logged:\n" + detail)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Run ``magis`` with ``argv`` (default: the process arguments); the exit status."""
    for stream in (sys.stdout, sys.stderr):  # whatever the terminal's encoding: never a codec error
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # samples are built from configs, never downloaded
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv  # accepted before or after the command
    args = build_parser().parse_args([x for x in argv if x != "--verbose"])
    try:
        args.fn(args)
    except Outcome as e:  # done, but short of what was asked
        print(f"magis: {e.label}: {error_line(e)}", file=sys.stderr)
        return e.status
    except BrokenPipeError:  # stdout's reader left (`magis info F | head`): stop quietly
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except InternalError as e:
        if verbose:
            print(error_detail(e.__cause__ or e), file=sys.stderr)
        print(f"magis: internal error: {error_line(e)} -- a bug of MAGIS Studio, not of your input; "
              f"rerun with --verbose for the traceback", file=sys.stderr)
        return EXIT_INTERNAL
    except (GraphError, ValueError, OSError) as e:  # a missing, unreadable or unwritable path too
        if verbose:
            print(error_detail(e), file=sys.stderr)
        print(f"magis: error: {error_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("magis: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        sys.stdout.flush()  # a reader that left shows here when the output fit in the buffer
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered does not
    fail again (the Python documentation's recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a captured stream)
        pass


if __name__ == "__main__":
    sys.exit(main())
