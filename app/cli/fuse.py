"""``magis fuse``: layer fusion under an on-chip buffer (GET), written as a plan."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import sample_graphs
from core.fmt import terminal_safe

from ..specs import load_graph
from .common import _names


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis fuse`` to the sub-commands ``sub``."""
    from core.search import fusion

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
