"""Memory limits: one type for what ``optimize``, the command line, sweeps and the app take.

A limit is either

* a **fraction** of the baseline peak (the imported graph's peak in its traced order): a bare number
  in (0, 1] -- ``0.5``, ``"0.8"``, ``"1"``; or
* a **size**: a number with a unit -- ``"8GiB"``, ``"512MiB"``, ``"1.5GB"`` (decimal units),
  ``"4096B"`` (``core.fmt.parse_bytes``), at least one byte.

A bare number above 1 is refused, never read as bytes: ``1.5`` says "a fraction of the peak must be
at most 1; for a size give units, e.g. 1.5GiB", so a forgotten unit cannot silently mean 1.5 bytes.
``MemoryLimit.bytes(peak)`` resolves a limit against a baseline peak; ``str()`` is the limit as
given (spaces left out), for labels, file names and the plan file's meta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..fmt import parse_bytes


@dataclass(frozen=True)
class MemoryLimit:
    """A fraction of the baseline peak (``fraction``) or a size in bytes (``size``): exactly one is
    set.  Build it with :meth:`parse`."""

    text: str  # as given, spaces left out
    fraction: float | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        if (self.fraction is None) == (self.size is None):
            raise ValueError("a memory limit is a fraction or a size, exactly one of them")

    @classmethod
    def parse(cls, value: MemoryLimit | str | float) -> MemoryLimit:
        """A limit from its text or number (ValueError with a one-line message saying what is
        accepted); a MemoryLimit is returned as it is."""
        if isinstance(value, MemoryLimit):
            return value
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{value!r} is not a memory limit (a fraction of the peak, e.g. 0.5, or a size, "
                             f"e.g. 8GiB)")
        text = value.strip().replace(" ", "") if isinstance(value, str) else str(value)
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is None:  # a size, which needs a unit
            try:
                size = parse_bytes(text)
            except ValueError:
                raise ValueError(f"{text!r} is not a size (e.g. 8GiB, 512MiB) or a fraction of the peak "
                                 f"(e.g. 0.5)") from None
            if size < 1:
                raise ValueError(f"{text!r} is not a memory limit: a size must be at least 1 byte")
            return cls(text, size=size)
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"{text!r} is not a memory limit: a fraction of the peak must be above 0 and "
                             f"at most 1")
        if number > 1:
            example = f"{text}B" if number.is_integer() and number >= 1024 else f"{text}GiB"
            raise ValueError(f"{text!r} is not a memory limit: a fraction of the peak must be at most 1; "
                             f"for a size give units, e.g. {example}")
        return cls(text, fraction=number)

    @classmethod
    def of_bytes(cls, size: int) -> MemoryLimit:
        """A size of ``size`` bytes (its text ``"<size>B"``)."""
        return cls.parse(f"{int(size)}B")

    def bytes(self, baseline_peak: int) -> int:
        """The limit in bytes: the size, or the fraction of ``baseline_peak`` rounded down (a peak of
        whole bytes is within the limit exactly when it is within the unrounded product)."""
        if self.size is not None:
            return self.size
        return math.floor(self.fraction * baseline_peak)

    def __str__(self) -> str:
        return self.text


__all__ = ["MemoryLimit"]
