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


__all__ = ["format_bytes", "terminal_safe"]
