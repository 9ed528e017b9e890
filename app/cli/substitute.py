"""``magis substitute``: graph substitutions (TASO's rules) chosen by an OCGGS search."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import sample_graphs
from core.fmt import format_bytes, plural, terminal_safe
from core.ir import io

from ..specs import load_graph
from .common import _cost, _devices_help


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis substitute`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE

    devices = _devices_help()

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
