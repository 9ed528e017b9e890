"""A wall-clock limit shared by the schedulers' searches (their ``time_budget``), which a caller may
also end early (``cancel``: a ``threading.Event``; the search then returns the best order it has)."""

from __future__ import annotations

import math
import threading
import time


class Deadline:
    """A wall-clock limit (``None``: no limit), expired early once ``cancel`` is set."""

    def __init__(self, seconds: float | None, cancel: threading.Event | None = None) -> None:
        self.start = time.perf_counter()
        self.end = math.inf if seconds is None else self.start + max(0.0, seconds)
        self.cancel = cancel

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def left(self) -> float:
        """Seconds left (negative once expired or cancelled, ``inf`` without a limit)."""
        return -1.0 if self.cancelled() else self.end - time.perf_counter()

    def expired(self) -> bool:
        """Whether the limit has passed or the caller cancelled."""
        return self.cancelled() or time.perf_counter() >= self.end

    def sub(self, share: float, floor: float = 0.05) -> Deadline:
        """A deadline for a share of the time left (at least ``floor`` seconds, within this one)."""
        d = Deadline(None, self.cancel)
        if self.end < math.inf:
            left = max(0.0, self.left())
            d.end = time.perf_counter() + min(left, max(floor, left * min(1.0, max(0.0, share))))
        return d


__all__ = ["Deadline"]
