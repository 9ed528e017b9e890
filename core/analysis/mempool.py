"""SwapAdvisor's memory-pool allocation (Huang et al. 2020, section 4.2).

The device memory left after the resident inputs and weights is one pool of fixed-size *objects*
grouped in size classes.  ``TS`` are the sorted distinct sizes of the tensors to place; ``CLS[i]``
is the class of size ``TS[i]`` (non-decreasing from 0, in steps of 0 or +1, so a class is a run of
consecutive sizes); ``CNT[k]`` is the number of objects of class k, each as large as the largest
size of its class.  A tensor lives in an object of its own class; a tensor that finds no free object
forces a swap (``core.schedule.swap_planner``).  The pool's bytes -- what the device must hold on top
of the residents -- are ``sum_k CNT[k] * object_size[k]``, at most the memory limit.

The chromosome's two allocation parts and their genetic operators (section 4.3) live here: the CLS
one-point crossover with its repair, and the CNT crossover through the per-size expansion
``CNT_EXT[i] = CNT[CLS[i]]``, averaged back per class and reduced where over capacity.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """A pool: ``sizes`` (TS, sorted distinct bytes), ``cls`` (CLS, per size) and ``cnt`` (CNT, per class)."""

    sizes: tuple[int, ...]
    cls: tuple[int, ...]
    cnt: tuple[int, ...]

    @property
    def classes(self) -> int:
        return len(self.cnt)

    def object_sizes(self) -> list[int]:
        """Bytes of one object of each class: the largest size of the class."""
        out = [0] * self.classes
        for s, c in zip(self.sizes, self.cls, strict=True):
            out[c] = max(out[c], s)
        return out

    @property
    def pool_bytes(self) -> int:
        return sum(n * s for n, s in zip(self.cnt, self.object_sizes(), strict=True))

    def class_of(self, nbytes: int) -> int:
        """The class of a tensor of ``nbytes`` (one of ``sizes``)."""
        lo, hi = 0, len(self.sizes)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.sizes[mid] < nbytes:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(self.sizes) or self.sizes[lo] != nbytes:
            raise ValueError(f"no size class holds a tensor of {nbytes} bytes")
        return self.cls[lo]

    def to_dict(self) -> dict:
        return {"sizes": list(self.sizes), "cls": list(self.cls), "cnt": list(self.cnt),
                "object_sizes": self.object_sizes(), "pool_bytes": self.pool_bytes}


def size_classes(nbytes: Sequence[int]) -> tuple[int, ...]:
    """TS: the sorted distinct sizes (zero-byte tensors take no object)."""
    return tuple(sorted({int(b) for b in nbytes if b > 0}))


def valid_cls(cls: Sequence[int]) -> bool:
    """CLS starts at 0 and steps by 0 or +1."""
    return bool(cls) and cls[0] == 0 and all(b - a in (0, 1) for a, b in zip(cls, cls[1:], strict=False))


def repair_cls(cls: Sequence[int]) -> list[int]:
    """Shift each tail so every step is 0 or +1 (a drop becomes 0, a jump becomes +1), then start at 0
    (the repair after a one-point crossover: the tail keeps its own steps)."""
    out = list(cls)
    for i in range(1, len(out)):
        step = out[i] - out[i - 1]
        if step not in (0, 1):
            shift = min(max(step, 0), 1) - step
            for j in range(i, len(out)):
                out[j] += shift
    base = out[0] if out else 0
    return [c - base for c in out]


def cls_crossover(a: Sequence[int], b: Sequence[int], cut: int) -> tuple[list[int], list[int]]:
    """One-point crossover of two CLS at ``cut`` (the head of one parent, the tail of the other), each
    child repaired (:func:`repair_cls`, on the parents' own numbering)."""
    c1 = list(a[:cut]) + list(b[cut:])
    c2 = list(b[:cut]) + list(a[cut:])
    base = min(a[0], b[0]) if a and b else 0
    return [c + base for c in repair_cls(c1)], [c + base for c in repair_cls(c2)]


def cnt_ext(cls: Sequence[int], cnt: Sequence[int]) -> list[int]:
    """CNT_EXT[i] = CNT[CLS[i]]: the object count seen by each size."""
    return [cnt[c] for c in cls]


def cnt_from_ext(cls: Sequence[int], ext: Sequence[float]) -> list[int]:
    """Per class the average of ``ext`` over its sizes (rounded half up, at least 1)."""
    k = max(cls) + 1 if cls else 0
    tot = [0.0] * k
    num = [0] * k
    for c, e in zip(cls, ext, strict=True):
        tot[c] += e
        num[c] += 1
    return [max(1, math.floor(t / n + 0.5)) for t, n in zip(tot, num, strict=True)]


def fit_capacity(cnt: Sequence[int], obj: Sequence[int], capacity: int,
                 floor: Sequence[int] | None = None) -> list[int] | None:
    """Reduce the classes over ``capacity``: the excess bytes are split into an equal share per class
    (among the classes that can still give), each class giving up ``ceil(share / object size)``
    objects, never below ``floor`` (default 1); repeated until the pool fits.  None if even the floor
    does not fit."""
    out = list(cnt)
    low = list(floor) if floor is not None else [1] * len(out)
    out = [max(c, f) for c, f in zip(out, low, strict=True)]
    if sum(f * s for f, s in zip(low, obj, strict=True)) > capacity:
        return None
    while True:
        total = sum(c * s for c, s in zip(out, obj, strict=True))
        excess = total - capacity
        if excess <= 0:
            return out
        givers = [k for k in range(len(out)) if out[k] > low[k]]
        share = excess / len(givers)
        for k in givers:
            out[k] = max(low[k], out[k] - math.ceil(share / obj[k]))


def cnt_crossover(cls: Sequence[int], ext_a: Sequence[int], ext_b: Sequence[int], cut: int, obj: Sequence[int],
                  capacity: int, floor: Sequence[int] | None = None) -> list[int] | None:
    """The CNT of a child with class map ``cls``: the parents' CNT_EXT crossed at ``cut``, averaged back
    per class (:func:`cnt_from_ext`) and reduced to ``capacity`` (:func:`fit_capacity`)."""
    ext = list(ext_a[:cut]) + list(ext_b[cut:])
    return fit_capacity(cnt_from_ext(cls, ext), obj, capacity, floor)


def object_sizes_of(sizes: Sequence[int], cls: Sequence[int]) -> list[int]:
    out = [0] * (max(cls) + 1)
    for s, c in zip(sizes, cls, strict=True):
        out[c] = max(out[c], s)
    return out


def class_demand(sizes: Sequence[int], cls: Sequence[int], op_sizes: Sequence[Sequence[int]]) -> list[int]:
    """Per class the most objects one op needs at once (its inputs and outputs of that class): the
    least CNT with which every op can run."""
    index = {s: i for i, s in enumerate(sizes)}
    need = [1] * (max(cls) + 1)
    for group in op_sizes:
        per: dict[int, int] = {}
        for s in group:
            if s > 0:
                c = cls[index[s]]
                per[c] = per.get(c, 0) + 1
        for c, n in per.items():
            if n > need[c]:
                need[c] = n
    return need


def random_allocation(sizes: Sequence[int], weight: Sequence[float], capacity: int, rng: random.Random,
                      floor: Callable[[Sequence[int]], Sequence[int]], classes: int | None = None
                      ) -> Allocation | None:
    """A random pool: ``classes`` (default: random) runs of consecutive sizes, each class's share of
    ``capacity`` proportional to the ``weight`` (bytes x lifetime, say) of its sizes, then fitted.
    None if no pool with these classes fits."""
    n = len(sizes)
    if n == 0:
        return Allocation((), (), ())
    k = classes or rng.randint(1, min(n, 24))
    cuts = sorted(rng.sample(range(1, n), k - 1)) if k > 1 else []
    cls = [0] * n
    c = 0
    for i in range(n):
        if c < len(cuts) and i == cuts[c]:
            c += 1
        cls[i] = c
    return allocation_for(sizes, cls, weight, capacity, floor)


def allocation_for(sizes: Sequence[int], cls: Sequence[int], weight: Sequence[float], capacity: int,
                   floor: Callable[[Sequence[int]], Sequence[int]]) -> Allocation | None:
    """The pool of class map ``cls`` whose classes share ``capacity`` in proportion to ``weight``, each
    class at least ``floor(cls)`` objects (None if those do not fit)."""
    obj = object_sizes_of(sizes, cls)
    need = list(floor(cls))
    w = [0.0] * len(obj)
    for c, x in zip(cls, weight, strict=True):
        w[c] += x
    tw = sum(w) or 1.0
    cnt = [max(need[k], int(capacity * w[k] / tw // obj[k])) for k in range(len(obj))]
    out = fit_capacity(cnt, obj, capacity, need)
    return None if out is None else Allocation(tuple(sizes), tuple(cls), tuple(out))


__all__ = ["Allocation", "allocation_for", "class_demand", "cls_crossover", "cnt_crossover", "cnt_ext",
           "cnt_from_ext", "fit_capacity", "object_sizes_of", "random_allocation", "repair_cls", "size_classes",
           "valid_cls"]
