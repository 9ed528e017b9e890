"""Sweeps: the M-Optimizer (``moptimizer.optimize``) over workloads x memory limits x devices.

One *job* is one ``optimize`` call -- a workload's graph, one memory limit (``limits.MemoryLimit``: a
size such as 8GiB or a fraction of the graph's own eager peak; or ``pareto`` for a frontier run) and
one device profile -- run in a worker process.  It returns a small result row (peak, latency, their
ratios to PyTorch's eager order, the limit in bytes and whether it was reached, states, seconds, or
the error that stopped it) and the bytes of its plan file.  The driver writes the plan files
(``<out>/<workload>.<device>.<limit>.plan.json.gz``) and ``<out>/sweep.json`` (the sweep's
parameters and every finished row, rewritten atomically as each job finishes): workers ship graph
bytes in and plan bytes out, so they need no shared disk with the driver, which is what running on a
Ray cluster asks for.

Runners share one small interface (``open``, ``run``, ``close``):

* :class:`LocalRunner` -- a ``ProcessPoolExecutor`` of N processes on this machine;
* :class:`RayRunner` -- tasks on a Ray cluster (an existing one given its address, or a local
  instance); Ray is an optional dependency, imported only here.

A job that fails gives a row with its error; it never stops the sweep.  ``cancel`` (Ctrl-C in the
command line) stops submitting: local jobs already running stop their search and keep the best
plan found so far, running Ray tasks are cancelled; the rows finished so far stay in sweep.json.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..cost.choice import cost_device, make_cost
from ..cost.devices import profile_from_dict, profile_to_dict
from ..cost.model import AnalyticCost
from ..ir import io
from .limits import MemoryLimit
from .moptimizer import optimize
from .plan import plans_to_bytes

SCHEMA = "magis-sweep"
VERSION = 1
PARETO = "pareto"
RAY_MISSING = "Ray is not installed: pip install 'magis-studio[ray]'"


class SweepError(ValueError):
    """A sweep that cannot start: no workloads, a bad limit or device, an unreachable Ray cluster."""


def _safe(text: str) -> str:
    """``text`` as one file-name component (letters, digits, ``._-``; anything else becomes ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text) or "_"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@dataclass(frozen=True)
class Limit:
    """One memory limit of a sweep: its text as given and ``optimize``'s ``memory_limit`` (a
    ``MemoryLimit``: a fraction of each graph's eager peak, or a size); ``memory`` None is a frontier
    (``pareto``) run."""

    text: str
    memory: MemoryLimit | None

    @property
    def label(self) -> str:
        return _safe(self.text)


def parse_limit(text: str) -> Limit:
    """``"0.5"``, ``"8GiB"`` or ``"pareto"`` -> a :class:`Limit` (SweepError with the accepted forms)."""
    t = text.strip()
    if t.lower() == PARETO:
        return Limit(PARETO, None)
    try:
        memory = MemoryLimit.parse(t)
    except ValueError as e:
        raise SweepError(f"{e}; or {PARETO} for a frontier") from None
    return Limit(str(memory), memory)


@dataclass(frozen=True)
class SweepWorkload:
    """A graph to sweep: its name (in file names and rows) and its graph file's bytes, or the error
    that kept them from being read (the workload's jobs then give error rows)."""

    name: str
    graph: bytes | None
    source: str = ""
    error: str | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike, name: str | None = None) -> SweepWorkload:
        """The graph file at ``path`` (named after the file, ``.json``/``.json.gz`` left out)."""
        p = Path(path)
        if name is None:
            name = p.name.removesuffix(".gz").removesuffix(".json")
        try:
            return cls(name, io.read_graph_bytes(p), str(p))
        except io.GraphError as e:
            return cls(name, None, str(p), str(e))


@dataclass(frozen=True)
class Job:
    """One ``optimize`` call of a sweep (the graph bytes travel separately, once per workload)."""

    workload: str
    device: str
    limit: Limit
    time_budget: float
    cost: str = "analytic"  # the cost model (``core.cost.choice``)
    profile: str = ""  # JSON of the calibrated profile (``cost == "calibrated"``), fitted once by the sweep

    @property
    def plan_name(self) -> str:
        cost = "" if self.cost == "analytic" else f".{self.cost}"
        return f"{_safe(self.workload)}.{self.device}{cost}.{self.limit.label}.plan.json.gz"


def _row(job: Job, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "workload": job.workload, "device": job.device, "cost": job.cost, "limit": job.limit.text,
        "limit_bytes": None,
        "graph": None, "peak_bytes": None, "latency_seconds": None, "eager_peak_bytes": None,
        "eager_latency_seconds": None, "peak_ratio": None, "latency_ratio": None, "reached": None,
        "points": 0, "states": 0, "stopped": None, "seconds": 0.0, "plan": None, "error": None}
    row.update(values)
    return row


def run_job(job: Job, graph: bytes, cancel: Any = None) -> tuple[dict[str, Any], bytes | None]:
    """Run one job: (its row, its plan file's bytes).  Never raises for a failing job: the row
    carries the error and the plan is None.  ``cancel``: anything with ``is_set()``; once set, the
    search stops and keeps the best state found."""
    t0 = time.perf_counter()
    try:
        g = io.loads(graph)
        pareto = job.limit.memory is None
        if job.profile:  # the sweep's calibration: every job uses the same constants
            cost = AnalyticCost(profile_from_dict(json.loads(job.profile)))
        else:
            cost = make_cost(job.cost, job.device)
        pf = optimize(g, memory_limit=job.limit.memory, pareto=pareto, time_budget=job.time_budget,
                      device=job.device, cancel=cancel, cost=cost, cost_name=job.cost)
        data = plans_to_bytes(pf, compress=True)
    except Exception as e:  # noqa: BLE001 -- a failing job is a row with its error, never a dead sweep
        return _row(job, error=_one_line(e), seconds=round(time.perf_counter() - t0, 3)), None
    best, eager = pf.points[0], pf.points[-1]
    limit = pf.meta["limit_bytes"]  # None for a frontier run
    return _row(job, limit_bytes=limit, graph=g.name, peak_bytes=best.peak,
                latency_seconds=best.latency, eager_peak_bytes=eager.peak, eager_latency_seconds=eager.latency,
                peak_ratio=best.peak / eager.peak if eager.peak else 1.0,
                latency_ratio=best.latency / eager.latency if eager.latency else 1.0,
                reached=None if limit is None else best.peak <= limit, points=len(pf.points) - 1,
                states=pf.meta["states"], stopped=pf.meta["stopped"],
                seconds=round(time.perf_counter() - t0, 3)), data


Finished = tuple[int, dict[str, Any], bytes | None]  # (index into the jobs, row, plan bytes)


class Runner(Protocol):
    """Where the jobs run.  ``open`` connects (SweepError when it cannot), ``run`` yields each job as
    it finishes and stops submitting once ``cancel`` is set, ``close`` lets go."""

    def describe(self) -> str: ...

    def open(self) -> None: ...

    def run(self, jobs: Sequence[Job], graphs: dict[str, bytes], cancel: threading.Event) -> Iterator[Finished]: ...

    def close(self) -> None: ...


# ---- local processes ---------------------------------------------------------------------------
_STOP: Any = None  # in a worker process: the sweep's stop event


def _init_worker(stop: Any) -> None:
    """Worker start-up: Ctrl-C belongs to the driver (it stops the sweep through ``stop``)."""
    global _STOP
    _STOP = stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _local_job(job: Job, graph: bytes) -> tuple[dict[str, Any], bytes | None]:
    return run_job(job, graph, _STOP)


class LocalRunner:
    """Jobs in ``processes`` worker processes on this machine (default: one per CPU).  Workers start
    by ``start_method`` ("forkserver": a clean process, whatever threads the driver runs; a script
    that starts a sweep needs the usual ``if __name__ == "__main__":`` guard, as with "spawn").  A
    worker that dies gives error rows for the jobs it had and the pool is started again."""

    def __init__(self, processes: int | None = None, start_method: str | None = "forkserver") -> None:
        if processes is None:
            processes = os.cpu_count() or 1
        if processes < 1:
            raise SweepError(f"processes must be at least 1, not {processes}")
        self.processes = processes
        if start_method not in multiprocessing.get_all_start_methods():
            start_method = None
        self.start_method = start_method

    def describe(self) -> str:
        return f"local, {self.processes} process{'es' if self.processes != 1 else ''}"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def run(self, jobs: Sequence[Job], graphs: dict[str, bytes], cancel: threading.Event) -> Iterator[Finished]:
        ctx = multiprocessing.get_context(self.start_method)
        stop = ctx.Event()
        workers = max(1, min(self.processes, len(jobs)))

        def pool() -> ProcessPoolExecutor:
            return ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(stop,))

        todo = deque(range(len(jobs)))
        running: dict[Future, int] = {}
        ex = pool()
        try:
            while todo or running:
                if cancel.is_set():
                    stop.set()  # running searches stop and return their best so far
                    todo.clear()
                while todo and len(running) < workers:
                    k = todo.popleft()
                    args = (_local_job, jobs[k], graphs[jobs[k].workload])
                    try:
                        running[ex.submit(*args)] = k
                    except BrokenProcessPool:  # a worker died since the last check: a fresh pool
                        ex = pool()
                        running[ex.submit(*args)] = k
                done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
                broken = False
                for f in sorted(done, key=running.__getitem__):
                    k = running.pop(f)
                    try:
                        row, data = f.result()
                    except BrokenProcessPool as e:
                        broken = True
                        row, data = _row(jobs[k], error=f"the worker process died ({e})"), None
                    except Exception as e:  # noqa: BLE001 -- e.g. a result that cannot be sent back
                        row, data = _row(jobs[k], error=_one_line(e)), None
                    yield k, row, data
                if broken:
                    ex.shutdown(wait=False, cancel_futures=True)
                    ex = pool()
        finally:
            stop.set()
            ex.shutdown(wait=True, cancel_futures=True)


# ---- Ray -----------------------------------------------------------------------------------------
class RayRunner:
    """Jobs as Ray tasks (one CPU each): on the cluster at ``address`` ("auto", "HOST:PORT",
    "ray://HOST:10001"), or on a local instance started for the sweep when ``address`` is None or
    "local" (``init_kwargs`` go to ``ray.init`` then, e.g. ``num_cpus``).  When Ray is already
    initialised in this process, that cluster is used as it is.  The cluster's workers need
    magis-studio installed (the same version); graphs and plans travel through Ray, not files."""

    def __init__(self, address: str | None = None, max_in_flight: int | None = None, **init_kwargs: Any) -> None:
        try:
            import ray
        except ImportError:
            raise SweepError(RAY_MISSING) from None
        self.ray = ray
        self.address = None if address in (None, "", "local") else address
        self.max_in_flight = max_in_flight
        self.init_kwargs = init_kwargs
        self.started = False

    def describe(self) -> str:
        return f"ray, {self.address or 'local instance'}"

    def open(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs = dict(self.init_kwargs)
        if self.address is None:
            kwargs = {"address": "local", "include_dashboard": False, **kwargs}
        else:
            kwargs["address"] = self.address
        kwargs.setdefault("logging_level", "warning")
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 -- connection errors come in many types
            raise SweepError(f"cannot start Ray at {self.address or 'a local instance'}: {_one_line(e)}") from None
        self.started = True

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False

    def run(self, jobs: Sequence[Job], graphs: dict[str, bytes], cancel: threading.Event) -> Iterator[Finished]:
        ray = self.ray
        task = ray.remote(num_cpus=1, max_retries=0)(run_job)
        refs = {name: ray.put(data) for name, data in graphs.items()}
        slots = self.max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1)))
        todo = deque(range(len(jobs)))
        running: dict[Any, int] = {}
        try:
            while todo or running:
                if cancel.is_set():
                    todo.clear()
                    for ref in running:
                        ray.cancel(ref)
                    running.clear()
                    break
                while todo and len(running) < slots:
                    k = todo.popleft()
                    running[task.remote(jobs[k], refs[jobs[k].workload])] = k
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.2)
                for ref in ready:
                    k = running.pop(ref)
                    try:
                        row, data = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 -- a crashed worker, a lost node
                        row, data = _row(jobs[k], error=_one_line(e)), None
                    yield k, row, data
        finally:
            for ref in running:
                ray.cancel(ref)


# ---- the sweep -----------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """The rows of the finished jobs (in job order), the sweep's parameters and where they were written."""

    rows: list[dict[str, Any]]
    parameters: dict[str, Any]
    path: Path
    jobs: int
    interrupted: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _document(self.parameters, self.rows, self.jobs,
                         "interrupted" if self.interrupted else "finished")


def _document(parameters: dict[str, Any], rows: list[dict[str, Any]], jobs: int, status: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "version": VERSION, "status": status, "jobs": jobs, "parameters": parameters,
            "rows": rows}


def _unique_names(workloads: list[SweepWorkload]) -> list[SweepWorkload]:
    seen: dict[str, int] = {}
    out = []
    for w in workloads:
        n = seen.get(_safe(w.name), 0) + 1
        seen[_safe(w.name)] = n
        out.append(w if n == 1 else SweepWorkload(f"{w.name}-{n}", w.graph, w.source, w.error))
    return out


def plan_jobs(workloads: Sequence[SweepWorkload], limits: Sequence[Limit], devices: Sequence[str],
              time_budget: float, cost: str = "analytic", profile: str = "") -> list[Job]:
    """The cross product, workload-major: each workload's devices, each device's limits."""
    return [Job(w.name, d, lim, time_budget, cost, profile) for w in workloads for d in devices for lim in limits]


def run_sweep(workloads: Sequence[SweepWorkload | str | os.PathLike], limits: Sequence[str | Limit],
              devices: Sequence[str], out: str | os.PathLike, *, time_budget: float = 60.0,
              runner: Runner | None = None,
              progress: Callable[[dict[str, Any], int, int], None] | None = None,
              cancel: threading.Event | None = None, cost: str = "analytic") -> SweepResult:
    """Run every job of workloads x ``limits`` x ``devices`` (strings as workloads are graph file
    paths) with ``time_budget`` seconds of search each, on ``runner`` (default: a
    :class:`LocalRunner`); plan files and ``sweep.json`` go to ``out``.  ``progress(row, done,
    total)`` hears each finished job.  ``cost``: the cost model of every job (``core.cost.choice``;
    a missing calibration is fitted here first, on the workloads' ops).  SweepError (one line) when
    the sweep cannot start."""
    ws = _unique_names([w if isinstance(w, SweepWorkload) else SweepWorkload.from_file(w) for w in workloads])
    lims = list({lim.label: lim for lim in (x if isinstance(x, Limit) else parse_limit(x) for x in limits)}.values())
    try:
        devs = list(dict.fromkeys(cost_device(cost, d.strip()) for d in devices))
    except ValueError as e:
        raise SweepError(str(e)) from None
    profile = ""
    if cost == "calibrated" and ws and devs:  # fitted (or loaded) once here; the jobs get its constants
        model = make_cost(cost, devs[0], graphs=[io.loads(w.graph) for w in ws if w.graph is not None])
        profile = json.dumps(profile_to_dict(model.device))
    if not ws or not lims or not devs:
        raise SweepError("a sweep needs at least one workload, one memory limit and one device")
    if not time_budget > 0:
        raise SweepError(f"the time budget must be positive, not {time_budget}")
    runner = runner if runner is not None else LocalRunner()
    cancel = cancel if cancel is not None else threading.Event()
    out = Path(out)
    jobs = plan_jobs(ws, lims, devs, time_budget, cost, profile)
    params = {"workloads": [{"name": w.name, "source": w.source} for w in ws], "memory_limits": [x.text for x in lims],
              "devices": devs, "cost": cost, "time_budget": time_budget, "runner": runner.describe(), "output": str(out)}
    path = out / "sweep.json"
    rows: dict[int, dict[str, Any]] = {}

    def write(status: str) -> None:
        doc = _document(params, [rows[k] for k in sorted(rows)], len(jobs), status)
        io.atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())

    def finished(k: int, row: dict[str, Any], data: bytes | None) -> None:
        if data is not None:
            row["plan"] = str(io.atomic_write(out / jobs[k].plan_name, data))
        rows[k] = row
        write("running")
        if progress is not None:
            progress(row, len(rows), len(jobs))

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"cannot write to {out}: {e.strerror or e}") from None
    errors = {w.name: w.error for w in ws if w.graph is None}
    runner.open()
    try:
        write("running")
        for k, job in enumerate(jobs):
            if job.workload in errors:
                finished(k, _row(job, error=errors[job.workload] or "no graph"), None)
        todo = [k for k, job in enumerate(jobs) if job.workload not in errors]
        graphs = {w.name: w.graph for w in ws if w.graph is not None}
        if todo:
            for j, row, data in runner.run([jobs[k] for k in todo], graphs, cancel):
                finished(todo[j], row, data)
    finally:
        runner.close()
        interrupted = len(rows) < len(jobs)
        write("interrupted" if interrupted else "finished")
    ordered = [rows[k] for k in sorted(rows)]
    return SweepResult(ordered, params, path, len(jobs), interrupted, [r for r in ordered if r["error"]])


__all__ = ["PARETO", "Job", "Limit", "LocalRunner", "RayRunner", "Runner", "SweepError", "SweepResult",
           "SweepWorkload", "parse_limit", "plan_jobs", "run_job", "run_sweep"]
