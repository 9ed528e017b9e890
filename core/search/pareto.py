"""Pareto non-dominance over named metrics: the one home of "which points are on the frontier"
(the M-Optimizer's archive, the app's memory slider, ``bench/plots``'s step lines).

A point *weakly dominates* another when it is no worse in every metric.  Lower is better.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
FRONT = ("peak", "latency")  # the frontier the product draws (memory against time)


def dominates(a: Sequence[float], b: Sequence[float], eps: float = 0.0) -> bool:
    """``a`` weakly dominates ``b``: no worse in every coordinate (``eps``: b must beat a by more
    than ``eps`` in one to escape)."""
    return all(x <= y + eps for x, y in zip(a, b, strict=True))


def vector(m: Mapping[str, float], names: Sequence[str] = FRONT) -> tuple[float, ...]:
    return tuple(m[k] for k in names)


def non_dominated(items: Iterable[T], values: Callable[[T], Sequence[float]], *,
                  tie: Callable[[T], object] | None = None, eps: float = 0.0) -> list[T]:
    """The items no other item weakly dominates, in ascending order of their values (then ``tie``);
    of equal points the first in that order stays.  A sweep: an item is kept unless an item kept
    before it weakly dominates it (one that dominates it sorts before it)."""
    keyed = sorted(((tuple(values(x)), tie(x) if tie else 0, k, x) for k, x in enumerate(items)),
                   key=lambda t: t[:3])
    kept: list[tuple[float, ...]] = []
    out: list[T] = []
    for v, _, _, x in keyed:
        if len(v) == 2:  # the common case: sorted by the first, compare with the last kept
            if kept and not v[1] < kept[-1][1] - eps:
                continue
        elif any(dominates(w, v, eps) for w in kept):
            continue
        kept.append(v)
        out.append(x)
    return out


def front_of(items: Iterable[T], names: Sequence[str] = FRONT) -> list[T]:
    """The frontier of items that carry named metrics (plans, states) over the metrics ``names``
    (any registered ones, e.g. ("peak", "host_bytes")), ascending."""
    return non_dominated(items, lambda x: vector(x.metrics, names))


class ParetoArchive(Generic[T]):
    """The non-dominated items seen so far, kept incrementally (the M-Optimizer's archive): an item
    enters unless one already there weakly dominates it (the first of equal points stays), and
    evicts those it dominates."""

    def __init__(self, values: Callable[[T], Sequence[float]]) -> None:
        self.values = values
        self._items: list[T] = []
        self._vecs: list[tuple[float, ...]] = []  # each item's values, computed once (a search adds per child)

    @property
    def items(self) -> list[T]:
        return self._items

    @items.setter
    def items(self, xs: list[T]) -> None:
        self._items = list(xs)
        self._vecs = [tuple(self.values(x)) for x in self._items]

    def add(self, x: T) -> bool:
        v = tuple(self.values(x))
        if any(dominates(w, v) for w in self._vecs):
            return False
        keep = [k for k, w in enumerate(self._vecs) if not dominates(v, w)]
        self._items = [self._items[k] for k in keep] + [x]
        self._vecs = [self._vecs[k] for k in keep] + [v]
        return True

    def front(self) -> list[T]:
        """The items by ascending values."""
        return sorted(self.items, key=lambda x: tuple(self.values(x)))

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


__all__ = ["FRONT", "ParetoArchive", "dominates", "front_of", "non_dominated", "vector"]
