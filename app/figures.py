"""Plotly figures and table rows: pure functions of core results (no dash, no app state).

The memory-over-time figure follows PyTorch's memory_viz: a stacked area of live bytes per tensor
kind for the selected schedule, its peak marked, and the total of other schedules overlaid as lines.
Curves of thousands of steps are drawn from a subset of steps that keeps each bucket's minimum and
maximum -- and therefore the exact peak -- so the drawing stays light and the peak stays true.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.analysis.allocator import profile_events, replay
from core.analysis.lifetimes import MemoryProfile, Storage
from core.fmt import BYTE_UNITS, format_bytes
from core.ir.graph import Graph

KIND_ORDER = ["input", "weight", "optimizer_state", "activation", "gradient", "output"]
KIND_LABELS = {"input": "inputs", "weight": "weights", "optimizer_state": "optimizer state",
               "activation": "activations", "gradient": "gradients", "output": "outputs"}
KIND_COLORS = {"input": "#9aa5b1", "weight": "#5b7083", "optimizer_state": "#8e6c8a",
               "activation": "#f2a541", "gradient": "#4c9be8", "output": "#59a14f"}
OVERLAY_COLORS = ["#d62728", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f"]
MAX_POINTS = 1200
TOP_LIVE = 5


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def short_op(op: str) -> str:
    """"aten.native_layer_norm.default" -> "native_layer_norm"."""
    parts = op.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "prims", "_c10d_functional"):
        return parts[1]
    return op


def tensor_name(g: Graph, s: Storage) -> str:
    node = g[s.root.node]
    return node.name if s.root.index == 0 else f"{node.name}[{s.root.index}]"


# ---- downsampling -------------------------------------------------------------------------------
def downsample_indices(y: np.ndarray, max_points: int = MAX_POINTS) -> np.ndarray:
    """Sorted step indices to draw: all of them if few, else per bucket the first, min and max step,
    plus the last step and the global argmax (the exact peak is always drawn)."""
    n = len(y)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 3)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    picks = [edges[:-1], np.array([n - 1, int(np.argmax(y))])]
    starts = edges[:-1]
    # reduceat gives per-bucket min/max values; recover their positions
    mx = np.maximum.reduceat(y, starts)
    mn = np.minimum.reduceat(y, starts)
    bucket_of = np.repeat(np.arange(buckets), np.diff(edges))
    is_max = y == mx[bucket_of]
    is_min = y == mn[bucket_of]
    # first occurrence per bucket
    for mask in (is_max, is_min):
        idx = np.flatnonzero(mask)
        b = bucket_of[idx]
        first = idx[np.r_[True, b[1:] != b[:-1]]]
        picks.append(first)
    return np.unique(np.concatenate(picks))


# ---- live tensors -------------------------------------------------------------------------------
@dataclass
class LiveIndex:
    """Arrays over a profile's storages for fast "largest live tensors at step i" queries."""

    storages: list[Storage]
    alloc: np.ndarray
    free: np.ndarray
    nbytes: np.ndarray

    @classmethod
    def of(cls, mem: MemoryProfile) -> LiveIndex:
        # order of MemoryProfile.live_at: largest first, ties by root
        st = sorted((s for s in mem.storages if s.nbytes > 0), key=lambda s: (-s.nbytes, s.root))
        return cls(st, np.array([s.alloc for s in st], dtype=np.int64),
                   np.array([s.free for s in st], dtype=np.int64),
                   np.array([s.nbytes for s in st], dtype=np.int64))

    def top(self, steps: Sequence[int], k: int = TOP_LIVE, resident: bool = False) -> list[list[Storage]]:
        """For each step, the k largest storages alive (as ``MemoryProfile.live_at(step)[:k]``);
        ``resident=False`` leaves out inputs/weights held for the whole step."""
        out: list[list[Storage]] = []
        steps = np.asarray(steps, dtype=np.int64)
        keep = np.ones(len(self.storages), bool) if resident else self.alloc >= 0
        cand = np.flatnonzero(keep)
        a, f = self.alloc[cand], self.free[cand]
        for lo in range(0, len(steps), 256):
            chunk = steps[lo:lo + 256]
            alive = (a[None, :] <= chunk[:, None]) & (chunk[:, None] <= f[None, :])
            for row in alive:
                out.append([self.storages[i] for i in cand[np.flatnonzero(row)[:k]]])
        return out


# ---- memory over time ---------------------------------------------------------------------------
@dataclass
class Curve:
    """One schedule's memory curve: its profile and (optionally) simulated start time per step."""

    name: str
    profile: MemoryProfile
    start: np.ndarray | None = None  # seconds per step; None: x is the step index
    latency: float = 0.0
    index: LiveIndex | None = None  # reuse a prebuilt index for the hover text
    hover: Hover | None = None  # reuse prebuilt hover data (must be for the drawn steps)


def _x(curve: Curve, idx: np.ndarray, x_mode: str) -> np.ndarray:
    if x_mode == "time" and curve.start is not None:
        return curve.start[idx] * 1e3  # milliseconds
    return idx


@dataclass
class Hover:
    """Per drawn step of a curve: its hover text and the producers of its largest live tensors."""

    steps: list[int]
    text: list[str]
    top_nodes: list[list[int]]


def hover_data(g: Graph, mem: MemoryProfile, steps: Sequence[int], index: LiveIndex | None = None,
               k: int = TOP_LIVE) -> Hover:
    """Hover text per step: the op, total live bytes and the k largest live tensors produced during
    the schedule (resident inputs/weights summarised in one line) -- ``live_at(step)`` without the
    residents, computed for all steps at once."""
    index = index or LiveIndex.of(mem)
    tops = index.top(steps, k)
    resident = mem.resident
    text = []
    for step, top in zip(steps, tops, strict=True):
        node = g[mem.order[step]]
        lines = [f"<b>step {step}</b>: {short_op(node.op)} <i>{node.name}</i>",
                 f"live {format_bytes(mem.step_bytes[step])}"]
        if top:
            lines.append("largest live tensors:")
            for s in top:
                lines.append(f"&nbsp;&nbsp;{format_bytes(s.nbytes)} {tensor_name(g, s)} ({s.kind})")
        if resident:
            lines.append(f"+ inputs & weights held all step: {format_bytes(resident)}")
        text.append("<br>".join(lines))
    return Hover(list(steps), text, [[s.root.node for s in top] for top in tops])


def memory_figure(g: Graph, curves: Sequence[Curve], x_mode: str = "step", max_points: int = MAX_POINTS,
                  capacity: int | None = None, pending: Sequence[str] = (), reserved: bool = True) -> dict:
    """Stacked live bytes by tensor kind for ``curves[0]``; the total of every other curve as a line.
    ``reserved``: a dotted line at ``curves[0]``'s predicted reserved peak of the CUDA caching
    allocator (``core.analysis.allocator``: block rounding, pools, segments, fragmentation).
    Each point's customdata is [step, schedule name] ([step, name, producers of the largest live
    tensors] on the selected curve's total) for click handling.

    Returns the figure as a plain dict (``go.Figure(fig)`` validates it): building ``go`` objects
    validates every array and costs more than the rest of the callback for 10k-step curves."""
    time_axis = x_mode == "time"
    data: list[dict] = []
    annotations: list[dict] = []
    shapes: list[dict] = []
    layout = _base_layout(time_axis)
    fig = {"data": data, "layout": layout}
    if pending:
        annotations.append(_note(("still computing: " if curves else "computing ") + ", ".join(pending) + " ..."))
    layout["annotations"] = annotations
    layout["shapes"] = shapes
    if not curves:
        return fig
    main = curves[0]
    mem = main.profile
    total = mem.step_bytes
    idx = downsample_indices(total, max_points)
    x = _x(main, idx, x_mode).tolist()
    steps = idx.tolist()
    hov = main.hover if main.hover is not None and main.hover.steps == steps else \
        hover_data(g, mem, steps, main.index)
    first = _first_kind(mem)
    for kind in KIND_ORDER:
        y = mem.by_kind.get(kind)
        if y is None or not np.any(y):
            continue
        tr = {"type": "scatter", "x": x, "y": y[idx].tolist(), "name": KIND_LABELS[kind], "stackgroup": "mem",
              "mode": "lines", "line": {"width": 0.5, "color": KIND_COLORS[kind], "shape": "hv"},
              "fillcolor": KIND_COLORS[kind], "hoverinfo": "skip", "legendgroup": "kinds"}
        if kind == first:
            tr["legendgrouptitle"] = {"text": f"{main.name}: live bytes by kind"}
        data.append(tr)
    data.append({
        "type": "scatter", "x": x, "y": total[idx].tolist(), "mode": "lines",
        "name": f"{main.name} total (peak {format_bytes(mem.peak)})",
        "line": {"width": 1.6, "color": "#222", "shape": "hv"},
        "customdata": [[s, main.name, top] for s, top in zip(steps, hov.top_nodes, strict=True)],
        "text": hov.text, "hovertemplate": "%{text}<extra></extra>", "legendgroup": "totals",
        "legendgrouptitle": {"text": "total per schedule"},
    })
    peaks: list[tuple[Curve, str]] = [(main, "#111")]
    for i, c in enumerate(curves[1:]):
        m = c.profile
        j = downsample_indices(m.step_bytes, max_points)
        color = OVERLAY_COLORS[i % len(OVERLAY_COLORS)]
        data.append({
            "type": "scatter", "x": _x(c, j, x_mode).tolist(), "y": m.step_bytes[j].tolist(), "mode": "lines",
            "name": f"{c.name} (peak {format_bytes(m.peak)})",
            "line": {"width": 1.6, "color": color, "shape": "hv", "dash": "dot"},
            "customdata": [[s, c.name] for s in j.tolist()], "legendgroup": "totals",
            "text": [format_bytes(v) for v in m.step_bytes[j].tolist()],
            "hovertemplate": f"{c.name}: %{{text}} at step %{{customdata[0]}}<extra></extra>",
        })
        peaks.append((c, color))
    for c, color in peaks:
        m = c.profile
        if not m.peak_steps:
            continue
        ps = m.peak_steps[0]
        data.append({
            "type": "scatter", "x": [_x(c, np.array([ps]), x_mode).tolist()[0]], "y": [m.peak], "mode": "markers",
            "showlegend": False, "customdata": [[ps, c.name]], "hoverinfo": "skip", "name": f"peak {c.name}",
            "marker": {"symbol": "triangle-down", "size": 12, "color": color, "line": {"width": 1, "color": "#fff"}},
        })
    ps = mem.peak_steps[0] if mem.peak_steps else 0
    node = g[mem.order[ps]] if mem.order else None
    annotations.append({
        "x": _x(main, np.array([ps]), x_mode).tolist()[0], "y": mem.peak, "yshift": 12, "showarrow": False,
        "text": f"peak {format_bytes(mem.peak)}" + (f" at step {ps} ({short_op(node.op)})" if node else ""),
        "font": {"size": 11, "color": "#111"}, "bgcolor": "rgba(255,255,255,0.8)",
    })
    if capacity and mem.peak > 0.5 * capacity:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": capacity, "y1": capacity,
                       "line": {"dash": "dash", "color": "#d62728", "width": 1}})
        annotations.append({"xref": "paper", "x": 1, "y": capacity, "xanchor": "right", "yanchor": "bottom",
                            "showarrow": False, "text": f"device memory {format_bytes(capacity)}",
                            "font": {"size": 10, "color": "#d62728"}})
    if capacity and mem.peak > capacity:
        annotations.append(_note(f"does not fit: peak {format_bytes(mem.peak)} is "
                                 f"{format_bytes(mem.peak - capacity)} over the device's {format_bytes(capacity)}"))
    reserved_peak = replay(profile_events(g, mem)).reserved_peak if reserved and mem.order else 0
    if reserved_peak:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": reserved_peak, "y1": reserved_peak,
                       "line": {"dash": "dot", "color": RESERVED_COLOR, "width": 1.2}})
        annotations.append({"xref": "paper", "x": 0, "y": reserved_peak, "xanchor": "left", "yanchor": "bottom",
                            "showarrow": False, "font": {"size": 10, "color": RESERVED_COLOR},
                            "text": f"{main.name}: predicted reserved peak {format_bytes(reserved_peak)} "
                                    f"(CUDA caching allocator, +{format_bytes(reserved_peak - mem.peak)} over live)"})
    top = max(max(c.profile.peak for c in curves), capacity if capacity and mem.peak > 0.5 * capacity else 0,
              reserved_peak)
    layout["yaxis"]["range"] = [0, top * 1.12 if top else 1]
    layout["yaxis"]["tickvals"], layout["yaxis"]["ticktext"] = binary_ticks(top * 1.12 if top else 1)
    return fig


RESERVED_COLOR = "#9333ea"  # the predicted reserved-peak line


def _first_kind(mem: MemoryProfile) -> str | None:
    for kind in KIND_ORDER:
        y = mem.by_kind.get(kind)
        if y is not None and np.any(y):
            return kind
    return None


def _note(text: str) -> dict:
    return {"xref": "paper", "yref": "paper", "x": 0, "y": 1.07, "showarrow": False, "xanchor": "left",
            "text": text, "font": {"size": 11, "color": "#8a5a00"}}


# ---- methods on the Pareto figure ---------------------------------------------------------------------
# colours another method already uses (closer than ``MIN_COLOUR_DISTANCE`` in RGB) are replaced, in the
# registry's order, by the first of these that is far enough from every colour taken
SPARE_COLOURS = ["#e11d48", "#84cc16", "#6366f1", "#d946ef", "#78350f", "#0d9488", "#facc15", "#475569"]
MIN_COLOUR_DISTANCE = 45.0


def _rgb(c: str) -> tuple[int, int, int]:
    c = c.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)


def _distance(a: str, b: str) -> float:
    return math.dist(_rgb(a), _rgb(b))


def method_styles(names: Sequence[str] | None = None) -> dict[str, tuple[str, str]]:
    """Method name -> (colour, marker) on the Pareto figure: each method's own (``Method.colour`` and
    ``Method.symbol`` of the registry, ``core.search.methods.METHODS``), a colour too close to an
    earlier method's replaced so that no two methods look alike (SwapAdvisor's and torch min-cut's
    greens); ``names``: methods outside the registry, given the spare colours and markers."""
    from core.search.methods import METHODS

    out: dict[str, tuple[str, str]] = {}
    taken: list[str] = []
    symbols = {m.symbol for m in METHODS.values()}
    spare_symbols = [s for s in ("circle-open", "square-open", "diamond-open", "star-open", "bowtie", "asterisk")
                     if s not in symbols]

    def pick(colour: str | None) -> str:
        if colour and all(_distance(colour, t) >= MIN_COLOUR_DISTANCE for t in taken):
            return colour
        return next((c for c in SPARE_COLOURS if c not in taken
                     and all(_distance(c, t) >= MIN_COLOUR_DISTANCE for t in taken)),
                    next((c for c in SPARE_COLOURS if c not in taken), "#6b7280"))

    for name, m in METHODS.items():
        c = pick(m.colour)
        taken.append(c)
        out[name] = (c, m.symbol)
    for i, name in enumerate(sorted(set(names or ()) - set(out))):
        c = pick(None)
        taken.append(c)
        out[name] = (c, spare_symbols[i % len(spare_symbols)] if spare_symbols else "circle")
    return out


def log_binary_ticks(low: float, top: float) -> tuple[list[float], list[str]]:
    """Ticks of a logarithmic byte axis from ``low`` to ``top``: powers of two (and 1.5 times them
    where the range spans less than three powers), labelled in binary units (``format_bytes``)."""
    low, top = max(float(low), 1.0), max(float(top), 2.0)
    k0, k1 = math.floor(math.log2(low)), math.ceil(math.log2(top))
    vals = [2.0**k for k in range(k0, k1 + 1) if low <= 2.0**k <= top]
    if len(vals) < 3:
        vals = sorted(v for k in range(k0, k1 + 1) for v in (2.0**k, 1.5 * 2.0**k) if low <= v <= top)
    return vals, [format_bytes(v) for v in vals]


_FAIL_HEAD = re.compile(r"^([^:;()]{1,40}): (.*)$", re.S)


def failure_groups(text: str) -> list[tuple[str, list[str]]]:
    """A method's failure reasons (``meta.peer_failures``: "budget 0.9: why; budget 0.8: why ...")
    grouped by reason: [(reason, [setting, ...])], in the order they first come.  Numbers of seconds
    a reason's details (what follows its first ": ", parentheses) and a "(budget X already is)" do
    not split a group: the first reason's text stands for it."""
    parts: list[list[str]] = []
    for piece in text.split("; "):
        m = _FAIL_HEAD.match(piece)
        if m and parts and not m.group(1).strip():
            m = None
        if m:
            parts.append([m.group(1).strip(), m.group(2).strip()])
        elif parts:
            parts[-1][1] += "; " + piece
        else:
            parts.append(["", piece.strip()])
    groups: dict[str, tuple[str, list[str]]] = {}
    for setting, why in parts:
        shown = re.sub(r"\s*\(budget [\d.]+ already is\)?", "", why)
        key = re.sub(r"\s*\([^()]*\)?", "", shown).split(": ")[0]  # the reason's head: its details differ
        key = re.sub(r"\d+(\.\d+)?", "#", key)
        if key not in groups:
            groups[key] = (shown, [])
        groups[key][1].append(setting)
    return list(groups.values())


def failure_lines(label: str, text: str) -> list[str]:
    """One line per failure reason of a method: "Checkmate: 7 budgets failed: infeasible" (or the
    setting itself where there is one: "DTR: budget 0.6 failed: ...")."""
    lines = []
    for why, settings in failure_groups(text):
        named = [s for s in settings if s]
        if not named or named == ["all"]:
            lines.append(f"{label}: {why}")
        elif len(named) == 1:
            lines.append(f"{label}: {named[0]} failed: {why}")
        else:
            words = {m.group(1) if (m := re.match(r"^(\w+) [\d.]+$", s)) else None for s in named}
            word = words.pop() if len(words) == 1 else None
            lines.append(f"{label}: {len(named)} {word + 's' if word else 'settings'} failed: {why}")
    return lines


def binary_ticks(top: float, n: int = 6, low: float = 0.0) -> tuple[list[float], list[str]]:
    """Tick values and labels for a byte axis from ``low`` (default 0) to ``top`` in binary units
    (KiB, MiB, GiB): a step of 1, 2, 2.5 or 5 (times a power of ten) of the unit that suits ``top``
    -- plotly's own ticks are decimal (kB, MB, GB).  From 0 the labels are ``format_bytes``'s; over a
    range (``low`` > 0) they are all in that unit with as many decimals as the step needs ("0.75 GiB",
    "1.00 GiB"), so neighbouring ticks never print alike."""
    top = max(float(top), 1.0)
    low = min(max(float(low), 0.0), top)
    unit = 1.0
    while top / unit >= 1024 and unit < 2.0**40:
        unit *= 1024
    raw = (top - low) / unit / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw) * unit
    if unit == 1:
        step = max(1.0, math.ceil(step))
    if low <= 0:
        vals = [i * step for i in range(int(top // step) + 2)]
        return vals, [format_bytes(v) for v in vals]
    first = math.ceil(low / step - 1e-9)
    vals = [i * step for i in range(first, int(top // step) + 1)]
    if len(vals) < 3 and n < 24:  # a narrow range: a finer step
        return binary_ticks(top, n + 2, low)
    name = BYTE_UNITS[min(round(math.log(unit, 1024)), len(BYTE_UNITS) - 1)]
    d = next((d for d in range(4) if all(abs(round(v / unit, d) - v / unit) < 1e-9 * max(1.0, v / unit)
                                         for v in vals)), 3)
    return vals, [f"{v / unit:.{d}f} {name}" for v in vals]


def _base_layout(time_axis: bool) -> dict:
    return {
        "template": "plotly_white",
        "margin": {"l": 60, "r": 10, "t": 30, "b": 40},
        "hovermode": "x",
        "hoverdistance": -1,
        "legend": {"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 10},
                   "groupclick": "toggleitem"},
        "xaxis": {"title": {"text": "simulated time (ms)" if time_axis else "schedule step"},
                  "showspikes": True, "spikemode": "across", "spikethickness": 1, "spikecolor": "#999",
                  "spikedash": "dot"},
        "yaxis": {"title": {"text": "live memory"}},
        "uirevision": "memory",
    }


# ---- tables -------------------------------------------------------------------------------------
HOTSPOT_COLUMNS = [
    ("tensor", "tensor"), ("producer", "producer op"), ("module", "module"), ("kind", "kind"),
    ("shape", "shape"), ("dtype", "dtype"), ("size", "size"), ("bytes", "bytes"), ("alloc", "alloc step (-1: resident)"),
    ("free", "free step"), ("lifetime", "lifetime (steps)"),
]


def hotspot_rows(g: Graph, hot: Sequence[Storage], include_resident: bool = False) -> list[dict]:
    """One row per tensor alive at the peak (largest first); ``id`` is "<producer node id>:<output>"."""
    rows = []
    for s in hot:
        if s.alloc < 0 and not include_resident:
            continue
        node = g[s.root.node]
        t = g.tensor(s.root)
        resident = s.alloc < 0
        rows.append({
            "id": f"{node.id}:{s.root.index}",
            "tensor": tensor_name(g, s),
            "producer": "placeholder" if resident else short_op(node.op),
            "module": node.module,
            "kind": s.kind,
            "shape": "x".join(map(str, t.shape)) or "scalar",
            "dtype": t.dtype,
            "size": format_bytes(s.nbytes),
            "bytes": s.nbytes,
            "alloc": s.alloc,  # -1: resident (input/weight held for the whole step)
            "free": s.free,
            "lifetime": s.free - max(s.alloc, 0) + 1,
        })
    return rows
