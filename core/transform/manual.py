"""Rule applications named as a user writes them (``magis transform``): each rule reads its own
(``Rule.from_text``, its ``option`` says the form): ``remat``/``swap`` take ``TENSOR:USER``
(``NAME#J`` for output J of a multi-output op), ``deremat`` a recomputed copy's name, ``deswap`` a
LOAD's name, ``swap_late`` a tensor (its readers after the peak of the schedule given as ``where``);
the F-Tree rules (``fission`` = Enable, ``mutate``, ``disable``, ``lift``) an F-Tree node
``ID[:N]``."""

from __future__ import annotations

from ..analysis.ftree import FTree
from ..ir.graph import Graph
from .ftree_rules import FTreeMutations
from .registry import get_rule
from .rule import Application, Where


def application_by_names(g: Graph, rule: str, value: str, where: Where | None = None,
                         ftree: FTree | None = None) -> Application:
    """The application of ``rule`` that ``value`` names in ``g`` (rules that need it: under the
    schedule ``where``, or on ``g``'s F-Tree ``ftree``)."""
    r = get_rule(rule)
    if not r.needs_ftree:
        return r.from_text(g, value, where=where)
    if ftree is None:
        raise ValueError(f"{r.option.flag if r.option else rule} needs the graph's F-Tree")
    return r.from_text(g, value, where=where, ftree=FTreeMutations(ftree))


def apply_by_names(g: Graph, rule: str, value: str, ftree: FTree | None = None,
                   where: Where | None = None) -> tuple[Application, str]:
    """Apply what ``value`` names; returns the application and a line saying what changed."""
    app = application_by_names(g, rule, value, where, ftree)
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


__all__ = ["application_by_names", "apply_by_names"]
