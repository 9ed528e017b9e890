"""A wall-clock limit shared by the schedulers' searches (their ``time_budget``)."""

from __future__ import annotations

import math
import time


class Deadline:
    """A wall-clock limit (``None``: no limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.start = time.perf_counter()
        self.end = math.inf if seconds is None else self.start + max(0.0, seconds)

    def left(self) -> float:
        """Seconds left (negative once expired, ``inf`` without a limit)."""
        return self.end - time.perf_counter()

    def expired(self) -> bool:
        """Whether the limit has passed."""
        return time.perf_counter() >= self.end

    def sub(self, share: float, floor: float = 0.05) -> Deadline:
        """A deadline for a share of the time left (at least ``floor`` seconds, within this one)."""
        d = Deadline(None)
        if self.end < math.inf:
            left = max(0.0, self.left())
            d.end = time.perf_counter() + min(left, max(floor, left * min(1.0, max(0.0, share))))
        return d


__all__ = ["Deadline"]
