"""``magis verify``: eager PyTorch vs the exported script of a model (or of a plan for it)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import sample_graphs
from core.fmt import format_bytes, terminal_safe

from ..specs import capture_spec, load_graph, verify_spec
from .common import CheckFailed, Progress, _cost, _plan_graph, _plan_options, _schedules


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis verify`` to the sub-commands ``sub``."""
    schedules = _schedules()

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
