"""The rule interface of the optimizer (MAGIS sections 5-6): a rule finds *applications* in a graph
(``match``), performs one (``apply``) and takes it back (``inverse``).

A rule edits the graph only through its checked primitives (``Graph.add_node``, ``erase_node``,
``replace_input``, ``replace_all_uses_with``, ``set_output``), inside ``Graph.recording``: the
journal it returns is the whole record of the change, ``inverse`` runs it backwards, and
``inverse(apply(G)) == G`` holds exactly (node order and id counter included).  Node ids created by
an application depend only on the graph it was applied to, so a sequence of applications replays
onto the imported graph identically -- a plan is that sequence.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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


class Rule:
    """Base class: subclasses implement ``match`` and ``edit`` (primitives only)."""

    name = "rule"

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
