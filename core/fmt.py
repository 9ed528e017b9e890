"""Human-readable quantities, shared by the command line, the exported scripts and the app."""

from __future__ import annotations

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: whole bytes below 1 KiB, then two decimals below 10 and one
    above -- "512 B", "1.50 KiB", "80.0 GiB" (TiB is the largest unit)."""
    n = float(n)
    unit = BYTE_UNITS[0]
    for unit in BYTE_UNITS:
        if abs(n) < 1024 or unit == BYTE_UNITS[-1]:
            break
        n /= 1024
    if unit == "B":
        return f"{n:.0f} B"
    return f"{n:.2f} {unit}" if abs(n) < 10 else f"{n:.1f} {unit}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it takes: "1 step", "2 steps", "1 tensor swapped" with
    ``many`` for an irregular plural ("1 copy", "3 copies")."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def parse_bytes(text: str) -> int:
    """``"8GiB"``, ``"512 MiB"``, ``"1.5GB"`` (decimal units), ``"4096"`` -> bytes; ValueError with the
    accepted forms otherwise."""
    t = text.strip().replace(" ", "")
    units = {u.lower(): 1024 ** k for k, u in enumerate(BYTE_UNITS)}
    units.update({"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 1024, "m": 1024**2, "g": 1024**3})
    num = t.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = t[len(num):].lower() or "b"
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in units or not value >= 0 or value != value or value == float("inf"):
        raise ValueError(f"{text!r} is not a size (e.g. 8GiB, 512MiB, 1.5GB or a byte count)")
    return int(value * units[unit])


def terminal_safe(s: object) -> str:
    """``s`` as text that is safe to print on a terminal: control characters (ANSI escape sequences
    start with one), format characters such as bidirectional overrides, line and paragraph
    separators and lone surrogates are written as ``\\xNN`` / ``\\uNNNN`` escapes; printable text
    (any script) is kept as it is."""
    s = str(s)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


__all__ = ["format_bytes", "plural", "terminal_safe"]
