"""Callbacks: thin glue between the page and core.  Each one reads the server-side cache
(``AppState``), calls a pure builder (figures / cyto / panels) and returns the result.  Errors a user
can cause become a message at the top of the page; the server keeps running."""

from __future__ import annotations

import functools
import logging
import time

from dash import ALL, Dash, Input, Output, State, ctx, html, no_update, set_props
from dash.exceptions import PreventUpdate

from core.cost import DEFAULT_PROFILE, DEVICES
from core.fmt import format_bytes, plural
from core.ir.graph import GraphError

from . import (
    cyto,
    export_view,
    figures,
    ftree_view,
    fusion_view,
    optimizer_view,
    panels,
    steps_view,
    swaps_view,
)
from .modtree import Path
from .state import AppError, AppState

log = logging.getLogger("magis.app")
PRIMARY_WAIT_EXTRA = 10.0  # seconds past the time budget a callback waits for the selected schedule
PRIMARY_WAIT_MAX = 6.0  # ... but never longer: then the page shows it running (with a stop button) and polls


def primary_wait(state: AppState, g) -> float:
    return min(state.budget_for(g) + PRIMARY_WAIT_EXTRA, PRIMARY_WAIT_MAX)
OVERLAY_WAIT = 1.0  # seconds a callback waits for an overlaid schedule before polling for it
GRAPH_BUDGET = 24  # elements in the initial collapsed view
MAX_CHIPS = 14


CY_OF = """function cyOf(id) {
    const root = document.getElementById(id);
    if (!root) { return null; }
    const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
    return el ? el._cyreg.cy : null;
}"""

DISMISS = """function(n) {
    return n ? null : window.dash_clientside.no_update;
}"""

SELECT_TAPPED = """function(d, gid) {
    if (!d || d.nid === undefined || d.nid === null) { return window.dash_clientside.no_update; }
    return {gid: gid, nid: d.nid};
}"""

# a click on the curve: the producers of the largest tensors alive at that step ride in the selected
# schedule's points (customdata [step, schedule, [node ids]]), so no server round trip is needed
LIVE_CLICKED = """function(click, gid, sched, device) {
    const pts = ((click || {}).points || []).filter(p => p.customdata && p.customdata.length > 2);
    if (!pts.length) { return window.dash_clientside.no_update; }
    const cd = (pts.find(p => p.customdata[1] === sched) || pts[0]).customdata;
    return {gid: gid, schedule: cd[1], device: device, step: cd[0], nodes: cd[2]};
}"""

# outline the tensors picked on the curve: an op drawn as itself, or the collapsed group holding it
# (the drawn group whose path is a prefix of the node's path, from the graph's path table)
MARK_LIVE = "function(live, _g, _d, table) {" + CY_OF + """
    const ok = live && table && live.gid === table.gid;
    const want = new Set(ok ? live.nodes : []);
    const cache = window.__magisPathOf || (window.__magisPathOf = new WeakMap());  // per table
    function path(nid) {
        let pathOf = cache.get(table);
        if (!pathOf) {
            pathOf = new Map();
            table.ids.forEach((id, i) => pathOf.set(id, table.paths[table.idx[i]]));
            cache.set(table, pathOf);
        }
        return pathOf.get(nid);
    }
    let marked = 0;
    for (const id of ["graph", "domtree"]) {
        const cy = cyOf(id);
        if (!cy) { continue; }
        cy.batch(() => {
            cy.nodes(".live").removeClass("live");
            if (!want.size) { return; }
            const byNid = new Map(), groups = [];
            cy.nodes().forEach(n => {
                const d = n.data();
                if (d.nid !== undefined && d.nid !== null && !n.hasClass("more")) { byNid.set(d.nid, n); }
                else if (d.group !== undefined) { groups.push([d.group, n]); }
            });
            for (const nid of want) {
                let n = byNid.get(nid);
                if (!n && id === "graph") {
                    const p = path(nid);
                    const hit = p === undefined ? null : groups.find(([g]) => p === g || p.startsWith(g + "/"));
                    n = hit ? hit[1] : null;
                }
                if (n) { n.addClass("live"); marked += 1; }
            }
        });
    }
    return marked;
}"""

MARK_SELECTED = "function(sel) {" + CY_OF + """
    for (const id of ["graph", "domtree"]) {
        const cy = cyOf(id);
        if (!cy) { continue; }
        cy.nodes(".sel").removeClass("sel");
        if (sel) { cy.nodes().filter(n => n.data("nid") === sel.nid).addClass("sel"); }
    }
    return sel ? sel.nid : null;
}"""


def show_message(text: str | None, kind: str = "error") -> None:
    set_props("messages", {"children": panels.message(text, kind) if text else None})


def guarded(n_outputs: int):
    """Turn exceptions into a message and leave the outputs unchanged."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            except PreventUpdate:
                raise
            except (AppError, GraphError) as e:
                show_message(str(e))
            except Exception as e:  # never a stack trace in the UI, never a dead server
                log.exception("callback %s failed", fn.__name__)
                show_message(f"Something went wrong ({fn.__name__}): {type(e).__name__}: {e}")
            finally:
                log.debug("callback %s took %.3f s", fn.__name__, time.perf_counter() - t0)
            return no_update if n_outputs == 1 else (no_update,) * n_outputs

        return wrapper

    return deco


def enc_paths(paths) -> list[str]:
    return sorted(cyto.path_str(p) for p in paths)


def dec_paths(items) -> set[Path]:
    return {cyto.str_path(s) for s in items or []}


def _for(store, gid):
    return store if isinstance(store, dict) and store.get("gid") == gid else None


# ---- outputs as functions of the cache (used by the callbacks and by the first page render) ---------
def view_initial(state: AppState, gid: str) -> dict:
    return {"gid": gid, "expanded": enc_paths(state.entry(gid).tree.initial_expanded(GRAPH_BUDGET))}


def chips_of(state: AppState, view: dict) -> list:
    tree = state.entry(view["gid"]).tree
    paths = tree.collapsible(dec_paths(view["expanded"]))
    if not paths:
        return [html.Span("all modules collapsed", className="muted small")]
    chips = [html.Button([tree.label(p), html.Span(" ×", className="x")],
                         id={"type": "collapse", "index": cyto.path_str(p)}, n_clicks=0,
                         className="chip" + (" chip-bwd" if tree.phase(p) == "bwd" else ""),
                         title=f"collapse {tree.full_name(p)}")
             for p in paths[:MAX_CHIPS]]
    if len(paths) > MAX_CHIPS:
        chips.append(html.Span(f"+{len(paths) - MAX_CHIPS} more", className="muted small"))
    return [html.Span("expanded:", className="muted small")] + chips


def graph_of(state: AppState, view: dict, live, hot, heat_mode: str, selected) -> tuple[list[dict], dict]:
    """(elements, layout) of the graph view."""
    gid = view["gid"]
    entry = state.entry(gid)
    sel, lv, ht = _for(selected, gid), _for(live, gid), _for(hot, gid)
    heat = entry.out_bytes
    if heat_mode == "peak" and ht:
        a = state.analysis(gid, ht["schedule"], ht.get("device", DEFAULT_PROFILE), wait=0)
        heat = a.hot_bytes if a is not None else {}
    els = cyto.graph_elements(entry.graph, entry.tree, dec_paths(view["expanded"]), entry.tok, heat,
                              hot=ht["nodes"] if ht else (), selected=sel["nid"] if sel else None,
                              live=lv["nodes"] if lv else ())
    return els, cyto.layout_for(els, cyto.LAYOUT)


def domtree_of(state: AppState, view: dict, selected, live, hot, only_info: bool = False):
    """(elements, layout, info line) of the dominator-tree view."""
    gid = view["gid"]
    entry = state.entry(gid)
    dt = entry.dom()
    if dt is None:
        return [], cyto.DOM_LAYOUT, entry.dom_error
    sel, lv, ht = _for(selected, gid), _for(live, gid), _for(hot, gid)
    nid = sel["nid"] if sel else None
    els = no_update if only_info else cyto.dom_elements(
        entry.graph, dt, entry.dom_children(), entry.dom_sizes(), entry.tok, entry.out_bytes,
        hot=ht["nodes"] if ht else (), selected=nid, live=lv["nodes"] if lv else ())
    g = entry.graph
    n = len(dt.reachable)
    if n <= cyto.DOM_FULL_MAX:
        info = f"{plural(n, 'node')} reachable from {g[dt.entry].name}"
    else:
        info = (f"{n:,} nodes reachable from {g[dt.entry].name}: showing the neighbourhood of "
                f"{g[nid].name if nid in dt.reachable else 'the entry'} (click a node to move there)")
    if nid is not None and nid not in dt.reachable:
        info += f" · {g[nid].name} is not reachable from the activation input"
    lay = no_update if only_info else cyto.layout_for(els, cyto.DOM_LAYOUT)
    return els, lay, info


def paths_of(state: AppState, gid: str) -> dict:
    return {"gid": gid, **state.entry(gid).path_table()}


def analysis_of(state: AppState, gid: str, device: str, sched: str, resident) -> tuple:
    """(summary cards, hot-spot rows, hot store, note) -- None if the schedule is still running."""
    entry = state.entry(gid)
    base = state.analysis(gid, "traced", device)
    cur = state.analysis(gid, sched, device, wait=primary_wait(state, entry.graph))
    if cur is None:
        return None
    g = entry.graph
    rows = figures.hotspot_rows(g, cur.hot, include_resident=bool(resident))
    res = [s for s in cur.hot if s.alloc < 0]
    note = (plural(len(rows), "tensor") + ("" if resident else
            f"; {len(res)} resident inputs & weights ({format_bytes(sum(s.nbytes for s in res))}) "
            "not listed") + f" · peak {format_bytes(cur.sim.peak)} at step "
            f"{cur.profile.peak_steps[0] if cur.profile.peak_steps else '-'} of {cur.name}")
    cards = panels.summary_cards(entry.label, g, base, cur, device)
    hot = {"gid": gid, "schedule": sched, "device": device, "nodes": sorted(cur.hot_nodes)}
    return cards, rows, hot, note


def memory_of(state: AppState, gid: str, device: str, sched: str, compare, xmode: str):
    """(figure, key of what it draws, pending schedules, failure messages)."""
    t0 = time.perf_counter()
    g = state.entry(gid).graph
    names = [sched] + [c for c in (compare or []) if c != sched]
    curves, pending, failed = [], [], []
    for name in names:
        wait = primary_wait(state, g) if name == sched else OVERLAY_WAIT
        try:
            a = state.analysis(gid, name, device, wait=wait)
        except AppError as e:
            failed.append(str(e))
            continue
        if a is None:
            pending.append(name)
            continue
        main = name == sched
        curves.append(figures.Curve(name, a.profile, a.sim.start, a.sim.latency,
                                    a.live_index() if main else None,
                                    a.hover(g, figures.MAX_POINTS) if main else None))
        if not main:  # ready for when the user selects it
            state.prefetch_hover(a, g, figures.MAX_POINTS)
    key = [gid, device, xmode] + [c.name for c in curves]
    fig = figures.memory_figure(g, curves, xmode, capacity=DEVICES[device].memory_bytes, pending=pending)
    log.debug("memory figure for %s in %.3f s", gid, time.perf_counter() - t0)
    return fig, key, pending, failed


def first_render(state: AppState, gid: str, device: str = DEFAULT_PROFILE, sched: str = "traced",
                 compare=("rpo",), xmode: str = "step", heat: str = "peak") -> dict:
    """Every output of the first page, computed on the server: the page paints without waiting for a
    chain of callbacks (they run on later changes only).  Raises like the callbacks would."""
    compare = [c for c in compare if c in state.schedules()]
    view = view_initial(state, gid)
    res = analysis_of(state, gid, device, sched, [])
    if res is None:
        raise AppError(f"schedule {sched!r} is still being computed")
    cards, rows, hot, note = res
    fig, key, pending, failed = memory_of(state, gid, device, sched, compare, xmode)
    dom_els, dom_layout, dom_info = domtree_of(state, view, None, None, hot)
    graph_els, graph_layout = graph_of(state, view, None, hot, heat, None)
    try:
        plan_bar = optimizer_view.initial(state, gid)
    except Exception as e:  # noqa: BLE001 -- the plan bar's callbacks will say what is wrong
        log.warning("plan bar of %s: %s", gid, e)
        plan_bar = {}
    return plan_bar | {
        "view": view, "hot": hot, "summary": cards, "hotspots": rows, "hot-note": note,
        "memory": fig, "mem-drawn": key, "poll-disabled": not pending,
        "mem-status": ("computing " + ", ".join(pending) + " ...") if pending else "",
        "messages": panels.message("; ".join(failed)) if failed else None,
        "chips": chips_of(state, view), "graph": graph_els, "graph-layout": graph_layout,
        "domtree": dom_els, "dom-layout": dom_layout, "dom-info": dom_info, "compare": compare,
        "paths": paths_of(state, gid),
    }


def register(app: Dash, state: AppState) -> None:
    for view in (optimizer_view, steps_view, swaps_view, export_view, ftree_view, fusion_view):
        view.register(app, state, guarded, show_message)
    # ---- model picker & upload --------------------------------------------------------------------
    @app.callback(Output("model", "options"), Output("model", "value"), Output("upload", "contents"),
                  Input("upload", "contents"), State("upload", "filename"), prevent_initial_call=True)
    def on_upload(contents, filename):
        if not contents:
            raise PreventUpdate
        name = filename or "upload"
        try:
            gid = state.add_upload(contents, filename)
        except (GraphError, AppError) as e:
            show_message(f"Could not load {name!r}: {e}")
            return no_update, no_update, None
        except Exception as e:  # anything else is still the file's fault, not a reason to crash
            log.exception("upload failed")
            show_message(f"Could not load {name!r}: {type(e).__name__}: {e}")
            return no_update, no_update, None
        g = state.entry(gid).graph
        show_message(f"Loaded {name}: {plural(len(g.ops()), 'op')}, {len(g.placeholders()):,} inputs & weights.", "ok")
        return state.model_options(), gid, None

    # in the browser: a server reply to the dismissal could land after a newer message and clear it
    app.clientside_callback(DISMISS, Output("messages", "children"), Input("msg-close", "n_clicks"),
                            prevent_initial_call=True)

    # ---- view state: expansion, selection, live tensors ------------------------------------------
    @app.callback(
        Output("view", "data"), Output("selected", "data"), Output("live", "data"),
        Output("graph", "elements", allow_duplicate=True), Output("graph", "layout", allow_duplicate=True),
        Input("model", "value"), Input("graph", "tapNodeData"), Input("domtree", "tapNodeData"),
        Input("hotspots", "active_cell"),
        Input({"type": "collapse", "index": ALL}, "n_clicks"), Input("collapse-all", "n_clicks"),
        Input("reset-view", "n_clicks"),
        State("view", "data"), State("selected", "data"), State("live", "data"), State("hot", "data"),
        State("heat", "value"), prevent_initial_call=True)
    @guarded(5)
    def on_view(gid, tap, dom_tap, cell, _chips, _all, _reset, view, selected, live, hot, heat):
        # (clicks on the memory curve are handled in the browser: LIVE_CLICKED)
        new_view, new_sel, new_live = _on_view(gid, tap, dom_tap, cell, view)
        if not isinstance(new_view, dict) or ctx.triggered_id in ("model", "reset-view"):
            return new_view, new_sel, new_live, no_update, no_update  # on_graph draws (after the hot-spots)
        # expanding / collapsing / revealing: draw right here, one round trip instead of two
        new_view["drawn"] = True
        sel = new_sel if isinstance(new_sel, dict) else selected
        lv = new_live if isinstance(new_live, dict) else live
        return new_view, new_sel, new_live, *graph_of(state, new_view, lv, hot, heat, sel)

    def _on_view(gid, tap, dom_tap, cell, view):
        entry = state.entry(gid)
        tree = entry.tree
        trig = ctx.triggered_id
        view = _for(view, gid)
        if trig in (None, "model", "reset-view") or view is None:
            keep = no_update if trig == "reset-view" else None
            return view_initial(state, gid), keep, keep
        expanded = dec_paths(view["expanded"])

        def new_view(paths):
            return {"gid": gid, "expanded": enc_paths(paths)} if paths != expanded else no_update

        def select(nid: int):
            if nid not in entry.graph.nodes:
                raise PreventUpdate
            return new_view(tree.reveal(expanded, nid)), {"gid": gid, "nid": nid}, no_update

        if trig == "collapse-all":
            return new_view(set()), no_update, no_update
        if isinstance(trig, dict) and trig.get("type") == "collapse":
            if not ctx.triggered[0].get("value"):
                raise PreventUpdate  # a chip was (re)rendered, not clicked
            return new_view(tree.collapse(expanded, cyto.str_path(trig["index"]))), no_update, no_update
        if trig == "graph":
            if not tap or not str(tap.get("id", "")).startswith(entry.tok + "-"):
                raise PreventUpdate
            if "nid" in tap:
                raise PreventUpdate  # selecting an op is done in the browser (SELECT_TAPPED)
            if "group" in tap:
                return new_view(tree.expand(expanded, cyto.str_path(tap["group"]))), no_update, no_update
            raise PreventUpdate
        if trig == "domtree":
            if not dom_tap or "nid" not in dom_tap or not str(dom_tap.get("id", "")).startswith(entry.tok + "-"):
                raise PreventUpdate
            return select(int(dom_tap["nid"]))
        if trig == "hotspots":
            if not cell or cell.get("row_id") is None:
                raise PreventUpdate
            return select(int(str(cell["row_id"]).split(":")[0]))
        raise PreventUpdate

    @app.callback(Output("chips", "children"), Input("view", "data"), prevent_initial_call=True)
    @guarded(1)
    def on_chips(view):
        if not view:
            raise PreventUpdate
        return chips_of(state, view)

    # ---- graph & dominator tree -------------------------------------------------------------------
    @app.callback(Output("graph", "elements"), Output("graph", "layout"), Input("view", "data"),
                  Input("hot", "data"), Input("heat", "value"), Input("tabs", "value"), State("live", "data"),
                  State("selected", "data"), prevent_initial_call=True)
    @guarded(2)
    def on_graph(view, hot, heat_mode, tab, live, selected):
        # the selection and the live tensors are marked in the browser (MARK_SELECTED, MARK_LIVE); they
        # only ride along here
        if not view:
            raise PreventUpdate
        if ctx.triggered_id == "tabs" and tab != "analysis":
            raise PreventUpdate
        # back on the tab: its graph is mounted again from the ``elements`` prop, which dash-cytoscape
        # overwrote after the last model switch with data and positions only (no classes: every group
        # would be drawn as a plain op), so the elements are sent again
        if ctx.triggered_id == "view" and len(ctx.triggered) == 1 and view.get("drawn"):
            raise PreventUpdate  # on_view already sent the elements of this view
        return graph_of(state, view, live, hot, heat_mode, selected)

    # instant feedback without a server round trip: select a tapped op, pick live tensors from the
    # curve (their producers ride in the point's customdata), and mark the selection in both views
    app.clientside_callback(SELECT_TAPPED, Output("selected", "data", allow_duplicate=True),
                            Input("graph", "tapNodeData"), State("model", "value"), prevent_initial_call=True)
    app.clientside_callback(LIVE_CLICKED, Output("live", "data", allow_duplicate=True),
                            Input("memory", "clickData"), State("model", "value"), State("schedule", "value"),
                            State("device", "value"), prevent_initial_call=True)
    app.clientside_callback(MARK_SELECTED, Output("sel-marked", "data"), Input("selected", "data"))
    app.clientside_callback(MARK_LIVE, Output("live-marked", "data"), Input("live", "data"),
                            Input("graph", "elements"), Input("domtree", "elements"), State("paths", "data"))

    @app.callback(Output("paths", "data"), Input("model", "value"), prevent_initial_call=True)
    @guarded(1)
    def on_paths(gid):
        return paths_of(state, gid)

    app.clientside_callback(
        """function(d) {
            if (!d) { return ""; }
            if (d.group) { return d.name + " · " + d.count + " · " + d.bytes + " · click to expand"; }
            return (d.name || "") + (d.module ? " · " + d.module : "") + " · " + (d.bytes || "");
        }""",
        Output("graph-hover", "children"), Input("graph", "mouseoverNodeData"))

    @app.callback(Output("domtree", "elements"), Output("domtree", "layout"), Output("dom-info", "children"),
                  Input("view", "data"), Input("selected", "data"), Input("hot", "data"), Input("tabs", "value"),
                  State("live", "data"), prevent_initial_call=True)
    @guarded(3)
    def on_domtree(view, selected, hot, tab, live):
        if not view or ctx.triggered_id == "tabs" and tab != "analysis":
            raise PreventUpdate  # back on the tab: sent again, as on_graph does
        entry = state.entry(view["gid"])
        dt = entry.dom()
        # whole tree drawn: the browser marks the selection (MARK_SELECTED), only the info changes
        only_info = ctx.triggered_id == "selected" and dt is not None and len(dt.reachable) <= cyto.DOM_FULL_MAX
        return domtree_of(state, view, selected, live, hot, only_info)

    # ---- details ----------------------------------------------------------------------------------
    @app.callback(Output("details", "children"), Input("selected", "data"), Input("live", "data"),
                  Input("schedule", "value"), Input("device", "value"), Input("model", "value"),
                  prevent_initial_call=True)
    @guarded(1)
    def on_details(selected, live, sched, device, gid):
        entry = state.entry(gid)
        g = entry.graph
        parts = []
        lv = _for(live, gid)
        sel = _for(selected, gid)
        # one breakdown at a time: the newest pick (a curve click, or an op) replaces the other
        if lv and sel:
            if ctx.triggered_id == "live":
                sel = None
            else:
                lv = None
        if lv:
            a = state.analysis(gid, lv["schedule"], lv.get("device", device), wait=0)
            if a is not None:
                step = lv["step"]
                parts.append(panels.live_details(g, a, step, a.profile.live_at(step)))
        if sel:
            a = state.analysis(gid, sched, device, wait=0)
            parts.append(panels.node_details(g, sel["nid"], a, entry.dom()))
        if not parts:  # nothing of this model picked (a model switch clears the previous one's op)
            return panels.details_hint()
        return parts

    # ---- summary & hot-spots ----------------------------------------------------------------------
    @app.callback(Output("summary", "children"), Output("hotspots", "data"), Output("hot", "data"),
                  Output("hot-note", "children"),
                  Input("model", "value"), Input("device", "value"), Input("schedule", "value"),
                  Input("hot-resident", "value"), Input("poll", "n_intervals"), State("hot", "data"),
                  prevent_initial_call=True)
    @guarded(4)
    def on_analysis(gid, device, sched, resident, _poll, hot):
        if ctx.triggered_id == "poll" and _for(hot, gid) and hot.get("schedule") == sched \
                and hot.get("device") == device:
            raise PreventUpdate  # already showing this schedule
        res = analysis_of(state, gid, device, sched, resident)
        if res is None:
            show_message(f"schedule {sched!r} is still being computed for {state.label(gid)} ...", "info")
            raise PreventUpdate
        return res

    # ---- stopping background schedules --------------------------------------------------------------
    @app.callback(Output("stop-schedule", "style"), Input("poll", "disabled"))
    def on_pending(disabled):
        return {"display": "none"} if disabled else {}

    @app.callback(Output("stop-ack", "data"), Input("stop-schedule", "n_clicks"), State("model", "value"),
                  prevent_initial_call=True)
    def on_stop(_n, gid):
        stopped = state.cancel(gid) if gid else 0
        if stopped:
            show_message(f"stopping {stopped} running schedule(s) of {state.label(gid)}: each keeps the best "
                         f"order found so far", "info")
        return {"gid": gid, "stopped": stopped}

    # ---- memory over time -------------------------------------------------------------------------
    @app.callback(Output("memory", "figure"), Output("poll", "disabled"), Output("mem-status", "children"),
                  Output("mem-drawn", "data"),
                  Input("model", "value"), Input("device", "value"), Input("schedule", "value"),
                  Input("compare", "value"), Input("xmode", "value"), Input("poll", "n_intervals"),
                  State("mem-drawn", "data"), prevent_initial_call=True)
    @guarded(4)
    def on_memory(gid, device, sched, compare, xmode, _poll, drawn):
        fig, key, pending, failed = memory_of(state, gid, device, sched, compare, xmode)
        if ctx.triggered_id == "poll" and key == drawn:
            return no_update, not pending, no_update, no_update  # nothing new finished
        if failed:
            show_message("; ".join(failed))
        status = ("computing " + ", ".join(pending) + " ...") if pending else ""
        return fig, not pending, status, key
