"""``magis fit``: does the training step fit the card?  Eager's verdict, then the plans that fit
(the report itself is ``app.fit_cmd``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from core.fmt import format_bytes

from .common import EXIT_FAILED, EXIT_FITS_WITH_PLAN, Outcome, Progress, _names, _split, optimizer_errors


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis fit`` to the sub-commands ``sub``."""
    from core.cost.devices import DEVICES
    from core.search.methods import METHODS

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

    from ..fit_cmd import fit_graph, fit_json, fit_lines, next_commands, parse_memory, point_of

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
