"""Rule stepping: the selected plan as its ordered rule applications from the imported graph, one
step at a time (first / back / forward / last, and play).  Each step shows the rule, the nodes it
added, removed and re-wired, the window of the schedule that incremental scheduling (MAGIS
Algorithm 2) re-ordered, and the memory and latency before -> after, with the memory curves of both
sides of the step and the window shaded.

The steps are replayed once per plan on a worker (``plans.build_steps``, as the M-Optimizer
evaluated them); a step change only looks them up.
"""

from __future__ import annotations

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.fmt import format_bytes, plural
from core.transform.registry import get_rule

from . import figures
from .plan_store import Step
from .tables import table

NAMES_SHOWN = 8
PLAY_MS = 1200


def _names(names: list[str]) -> str:
    if not names:
        return "none"
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def app_text(app, names: dict[int, str] | None = None, shown: int = 6) -> str:
    """An application as text: its node parameters by name (``names``; the rule says which parameters
    are nodes, ``Rule.roles``), numbers as they are, long lists (a fission's region) cut short."""
    names = names or {}
    try:
        roles = get_rule(app.rule).roles(app.params)
    except (KeyError, ValueError):
        roles = ()
    parts = [names.get(p, f"#{p}") if role == "node" else str(p)
             for p, role in zip(app.params, [*roles, *["n"] * (len(app.params) - len(roles))], strict=True)]
    if len(parts) > shown + 2:
        parts = [*parts[:shown], f"… {len(parts) - shown} more"]
    return f"{app.rule}({', '.join(parts)})"


def _pct(a: float, b: float) -> str:
    return f"{(b / a - 1) * 100:+.2f}%" if a else ""


def peak_change(a: int, b: int) -> str:
    """The change of a step's peak: a percentage with the bytes, the bytes alone where the percentage
    would print as 0.00%, or "unchanged"."""
    d = b - a
    if d == 0:
        return "unchanged"
    size = ("-" if d < 0 else "+") + format_bytes(abs(d))
    if not a or abs(d / a) * 100 < 0.005:
        return size
    return f"{_pct(a, b)}, {size}"


def step_rows(steps: list[Step]) -> list[dict]:
    return [{"id": s.index, "step": s.index + 1, "rule": s.rule, "application": app_text(s.app, s.names),
             "peak": f"{format_bytes(s.peak[0])} → {format_bytes(s.peak[1])} ({peak_change(*s.peak)})",
             "latency": f"{figures.fmt_seconds(s.latency[0])} → {figures.fmt_seconds(s.latency[1])}",
             "window": f"{s.hi - s.lo + 1} → {plural(s.window, 'op')}"} for s in steps]


def rescheduled_text(s: Step) -> str:
    how = ("the search's own schedule of this state (a frontier point's)" if s.recorded
           else "incremental scheduling")
    if s.hi < s.lo and not s.window:
        return f"the schedule is unchanged ({how})"
    return (f"schedule positions {s.lo}..{s.hi} ({plural(s.hi - s.lo + 1, 'op')}) re-ordered into "
            f"{plural(s.window, 'op')} by {how}")


PAGE_SIZE = 12


def step_details(s: Step, total: int) -> html.Div:
    rows = [
        ("rule", f"{s.rule}: {get_rule(s.rule).text}"),
        ("application", app_text(s.app, s.names, 16)),
        ("added", f"{len(s.added)}: {_names(s.added)}"),
        ("removed", f"{len(s.removed)}: {_names(s.removed)}"),
        ("re-wired", f"{len(s.rewired)}: {_names(s.rewired)}"),
        ("rescheduled", rescheduled_text(s)),
        ("peak", f"{format_bytes(s.peak[0])} → {format_bytes(s.peak[1])} ({peak_change(*s.peak)})"),
        ("latency", f"{figures.fmt_seconds(s.latency[0])} → {figures.fmt_seconds(s.latency[1])} "
                    f"({_pct(*s.latency)})"),
    ]
    if s.enables or not s.peak[0] or abs(s.peak[1] - s.peak[0]) / s.peak[0] < 0.00005:
        later = ", ".join(str(j + 1) for j in s.enables)
        rows.append(("enables", f"{'step' if len(s.enables) == 1 else 'steps'} {later}: applied to nodes this "
                     "step added" if s.enables else "no later step builds on its nodes; the peak barely moves: "
                     "it changes memory away from the peak (the curves below) or the latency"))
    return html.Div([
        html.Div(f"step {s.index + 1} of {total}", className="step-title", id="step-title"),
        html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in rows], className="kv step-kv"),
    ])


def step_figure(s: Step) -> dict:
    """Memory per schedule step before and after the application; the re-ordered window shaded."""
    before, after = s.curve
    data = []
    for name, y, colour, width in (("before", before, "#9ca3af", 1.2), ("after", after, "#7c3aed", 1.8)):
        idx = figures.downsample_indices(y, figures.MAX_POINTS)
        data.append({"type": "scatter", "mode": "lines", "name": f"{name} step {s.index + 1}",
                     "x": idx.tolist(), "y": y[idx].tolist(), "line": {"shape": "hv", "color": colour,
                                                                      "width": width},
                     "hovertemplate": "position %{x}: %{y:.4s}B<extra>" + name + "</extra>"})
    top = float(max(before.max() if len(before) else 0, after.max() if len(after) else 0)) * 1.1 or 1.0
    tickvals, ticktext = figures.binary_ticks(top)
    shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": s.lo - 0.5, "x1": s.lo + s.window - 0.5,
               "y0": 0, "y1": 1, "fillcolor": "#c4b5fd", "opacity": 0.3, "line": {"width": 0}}]
    return {"data": data, "layout": {
        "template": "plotly_white", "margin": {"l": 60, "r": 10, "t": 30, "b": 40}, "shapes": shapes,
        "xaxis": {"title": {"text": "schedule position (shaded: the re-ordered window)"}, "automargin": True},
        "yaxis": {"title": {"text": "live memory", "standoff": 8}, "range": [0, top], "tickvals": tickvals,
                  "ticktext": ticktext, "automargin": True},  # "211.5 KiB" ticks: the title moves out
        "legend": {"orientation": "h", "y": 1.12}, "uirevision": "steps"}}


def tab() -> dcc.Tab:
    btn = "btn step-btn"
    return dcc.Tab(html.Div([
        html.Section([
            html.Div([html.H3("Rule steps"),
                      html.Span("the selected plan's rule applications from the imported graph, each "
                                "rescheduled incrementally as the M-Optimizer evaluated it", className="muted hint")],
                     className="panel-head"),
            html.Div([html.Button("|◀ first", id="step-first", n_clicks=0, className=btn, title="before the first step"),
                      html.Button("◀ back", id="step-back", n_clicks=0, className=btn, title="one step back"),
                      html.Button("forward ▶", id="step-fwd", n_clicks=0, className=btn, title="one step forward"),
                      html.Button("last ▶|", id="step-last", n_clicks=0, className=btn, title="the last step"),
                      html.Button("play", id="step-play", n_clicks=0, className=btn,
                                  title="step forward every second"),
                      html.Span(id="step-status", className="muted small")], className="btn-row"),
            html.Div([
                html.Div(table(id="step-table", columns=[{"name": c, "id": c} for c in
                                                         ("step", "rule", "application", "peak", "latency",
                                                          "window")],
                               data=[], page_action="native", page_size=PAGE_SIZE, page_current=0, row_selectable=False,
                               wrap=("application", "peak", "latency"), min_width=170, max_width=280),
                         className="step-list"),
                html.Div(id="step-details", className="details-box step-details"),
            ], className="row-steps"),
            dcc.Graph(id="step-memory", config={"displaylogo": False, "responsive": True},
                      style={"height": "320px"}),
        ], className="panel"),
        dcc.Store(id="step"),  # {gid, version, key, index, count}: index -1 = the imported graph
        dcc.Interval(id="step-poll", interval=600, disabled=True),
        dcc.Interval(id="step-timer", interval=PLAY_MS, disabled=True),
    ], className="tab-body"), label="Rule steps", value="steps")


# the step buttons, the play timer and a click on a row move the index in the browser: one round trip
# (the step's details and curves) per step
STEP = """function(_f, _b, _fw, _l, _p, _t, cell, cur, stopped) {
    const no = window.dash_clientside.no_update;
    if (!cur || !cur.count) { return [no, no, no, no]; }
    const trig = window.dash_clientside.callback_context.triggered_id;
    const n = cur.count;
    let i = cur.index, playing = !stopped;
    if (trig === "step-play") {
        playing = !playing;
        if (playing && i >= n - 1) { i = -1; }  // play from the start
    } else if (trig === "step-timer") {
        if (i >= n - 1) { return [no, true, "play", no]; }
        i += 1;
        if (i >= n - 1) { playing = false; }
    } else if (trig === "step-table") {
        // row_id: the step's index (a row's position counts from the top of its page)
        const id = cell ? (cell.row_id !== undefined && cell.row_id !== null ? cell.row_id : null) : null;
        if (id === null || id < 0 || id >= n) { return [no, no, no, no]; }
        if (id === cur.index) { return [no, no, no, no]; }
        i = id;
    } else {
        i = {"step-first": -1, "step-back": Math.max(-1, i - 1), "step-fwd": Math.min(n - 1, i + 1),
             "step-last": n - 1}[trig];
        playing = false;
    }
    const page = Math.floor(Math.max(0, i) / PAGE_SIZE);  // the table shows the selected step's page
    return [Object.assign({}, cur, {index: i}), !playing, playing ? "pause" : "play", page];
}""".replace("PAGE_SIZE", str(PAGE_SIZE))


def register(app: Dash, state, guarded, show_message) -> None:
    plans = state.plans

    @app.callback(Output("step", "data"), Output("step-table", "data"), Output("step-poll", "disabled"),
                  Output("step-status", "children"), Output("step-table", "page_current", allow_duplicate=True),
                  Input("plan-steps", "data"), Input("step-poll", "n_intervals"), State("step", "data"),
                  prevent_initial_call="initial_duplicate")
    @guarded(5)
    def on_plan_steps(sel, _poll, cur):
        if not sel:  # (the selected plan reaches this tab only while it is shown: steps replay a whole plan)
            raise PreventUpdate
        gid, key = sel["gid"], sel["key"]
        f = plans.frontier(gid)
        if sel.get("version") != f.version:
            raise PreventUpdate
        n = len(f.points[key].applications)
        steps = plans.steps(gid, key, wait=0.05 if ctx.triggered_id != "step-poll" else 0)
        if steps is None:
            return no_update, [], False, f"replaying {plural(n, 'rule application')} with incremental scheduling ...", \
                no_update
        same = cur and cur.get("gid") == gid and cur.get("version") == f.version and cur.get("key") == key
        if same and ctx.triggered_id == "step-poll":
            return no_update, no_update, True, no_update, no_update
        start = 0 if steps else -1  # step 1: forward moves on, back shows the imported graph (step 0)
        return ({"gid": gid, "version": f.version, "key": key, "index": start, "count": len(steps)},
                step_rows(steps), True, plural(len(steps), "step") if steps else "this plan changes nothing: no steps", 0)

    app.clientside_callback(STEP, Output("step", "data", allow_duplicate=True), Output("step-timer", "disabled"),
                            Output("step-play", "children"), Output("step-table", "page_current"),
                            Input("step-first", "n_clicks"), Input("step-back", "n_clicks"),
                            Input("step-fwd", "n_clicks"), Input("step-last", "n_clicks"),
                            Input("step-play", "n_clicks"), Input("step-timer", "n_intervals"),
                            Input("step-table", "active_cell"), State("step", "data"),
                            State("step-timer", "disabled"), prevent_initial_call=True)

    @app.callback(Output("step-details", "children"), Output("step-memory", "figure"), Input("step", "data"))
    @guarded(2)
    def on_show(cur):
        if not cur:
            raise PreventUpdate
        steps = plans.steps(cur["gid"], cur["key"], wait=0)
        if steps is None:
            raise PreventUpdate
        i = cur["index"]
        if i < 0 or not steps:
            what = "the imported graph, before the first step" if steps else "the imported graph"
            return html.Div([html.Div(f"step 0 of {len(steps)}", className="step-title", id="step-title"),
                             html.Div(what, className="muted")]), {"data": [], "layout": {
                                 "template": "plotly_white", "xaxis": {"visible": False}, "yaxis": {"visible": False},
                                 "annotations": [{"text": "step forward to see the first application",
                                                  "showarrow": False, "xref": "paper", "yref": "paper",
                                                  "x": 0.5, "y": 0.5}]}}
        s = steps[min(i, len(steps) - 1)]
        return step_details(s, len(steps)), step_figure(s)


__all__ = ["register", "step_details", "step_figure", "step_rows", "tab"]
