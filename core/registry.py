"""``Registry``: things by name, in the order they were registered -- the one idiom behind every
table of the product (rules, methods, metrics, schedulers, substitution and fusion searches,
explainers).

A registry is filled by explicit ``register`` lines in the module that owns it; importing this
module registers nothing, and it imports nothing from the project (every package may use it).
Looking up an unknown name is a ``ValueError`` whose message lists the known names, so a user's
typo comes back with the choices.  ``temporarily`` lends a name for a ``with`` block (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "UnknownName"]


class UnknownName(ValueError, KeyError):
    """An unknown name: a ``ValueError`` (what the ``get_*`` functions always raised) that is also a
    ``KeyError``, so ``registry[name]`` keeps the mapping contract."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Items of type ``T`` by name, in registration order.

    ``kind`` names an item in messages ("rule": ``unknown rule 'x'; known: a, b``); ``sort_known``
    lists the known names sorted in that message instead of in registration order; ``check(name,
    item)``, if given, vets every item registered (it raises ``ValueError`` to refuse one).
    """

    def __init__(self, kind: str, *, sort_known: bool = False,
                 check: Callable[[str, T], None] | None = None) -> None:
        self.kind = kind
        self.sort_known = sort_known
        self._check = check
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T, *, replace: bool = False) -> T:
        """Add ``item`` as ``name`` and return it (so ``X = registry.register("x", X(...))`` is one
        line).  A name already taken is refused (``ValueError``) unless ``replace``: then the new item
        takes the old one's place in the order."""
        if not name:
            raise ValueError(f"a {self.kind} needs a name (got {name!r})")
        if name in self._items and not replace:
            raise ValueError(f"a {self.kind} needs a new name ({name!r} is taken)")
        if self._check is not None:
            self._check(name, item)
        self._items[name] = item
        return item

    def unregister(self, name: str) -> T | None:
        """Remove ``name``; the item it had, or None if it had none."""
        return self._items.pop(name, None)

    def get(self, name: str) -> T:
        """The item called ``name`` (``UnknownName``, a ``ValueError``, listing the known names if
        there is none)."""
        try:
            return self._items[name]
        except KeyError:
            known = sorted(self._items) if self.sort_known else list(self._items)
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(known)}") from None

    __getitem__ = get

    def names(self) -> list[str]:
        """The names, in registration order."""
        return list(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs, in registration order."""
        return list(self._items.items())

    def values(self) -> list[T]:
        """The items, in registration order."""
        return list(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        """The names, in registration order (a snapshot: registering while iterating is safe)."""
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"

    @contextmanager
    def temporarily(self, name: str, item: T) -> Iterator[T]:
        """Register ``item`` as ``name`` for the duration of a ``with`` block (replacing what is
        there), then restore what was there before -- the old item in its place, or no item --
        whether the block ends normally or by an exception."""
        before = {name: self._items[name]} if name in self._items else {}
        self.register(name, item, replace=True)
        try:
            yield item
        finally:
            if before:
                self._items.update(before)  # back in its place: the name never left the order
            else:
                self._items.pop(name, None)
