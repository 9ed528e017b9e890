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


__all__ = ["format_bytes"]
