"""Rule applications named by node names, as a user writes them (``magis transform``):
``remat``/``swap`` take ``TENSOR:USER`` (``NAME#J`` for output J of a multi-output op), ``deremat``
a recomputed copy's name and ``deswap`` a LOAD's name."""

from __future__ import annotations

import difflib

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


def apply_by_names(g: Graph, rule: str, value: str) -> tuple[Application, str]:
    """Apply what ``value`` names; returns the application and a line saying what changed."""
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
