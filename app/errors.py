"""The app's one-line errors and the wait on background work that raises them.

A module of its own, below ``state`` and ``plans``: both wait on futures, and ``state`` imports
``plans`` (its plan store), so neither may import the other for these.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import wait as wait_futures


class AppError(ValueError):
    """A problem the user can cause or fix; the app shows its one-line message."""


def wait_result(fut: Future, wait: float | None, failed: str, keep: tuple[type, ...] = (AppError,)):
    """The result of background work ``fut``, or None while it still runs after ``wait`` seconds
    (None: wait for it).  A failure raises AppError "``failed``: <error>", or the error itself when it
    is one of ``keep`` (already a one-line message)."""
    if wait is None or wait > 0:
        wait_futures([fut], timeout=wait)
    if not fut.done():
        return None
    exc = fut.exception()
    if exc is not None:
        if isinstance(exc, keep):
            raise exc
        raise AppError(f"{failed}: {type(exc).__name__}: {exc}")
    return fut.result()


__all__ = ["AppError", "wait_result"]
