"""The optimizer in the page: the plan bar (a memory slider along the frontier, above every tab),
the "Pareto frontier" tab (every method's points, the optimizer run with progress and cancel, the
selected plan's memory over time and hot-spots) and the marks the selected plan puts on the
computation graph.

The selected point lives in the ``plan`` store ({gid, version, key}); the slider writes it in the
browser (``SLIDER_TO_PLAN``), a click on a point of the Pareto figure too.  Every plan view reads it.
"""

from __future__ import annotations

import logging
import math

from dash import Dash, Input, Output, Patch, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.cost import DEVICES
from core.cost.choice import COST_MODELS, DEFAULT_COST, cost_device
from core.fmt import format_bytes, plural
from core.search.methods import METHODS, label_of
from core.search.plan import PlanError
from core.summary import floor_parts

from . import figures
from .panels import _card
from .plan_store import Frontier, PointView
from .state import AppError, AppState, decode_upload
from .tables import table

log = logging.getLogger("magis.app")
OPT_BUDGETS = [10, 30, 60, 120]
PLAN_POINTS = 300  # points per memory curve of a plan (the Memory analysis tab draws up to figures.MAX_POINTS)
GATED_TABS = ("pareto", "steps", "swaps", "export")
HOT_ROWS = 60  # the largest tensors at the plan's peak listed (five pages of the table)
PLAN_WAIT = 0.3  # seconds a callback waits for a point's view before showing the plan file's numbers and polling


# ---- pure builders ---------------------------------------------------------------------------------
SLIDER_LABELS = 8  # stop labels drawn on the slider (more overlap); the caption names the selected stop's


def stop_label(f: Frontier, key: int) -> str:
    """A slider stop's name: its peak as a fraction of eager's and its latency overhead, "0.62x · +4%"."""
    base = f.points[f.baseline()]
    p = f.points[key]
    ratio = p.peak / base.peak if base.peak else 1.0
    over = (p.latency / base.latency - 1) * 100 if base.latency else 0.0
    return f"{ratio:.2f}x · {over:+.0f}%" if abs(over) >= 0.95 or over == 0 else f"{ratio:.2f}x · {over:+.1f}%"


def slider_of(f: Frontier) -> dict:
    """Slider props: one stop per point of the frontier's plan file (``Frontier.stops``: peak
    ascending, evenly spaced: clustered points stay reachable), labelled by its peak and overhead
    (``stop_label``; a spaced subset drawn, the caption names the selected one); stop i is point
    ``keys[i]``."""
    base = f.points[f.baseline()]
    keys = f.stops()
    ratios = [f.points[k].peak / base.peak if base.peak else 1.0 for k in keys]
    labels = [stop_label(f, k) for k in keys]
    marks: dict[int, dict] = {}
    end = len(keys) - 1
    gap = max(1, math.ceil(len(keys) / SLIDER_LABELS))
    last_i = -gap
    for i in range(len(keys)):
        show = i == 0 or (i - last_i >= gap and (end - i >= gap or i == end))
        marks[i] = {"label": labels[i] if show else " "}  # " ": a stop without a label (empty shows the value)
        if show:
            last_i = i
    d = keys.index(f.default())
    return {"gid": f.gid, "version": f.version, "keys": keys, "ratios": [round(r, 4) for r in ratios],
            "labels": labels, "min": 0, "max": max(len(keys) - 1, 0), "marks": marks, "default": d,
            "default_key": keys[d]}


def slider_stop(f: Frontier, key: int) -> int:
    """The slider stop of point ``key`` (every point has one)."""
    return f.stops().index(key)


def plan_caption(f: Frontier, key: int, v: PointView | None = None) -> str:
    """The line beside the slider: the selected stop and point, its rule applications, what it swaps
    once its view ``v`` is built, and for a dominated point which point is no larger and no slower."""
    p = f.points[key]
    keys = f.stops()
    out = (f"point {key}: {label_of(p.method)} {p.label} · stop {keys.index(key) + 1} of {len(keys)}: "
           f"{stop_label(f, key)} · {plural(len(p.applications), 'rule application')}")
    if v is not None and (sw := v.swaps()):
        out += f" · {sw.text()}"
    if len(f.points) == 1:
        out += (" · the only point so far: press optimize (MAGIS) or run the peers, on the Pareto tab, for plans "
                "that use less memory")
    front = f.slider()
    if key not in front:
        better = max((k for k in front if f.points[k].peak <= p.peak and f.points[k].latency <= p.latency),
                     key=lambda k: f.points[k].peak, default=None)  # the nearest in peak
        if better is not None:
            out += f" · dominated: point {better} ({stop_label(f, better)}) is no larger and no slower"
    return out


def pareto_figure(f: Frontier, selected: int | None, running: list[tuple[int, float]] | None = None,
                  scale: str = "linear") -> dict:
    """Peak (x) against latency (y) of every point, one trace per method (its own colour and marker:
    ``figures.method_styles``), the slider's frontier as a step line; each marker's customdata is its
    point key (a click selects it).  ``scale``: "linear" or "log" axes (an outlier far from the rest
    squashes them into a corner on linear ones); a drag zooms, a double click zooms back out."""
    pts = f.points
    base = pts[f.baseline()]
    log_axes = scale == "log"
    data = []
    front = sorted(f.slider(), key=lambda k: pts[k].peak)
    data.append({"type": "scatter", "mode": "lines", "name": "frontier (non-dominated)", "hoverinfo": "skip",
                 "x": [pts[k].peak for k in front], "y": [pts[k].latency * 1e3 for k in front],
                 "line": {"shape": "hv", "color": "#c4b5fd", "width": 2}})
    styles = figures.method_styles([p.method for p in pts])
    order = [*METHODS, *sorted({p.method for p in pts} - set(METHODS))]  # the registry's order, then the rest
    for method in order:
        ks = [k for k, p in enumerate(pts) if p.method == method]
        if not ks:
            continue
        colour, symbol = styles[method]
        data.append({
            "type": "scatter", "mode": "markers", "name": label_of(method) if method in METHODS else method,
            "customdata": ks, "x": [pts[k].peak for k in ks], "y": [pts[k].latency * 1e3 for k in ks],
            "text": [_hover(pts[k], base) for k in ks], "hovertemplate": "%{text}<extra></extra>",
            "marker": {"color": colour, "symbol": symbol, "size": 10 if method == "magis" else 8,
                       "line": {"width": 1, "color": "white"}}})
    if running:
        run = sorted(running)
        data.append({"type": "scatter", "mode": "lines+markers", "name": "search so far", "hoverinfo": "skip",
                     "x": [p for p, _ in run], "y": [t * 1e3 for _, t in run],
                     "line": {"shape": "hv", "color": "#a855f7", "dash": "dot"},
                     "marker": {"size": 6, "color": "#a855f7"}})
    if selected is not None and 0 <= selected < len(pts):
        p = pts[selected]
        data.append({"type": "scatter", "mode": "markers", "name": "selected", "hoverinfo": "skip",
                     "x": [p.peak], "y": [p.latency * 1e3], "showlegend": False,
                     "marker": {"size": 20, "color": "rgba(0,0,0,0)", "line": {"width": 3, "color": "#111827"}}})
    xs = [p.peak for p in pts] + [q for q, _ in running or []]
    if log_axes:
        low, top = (min(xs) / 1.15, max(xs) * 1.15) if xs else (1, 2)
        tickvals, ticktext = figures.log_binary_ticks(low, top)
        xaxis = {"type": "log", "range": [math.log10(max(low, 1)), math.log10(max(top, 2))]}
    else:
        top = max(xs) * 1.04 if xs else 1
        low = min(xs) * 0.9 if xs else 0
        tickvals, ticktext = figures.binary_ticks(top, low=low)  # binary units over the shown range, as the cards
        xaxis = {"type": "linear", "range": [low, top]}
    layout = {"template": "plotly_white", "margin": {"l": 60, "r": 10, "t": 30, "b": 45}, "hovermode": "closest",
              "dragmode": "zoom",
              "xaxis": {"title": {"text": "simulated peak memory" + (" (log)" if log_axes else "")},
                        "tickvals": tickvals, "ticktext": ticktext, **xaxis},
              "yaxis": {"title": {"text": f"simulated latency (ms, {f.device})" + (" (log)" if log_axes else "")},
                        "type": "log" if log_axes else "linear"},
              "legend": {"orientation": "h", "y": -0.2, "font": {"size": 11}},
              "uirevision": f"{f.gid}:{scale}",  # a zoom stays over a slider move, a new scale shows everything
              "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": base.peak, "x1": base.peak,
                          "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#9ca3af", "width": 1}}]}
    return {"data": data, "layout": layout}


def missing_methods(f: Frontier) -> list[tuple[str, str]]:
    """(label, why) of each peer and baseline with no point on the frontier: its failure reasons
    from the run that tried it (``meta.peer_failures``), or that it has not been run on this graph."""
    from core.search.methods import PEER_FAMILIES, methods_of

    have = {p.method for p in f.points}
    failed = f.plans.meta.get("peer_failures", {})
    out = []
    for name in methods_of(*PEER_FAMILIES):
        if name in have:
            continue
        out.append((label_of(name), failed.get(name) or "not run on this graph yet: press \"run the peers\""))
    return out


def failure_notes(f: Frontier) -> list[str]:
    """The lines under the Pareto figure: per method, its failures grouped by reason with a count
    ("Checkmate: 7 budgets failed: <reason>", ``figures.failure_lines``) -- a method with points
    too, for the settings that gave none -- and the methods not run on this graph yet, in one line."""
    from core.search.methods import PEER_FAMILIES, methods_of

    have = {p.method for p in f.points}
    failed = f.plans.meta.get("peer_failures", {})
    lines: list[str] = []
    not_run = []
    for name in methods_of(*PEER_FAMILIES):
        if failed.get(name):
            lines += figures.failure_lines(label_of(name), failed[name])
        elif name not in have:
            not_run.append(label_of(name))
    if not_run:
        lines.append(f"not run on this graph yet (press \"run the peers\"): {', '.join(not_run)}")
    return lines


def missing_block(f: Frontier) -> list:
    """The lines under the Pareto figure naming each method's failures, grouped, and the methods not run."""
    lines = failure_notes(f)
    if not lines:
        return []
    miss = missing_methods(f)
    head = f"no point from {plural(len(miss), 'method')}; failed settings:" if miss else "failed settings:"
    items = []
    for line in lines:
        label, _, rest = line.partition(": ")
        items.append(html.Li([html.B(label), f": {rest}"]))
    return [html.Div(head, className="small"), html.Ul(items, className="small missing-list")]


def compare_line(st: dict) -> str:
    """The status line of a peers' run (``PlanStore.start_compare``)."""
    if not st:
        return ""
    if st.get("error"):
        return f"the peers' run failed: {st['error']}"
    i, n = st.get("method_index", 0), st.get("methods", 0)
    pts = plural(st.get("points", 0), "point")
    if st.get("done"):
        head = "cancelled" if st.get("cancelled") else "finished"
        return f"peers {head} in {st.get('seconds', 0):.0f} s · {pts} found, merged into the frontier"
    m = st.get("method")
    line = f"running the peers: {label_of(m) if m else '...'} ({i} of {n}) · {pts} so far"
    return line + (f" · {st['line']}" if st.get("line") else "")


def _hover(p, base) -> str:
    return (f"{label_of(p.method)} {p.label}<br>peak {format_bytes(p.peak)} "
            f"({p.peak / base.peak:.3f}x)<br>latency {figures.fmt_seconds(p.latency)} "
            f"({(p.latency / base.latency - 1) * 100:+.1f}%)<br>{plural(len(p.applications), 'rule application')}")


def floor_card(floor: int, by_kind: dict[str, int], base_peak: int, peak: int) -> html.Div:
    """The plan bar's card of the resident floor (``core.analysis.lifetimes.resident_floor``): what no
    plan without swaps goes below, as a share of eager's peak, and what it is made of; at a plan within
    5% of it, that offloading is the lever."""
    ratio = floor / base_peak if base_peak else 1.0
    parts = floor_parts(by_kind, floor, with_bytes=False)
    near = floor > 0 and peak <= floor * 1.05
    sub = (f"{format_bytes(floor)}: {parts} · "
           + ("this plan is at it: only offloading them goes lower" if near else "no plan without swaps goes lower"))
    return _card("resident floor", f"floor {ratio:.2f}x", sub, id_="plan-floor")


def plan_cards(f: Frontier, key: int, v: PointView | None, device: str,
               floor: tuple[int, dict[str, int]] | None = None) -> list:
    """The plan bar's cards of point ``key``: its numbers from the plan file at once, what it does to
    the graph once its view (``v``) is built, and the graph's resident ``floor`` when given.
    ``device``: the device picked on the page -- whether the plan fits in its memory; the latencies
    are the frontier's device profile's, and say so when that is another one."""
    base = f.points[f.baseline()]
    p = f.points[key]
    name = label_of(p.method)
    cap = DEVICES[device].memory_bytes if device in DEVICES else None
    fits = "" if cap is None else ("fits" if p.peak <= cap else "does not fit") + f" on {device}"
    if v is None:
        what = "replaying its rule applications ..."
    else:
        c = v.counts
        what = (f"{plural(c['fission'], 'op')} in fission regions · {c['remat']} recomputed · "
                f"{plural(v.swaps().tensors, 'tensor')} swapped"
                + (f" · {plural(c['substitution'], 'op')} substituted" if c.get("substitution") else ""))
    return [
        _card("plan", f"{name}", p.label or f"point {key}", kind="model", id_="plan-method"),
        _card("plan peak", format_bytes(p.peak), f"{p.peak / base.peak:.3f}x eager · {fits}",
              id_="plan-peak", kind="peak"),
        _card("plan latency", figures.fmt_seconds(p.latency),
              f"{(p.latency / base.latency - 1) * 100:+.1f}% vs eager · {f.device} profile"
              + ("" if device == f.device else f" (the frontier's: optimize to re-plan for {device})"),
              id_="plan-latency"),
        _card("transformations", plural(len(p.applications), "step"), what, id_="plan-counts"),
        *([floor_card(floor[0], floor[1], base.peak, p.peak)] if floor is not None else []),
    ]


def plan_memory_figure(base_sim, v: PointView, xmode: str, device: str) -> dict:
    """The plan's memory over time (filled) against PyTorch eager's (dotted), peaks marked.  Totals
    only -- the Memory analysis tab stacks the imported graph by tensor kind -- so that a slider step
    redraws two light traces (stacked areas cost the page more than everything else of a step)."""
    time_axis = xmode == "time"
    data, top = [], 1
    for name, sim, style in ((f"plan {v.key} (peak {format_bytes(v.sim.peak)})", v.sim,
                              {"line": {"shape": "hv", "color": "#7c3aed", "width": 1.5}, "fill": "tozeroy",
                               "fillcolor": "rgba(124, 58, 237, 0.18)"}),
                             (f"eager (peak {format_bytes(base_sim.peak)})", base_sim,
                              {"line": {"shape": "hv", "color": "#111827", "width": 1.2, "dash": "dot"}})):
        y = sim.memory.step_bytes
        idx = figures.downsample_indices(y, PLAN_POINTS)
        x = (sim.start[idx] * 1e3) if time_axis else idx
        data.append({"type": "scatter", "mode": "lines", "name": name, "x": x.tolist(), "y": y[idx].tolist(),
                     "hovertemplate": "%{y:.4s}B<extra>" + name.split(" (")[0] + "</extra>", **style})
        top = max(top, int(y.max()) if len(y) else 1)
    cap = DEVICES[device].memory_bytes if device in DEVICES else None
    tickvals, ticktext = figures.binary_ticks(top * 1.1)
    shapes = []
    if cap is not None and cap <= top * 1.1:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": cap, "y1": cap,
                       "line": {"color": "#dc2626", "dash": "dash", "width": 1}})
    return {"data": data, "layout": {
        "template": "plotly_white", "margin": {"l": 60, "r": 10, "t": 20, "b": 40}, "hovermode": "x",
        "xaxis": {"title": {"text": "simulated time (ms)" if time_axis else "schedule step (each graph its own)"}},
        "yaxis": {"title": {"text": "live memory", "standoff": 8}, "range": [0, top * 1.1], "tickvals": tickvals,
                  "ticktext": ticktext, "automargin": True},
        "legend": {"orientation": "h", "y": 1.12}, "shapes": shapes, "uirevision": "plan-memory"}}


def marks_of(v: PointView, gid: str, version: int) -> dict:
    return {"gid": gid, "version": version, "key": v.key, "marks": {str(k): m for k, m in v.marks.items()}}


def job_line(st: dict) -> str:
    if not st:
        return ""
    if st.get("error"):
        return f"optimization failed: {st['error']}"
    done = st.get("done")
    head = "finished" if done else ("cancelling ..." if st.get("cancelled") else "optimizing ...")
    secs, budget = st.get("seconds", 0), st.get("budget")
    clock = f"{secs:.0f} s" + (f" of {budget:g} s" if budget else "")
    if budget and not done:
        clock += f" ({max(0.0, budget - secs):.0f} s left)"
    parts = [f"{head} {'in ' if done else ''}{clock}"]
    k, n = st.get("limit"), st.get("limits")
    if k and n:
        where = f"limit {k} of {n}" if k <= n else f"limit {k} (a gap in the frontier)"
        if done:
            parts.append(f"{plural(k, 'limit')} searched")
        else:
            parts.append(f"{where}: {st.get('limit_ratio', 0):.2f}x ({format_bytes(st.get('limit_bytes', 0))}), "
                         f"iteration {st.get('iteration', 0)}")
    elif "iteration" in st and not done:
        parts.append(f"iteration {st['iteration']}")
    ev, dist = st.get("evaluated"), st.get("distinct")
    if ev:
        parts.append(f"{plural(ev, 'state')} evaluated"
                     + (f" ({dist:,} distinct, warm start included)" if dist is not None else ""))
    elif dist:
        parts.append(f"{plural(dist, 'state')} (warm start)")
    if "iteration" in st and not done:
        parts.append(f"best peak so far {format_bytes(st.get('frontier_peak') or st.get('best_peak', 0))}")
    elif not done and "iteration" not in st:
        parts.append("warm start (greedy fission, then remat steps)")
    if done and "points" in st:
        parts.append(plural(st["points"], "frontier point"))
    return " · ".join(parts)


# ---- layout --------------------------------------------------------------------------------------
def initial(state: AppState, gid: str) -> dict:
    """The plan bar of the first page, computed on the server (like ``callbacks.first_render``): the
    page paints with its slider and cards, no chain of callbacks first."""
    f = state.plans.frontier(gid)
    s = slider_of(f)
    key = s["default_key"]  # its view is built after the page is out (``on_plan``): not on the page's path
    return {"plan-points": s, "plan": {"gid": gid, "version": f.version, "key": key},
            "plan-slider": {"min": s["min"], "max": s["max"], "marks": s["marks"], "value": s["default"]},
            "plan-cards": plan_cards(f, key, None, f.device, state.plans.floor(gid)),
            "plan-caption": plan_caption(f, key),
            "frontier-source": source_line(f, s),
            "pareto-missing": missing_block(f)}


def source_line(f: Frontier, s: dict) -> str:
    return f"{f.source} · {plural(len(f.points), 'point')}, {len(f.slider())} on the frontier"


def plan_bar(init: dict | None = None) -> html.Section:
    init = init or {}
    sl = init.get("plan-slider", {"min": 0, "max": 0, "marks": {0: "1.00x"}, "value": 0})
    return html.Section([
        html.Div([html.Span("plan", className="planbar-title"),
                  html.Span("drag along the memory/latency frontier (peak as a fraction of PyTorch eager's)",
                            className="muted small")], className="planbar-head"),
        html.Div([
            html.Div(dcc.Slider(id="plan-slider", step=1, included=False, updatemode="drag", allow_direct_input=False, **sl),
                     className="plan-slider"),
            html.Div(init.get("plan-caption"), id="plan-caption", className="plan-caption small"),
        ], className="planbar-row"),
        html.Div(init.get("plan-cards"), id="plan-cards", className="cards plan-cards"),
        dcc.Store(id="plan-points", data=init.get("plan-points")),  # slider_of(): stop i -> point keys[i]
        dcc.Store(id="plan", data=init.get("plan")),  # {gid, version, key}: the selected point
        dcc.Store(id="plan-marks"),  # {gid, version, key, marks: {imported op id: kind}}
        dcc.Store(id="plan-marked"),
        # the selected point as each tab sees it: passed on in the browser only while the tab is shown,
        # so a slider drag costs no server round trip for the views that are hidden
        *[dcc.Store(id=f"plan-{t}") for t in GATED_TABS],
        dcc.Store(id="plan-marks-ftree"),
        dcc.Store(id="pareto-drawn"),
        dcc.Interval(id="plan-poll", interval=500, disabled=True),  # while the selected point's view is built  # [gid, version] of the frontier the Pareto figure shows
    ], className="panel planbar")


def pareto_tab(init: dict | None = None) -> dcc.Tab:
    init = init or {}
    return dcc.Tab(html.Div([
        html.Div([
            html.Section([
                html.Div([html.H3("Pareto frontier"),
                          html.Span(init.get("frontier-source"), id="frontier-source", className="muted small")],
                         className="panel-head"),
                html.Div([dcc.RadioItems(id="pareto-scale", options=[{"label": "linear", "value": "linear"},
                                                                     {"label": "log", "value": "log"}],
                                         value="linear", inline=True, className="xmode"),
                          html.Span("axes · drag to zoom, double-click to zoom out", className="muted small")],
                         className="pareto-scale-row"),
                dcc.Graph(id="pareto", config={"displaylogo": False, "responsive": True, "scrollZoom": True},
                          style={"height": "400px"}),
                html.Div("click a point to select its plan · the slider above has a stop for every point, peak "
                         "ascending",
                         className="muted small"),
                html.Div(init.get("pareto-missing"), id="pareto-missing", className="pareto-missing"),
            ], className="panel pareto-panel"),
            html.Section([
                html.Div(html.H3("Optimize"), className="panel-head"),
                html.Div([html.Label("time budget", htmlFor="opt-budget"),
                          dcc.Dropdown(id="opt-budget", value=30, clearable=False, searchable=False,
                                       options=[{"label": f"{b} s", "value": b} for b in OPT_BUDGETS],
                                       className="budget-dd")], className="ctl"),
                html.Div([html.Label("cost model", htmlFor="opt-cost"),
                          dcc.Dropdown(id="opt-cost", value=DEFAULT_COST, clearable=False, searchable=False,
                                       options=[{"label": k, "value": k, "title": v} for k, v in COST_MODELS.items()],
                                       className="budget-dd")], className="ctl",
                         title="latency model of the search; calibrated and measured time ops on this machine "
                               "(choose its device profile: cpu without a GPU)"),
                html.Div(dcc.Checklist(id="opt-subst", options=[{"label": " TASO's substitution rules", "value": "on"}],
                                       value=[], inputStyle={"margin-right": "4px"}),
                         className="ctl small",
                         title="merge matmuls / convolutions sharing an input and the identities that open "
                               "the way, as rules of the search (MAGIS's A-Trans and I-Trans)"),
                html.Div([html.Button("optimize", id="opt-run", n_clicks=0, className="btn btn-primary",
                                      title="run the M-Optimizer's Pareto sweep on this model in the background"),
                          html.Button("cancel, keep the best", id="opt-cancel", n_clicks=0, className="btn",
                                      title="stop the search now; the frontier found so far is kept")],
                         className="btn-row"),
                html.Div(id="opt-status", className="small opt-status"),
                html.Div([html.Button("run the peers", id="peers-run", n_clicks=0, className="btn",
                                      title="every peer and baseline (sqrt(n), DTR, Checkmate, torch min-cut, "
                                            "micro-batching, offloading ...) on this graph, each within the time "
                                            "budget; their points are merged into the frontier"),
                          html.Button("cancel", id="peers-cancel", n_clicks=0, className="btn")],
                         className="btn-row"),
                html.Div(id="peers-status", className="small opt-status"),
                dcc.Interval(id="peers-poll", interval=1000, disabled=True),
                html.Hr(),
                html.Div([html.Label("fit in", htmlFor="fit-limit"),
                          dcc.Input(id="fit-limit", type="text", placeholder="e.g. 8GiB or 0.5", debounce=True,
                                    className="fit-input"),
                          html.Span("the fastest plan on the frontier under this peak", className="muted small")],
                         className="ctl"),
                html.Hr(),
                dcc.Upload(id="plan-upload", children=html.Div(["drop or ", html.A("open a plan file"),
                                                                html.Span(" (magis optimize -o)", className="muted")]),
                           className="upload", multiple=False),
                dcc.Interval(id="opt-poll", interval=700, disabled=True),
            ], className="panel opt-panel"),
        ], className="row-pareto"),
        html.Section([
            html.Div([html.H3("Memory over time of the selected plan"),
                      dcc.RadioItems(id="plan-xmode", options=[{"label": "step", "value": "step"},
                                                               {"label": "time", "value": "time"}],
                                     value="time", inline=True, className="xmode"),
                      html.Span("filled: the plan · dotted: PyTorch eager (a plan's graph has its own steps: "
                                "compare in time)", className="muted small")],
                     className="panel-head"),
            dcc.Graph(id="plan-memory", config={"displaylogo": False, "responsive": True},
                      style={"height": "320px"}),
        ], className="panel"),
        html.Section([
            html.Div([html.H3("Hot-spots of the selected plan"),
                      html.Span(f"the {HOT_ROWS} largest tensors alive at the plan's peak", className="muted hint")],
                     className="panel-head"),
            table(id="plan-hotspots", columns=[{"name": n, "id": c} for c, n in figures.HOTSPOT_COLUMNS],
                  data=[], sort_action="native", page_action="native", page_size=10,
                  wrap=("tensor", "producer", "module")),
        ], className="panel"),
    ], className="tab-body"), label="Pareto frontier", value="pareto")


# ---- in the browser --------------------------------------------------------------------------------
SLIDER_TO_PLAN = """function(value, pts, cur) {
    if (!pts || value === null || value === undefined) { return window.dash_clientside.no_update; }
    const stop = Math.max(0, Math.min(pts.keys.length - 1, Math.round(value)));
    const key = pts.keys[stop];
    const same = cur && cur.gid === pts.gid && cur.version === pts.version;
    // the selection is this stop's point, or a point off the frontier that a click placed the slider for
    if (same && (cur.key === key || cur.stop === stop)) {
        return window.dash_clientside.no_update;
    }
    return {gid: pts.gid, version: pts.version, key: key};
}"""

GATE = """function(plan, tab) {
    return tab === "%s" && plan ? plan : window.dash_clientside.no_update;
}"""
GATE_FTREE = """function(marks, view) {
    return view === "ftree" && marks ? marks : window.dash_clientside.no_update;
}"""

MARK_PLAN = """function(marks, _els, _tab, table) {
    const root = document.getElementById("graph");
    if (!root) { return window.dash_clientside.no_update; }
    const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
    const cy = el ? el._cyreg.cy : null;
    if (!cy) { return window.dash_clientside.no_update; }
    const ok = marks && table && marks.gid === table.gid;
    const want = ok ? marks.marks : {};
    const pathOf = new Map();
    if (ok) { table.ids.forEach((id, i) => pathOf.set(id, table.paths[table.idx[i]])); }
    let n = 0;
    cy.batch(() => {
        cy.nodes(".mk-fission, .mk-remat, .mk-swap, .mk-substitution")
            .removeClass("mk-fission mk-remat mk-swap mk-substitution");
        if (!ok) { return; }
        const byNid = new Map(), groups = [];
        cy.nodes().forEach(x => {
            const d = x.data();
            if (d.nid !== undefined && d.nid !== null && !x.hasClass("more")) { byNid.set(String(d.nid), x); }
            else if (d.group !== undefined) { groups.push([d.group, x]); }
        });
        for (const [nid, kind] of Object.entries(want)) {
            let x = byNid.get(nid);
            if (!x) {
                const p = pathOf.get(Number(nid));
                const hit = p === undefined ? null : groups.find(([g]) => p === g || p.startsWith(g + "/"));
                x = hit ? hit[1] : null;
            }
            if (x && !x.hasClass("mk-" + kind)) { x.addClass("mk-" + kind); n += 1; }
        }
    });
    cy.scratch("magisPlanKey", ok ? marks.key : null);  // which plan the marks show (for tests, timings)
    return n;
}"""


def fit_point(f: Frontier, text: str) -> int:
    """The fastest point of the frontier's slider whose peak is within the memory limit ``text``
    (``MemoryLimit.parse``: a size such as 8GiB, or a fraction of the baseline's peak); AppError with a
    one-line message otherwise."""
    from core.search.limits import MemoryLimit

    try:
        limit = MemoryLimit.parse(text).bytes(f.points[f.baseline()].peak)
    except ValueError as e:
        raise AppError(f"fit in {e}") from None
    ok = [k for k in f.slider() if f.points[k].peak <= limit]
    if not ok:
        low = min(f.points[k].peak for k in f.slider())
        raise AppError(f"no plan on the frontier has a peak under {format_bytes(limit)} (the lowest is "
                       f"{format_bytes(low)}): run the optimizer longer, or accept more memory")
    return min(ok, key=lambda k: (f.points[k].latency, f.points[k].peak))


# ---- callbacks -------------------------------------------------------------------------------------
def register(app: Dash, state: AppState, guarded, show_message) -> None:
    plans = state.plans

    @app.callback(Output("plan-points", "data"), Output("plan-slider", "min"), Output("plan-slider", "max"),
                  Output("plan-slider", "marks"), Output("plan-slider", "value"), Output("plan", "data"),
                  Output("frontier-source", "children"), Output("pareto-missing", "children"),
                  Input("model", "value"), Input("frontier-version", "data"), Input("fit-limit", "value"),
                  prevent_initial_call=True)  # the first page has it (``initial``)
    @guarded(8)
    def on_frontier(gid, _version, fit):
        f = plans.frontier(gid)
        s = slider_of(f)
        plans.prefetch(gid, around=s["default_key"])
        src = source_line(f, s)
        value, key = s["default"], s["default_key"]
        if ctx.triggered_id == "fit-limit":
            if not fit:
                raise PreventUpdate
            key = fit_point(f, fit)
            show_message(None)  # a valid limit: an earlier invalid one's message goes
            value = s["keys"].index(key)
            return no_update, no_update, no_update, no_update, value, \
                {"gid": gid, "version": f.version, "key": key}, no_update, no_update
        return s, s["min"], s["max"], s["marks"], value, {"gid": gid, "version": f.version, "key": key}, src, \
            missing_block(f)

    app.clientside_callback(SLIDER_TO_PLAN, Output("plan", "data", allow_duplicate=True),
                            Input("plan-slider", "value"), State("plan-points", "data"), State("plan", "data"),
                            prevent_initial_call=True)

    @app.callback(Output("plan", "data", allow_duplicate=True), Output("plan-slider", "value", allow_duplicate=True),
                  Input("pareto", "clickData"), State("model", "value"), prevent_initial_call=True)
    @guarded(2)
    def on_pareto_click(click, gid):
        pts = [p for p in (click or {}).get("points", []) if isinstance(p.get("customdata"), int)]
        if not pts:
            raise PreventUpdate
        f = plans.frontier(gid)
        key = pts[0]["customdata"]
        plans.prefetch(gid, around=key)
        # the slider follows: to the point's own stop, or for a dominated point to the nearest one
        # ("stop" tells SLIDER_TO_PLAN that this move only shows the selection, not a new one)
        stop = slider_stop(f, key)
        return {"gid": gid, "version": f.version, "key": key, "stop": stop}, stop

    def selected(sel) -> tuple[Frontier, str, int]:
        if not sel:
            raise PreventUpdate
        f = plans.frontier(sel["gid"])
        if sel.get("version") != f.version:
            raise PreventUpdate  # a newer frontier is on its way
        return f, sel["gid"], sel["key"]

    @app.callback(Output("plan-cards", "children"), Output("plan-caption", "children"), Output("plan-marks", "data"),
                  Output("plan-poll", "disabled"),
                  Input("plan", "data"), Input("plan-poll", "n_intervals"), Input("device", "value"))
    @guarded(4)
    def on_plan(sel, _poll, device):
        """The plan bar and the graph's marks: the plan file's numbers at once, the marks when the
        point's view is built (polled; a slider drag over built views is a lookup)."""
        f, gid, key = selected(sel)
        if ctx.triggered_id != "plan-poll":
            plans.prefetch(gid, around=key)  # this point, and the slider's next stops either way
        v = plans.view(gid, key, wait=PLAN_WAIT)
        floor = plans.floor(gid)
        device = device or f.device
        if v is None:
            return plan_cards(f, key, None, device, floor), plan_caption(f, key), no_update, False
        return plan_cards(f, key, v, device, floor), plan_caption(f, key, v), marks_of(v, gid, f.version), True

    @app.callback(Output("plan-memory", "figure"), Output("plan-hotspots", "data"), Output("pareto", "figure"),
                  Output("pareto-drawn", "data"),
                  Input("plan-pareto", "data"), Input("plan-xmode", "value"), Input("plan-poll", "n_intervals"),
                  Input("pareto-scale", "value"), State("pareto-drawn", "data"))
    @guarded(4)
    def on_plan_views(sel, xmode, _poll, scale, drawn):
        """The Pareto tab's views of the selected plan (drawn while that tab is shown)."""
        f, gid, key = selected(sel)
        scale = scale or "linear"
        now = [gid, f.version, scale]
        if ctx.triggered_id == "pareto-scale":
            return no_update, no_update, pareto_figure(f, key, scale=scale), now
        if drawn == now:  # the page shows this frontier already: move the selection ring only
            pareto = Patch()
            pareto["data"][-1]["x"] = [f.points[key].peak]
            pareto["data"][-1]["y"] = [f.points[key].latency * 1e3]
        else:
            pareto = pareto_figure(f, key, scale=scale)
        v = plans.view(gid, key, wait=PLAN_WAIT)
        base = plans.view(gid, f.baseline(), wait=PLAN_WAIT)
        if v is None or base is None:  # on_plan polls until the view is built
            return no_update, no_update, pareto, now
        if ctx.triggered_id == "plan-xmode":
            return plan_memory_figure(base.sim, v, xmode, f.device), no_update, no_update, no_update
        rows = figures.hotspot_rows(v.graph, v.hot)[:HOT_ROWS]
        return plan_memory_figure(base.sim, v, xmode, f.device), rows, pareto, now

    for t in GATED_TABS:
        app.clientside_callback(GATE % t, Output(f"plan-{t}", "data"), Input("plan", "data"), Input("tabs", "value"))
    app.clientside_callback(GATE_FTREE, Output("plan-marks-ftree", "data"), Input("plan-marks", "data"),
                            Input("side-view", "value"))

    app.clientside_callback(MARK_PLAN, Output("plan-marked", "data"), Input("plan-marks", "data"),
                            Input("graph", "elements"), Input("tabs", "value"), State("paths", "data"))

    # ---- optimizing from the page --------------------------------------------------------------------
    @app.callback(Output("opt-poll", "disabled"), Output("opt-status", "children"),
                  Input("opt-run", "n_clicks"), State("model", "value"), State("opt-budget", "value"),
                  State("device", "value"), State("opt-cost", "value"), State("opt-subst", "value"),
                  prevent_initial_call=True)
    @guarded(2)
    def on_optimize(n, gid, budget, device, cost, subst=None):
        if not n:
            raise PreventUpdate
        state.entry(gid)
        cost = cost if cost in COST_MODELS else DEFAULT_COST
        try:
            cost_device(cost, device)
        except ValueError as e:
            raise AppError(f"Cannot optimize with the {cost} cost model: {e}.") from None
        job = plans.start_optimize(gid, float(budget or 30), device, cost, substitutions=bool(subst))
        return False, job_line(job.status())

    @app.callback(Output("opt-status", "children", allow_duplicate=True), Input("opt-cancel", "n_clicks"),
                  State("model", "value"), prevent_initial_call=True)
    @guarded(1)
    def on_cancel(n, gid):
        job = plans.job(gid)
        if not n or job is None or job.done:
            raise PreventUpdate
        job.cancel.set()
        return job_line(job.status())

    @app.callback(Output("opt-status", "children", allow_duplicate=True), Output("opt-poll", "disabled",
                                                                                 allow_duplicate=True),
                  Output("pareto", "figure", allow_duplicate=True), Output("frontier-version", "data"),
                  Output("pareto-drawn", "data", allow_duplicate=True),
                  Input("opt-poll", "n_intervals"), State("model", "value"), State("plan", "data"),
                  State("pareto-scale", "value"), prevent_initial_call=True)
    @guarded(5)
    def on_poll(_n, gid, sel, scale=None):
        job = plans.job(gid)
        if job is None:
            return "", True, no_update, no_update, no_update
        st = job.status()
        if job.error:
            show_message(f"optimization of {state.label(gid)} failed: {job.error}")
        f = plans.frontier(gid)
        if job.done:
            return job_line(st), True, no_update, {"gid": gid, "version": f.version}, None
        key = sel["key"] if sel and sel.get("gid") == gid and sel.get("version") == f.version else None
        # without a selection the figure has no ring to move: the next selection redraws it
        scale = scale or "linear"
        return job_line(st), False, pareto_figure(f, key, list(job.frontier), scale), no_update, \
            [gid, f.version, scale] if key is not None else None

    # ---- the peers on this graph ------------------------------------------------------------------
    @app.callback(Output("peers-poll", "disabled"), Output("peers-status", "children"),
                  Input("peers-run", "n_clicks"), State("model", "value"), State("opt-budget", "value"),
                  State("device", "value"), prevent_initial_call=True)
    @guarded(2)
    def on_peers(n, gid, budget, device):
        if not n:
            raise PreventUpdate
        state.entry(gid)
        job = plans.start_compare(gid, float(budget or 30), device)
        return False, compare_line(job.status())

    @app.callback(Output("peers-status", "children", allow_duplicate=True), Input("peers-cancel", "n_clicks"),
                  State("model", "value"), prevent_initial_call=True)
    @guarded(1)
    def on_peers_cancel(n, gid):
        job = plans.job(gid, "compare")
        if not n or job is None or job.done:
            raise PreventUpdate
        job.cancel.set()
        return compare_line(job.status())

    @app.callback(Output("peers-status", "children", allow_duplicate=True),
                  Output("peers-poll", "disabled", allow_duplicate=True),
                  Output("frontier-version", "data", allow_duplicate=True),
                  Input("peers-poll", "n_intervals"), State("model", "value"), prevent_initial_call=True)
    @guarded(3)
    def on_peers_poll(_n, gid):
        job = plans.job(gid, "compare")
        if job is None:
            return "", True, no_update
        if job.error:
            show_message(f"the peers' run on {state.label(gid)} failed: {job.error}")
        if job.done:
            f = plans.frontier(gid)
            return compare_line(job.status()), True, {"gid": gid, "version": f.version}
        return compare_line(job.status()), False, no_update

    @app.callback(Output("frontier-version", "data", allow_duplicate=True), Output("plan-upload", "contents"),
                  Input("plan-upload", "contents"), State("plan-upload", "filename"), State("model", "value"),
                  prevent_initial_call=True)
    def on_plan_upload(contents, filename, gid):
        if not contents:
            raise PreventUpdate
        name = filename or "plan file"
        try:
            f = plans.load_upload(gid, decode_upload(contents), name)
        except (PlanError, AppError, ValueError) as e:
            show_message(f"Could not open {name!r} for {state.label(gid)}: {e}")
            return no_update, None
        except Exception as e:  # noqa: BLE001
            log.exception("plan upload failed")
            show_message(f"Could not open {name!r}: {type(e).__name__}: {e}")
            return no_update, None
        show_message(f"Opened {name}: {plural(len(f.points), 'point')} for {state.label(gid)}.", "ok")
        return {"gid": gid, "version": f.version}, None


__all__ = ["compare_line", "fit_point", "floor_card", "missing_block", "missing_methods", "pareto_figure", "plan_caption", "slider_stop", "stop_label",
           "failure_notes", "pareto_tab", "plan_bar", "plan_cards", "register", "slider_of"]
