"""The one result record of a substitution search, and its time budget."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...transform.rule import Application


class Budget:
    """Seconds from now; ``over()`` once they are spent (checked once per state)."""

    def __init__(self, seconds: float | None) -> None:
        self.t0 = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over(self) -> bool:
        return self.seconds is not None and self.elapsed() > self.seconds


@dataclass
class SubstResult:
    """A search's best sequence and what it cost to find: ``cost_before`` / ``cost_after`` in
    seconds (the sum of the op times the search minimises), ``complete`` False when the time
    budget stopped it (an exact method's result is then only the best so far)."""

    method: str
    sequence: list[Application]
    cost_before: float
    cost_after: float
    states: int
    matches: int
    seconds: float
    complete: bool
    max_steps: int
    refused: int = 0
    match_seconds: float = 0.0
    best_seconds: float = 0.0  # when the best sequence was found (time to best)
    trace: list[dict[str, Any]] = field(default_factory=list)  # per step of the best sequence

    @property
    def speedup(self) -> float:
        return self.cost_before / self.cost_after if self.cost_after else float("nan")

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "cost_before_ms": self.cost_before * 1e3, "cost_after_ms": self.cost_after * 1e3,
                "speedup": self.speedup, "steps": len(self.sequence), "states": self.states,
                "matches": self.matches, "refused": self.refused, "seconds": self.seconds,
                "match_seconds": self.match_seconds, "best_seconds": self.best_seconds, "complete": self.complete, "max_steps": self.max_steps}


__all__ = ["Budget", "SubstResult"]
