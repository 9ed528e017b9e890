"""Rule applications named by node names, as a user writes them (``magis transform``):
``remat``/``swap`` take ``TENSOR:USER`` (``NAME#J`` for output J of a multi-output op), ``deremat``
a recomputed copy's name, ``deswap`` a LOAD's name and ``fission`` an F-Tree node ``ID[:N]``."""

from __future__ import annotations

import difflib

from ..analysis.ftree import FTree
from ..ir.graph import Graph, Node, TRef
from .registry import get_rule
from .rule import Application


def node_named(g: Graph, name: str) -> Node:
    """The node called ``name`` (ValueError naming the closest names when there is none)."""
    try:
        return g.by_name(name)
    except KeyError:
        close = difflib.get_close_matches(name, [n.name for n in g], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"no node named {name!r} in {g.name}{hint}") from None


def tensor_named(g: Graph, text: str) -> TRef:
    """``NAME`` (output 0) or ``NAME#J``."""
    name, sep, j = text.rpartition("#") if "#" in text else (text, "", "0")
    node = node_named(g, name)
    if not j.isdigit() or int(j) >= len(node.outputs):
        raise ValueError(f"{node.name!r} has {len(node.outputs)} output(s); {text!r} names none of them")
    return TRef(node.id, int(j))


def fission_application(g: Graph, value: str, ftree: FTree, enabled: set[int]) -> Application:
    """``ID`` or ``ID:N`` of an F-Tree node of ``g`` (n defaults to 2)."""
    fid, _, n_text = value.partition(":")
    if not fid.isdigit() or int(fid) >= len(ftree.nodes):
        raise ValueError(f"--enable {value!r}: no F-Tree node {fid!r} (the tree has {len(ftree.nodes)} "
                         f"nodes, ids 0-{len(ftree.nodes) - 1}; see `magis ftree`)")
    f = ftree.nodes[int(fid)]
    n = int(n_text) if n_text.isdigit() else 2 if not n_text else -1
    if n < 2 or f.split.length % n:
        raise ValueError(f"--enable {value!r}: n must divide the split dimension of size {f.split.length} "
                         f"({', '.join(map(str, f.split.divisors()[:8]))}...)")
    nodes = set(f.split.nodes)
    if nodes & enabled:
        raise ValueError(f"--enable {value!r}: F-Tree node {f.id} overlaps a node enabled before it; "
                         f"nested fission is not supported yet")
    if any(v not in g.nodes for v in nodes):
        raise ValueError(f"--enable {value!r}: a rule applied before it removed part of its sub-graph")
    return Application("fission", (n, *f.split.comp, *sorted(nodes)))


def application_by_names(g: Graph, rule: str, value: str) -> Application:
    """The application of ``rule`` that ``value`` names in ``g``."""
    get_rule(rule)
    if rule in ("remat", "swap"):
        tensor, sep, user = value.partition(":")
        if not sep or not tensor or not user:
            raise ValueError(f"--{rule} {value!r}: expected TENSOR:USER (node names)")
        ref = tensor_named(g, tensor)
        b = node_named(g, user).id
        if rule == "remat":  # the whole op is recomputed: every output of it USER reads
            return Application("remat", (ref.node, b))
        return Application("swap", (ref.node, ref.index, b))
    return Application(rule, (node_named(g, value).id,))


def apply_by_names(g: Graph, rule: str, value: str, ftree: FTree | None = None,
                   enabled: set[int] | None = None) -> tuple[Application, str]:
    """Apply what ``value`` names (``fission``: an F-Tree node of ``ftree``, disjoint from the
    ``enabled`` ops); returns the application and a line saying what changed."""
    if rule == "fission":
        if ftree is None:
            raise ValueError("--enable needs the graph's F-Tree")
        app = fission_application(g, value, ftree, enabled if enabled is not None else set())
        if enabled is not None:
            enabled.update(app.params[4:])
    else:
        app = application_by_names(g, rule, value)
    log = get_rule(rule).apply(g, app)
    added = [g[v].name for v in log.added()]
    removed = sorted({e.nid for e in log.edits if e.kind == "erase"})
    parts = []
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append(f"removed {len(removed)} node(s)")
    rewired = sorted(log.touched() - set(log.added()) - set(removed))
    if rewired:
        parts.append("re-wired " + ", ".join(g[v].name for v in rewired if v in g.nodes))
    return app, "; ".join(parts) or "no change"
