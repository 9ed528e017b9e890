"""Rule applications named by node names, as a user writes them (``magis transform``):
``remat``/``swap`` take ``TENSOR:USER`` (``NAME#J`` for output J of a multi-output op), ``deremat``
a recomputed copy's name, ``deswap`` a LOAD's name, ``swap_late`` a tensor (its readers after the
peak of the schedule given as ``where``); the F-Tree rules (``fission`` = Enable, ``mutate``,
``disable``, ``lift``) an F-Tree node ``ID[:N]``."""

from __future__ import annotations

import difflib

from ..analysis.ftree import FTree
from ..ir.graph import Graph, Node, TRef
from .registry import get_rule
from .rule import Application, Where

FTREE_RULES = ("fission", "lift", "disable", "mutate")


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


def ftree_application(g: Graph, rule: str, value: str, ftree: FTree) -> Application:
    """``ID`` or ``ID:N`` of an F-Tree node of ``g``'s F-Tree: Enable (``fission``), Mutate (``N``:
    the new fission number, default the next divisor), Disable or Lift."""
    from .ftree_rules import FTreeMutations

    option = {"fission": "--enable"}.get(rule, f"--{rule}")
    fid, _, n_text = value.partition(":")
    if not fid.isdigit() or int(fid) >= len(ftree.nodes):
        raise ValueError(f"{option} {value!r}: no F-Tree node {fid!r} (the tree has {len(ftree.nodes)} "
                         f"nodes, ids 0-{len(ftree.nodes) - 1}; see `magis ftree`)")
    if n_text and not n_text.isdigit():
        raise ValueError(f"{option} {value!r}: N must be a whole number")
    try:
        return FTreeMutations(ftree).application(g, rule, int(fid), int(n_text) if n_text else None)
    except ValueError as e:
        raise ValueError(f"{option} {value!r}: {e}") from None


def application_by_names(g: Graph, rule: str, value: str, where: Where | None = None) -> Application:
    """The application of ``rule`` that ``value`` names in ``g`` (``swap_late``: under the schedule
    ``where``)."""
    get_rule(rule)
    if rule == "swap_late":
        ref = tensor_named(g, value)
        apps = get_rule(rule).match(g, [ref], where) if where is not None else []
        if not apps:
            raise ValueError(f"--swap-late {value!r}: no reader of it comes after a peak step it is alive at "
                             f"(nothing to free), or it cannot be swapped")
        return apps[0]
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
                   where: Where | None = None) -> tuple[Application, str]:
    """Apply what ``value`` names (the F-Tree rules: a node of ``ftree``; ``swap_late``: under the
    schedule ``where``); returns the application and a line saying what changed."""
    if rule in FTREE_RULES:
        if ftree is None:
            raise ValueError(f"--{rule} needs the graph's F-Tree")
        app = ftree_application(g, rule, value, ftree)
    else:
        app = application_by_names(g, rule, value, where)
    log = get_rule(app.rule).apply(g, app)
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
