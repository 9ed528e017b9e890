"""Nodes and tensors named as a user writes them (``magis info`` and the app show the names):
``NAME`` for a node, ``NAME`` or ``NAME#J`` for output J of a multi-output op.  The rules'
``from_text`` read their applications with these."""

from __future__ import annotations

import difflib

from ..ir.graph import Graph, Node, TRef


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


def tensor_and_user(g: Graph, text: str, option: str) -> tuple[TRef, int]:
    """``TENSOR:USER`` -> (the tensor, the user's node id)."""
    tensor, sep, user = text.partition(":")
    if not sep or not tensor or not user:
        raise ValueError(f"{option} {text!r}: expected TENSOR:USER (node names)")
    return tensor_named(g, tensor), node_named(g, user).id


__all__ = ["node_named", "tensor_and_user", "tensor_named"]
