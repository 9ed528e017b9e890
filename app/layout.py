"""The page: a header with the model / upload / device pickers, summary cards, and a tab bar whose
tabs are the workspace panels: "Memory analysis" (graph, dominator tree or F-Tree, node details, memory over time, hot-spots); the plan bar (a memory slider along the
frontier) sits above the tabs, and the optimizer's tabs (Pareto frontier, rule steps, swaps, export)
show the plan it selects; the "Fusion" tab plans layer fusion of a forward graph under an on-chip
buffer."""

from __future__ import annotations

import dash_cytoscape as cyto
from dash import dcc, html
from dash.dash_table.Format import Format

from core.cost import DEFAULT_PROFILE, DEVICES

from . import export_view, fusion_view, measured_view, optimizer_view, steps_view, swaps_view, url_state
from .cyto import DOM_LAYOUT, LAYOUT, ftree_stylesheet, stylesheet
from .figures import HOTSPOT_COLUMNS
from .ftree_view import CANDIDATE_TEXT, ENABLED_TEXT, FTREE_LAYOUT, ftree_hint
from .panels import details_hint
from .state import AppState
from .tables import table


def header(state: AppState, initial: str) -> html.Header:
    return html.Header([
        html.Div([html.Span("MAGIS", className="brand-strong"), html.Span(" Studio", className="brand-light")],
                 className="brand"),
        html.Div([
            html.Label("model", htmlFor="model"),
            dcc.Dropdown(id="model", options=state.model_options(), value=initial, clearable=False,
                         searchable=True, className="model-dd"),
        ], className="ctl ctl-model"),
        dcc.Upload(id="upload", children=html.Div(["drop or ", html.A("upload a graph file"),
                                                   html.Span(" (.json / .json.gz from magis import)",
                                                             className="muted")]),
                   className="upload", multiple=False),  # any name: the content decides, with a message
        html.Div([
            html.Label("device", htmlFor="device"),
            dcc.Dropdown(id="device", value=DEFAULT_PROFILE, clearable=False, searchable=False,
                         options=[{"label": f"{k} ({v.memory_bytes // 2**30} GiB)", "value": k}
                                  for k, v in DEVICES.items()], className="device-dd"),
        ], className="ctl ctl-device"),
    ], className="top")


LEGEND = (  # (class of the swatch, what it means): the marks of the graph's stylesheet (cyto.stylesheet)
    ("lg-op", "op"), ("lg-input", "input / weight"), ("lg-group", "module group (click: expand)"),
    ("lg-bwd", "backward (∇)"), ("lg-sel", "selected"), ("lg-found", "search match"),
    ("lg-fission", "fission (split)"), ("lg-remat", "recomputed"), ("lg-swap", "swapped out / in"),
    ("lg-subst", "substituted"), ("lg-ftsel", "F-Tree node's S"),
)


def graph_legend() -> html.Div:
    """What the shapes and outlines of the graph mean (the plan's marks show the selected plan)."""
    return html.Div([html.Span("marks", className="muted")]
                    + [html.Span([html.Span(className=f"sw {cls}"), text], className="lg-item") for cls, text in LEGEND],
                    id="graph-legend", className="legend graph-legend")


def graph_panel(init: dict) -> html.Section:
    return html.Section([
        html.Div([html.H3("Computation graph"),
                  html.Span("collapsed by module · click a group to expand it, an op for its details",
                            className="muted hint"),
                  html.Div([
                      html.Span("colour", className="muted"),
                      dcc.RadioItems(id="heat", value="peak", inline=True, className="heat-mode", options=[
                          {"label": "bytes at peak", "value": "peak"},
                          {"label": "output bytes", "value": "out"}]),
                      html.Span(className="heat-bar"), html.Span("hot-spot", className="lg-hot"),
                      html.Span("picked on curve", className="lg-live"),
                      html.Span("∇ / dashed: backward", className="muted")], className="legend")],
                 className="panel-head"),
        html.Div([html.Div(init.get("chips"), id="chips", className="chips"),
                  dcc.Input(id="graph-search", type="search", debounce=0.35, placeholder="find a node, tensor or module",
                            className="graph-search", autoComplete="off"),
                  html.Button("collapse all", id="collapse-all", n_clicks=0, className="btn"),
                  html.Button("reset view", id="reset-view", n_clicks=0, className="btn")],
                 className="chip-row"),
        html.Div(id="graph-search-note", className="muted small"),
        dcc.Store(id="search-hit"),  # {gid, tok, nid | group}: what the search box found (centred in the browser)
        graph_legend(),
        dcc.Loading(cyto.Cytoscape(
            id="graph", elements=init.get("graph", []), layout=init.get("graph-layout", LAYOUT), stylesheet=stylesheet(),
            minZoom=0.05, maxZoom=3, wheelSensitivity=0.25, clearOnUnhover=True, autoRefreshLayout=False,
            autounselectify=True, boxSelectionEnabled=False,
            style={"width": "100%", "height": "600px"}), type="dot", delay_show=400,
            overlay_style={"visibility": "visible", "opacity": 0.6}),
        html.Div(id="graph-hover", className="muted small hover-line"),
    ], className="panel graph-panel")


def side_panel(init: dict) -> html.Section:
    """The dominator tree or (toggle in the head) the F-Tree, above the details of what is picked."""
    return html.Section([
        html.Div([dcc.RadioItems(id="side-view", value="domtree", inline=True, className="side-view", options=[
                      {"label": "dominator tree", "value": "domtree"}, {"label": "F-Tree", "value": "ftree"}])],
                 className="panel-head"),
        html.Div([
            html.Span("from the activation input; in sync with the graph · ▾N: N more ops it dominates "
                      "(click it to show them)", className="muted hint"),
            cyto.Cytoscape(id="domtree", elements=init.get("domtree", []), layout=init.get("dom-layout", DOM_LAYOUT),
                           stylesheet=stylesheet(dom=True), autoRefreshLayout=False, minZoom=0.05, maxZoom=1.3,
                           wheelSensitivity=0.25, autounselectify=True, boxSelectionEnabled=False,
                           style={"width": "100%", "height": "340px"}),
            html.Div(init.get("dom-info"), id="dom-info", className="muted small"),
        ], id="domtree-box", className="side-box"),
        html.Div([
            html.Div([html.Span("candidate F-Trans of Algorithm 1, nested S under S · colour: heat · ▾N: N more "
                                "below (click the node)", className="muted"),
                      html.Span(ENABLED_TEXT, className="lg-ft-on"), html.Span(CANDIDATE_TEXT, className="lg-ft-cand")],
                     className="legend ftree-legend"),
            cyto.Cytoscape(id="ftree", elements=[], layout=FTREE_LAYOUT, stylesheet=ftree_stylesheet(),
                           autoRefreshLayout=False, minZoom=0.05, maxZoom=1.6, wheelSensitivity=0.25,
                           autounselectify=True, boxSelectionEnabled=False,
                           style={"width": "100%", "height": "320px"}),
            html.Div(id="ftree-status", className="muted small"),
            html.Div(ftree_hint(), id="ftree-info", className="details-box ftree-info"),
            dcc.Interval(id="ftree-poll", interval=700, disabled=True),
            dcc.Store(id="ftree-drawn"),  # {gid, tok, enabled, open}: what the F-Tree view draws
            dcc.Store(id="ftree-open"),  # {gid, open: [F-Tree node ids, -1: the roots]}: children drawn
            dcc.Store(id="ftree-s"),  # {gid, fid, dims: {op id: split dim}}: the picked node's S
            dcc.Store(id="ftree-marked"),  # written by the clientside marker of S in the graph
        ], id="ftree-box", className="side-box", style={"display": "none"}),
        html.Div(details_hint(), id="details", className="details-box"),
    ], className="panel side-panel")


def memory_panel(schedules: list[str], init: dict) -> html.Section:
    opts = [{"label": s, "value": s} for s in schedules]
    return html.Section([
        html.Div([html.H3("Memory over time"),
                  html.Div([
                      html.Label("schedule", htmlFor="schedule"),
                      dcc.Dropdown(id="schedule", options=opts, value="traced", clearable=False,
                                   searchable=False, className="sched-dd"),
                      html.Label("compare"),
                      dcc.Checklist(id="compare", options=opts,
                                    value=init.get("compare", ["rpo"] if "rpo" in schedules else []),
                                    inline=True, className="compare"),
                      dcc.RadioItems(id="xmode", options=[{"label": "step", "value": "step"},
                                                          {"label": "time", "value": "time"}],
                                     value="step", inline=True, className="xmode"),
                  ], className="mem-controls"),
                  html.Span(init.get("mem-status"), id="mem-status", className="muted small"),
                  html.Button("stop, keep the best so far", id="stop-schedule", n_clicks=0, className="stop-btn",
                              title="end the running schedulers of this model now; each returns the best "
                                    "order it has found",
                              style={} if not init.get("poll-disabled", True) else {"display": "none"}),
                  dcc.Store(id="stop-ack")],
                 className="panel-head"),
        dcc.Loading(dcc.Graph(id="memory", figure=init.get("memory", {}),
                              config={"displaylogo": False, "responsive": True},
                              style={"height": "360px"}, clear_on_unhover=True),
                    type="dot", delay_show=400, overlay_style={"visibility": "visible", "opacity": 0.6}),
        html.Div("hover a step for the largest live tensors; click it to outline them in the graph",
                 className="muted small"),
        dcc.Interval(id="poll", interval=1000, disabled=init.get("poll-disabled", True)),
        dcc.Store(id="mem-drawn", data=init.get("mem-drawn")),
    ], className="panel memory-panel")


def hotspot_panel(init: dict) -> html.Section:
    exact = Format().group(True)  # the exact byte count (the "size" column has it in KiB / MiB / GiB)
    cols = [{"name": name, "id": cid, "type": "numeric" if cid in ("bytes", "alloc", "free", "lifetime") else "text"}
            | ({"format": exact} if cid == "bytes" else {}) for cid, name in HOTSPOT_COLUMNS]
    return html.Section([
        html.Div([html.H3("Memory hot-spots"),
                  html.Span("tensors alive at the peak of the selected schedule; click a row to find it",
                            className="muted hint"),
                  dcc.Checklist(id="hot-resident", options=[{"label": "include inputs & weights",
                                                             "value": "resident"}], value=[], inline=True)],
                 className="panel-head"),
        table(
            id="hotspots", columns=cols, data=init.get("hotspots", []), sort_action="native", filter_action="native",
            page_action="native", page_size=12, sort_by=[{"column_id": "bytes", "direction": "desc"}],
            cell_selectable=True, wrap=("tensor", "producer", "module"),
            style_data_conditional=[{"if": {"state": "active"}, "backgroundColor": "#fee2e2",
                                     "border": "1px solid #dc2626"}],
            tooltip_duration=None),
        html.Div(init.get("hot-note"), id="hot-note", className="muted small"),
    ], className="panel hot-panel")


def analysis_tab(schedules: list[str], init: dict) -> html.Div:
    return html.Div([
        html.Div([graph_panel(init), side_panel(init)], className="row-graph"),
        memory_panel(schedules, init),
        measured_view.panel(),  # the selected plan's script run on the CPU, over its simulated curve
        hotspot_panel(init),
    ], className="tab-body")


def workspace_tabs(schedules: list[str], init: dict) -> list[dcc.Tab]:
    """The workspace panels, one tab each: the memory analysis of the imported graph, the optimizer's
    views of the plan selected in the plan bar, and layer fusion (GET)."""
    return [dcc.Tab(analysis_tab(schedules, init), label="Memory analysis", value="analysis"),
            optimizer_view.pareto_tab(init), steps_view.tab(), swaps_view.tab(), export_view.tab(),
            fusion_view.tab()]


def build_layout(state: AppState, initial: str, init: dict | None = None) -> html.Div:
    """The page; ``init`` holds the first render's outputs (``callbacks.first_render``) so the page
    paints without waiting for callbacks."""
    schedules = state.schedules()
    init = init or {}
    return html.Div([
        header(state, initial),
        html.Div(init.get("messages"), id="messages", className="messages"),
        dcc.Loading(html.Div(init.get("summary"), id="summary", className="cards"), type="dot", delay_show=400),
        optimizer_view.plan_bar(init),
        dcc.Store(id="frontier-version"),  # {gid, version}: bumped when a graph's frontier changes
        *url_state.components(),  # the view in the address (model, slider stop, tab)
        dcc.Tabs(workspace_tabs(schedules, init), id="tabs", value="analysis", className="tabs"),
        dcc.Store(id="view", data=init.get("view")),  # {"gid", "expanded": [paths]}
        dcc.Store(id="selected"),  # {"gid", "nid"}
        dcc.Store(id="live"),  # {"gid", "schedule", "step", "nodes"}
        dcc.Store(id="hot", data=init.get("hot")),  # {"gid", "schedule", "device", "nodes"}
        dcc.Store(id="sel-marked"),  # written by the clientside selection marker
        dcc.Store(id="live-marked"),  # written by the clientside live-tensor marker
        dcc.Store(id="paths", data=init.get("paths")),  # {"gid", "paths", "ids", "idx"}: node -> module group
        html.Footer("MAGIS Studio · graphs are parsed as JSON only; nothing uploaded is executed",
                    className="muted small foot"),
    ], className="page")
