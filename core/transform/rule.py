"""The rule interface of the optimizer (MAGIS sections 5-6): a rule finds *applications* in a graph
(``match``), performs one (``apply``) and takes it back (``inverse``).

A rule edits the graph only through its checked primitives (``Graph.add_node``, ``erase_node``,
``replace_input``, ``replace_all_uses_with``, ``set_output``), inside ``Graph.recording``: the
journal it returns is the whole record of the change, ``inverse`` runs it backwards, and
``inverse(apply(G)) == G`` holds exactly (node order and id counter included).  Node ids created by
an application depend only on the graph it was applied to, so a sequence of applications replays
onto the imported graph identically -- a plan is that sequence.

A rule describes itself (``family``, ``text``, ``option``): the registry (``transform.registry``)
is the one list of rules, and every table of rules -- the search's rule sets, the app's marks and
rule steps, the options of ``magis transform``, plan-file validation -- is derived from it.  A rule
that does not apply raises ``RuleNotApplicable``; anything else it raises is a bug.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import RuleNotApplicable
from ..ir.graph import EditLog, Graph, TRef


@dataclass(frozen=True)
class Application:
    """One application of a rule: its name and parameters (node ids of the graph it applies to)."""

    rule: str
    params: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.rule}({', '.join(map(str, self.params))})"


@dataclass(frozen=True)
class Where:
    """Where the working schedule stands, for rules that match by liveness: each op's position in
    the schedule and the positions of its peak steps."""

    pos: Mapping[int, int]
    peaks: tuple[int, ...] = field(default=())  # ascending

    def peak_between(self, lo: int, hi: int) -> int | None:
        """The first peak step strictly between positions ``lo`` and ``hi`` (a tensor made at
        ``lo`` and last read at ``hi`` is alive across it), or None."""
        k = bisect.bisect_right(self.peaks, lo)
        return self.peaks[k] if k < len(self.peaks) and self.peaks[k] < hi else None


@dataclass(frozen=True)
class RuleOption:
    """How ``magis transform`` takes one application of a rule by hand: ``--flag METAVAR``."""

    flag: str  # "--remat"
    metavar: str  # what the value names: "TENSOR:USER", "ID[:N]", "NODE"
    help: str


class Rule:
    """Base class: subclasses implement ``match`` and ``edit`` (primitives only), and say what
    they are: ``name`` (in applications and plan files), ``family`` (the graph marks and the
    search's rule sets group rules by it: "fission", "remat", "swap", ...), ``text`` (one line on
    what an application does) and ``option`` (``magis transform``'s option, or None)."""

    name = "rule"
    family = ""
    text = ""
    option: RuleOption | None = None
    needs_schedule = False  # naming an application by hand needs the schedule's peak steps (``where``)
    needs_ftree = False  # naming an application by hand needs the graph's F-Tree

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        """The application that ``text`` names in ``g`` (``magis transform``); by default a node
        name, the rule's one parameter.  ValueError naming what is expected."""
        from .names import node_named

        return Application(self.name, (node_named(g, text).id,))

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        """What each parameter of an application is, for showing it by name: "node" (a node id of the
        graph it applies to, or of the imported graph) or "n" (a number: a count, an output index, a
        dimension, a number of parts).  By default every parameter is a node."""
        return ("node",) * len(params)

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        """Applications of this rule in ``g``, restricted to the memory hot-spot tensors ``hot``
        (heuristic H2 of the paper) where the rule is about tensors.  ``where`` (the schedule) is
        for rules that decide by liveness; the others ignore it."""
        raise NotImplementedError

    def edit(self, g: Graph, app: Application) -> None:
        raise NotImplementedError

    def apply(self, g: Graph, app: Application) -> EditLog:
        """Perform ``app`` on ``g``; the returned journal undoes it (``inverse``)."""
        if app.rule != self.name:
            raise ValueError(f"{app} is not an application of {self.name}")
        try:
            with g.recording() as log:
                self.edit(g, app)
        except BaseException:
            g.undo(log)  # a failed application leaves the graph as it was
            raise
        return log

    def inverse(self, g: Graph, log: EditLog) -> None:
        g.undo(log)


__all__ = ["Application", "Rule", "RuleNotApplicable", "RuleOption", "Where"]
