"""``magis ftree``: the F-Tree of a graph, its fission candidates (MAGIS Algorithm 1)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from core.fmt import format_bytes

from ..specs import load_graph


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis ftree`` to the sub-commands ``sub``."""
    s = sub.add_parser("ftree", help="the F-Tree of a graph: its fission candidates (MAGIS Algorithm 1)")
    s.add_argument("file", help="graph file or sample name")
    s.add_argument("--levels", type=int, default=4, metavar="L", help="score levels L (default: %(default)s)")
    s.add_argument("--json", action="store_true", help="print the tree as JSON")
    s.set_defaults(fn=cmd_ftree)


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
