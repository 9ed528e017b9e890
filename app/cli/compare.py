"""``magis compare``: MAGIS, the peers and the baselines side by side on one graph."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import sample_graphs

from ..specs import capture_spec, load_graph
from .common import Progress, _cost_device, _cost_option, _devices_help, _names, _split, optimizer_errors


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis compare`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE
    from core.search.methods import METHODS

    devices = _devices_help()

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


def _compare_model(spec: str):
    """(graph, model builder or None) of ``magis compare``'s FILE: a graph file alone gives no model
    (the methods that trace the model again then say why they were not run); a sample or a model
    spec gives its model too, built under fake tensors."""
    from ..specs import build_workload

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
