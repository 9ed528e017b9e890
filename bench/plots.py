"""Figures of ``bench/pareto.py``: per workload, one Pareto figure (every method on one figure) and
one convergence figure of the M-Optimizer's search, each written as PNG (matplotlib, the ``bench``
extra) and HTML (plotly).

The HTML files load ``plotly.min.js`` from the same folder (plotly's bundled copy, written there
once), so they open offline; where that file is missing (e.g. only the figures were copied) they
fall back to plotly's CDN.

Inputs are plain data, as ``bench/pareto.py`` writes them to its JSON:

* ``points``: method -> list of ``{"peak_ratio", "latency_ratio", "label"}`` (ratios against
  PyTorch eager of the same run);
* ``records``: the M-Optimizer's per-iteration records, each with ``wall_seconds`` (since
  ``optimize`` was called), ``iteration`` (restarting with each memory limit of the sweep),
  ``best_peak`` and ``best_latency`` (bytes, seconds).
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from plotly.subplots import make_subplots

from core.search.methods import METHODS
from core.search.pareto import non_dominated

# names, colours and markers are the methods' own (``core.search.methods``): the same as the app's
MPL_MARKERS = {"circle": "o", "square": "s", "diamond": "D", "triangle-up": "^", "triangle-down": "v",
               "star": "*", "x": "x", "hexagon": "h", "pentagon": "p", "cross": "P",
               "triangle-left": "<", "diamond-wide": "d", "triangle-right": ">", "square-x": "X"}


def _style(m: str) -> tuple[str, str, str, str]:
    """(label, colour, matplotlib marker, plotly symbol) of method ``m``."""
    if m not in METHODS:
        return m, "#666666", "o", "circle"
    x = METHODS[m]
    return x.label, x.colour, MPL_MARKERS.get(x.symbol, "o"), x.symbol


PLOTLYJS = "plotly.min.js"
# the headline numbers' thresholds, drawn as guides: latency overheads and memory limits
OVERHEADS = (1.05, 1.10)
LIMITS = (0.8, 0.4)


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated (peak, latency) points, by peak ascending (so latency descending)."""
    return non_dominated(points, lambda x: x)


def _methods(points: dict[str, list[dict]]) -> list[str]:
    order = list(METHODS)
    return sorted(points, key=lambda m: (order.index(m) if m in order else len(order), m))


def _xy(pts: list[dict]) -> tuple[list[float], list[float]]:
    return [p["peak_ratio"] for p in pts], [p["latency_ratio"] for p in pts]


# ---- PNG (matplotlib) -------------------------------------------------------------------------
def _figure(w: float, h: float):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def pareto_png(path: Path, workload: str, points: dict[str, list[dict]], subtitle: str = "") -> None:
    fig = _figure(10.0, 5.6)
    ax = fig.add_subplot()
    for x in LIMITS:
        ax.axvline(x, color="0.6", lw=0.9, ls=":", zorder=0)
        ax.annotate(f"{x:.0%} limit", (x, 0), xycoords=("data", "axes fraction"), xytext=(3, 3),
                    textcoords="offset points", fontsize=8, color="0.4")
    for y in OVERHEADS:
        ax.axhline(y, color="0.6", lw=0.9, ls=":", zorder=0)
        ax.annotate(f"+{y - 1:.0%}", (0, y), xycoords=("axes fraction", "data"), xytext=(2, 2),
                    textcoords="offset points", fontsize=8, color="0.45")
    for m in _methods(points):
        pts = points[m]
        name, color, marker, _ = _style(m)
        if not pts:  # in the legend all the same: the table says why
            ax.plot([], [], marker=marker, ls="none", color=color, mfc="white",
                    label=f"{name}: no point")
            continue
        if m == "eager":
            ax.plot([1.0], [1.0], marker="*", ms=15, color=color, ls="none", label=name, zorder=5)
            continue
        fr = frontier(list(zip(*_xy(pts), strict=True)))
        fx, fy = [p for p, _ in fr], [t for _, t in fr]
        if m == "magis":
            ax.plot(fx, fy, drawstyle="steps-post", color=color, lw=2.2, label=f"{name}, frontier", zorder=4)
            ax.plot(fx, fy, "o", color=color, ms=3.5, zorder=4)
            continue
        if len(fr) > 1:
            ax.plot(fx, fy, drawstyle="steps-post", color=color, lw=1.2, ls="--", alpha=0.8, zorder=3)
        x, y = _xy(pts)
        ax.plot(x, y, marker=marker, ls="none", ms=7, color=color, mfc="white", mew=1.6, label=name, zorder=3)
    ax.set_xlabel("peak memory / PyTorch eager's peak")
    ax.set_ylabel("latency / PyTorch eager's latency")
    ax.set_title(f"{workload}: memory / latency trade-off" + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    ax.grid(True, color="0.92")
    lo, hi = ax.get_xlim()
    ax.set_xlim(max(0.0, min(lo, 0.35)), max(hi, 1.05))
    fig.legend(fontsize=8.5, loc="outside right upper")
    fig.savefig(path)


def convergence_png(path: Path, workload: str, records: list[dict], eager: dict, within: float | None,
                    subtitle: str = "", frontier_peak: float | None = None) -> None:
    fig = _figure(8.5, 5.8)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    t, peak, lat, low, starts = _convergence(records, eager)
    ax1.plot(t, peak, drawstyle="steps-post", color=_style("magis")[1], lw=1.8, label="best state's peak")
    ax1.plot(t, low, drawstyle="steps-post", color="0.35", lw=1.0, ls="--", label="frontier's lowest peak so far")
    if frontier_peak is not None:
        ax1.axhline(frontier_peak, color=_style("magis")[1], lw=1.0, ls="-.", alpha=0.7,
                    label=f"final frontier's lowest peak ({frontier_peak:.3f})")
    ax2.plot(t, lat, drawstyle="steps-post", color=_style("sqrt_n")[1], lw=1.8, label="best state's latency")
    for k, ax in enumerate((ax1, ax2)):
        if t:
            ax.axvspan(0, t[0], color="0.93", zorder=0,
                       label="before the first record (F-Tree, greedy warm start)" if k == 0 else None)
        for j, s in enumerate(starts[1:]):
            ax.axvline(s, color="0.7", lw=0.8, zorder=0,
                       label="next memory limit of the sweep" if k == 0 and j == 0 else None)
        if within is not None:
            ax.axvline(within, color="k", lw=1.2, ls=":",
                       label=f"within 1% of the final best peak: {within:.1f} s" if k == 0 else None)
        ax.grid(True, color="0.92")
        ax.set_xlim(left=0)
        ax.legend(fontsize=8, loc="best", framealpha=0.9)
    ax1.set_ylabel("peak / eager's")
    ax2.set_ylabel("latency / eager's")
    ax2.set_xlabel("seconds since optimize() was called")
    ax1.set_title(f"{workload}: M-Optimizer convergence" + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    fig.savefig(path)


def _convergence(records: list[dict], eager: dict):
    """(times, best peak ratios, best latency ratios, the frontier's lowest peak ratio so far, start times
    of the sweep's searches: a record whose iteration does not follow the previous one's)."""
    t = [r["wall_seconds"] for r in records]
    peak = [r["best_peak"] / eager["peak"] for r in records]
    lat = [r["best_latency"] / eager["latency"] for r in records]
    low = [r.get("frontier_peak", r["best_peak"]) / eager["peak"] for r in records]  # the archive's lowest peak
    starts = [r["wall_seconds"] for k, r in enumerate(records)
              if k == 0 or r["iteration"] <= records[k - 1]["iteration"]]
    return t, peak, lat, low, starts


# ---- HTML (plotly) --------------------------------------------------------------------------------
def pareto_html(path: Path, workload: str, points: dict[str, list[dict]], subtitle: str = "") -> None:
    fig = go.Figure()
    for m in _methods(points):
        pts = points[m]
        name, color, _, symbol = _style(m)
        if not pts:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{name}: no point",
                                     marker=dict(color=color)))
            continue
        if m == "eager":
            fig.add_trace(go.Scatter(x=[1.0], y=[1.0], mode="markers", name=name, text=["traced order"],
                                     marker=dict(symbol="star", size=16, color=color)))
            continue
        x, y = _xy(pts)
        labels = [p.get("label", "") for p in pts]
        fr = frontier(list(zip(x, y, strict=True)))
        if m == "magis":
            fig.add_trace(go.Scatter(x=[p for p, _ in fr], y=[t for _, t in fr], mode="lines+markers",
                                     line=dict(shape="hv", color=color, width=3), marker=dict(size=5),
                                     name=f"{name}, frontier", text=labels))
            continue
        if len(fr) > 1:
            fig.add_trace(go.Scatter(x=[p for p, _ in fr], y=[t for _, t in fr], mode="lines", showlegend=False,
                                     hoverinfo="skip", line=dict(shape="hv", color=color, width=1.2, dash="dash")))
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name=name, text=labels,
                                 marker=dict(symbol=symbol + "-open", size=10,
                                             color=color, line=dict(width=2))))
    for xv in LIMITS:
        fig.add_vline(x=xv, line=dict(color="#bbb", dash="dot", width=1), annotation_text=f"{xv:.0%} limit")
    for yv in OVERHEADS:
        fig.add_hline(y=yv, line=dict(color="#bbb", dash="dot", width=1), annotation_text=f"+{yv - 1:.0%}",
                      annotation_position="top left")
    fig.update_traces(hovertemplate="%{text}<br>peak %{x:.3f}, latency %{y:.3f}")
    fig.update_layout(title=f"{workload}: memory / latency trade-off" + (f"<br><sub>{subtitle}</sub>" if subtitle else ""),
                      xaxis_title="peak memory / PyTorch eager's peak",
                      yaxis_title="latency / PyTorch eager's latency", template="plotly_white",
                      width=900, height=620)
    _write_html(fig, path)


def convergence_html(path: Path, workload: str, records: list[dict], eager: dict, within: float | None,
                     subtitle: str = "", frontier_peak: float | None = None) -> None:
    t, peak, lat, low, starts = _convergence(records, eager)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    fig.add_trace(go.Scatter(x=t, y=peak, name="best state's peak", line=dict(shape="hv", color=_style("magis")[1])),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=low, name="frontier's lowest peak so far",
                             line=dict(shape="hv", color="#555", dash="dash", width=1)), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=lat, name="best state's latency", line=dict(shape="hv", color=_style("sqrt_n")[1])),
                  row=2, col=1)
    if t:
        fig.add_vrect(x0=0, x1=t[0], fillcolor="#eee", line_width=0, layer="below",
                      annotation_text="F-Tree, warm start", annotation_position="top left")
    for s in starts[1:]:
        fig.add_vline(x=s, line=dict(color="#ccc", width=1))
    if frontier_peak is not None:
        fig.add_hline(y=frontier_peak, line=dict(color=_style("magis")[1], dash="dashdot", width=1), row=1, col=1,
                      annotation_text=f"final frontier's lowest peak ({frontier_peak:.3f})")
    if within is not None:
        fig.add_vline(x=within, line=dict(color="black", dash="dot", width=1.5),
                      annotation_text=f"within 1% of the final best peak: {within:.1f} s")
    fig.update_yaxes(title_text="peak / eager's", row=1, col=1)
    fig.update_yaxes(title_text="latency / eager's", row=2, col=1)
    fig.update_xaxes(rangemode="tozero")
    fig.update_xaxes(title_text="seconds since optimize() was called (grey lines: the sweep's next memory limit)",
                     row=2, col=1)
    fig.update_layout(title=f"{workload}: M-Optimizer convergence" + (f"<br><sub>{subtitle}</sub>" if subtitle else ""),
                      template="plotly_white", width=900, height=620)
    _write_html(fig, path)


_JS_WRITTEN: set[Path] = set()


def _write_html(fig: go.Figure, path: Path) -> None:
    js = (path.parent / PLOTLYJS).resolve()
    if js not in _JS_WRITTEN:  # once per folder and run: the copy of the installed plotly
        js.write_text(get_plotlyjs(), encoding="utf-8")
        _JS_WRITTEN.add(js)
    html = fig.to_html(include_plotlyjs=PLOTLYJS, full_html=True)
    tag = f'<script charset="utf-8" src="{PLOTLYJS}"></script>'
    if tag in html:  # the local copy, else the CDN
        cdn = f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"
        html = html.replace(tag, tag + "\n<script>window.Plotly || document.write("
                                       f"'<script src=\"{cdn}\"><\\/script>')</script>", 1)
    path.write_text(html, encoding="utf-8")


# ---- one workload --------------------------------------------------------------------------------
def write_plots(out: Path, workload: str, points: dict[str, list[dict]], records: list[dict] | None = None,
                eager: dict | None = None, within: float | None = None, subtitle: str = "") -> list[Path]:
    """Write ``<workload>_pareto.{png,html}`` and, given the M-Optimizer's records,
    ``<workload>_convergence.{png,html}`` (with the lowest peak of ``points["magis"]``, which the
    records need not reach: states of the warm start, or archived without becoming a search's
    best, are not in them) into ``out``; returns the paths written.  PNGs need
    matplotlib (``pip install -e '.[bench]'``); without it only the HTML files are written."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib  # noqa: F401
        png = True
    except ImportError:
        png = False
    written = []
    stem = out / f"{workload}_pareto"
    pareto_html(stem.with_suffix(".html"), workload, points, subtitle)
    written.append(stem.with_suffix(".html"))
    if png:
        pareto_png(stem.with_suffix(".png"), workload, points, subtitle)
        written.append(stem.with_suffix(".png"))
    if records and eager:
        stem = out / f"{workload}_convergence"
        low = min((p["peak_ratio"] for p in points.get("magis", [])), default=None)
        convergence_html(stem.with_suffix(".html"), workload, records, eager, within, subtitle, low)
        written.append(stem.with_suffix(".html"))
        if png:
            convergence_png(stem.with_suffix(".png"), workload, records, eager, within, subtitle, low)
            written.append(stem.with_suffix(".png"))
    return written


__all__ = ["frontier", "write_plots"]
