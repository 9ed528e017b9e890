"""The "Swaps" tab: when the selected plan's copies to and from host memory run, and what they cost.

One figure, two rows on a shared time axis (ms of simulated time): on top the streams of the
simulator (``core.simulate``) -- the compute stream as its busy intervals (consecutive ops with no
gap between them drawn as one bar) with its waits for a copy in red, and the copy stream with one
bar per STORE (device -> host) and LOAD (host -> device); a plan simulated on SwapAdvisor's three
streams (``search.plan.sim_options``) has two copy lanes, swap-in (its LOADs) and swap-out (its
STOREs); below, the device memory over time of the plan and of PyTorch's eager order.  A summary
line above says how much the copies moved and how long compute waited for them.  A plan that
carries a memory-pool allocation (SwapAdvisor's) also gets the pool's view (``alloc_view``): its
size classes and which tensor is in which object over the same time axis.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.fmt import format_bytes, plural
from core.ir.graph import Graph, NodeKind, TRef
from core.search.plan import PlanError, sim_options
from core.transform.registry import get_rule

from . import alloc_view, figures, tables
from .plan_store import Frontier, PointView
from .state import AppError, AppState

VIEW_WAIT = 5.0  # seconds a callback waits for a point's view before polling for it
LANES = {"compute": 1, "copy": 0}  # y of each lane in the top row
LANES3 = {"compute": 2, "swap-in": 1, "swap-out": 0}  # SwapAdvisor's three streams
COPY_LANE = {NodeKind.STORE: "swap-out", NodeKind.LOAD: "swap-in"}  # a copy's lane among LANES3
BAR_WIDTH = 0.56
COLORS = {"compute": "#94a3b8", "wait": "#dc2626", "store": "#f59e0b", "load": "#2563eb",
          "plan": "#7c3aed", "eager": "#111827"}
KIND_TEXT = {NodeKind.STORE: ("STORE", "device → host"), NodeKind.LOAD: ("LOAD", "host → device")}
CURVES_KEPT = 8  # memory-over-time curves kept (a point's and eager's are redrawn on every visit)

_curves: OrderedDict[int, tuple[object, tuple[np.ndarray, np.ndarray]]] = OrderedDict()
_curves_lock = threading.Lock()


def memory_curve(v: PointView) -> tuple[np.ndarray, np.ndarray]:
    """``v.sim.memory_over_time()``, remembered for the last few simulations (it rebuilds the
    storage table: half a second on a 9k-op graph)."""
    sim = v.sim
    with _curves_lock:
        hit = _curves.get(id(sim))
        if hit is not None and hit[0] is sim:
            _curves.move_to_end(id(sim))
            return hit[1]
    curve = sim.memory_over_time()
    with _curves_lock:
        _curves[id(sim)] = (sim, curve)
        while len(_curves) > CURVES_KEPT:
            _curves.popitem(last=False)
    return curve


# ---- what the figure draws -------------------------------------------------------------------------
@dataclass
class Copy:
    step: int
    kind: NodeKind  # STORE or LOAD
    node: str  # the copy node's name
    tensor: str  # the tensor it copies (its producer's name, [output index] when not 0)
    nbytes: int
    start: float  # seconds
    end: float


@dataclass
class Busy:
    """Consecutive compute steps with no gap between them."""

    first: int  # schedule steps
    last: int
    ops: int
    start: float
    end: float


@dataclass
class Wait:
    """The compute stream idle before ``step``, waiting for the step at ``blocker``: a LOAD of an
    input, or (three streams) a STORE whose memory the step takes."""

    step: int
    blocker: int | None
    start: float
    end: float


def _tensor(g: Graph, r: TRef) -> str:
    node = g.nodes[r.node]
    return node.name if r.index == 0 else f"{node.name}[{r.index}]"


def copied_tensor(g: Graph, nid: int) -> str:
    """The tensor a STORE or LOAD copies: a STORE's input, a LOAD's STORE's input."""
    node = g.nodes[nid]
    r = node.inputs()[0]
    src = g.nodes.get(r.node)
    if node.kind == NodeKind.LOAD and src is not None and src.kind == NodeKind.STORE and src.inputs():
        r = src.inputs()[0]
    return _tensor(g, r)


def copies_of(v: PointView) -> list[Copy]:
    """Every copy step of the plan's schedule, in schedule order."""
    g, sim = v.graph, v.sim
    out = []
    for i, nid in enumerate(sim.order):
        node = g.nodes[nid]
        if node.kind in KIND_TEXT:
            out.append(Copy(i, node.kind, node.name, copied_tensor(g, nid), int(node.outputs[0].nbytes),
                            float(sim.start[i]), float(sim.end[i])))
    return out


def three_streams(v: PointView) -> bool:
    """Whether the point is simulated on SwapAdvisor's three streams (compute, swap-in, swap-out)."""
    return bool(sim_options(v.plan).get("swap_streams")) or any(k in ("swap_in", "swap_out") for k in v.sim.stream)


def compute_lanes(v: PointView) -> tuple[list[Busy], list[Wait]]:
    """The compute stream as busy intervals and the waits between them (each with what it waited
    for: of its inputs and the STOREs it waits for (three streams), the one that ended last).  The
    waits add up to ``sim.compute_wait``."""
    g, sim = v.graph, v.sim
    pos = {nid: i for i, nid in enumerate(sim.order)}
    waited: dict[int, list[int]] = {}
    for a, b in sim_options(v.plan).get("waits", ()):
        waited.setdefault(a, []).append(b)
    busy: list[Busy] = []
    waits: list[Wait] = []
    t = 0.0
    for i, nid in enumerate(sim.order):
        if sim.stream[i] != "compute":
            continue
        s, e = float(sim.start[i]), float(sim.end[i])
        if s > t:
            before = [r.node for r in g.nodes[nid].inputs()] + waited.get(nid, [])
            ready = [(float(sim.end[pos[u]]), pos[u]) for u in before if u in pos]
            waits.append(Wait(i, max(ready)[1] if ready else None, t, s))
        if busy and s <= t:
            b = busy[-1]
            b.last, b.ops, b.end = i, b.ops + 1, e
        else:
            busy.append(Busy(i, i, 1, s, e))
        t = e
    return busy, waits


def swap_summary(v: PointView) -> str:
    """One line: what the plan swaps (``PointView.swaps``, as every view counts it), the bytes the copies
    move each way, and the compute stream's wait for them."""
    cs = copies_of(v)
    if not cs:
        return "this plan moves no tensors to host memory"
    st = [c for c in cs if c.kind == NodeKind.STORE]
    ld = [c for c in cs if c.kind == NodeKind.LOAD]
    wait, lat = v.sim.compute_wait, v.sim.latency
    share = wait / lat * 100 if lat else 0.0
    what = "copies (three streams: compute, swap-in, swap-out)" if three_streams(v) else "loads"
    return (f"{v.swaps().text()}: {format_bytes(sum(c.nbytes for c in st))} device → host · "
            f"{format_bytes(sum(c.nbytes for c in ld))} host → device · "
            f"compute waits {figures.fmt_seconds(wait)} for {what} ({share:.2f}% of the "
            f"{figures.fmt_seconds(lat)} latency)")


def _swaps(rule: str) -> bool:
    try:
        return get_rule(rule).family == "swap"
    except ValueError:
        return False


def swap_points(f: Frontier) -> list[int]:
    """Keys of the frontier's points whose applications swap a tensor (a rule of the swap family:
    MAGIS's Swap, SwapAdvisor's and on-demand swapping's SwapLate)."""
    return [k for k, p in enumerate(f.points) if any(a.rule != "deswap" and _swaps(a.rule) for a in p.applications)]


def no_swaps_text(f: Frontier | None = None) -> str:
    text = "this plan moves no tensors to host memory; pick a point with swaps"
    if f is None:
        return text
    keys = swap_points(f)
    if not keys:
        return text + " (no point of this frontier has any: run the optimizer, or open a plan file with swaps)"
    shown = ", ".join(map(str, keys[:8])) + (", ..." if len(keys) > 8 else "")
    return text + f" (point{'s' * (len(keys) > 1)} {shown} of this frontier swap; click one in the Pareto tab)"


def _ms(t: float) -> float:
    return t * 1e3


def _bars(items: list, y: int, meta: str, name: str, color: str, hover: list[str]) -> dict:
    """Horizontal bars of ``items`` (each with ``start`` and ``end`` seconds) on lane ``y``."""
    return {"type": "bar", "orientation": "h", "xaxis": "x", "yaxis": "y", "meta": meta, "name": name,
            "y": [y] * len(items), "base": [_ms(c.start) for c in items],
            "x": [_ms(c.end - c.start) for c in items], "width": BAR_WIDTH,
            "marker": {"color": color, "line": {"color": color, "width": 1}},
            "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>", "textposition": "none"}


def _step_curve(times, live, name: str, meta: str, color: str, dash: str, max_points: int) -> dict:
    """Bytes alive over time as a step line: one point per distinct time (the bytes after all of its
    events: frees come first, so the peak is kept), downsampled keeping the peak; after the last op
    the line holds its bytes (the program's end frees everything: no drop to 0 B)."""
    last = np.flatnonzero(np.r_[times[1:] != times[:-1], True]) if len(times) else np.zeros(0, np.int64)
    times, live = times[last], live[last]
    if len(live) >= 2 and live[-1] < live[-2]:  # the end's frees: the line holds the last op's bytes, not 0 B
        live = live.copy()
        live[-1] = live[-2]
    idx = figures.downsample_indices(live, max_points)
    return {"type": "scatter", "mode": "lines", "xaxis": "x", "yaxis": "y2", "meta": meta,
            "name": f"{name} (peak {format_bytes(int(live.max()) if len(live) else 0)})",
            "x": [_ms(float(t)) for t in times[idx]], "y": live[idx].tolist(),
            "text": [format_bytes(int(b)) for b in live[idx]],
            "hovertemplate": f"{name}: %{{text}} at %{{x:.3f}} ms<extra></extra>",
            "line": {"color": color, "width": 1.6, "shape": "hv", "dash": dash}}


def swap_timeline_figure(v: PointView, base: PointView | None, device: str = "",
                         max_points: int = 2 * figures.MAX_POINTS) -> dict:
    """The compute and copy streams (top) and the memory over time (bottom) of the plan ``v``, with
    the eager point ``base``'s memory as a dotted line; a plain-dict plotly figure.  Two lanes
    (``LANES``: compute, copy), or three for a plan on SwapAdvisor's streams (``LANES3``: compute,
    swap-in, swap-out)."""
    g, sim = v.graph, v.sim
    three = three_streams(v)
    lanes = LANES3 if three else LANES
    data: list[dict] = []
    busy, waits = compute_lanes(v)
    data.append(_bars(busy, lanes["compute"], "compute", "compute (busy)", COLORS["compute"], [
        f"<b>compute</b> {_ms(b.start):.3f}–{_ms(b.end):.3f} ms<br>steps {b.first}–{b.last} ({plural(b.ops, 'op')})"
        for b in busy]))
    if waits:
        hover = []
        for w in waits:
            op = g.nodes[sim.order[w.step]].name
            if w.blocker is not None and g.nodes[sim.order[w.blocker]].kind == NodeKind.LOAD:
                lid = sim.order[w.blocker]
                what = f"waits for LOAD <i>{g.nodes[lid].name}</i> ({copied_tensor(g, lid)}, step {w.blocker})"
            elif w.blocker is not None and g.nodes[sim.order[w.blocker]].kind == NodeKind.STORE:
                sid = sim.order[w.blocker]
                what = (f"waits for STORE <i>{g.nodes[sid].name}</i> ({copied_tensor(g, sid)}, step {w.blocker}) "
                        f"to free the memory it takes")
            elif w.blocker is not None:
                what = f"waits for <i>{g.nodes[sim.order[w.blocker]].name}</i> (step {w.blocker})"
            else:
                what = "waits"
            hover.append(f"<b>wait</b> {figures.fmt_seconds(w.end - w.start)}: {what}<br>"
                         f"before <i>{op}</i> (step {w.step}), {_ms(w.start):.3f}–{_ms(w.end):.3f} ms")
        data.append(_bars(waits, lanes["compute"], "wait", "wait for a copy" if three else "wait for a load",
                          COLORS["wait"], hover))
    cs = copies_of(v)
    for kind, meta in ((NodeKind.STORE, "store"), (NodeKind.LOAD, "load")):
        items = [c for c in cs if c.kind == kind]
        if not items:
            continue
        word, way = KIND_TEXT[kind]
        lane = lanes[COPY_LANE[kind]] if three else lanes["copy"]
        data.append(_bars(items, lane, meta, f"{word} ({way})", COLORS[meta], [
            f"<b>{word}</b> {way}: <i>{c.tensor}</i><br>{format_bytes(c.nbytes)} · "
            f"{_ms(c.start):.3f}–{_ms(c.end):.3f} ms ({figures.fmt_seconds(c.end - c.start)})<br>"
            f"{c.node}, step {c.step}" for c in items]))
    times, live = memory_curve(v)
    data.append(_step_curve(times, live, f"plan {v.key}", "memory-plan", COLORS["plan"], "solid", max_points))
    top = float(live.max()) if len(live) else 0.0
    end = sim.latency
    if base is not None and base is not v:
        bt, bl = memory_curve(base)
        data.append(_step_curve(bt, bl, "eager", "memory-eager", COLORS["eager"], "dot", max_points))
        top = max(top, float(bl.max()) if len(bl) else 0.0)
        end = max(end, base.sim.latency)
    tickvals, ticktext = figures.binary_ticks(top * 1.1 if top else 1)
    notes = []
    if not cs:
        notes.append({"xref": "paper", "yref": "y", "x": 0.5, "y": lanes["swap-in" if three else "copy"],
                      "showarrow": False,
                      "text": "no copies: this plan keeps every tensor on the device",
                      "font": {"size": 11, "color": "#6b7280"}})
    layout = {
        "template": "plotly_white", "barmode": "overlay", "hovermode": "closest", "bargap": 0,
        "margin": {"l": 70, "r": 10, "t": 20, "b": 45},
        "legend": {"orientation": "h", "y": -0.16, "font": {"size": 11}},
        "xaxis": {"anchor": "y2", "title": {"text": f"simulated time (ms{', ' + device if device else ''})"},
                  "range": [0, _ms(end) * 1.01 if end else 1], "showspikes": True, "spikemode": "across",
                  "spikethickness": 1, "spikecolor": "#999", "spikedash": "dot", "zeroline": False},
        "yaxis": {"domain": [0.58 if three else 0.64, 1.0], "range": [-0.6, len(lanes) - 0.4],
                  "tickvals": list(lanes.values()), "ticktext": list(lanes), "fixedrange": True, "showgrid": False,
                  "zeroline": False},
        "yaxis2": {"domain": [0.0, 0.5 if three else 0.56], "title": {"text": "device memory"},
                   "range": [0, top * 1.1 if top else 1],
                   "tickvals": tickvals, "ticktext": ticktext, "zeroline": False},
        "annotations": notes, "uirevision": f"swaps-{v.key}",
    }
    return {"data": data, "layout": layout}


# ---- layout ----------------------------------------------------------------------------------------
def tab() -> dcc.Tab:
    return dcc.Tab(html.Div([
        html.Section([
            html.Div([html.H3("Swaps of the selected plan"),
                      html.Span("top: the compute and copy streams (hover a bar) · bottom: device memory over "
                                "time, the plan and PyTorch eager", className="muted hint")],
                     className="panel-head"),
            html.Div(id="swaps-summary", className="swaps-summary"),
            dcc.Graph(id="swaps-timeline", config={"displaylogo": False, "responsive": True},
                      style={"height": "470px"}),
            dcc.Store(id="swaps-shown"),  # the plan selection the figure shows
            dcc.Interval(id="swaps-poll", interval=800, disabled=True),  # while the point's view is built
        ], className="panel swaps-panel"),
        pool_section(),
    ], className="tab-body"), label="Swaps", value="swaps")


HIDDEN = {"display": "none"}


def pool_section() -> html.Section:
    """The memory pool of a plan that carries one (SwapAdvisor's): hidden for the others."""
    return html.Section([
        html.Div([html.H3("Memory pool of the selected plan (SwapAdvisor)"),
                  html.Span("size classes, and which tensor is in which object over time (hover a bar); "
                            "hatched: a tensor's time on the host", className="muted hint")],
                 className="panel-head"),
        html.Div(id="swaps-pool-line", className="swaps-summary"),
        tables.table(id="swaps-pool-classes", columns=alloc_view.CLASS_COLUMNS, data=[], page_action="none",
                     style_table={"overflowX": "auto", "overflowY": "auto", "maxHeight": "240px"}),
        dcc.Graph(id="swaps-pool", config={"displaylogo": False, "responsive": True}, style={"height": "300px"}),
    ], id="swaps-pool-section", className="panel swaps-panel", style=HIDDEN)


def pool_outputs(v: PointView, imported: Graph, device: str, end: float) -> tuple:
    """The pool section's (style, summary line, class rows, occupancy figure, figure style) for point
    ``v``: hidden unless its plan carries an allocation; a line saying why when the pool cannot be
    rebuilt."""
    if not alloc_view.has_allocation(v):
        return HIDDEN, "", [], no_update, no_update
    pool = alloc_view.pool_of(v, imported, device)
    if isinstance(pool, str):
        return {}, html.Span(pool, id="swaps-pool-text", className="swaps-none"), [], no_update, no_update
    fig = alloc_view.occupancy_figure(pool, alloc_view.step_index(v), device, end)
    return ({}, html.Span(alloc_view.pool_summary(pool), id="swaps-pool-text"), alloc_view.class_rows(pool), fig,
            {"height": f"{fig['layout']['height']}px"})


# ---- callbacks -------------------------------------------------------------------------------------
def register(app: Dash, state: AppState, guarded, show_message) -> None:
    plans = state.plans

    @app.callback(Output("swaps-summary", "children"), Output("swaps-timeline", "figure"),
                  Output("swaps-shown", "data"), Output("swaps-poll", "disabled"),
                  Output("swaps-pool-section", "style"), Output("swaps-pool-line", "children"),
                  Output("swaps-pool-classes", "data"), Output("swaps-pool", "figure"), Output("swaps-pool", "style"),
                  Input("plan-swaps", "data"), Input("swaps-poll", "n_intervals"), State("swaps-shown", "data"))
    @guarded(9)
    def on_swaps(sel, _n, shown):
        if not sel:
            raise PreventUpdate  # drawn when the tab is open (the selected plan reaches it only then)
        if ctx.triggered_id == "plan-swaps" and shown == sel:
            raise PreventUpdate
        gid = sel["gid"]
        f = plans.frontier(gid)
        if sel.get("version") != f.version:
            raise PreventUpdate
        key = sel["key"]
        try:
            v = plans.view(gid, key, wait=VIEW_WAIT)
            base = plans.view(gid, f.baseline(), wait=VIEW_WAIT) if v is not None else None
        except (AppError, PlanError) as e:  # the point does not replay: say so once, stop polling
            show_message(f"point {key} of {state.label(gid)}: {e}")
            return (html.Span(f"point {key} cannot be drawn", className="muted"), no_update, no_update, True,
                    HIDDEN, "", [], no_update, no_update)
        if v is None or base is None:
            text = html.Span(f"building the view of point {key} of {state.label(gid)} ...", className="muted")
            return text, no_update, no_update, False, no_update, no_update, no_update, no_update, no_update
        fig = swap_timeline_figure(v, base, f.device)
        if v.swaps():
            summary = html.Span(swap_summary(v), id="swaps-line")
        else:
            summary = html.Span(no_swaps_text(f), id="swaps-line", className="swaps-none")
        end = max(v.sim.latency, base.sim.latency)
        return (summary, fig, sel, True, *pool_outputs(v, state.entry(gid).graph, f.device, end))


__all__ = ["Busy", "Copy", "LANES", "LANES3", "Wait", "compute_lanes", "copies_of", "memory_curve", "no_swaps_text",
           "pool_outputs", "pool_section", "register", "swap_summary", "swap_timeline_figure", "tab", "three_streams"]
