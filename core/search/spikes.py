"""Spikes of a memory curve: the local maxima near its peak.

A greedy step judged by the whole curve's peak stalls where several separate parts of the schedule
peak at the same height -- a U-Net's feed-forward blocks at the top resolution, at the start of the
backward and again at its end -- since any one rule application lowers one of them and leaves the
peak where it was.  MAGIS's hot-spot steps (section 6: H is what is alive at the peak step) then see
no child that lowers the peak.  :func:`spikes` finds those parts; ``MOptimizer.spike_steps`` lowers
them one at a time (``DeltaEvaluator.focused``: a child is judged by the most its curve holds around
the spike, without raising the peak), and the peak falls once every spike at its height has.
"""

from __future__ import annotations

import numpy as np


def spikes(curve: np.ndarray, level: float, sep: int) -> list[int]:
    """The steps of ``curve`` that hold at least ``level`` and are the most of the curve within
    ``sep`` steps either side (of equal steps, the first; of two such steps closer than ``sep``,
    the earlier), highest first (then earliest)."""
    curve = np.asarray(curve)
    out: list[int] = []
    for p in np.flatnonzero(curve >= level):
        p = int(p)
        lo, hi = max(0, p - sep), p + sep + 1
        window = curve[lo:hi]
        if curve[p] == window.max() and lo + int(np.argmax(window)) == p and (not out or p - out[-1] > sep):
            out.append(p)
    return sorted(out, key=lambda p: (-int(curve[p]), p))


__all__ = ["spikes"]
