"""M-States (MAGIS section 6.2): a state is its parent plus the rule application that made it and
the schedule window that incremental scheduling re-ordered -- never a copy of the graph or of the
schedule.  A queued state is a few hundred bytes; the evaluator (``search.delta``) materialises a
state's graph and schedule by replaying applications along its path onto one working graph."""

from __future__ import annotations

from dataclasses import dataclass

from ..metrics import HasMetrics
from ..transform.rule import Application


@dataclass(slots=True, eq=False)
class MState(HasMetrics):
    parent: MState | None
    app: Application | None  # None for the root (the imported graph and its schedule)
    lo: int  # the parent's schedule positions lo..hi were replaced by ``window``
    hi: int
    window: tuple[int, ...]
    metrics: dict[str, float]  # named metrics (``core.metrics``): peak (bytes), latency (s), host_bytes, ...
    hash: int  # canonical graph hash (``search.wl_hash``)
    depth: int = 0
    inner: bool = False  # an inner step of an adopted plan (``DeltaEvaluator.place``): no schedule of its own

    def path(self) -> list[MState]:
        """The states from the root's child down to this one."""
        out: list[MState] = []
        s: MState | None = self
        while s is not None and s.app is not None:
            out.append(s)
            s = s.parent
        return out[::-1]

    def applications(self) -> list[Application]:
        """The plan: rule applications from the imported graph to this state."""
        return [s.app for s in self.path() if s.app is not None]

    def nbytes(self) -> int:
        """Memory this state holds of its own (its parent and the graph are shared)."""
        import sys

        own = sys.getsizeof(self) + sys.getsizeof(self.window) + 28 * len(self.window) + sys.getsizeof(self.metrics)
        if self.app is not None:
            own += sys.getsizeof(self.app) + sys.getsizeof(self.app.params) + 28 * len(self.app.params)
        return own
