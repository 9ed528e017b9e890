"""``magis fit``'s inputs and text: the graph a SPEC names, ``--memory``, the commands that use a
plan that fits, and the report of ``core.fit.fit`` as lines.

The command itself (``cmd_fit``: parser, exit statuses) is in ``app.cli``; this module never
imports it.  Exit statuses of ``magis fit``: 0 the step fits eagerly; 4 (``EXIT_FITS_WITH_PLAN``)
it does not, but a method's plan does; 1 nothing fits (the bound that explains it is printed);
2 bad input; 70 an internal error.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sample_graphs
from core.fit import PARTS, FitResult
from core.fmt import format_bytes, parse_bytes, terminal_safe
from core.ir.graph import Graph

from .specs import capture_spec, load_graph

GRAPH_SUFFIXES = (".json", ".json.gz")


@dataclass
class FitInput:
    """The graph ``magis fit`` judges, the name later commands give it (a graph file, a sample name,
    or the file ``import_command`` writes) and that ``magis import`` command (None when the graph
    is already a file or a sample's committed graph)."""

    graph: Graph
    ref: str
    import_command: str | None = None


def parse_memory(text: str) -> int:
    """``--memory``: a size with a unit (24GiB, 512MiB, 1.5GB, 4096B) -> bytes; a bare number is
    refused (bytes or GiB?)."""
    t = text.strip().replace(" ", "")
    if t and t[-1].isdigit():
        raise ValueError(f"--memory {text!r}: give a unit (e.g. 24GiB, 512MiB, 4096B)")
    try:
        size = parse_bytes(t)
    except ValueError as e:
        raise ValueError(f"--memory {e}") from None
    if size < 1:
        raise ValueError(f"--memory {text!r}: a size of at least 1 byte")
    return size


def exact_size(n: int) -> str:
    """``n`` bytes as a size ``parse_bytes`` reads back exactly: 24GiB, 300MiB or 123456B."""
    for unit, k in (("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if n % 1024**k == 0:
            return f"{n // 1024 ** k}{unit}"
    return f"{n}B"


def _is_graph_file(spec: str) -> bool:
    return Path(spec).exists() or spec.endswith(GRAPH_SUFFIXES)


def fit_graph(spec: str, adam: float | None = None, sgd: float | None = None,
              progress: Callable[[str], None] | None = None) -> FitInput:
    """The graph of SPEC: a graph file as it is; a sample's committed graph (captured again with
    ``--adam`` / ``--sgd``: the optimizer step is part of the graph); a model file's training step
    captured as ``magis import`` captures it."""
    opt = ([f"--adam {adam:g}"] if adam is not None else []) + ([f"--sgd {sgd:g}"] if sgd is not None else [])
    if _is_graph_file(spec):
        if opt:
            raise ValueError(f"{' '.join(opt)}: {spec} is a graph file, captured already; give the model spec "
                             f"(a sample or path/to/file.py:factory) to capture its optimizer step")
        return FitInput(load_graph(spec), spec)
    if spec in sample_graphs.NAMES and not opt:
        return FitInput(load_graph(spec), spec)
    if progress:
        progress(f"importing {spec} (training step{', ' + ' '.join(opt) if opt else ''})")
    g = capture_spec(spec, sgd_lr=sgd, adam_lr=adam, progress=progress)
    ref = f"{g.name}.json.gz"
    return FitInput(g, ref, shlex.join(["magis", "import", spec, *" ".join(opt).split(), "-o", ref]))


def point_of(res: FitResult, plans_file_points: list) -> dict[str, int]:
    """Method -> the index of its pick among the points of the plan file ``magis fit -o`` writes."""
    out = {}
    for p in res.picks:
        if p.plan is not None:
            out[p.method] = next(k for k, q in enumerate(plans_file_points) if q is p.plan)
    return out


def next_commands(res: FitResult, inp: FitInput, output: Path | None, points: dict[str, int],
                  time_budget: float) -> list[str]:
    """The commands that export (or train with) the fastest plan that fits."""
    rep = res.report
    if not rep["plans"]:
        return []
    best = rep["plans"][0]
    ref = shlex.quote(inp.ref)
    cmds = [inp.import_command] if inp.import_command else []
    if output is not None:
        cmds.append(f"magis export {ref} --plan {shlex.quote(str(output))} --point {points[best['method']]} "
                    f"-o step.py")
    else:
        size = exact_size(rep["memory_bytes"])
        method = (f" --method {best['method']}" if best["method"] != "magis"
                  else " --limit-kind reserved" if rep["verdict"]["basis"] == "reserved" else "")
        cmds.append(f"magis optimize {ref}{method} --memory-limit {size} --device {rep['device']} "
                    f"--time-budget {time_budget:g} -o plans.json")
        cmds.append(f"magis export {ref} --plan plans.json -o step.py")
    if rep["optimizer"] is None:
        cmds.append(f"# in your own loop: step = core.train.plan_step(module, loss_fn, inputs, "
                    f"memory_limit=\"{exact_size(rep['memory_bytes'])}\", profile=\"{rep['device']}\")")
    return cmds


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def fit_lines(res: FitResult, commands: list[str], memory_from: str) -> list[str]:
    """``magis fit``'s text report."""
    r, t = res.report, terminal_safe
    e, mem = r["eager"], r["memory_bytes"]
    opt = {"adam": ", Adam step", "sgd": ", SGD step"}.get(r["optimizer"], "")
    lines = [f"{t(r['graph'])}: {e['steps']} ops ({t(r['mode'])}{opt}) on {r['device']}, "
             f"{format_bytes(mem)} ({memory_from})"]
    lines.append(f"eager step (PyTorch's order), predicted: peak {format_bytes(e['peak_bytes'])} at op "
                 f"{e['peak_step'] + 1 if e['peak_step'] is not None else '-'} of {e['steps']} "
                 f"({t(e['peak_op'] or '-')}), latency {_ms(e['latency_seconds'])}")
    lines.append(f"  {'':<28}{'at the peak':>13}{'whole step':>13}")
    parts = e["breakdown"]
    for key, words in PARTS.items():
        p = parts[key]
        if not p["at_peak"] and not p["total"]:
            continue
        total = "-" if p["total"] is None else format_bytes(p["total"])
        extra = ""
        if key == "optimizer_state" and parts["weights"]["total"]:
            extra = f"  ({p['total'] / parts['weights']['total']:.2f}x the weights)"
        lines.append(f"  {words:<28}{format_bytes(p['at_peak']):>13}{total:>13}{extra}")
    floor = r["floor"]
    kinds = ", ".join(f"{PARTS[k]} {format_bytes(parts[k]['total'])}" for k in PARTS if parts[k]["total"])
    lines.append(f"  resident floor {format_bytes(floor['bytes'])} ({kinds}): no plan that keeps them on the "
                 f"device goes below it")
    if parts["updated"]["total"]:
        lines.append(f"  the optimizer update writes new weights and state ({format_bytes(parts['updated']['total'])})"
                     f" beside the old ones, as the exported step does; an in-place torch.optim step does not")
    if e["reserved_bytes"] is not None:
        lines.append(f"  reserved {format_bytes(e['reserved_bytes'])}  (predicted max_memory_reserved of PyTorch's "
                     f"CUDA caching allocator)")
    v = r["verdict"]
    basis = ("predicted reserved bytes" if v["basis"] == "reserved" else "live tensor bytes")
    if v["fits"]:
        retry = (f", after {e['oom_retries']} release(s) of the allocator's cache" if e.get("oom_retries") else "")
        lines.append(f"verdict: FITS eagerly: {format_bytes(v['bytes'])} of {format_bytes(mem)}, headroom "
                     f"{format_bytes(v['headroom_bytes'])} (judged on {basis}{retry})")
        return lines
    lines.append(f"verdict: DOES NOT FIT eagerly: {format_bytes(v['bytes'])} > {format_bytes(mem)}, "
                 f"{format_bytes(-v['headroom_bytes'])} over (judged on {basis})")
    if r["plans"]:
        lines.append(f"plans that fit {format_bytes(mem)} (the fastest point of each method; predicted latency "
                     f"against eager's {_ms(e['latency_seconds'])}):")
        for p in r["plans"]:
            res_b = "" if p["reserved_bytes"] is None else f"  reserved {format_bytes(p['reserved_bytes']):>10}"
            lines.append(f"  {t(p['label']):<32} peak {format_bytes(p['peak_bytes']):>10}{res_b}  latency "
                         f"{_ms(p['latency_seconds']):>11} ({100 * p['overhead']:+.1f}%)  [{t(p['point_label'])}]")
    else:
        lines.append(f"no method found a plan that fits {format_bytes(mem)}"
                     + (f" (the lowest peak found: {format_bytes(r['best_peak'])})" if r["best_peak"] else ""))
    for p in r["no_plan"]:
        lines.append(f"  no plan from {t(p['label'])}: {t(_short(p['why']))}")
    for b in r["bounds"]:
        if b["bound"] == "resident_floor":
            lines.append(f"bound: the resident floor {format_bytes(b['bytes'])} is above {format_bytes(mem)}: the "
                         f"weights, gradients and optimizer state alone do not fit, whatever the activations do")
        else:
            lines.append(f"bound: the largest op, {t(b['op'])}, works on {format_bytes(b['op_bytes'])} beside the "
                         f"{format_bytes(b['held_bytes'])} held all step: {format_bytes(b['bytes'])} > "
                         f"{format_bytes(mem)} for any plan that runs it whole")
    if not r["plans"] and not r["bounds"]:
        lines.append("neither the resident floor nor the largest op rules a plan out: a longer --time-budget "
                     "may find one")
    if commands:
        lines.append("next:")
        lines.extend(f"  {c}" for c in commands)
    return lines


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fit_json(res: FitResult, commands: list[str], output: Path | None, points: dict[str, int],
             memory_from: str) -> dict[str, Any]:
    """``magis fit --json``: the report with the commands, the plan file and each plan's point."""
    rep = dict(res.report)
    rep["plans"] = [dict(p, point=points.get(p["method"])) for p in rep["plans"]]
    return {**rep, "memory_from": memory_from, "commands": commands,
            "output": None if output is None else str(output)}


__all__ = ["FitInput", "exact_size", "fit_graph", "fit_json", "fit_lines", "next_commands", "parse_memory",
           "point_of"]
