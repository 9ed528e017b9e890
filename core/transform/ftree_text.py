"""F-Tree rule applications named as a user writes them: ``ID`` or ``ID:N`` of a node of the
graph's F-Tree (``magis ftree`` lists them).  Shared by Enable (``fission``) and the mutation
rules (Lift, Disable, Mutate)."""

from __future__ import annotations

from ..ir.graph import Graph
from .rule import Application, Rule


def ftree_from_text(rule: Rule, g: Graph, value: str, mutations) -> Application:
    """The application of F-Tree rule ``rule`` to the F-Tree node ``value`` names; ``mutations`` is
    the graph's ``ftree_rules.FTreeMutations`` (N: the fission number for Enable / Mutate, default
    the next divisor)."""
    option = rule.option.flag if rule.option else rule.name
    nodes = mutations.ft.nodes
    fid, _, n_text = value.partition(":")
    if not fid.isdigit() or int(fid) >= len(nodes):
        raise ValueError(f"{option} {value!r}: no F-Tree node {fid!r} (the tree has {len(nodes)} "
                         f"nodes, ids 0-{len(nodes) - 1}; see `magis ftree`)")
    if n_text and not n_text.isdigit():
        raise ValueError(f"{option} {value!r}: N must be a whole number")
    try:
        return mutations.application(g, rule.name, int(fid), int(n_text) if n_text else None)
    except ValueError as e:
        raise ValueError(f"{option} {value!r}: {e}") from None


class FTreeNamed:
    """What the F-Tree rules share when a user names an application: ``ID[:N]`` on the F-Tree."""

    needs_ftree = True

    def from_text(self, g: Graph, text: str, *, where=None, ftree=None) -> Application:
        return ftree_from_text(self, g, text, ftree)


__all__ = ["FTreeNamed", "ftree_from_text"]
