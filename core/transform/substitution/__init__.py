"""Graph substitutions (TASO's rules, OCGGS's rule set): the pattern language and rewriter
(``pattern``), the rules as data (``rules``) and :class:`Substitute`, the rule object the optimizer,
the searches and ``magis transform`` use for each of them."""

from __future__ import annotations

from collections.abc import Iterable

from ...ir.graph import Graph, TRef
from ..names import node_named
from ..rule import Application, Rule, RuleNotApplicable, Where
from .pattern import Substitution, bind, find_matches, rewrite
from .rules import SUBSTITUTIONS

FAMILY = "substitution"


class Substitute(Rule):
    """One substitution rule phi = (G_s, G_t, f) as a rule of the optimizer: an application's
    parameters are the source ops' node ids (in the pattern's order), then the rule's numeric
    parameters (an enlarged kernel's size)."""

    family = FAMILY

    def __init__(self, sub: Substitution) -> None:
        self.sub = sub
        self.name = sub.name
        self.text = sub.text

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        n = self.sub.n_source
        return ("node",) * n + ("n",) * (len(params) - n)

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        """``NODE,NODE[,...][:N]``: the source ops by name in the pattern's order (and a number)."""
        head, _, num = text.partition(":")
        ids = tuple(node_named(g, s.strip()).id for s in head.split(",") if s.strip())
        extra = (int(num),) if num else ()
        if len(ids) != self.sub.n_source:
            raise ValueError(f"{self.name} takes {self.sub.n_source} node names (its source pattern's ops)")
        return Application(self.name, ids + extra)

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        """The matches in ``g``: every one, or with memory hot-spot tensors ``hot`` (the M-Optimizer's
        heuristic H2) those with an op next to a hot-spot -- its producer, a reader, or an input of
        the producer -- which keeps a search state's matching local on a graph of thousands of ops."""
        hot = list(hot)
        if not hot:
            return [Application(self.name, p) for p in find_matches(g, self.sub)]
        near: set[int] = set()
        for r in hot:
            if r.node in g.nodes:
                near.add(r.node)
                near.update(g.preds(r.node))
                near.update(g.readers(r))
        return [Application(self.name, p) for p in find_matches(g, self.sub, anchor=sorted(near))]

    def edit(self, g: Graph, app: Application) -> None:
        rewrite(g, self.sub, bind(g, self.sub, app.params))


SUBSTITUTE_RULES: tuple[Substitute, ...] = tuple(Substitute(s) for s in SUBSTITUTIONS)

__all__ = ["FAMILY", "SUBSTITUTE_RULES", "SUBSTITUTIONS", "Substitute", "Substitution", "RuleNotApplicable"]
