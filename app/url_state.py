"""The view in the page's address: the model, the plan bar's slider stop and the tab, as a query
string (``?sample=bert_tiny&stop=3&tab=pareto``), so that a copied link opens the same view.

``encode`` writes the query of a view; ``decode`` reads one back against what exists (the model
ids, the tab values, the slider's last stop): an unknown or malformed value is dropped -- the page
keeps its default for it -- never an error.  ``register`` wires the page: on load the query is
restored (the model first; the stop once that model's slider is drawn), and every change of the
three is written back with ``history.replaceState`` (no reload, no new history entry per drag).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, urlencode

from dash import Dash, Input, Output, State, dcc, no_update
from dash.exceptions import PreventUpdate

TABS = ("analysis", "pareto", "steps", "swaps", "export", "fusion")
DEFAULT_TAB = "analysis"
SAMPLE_PREFIX = "sample:"


def encode(gid: str | None, stop: int | None = None, tab: str | None = None) -> str:
    """The query string (with its leading ``?``; empty for no view) of model ``gid``, slider stop
    ``stop`` and tab ``tab``; a sample is written by name (``sample=NAME``), another model by its id."""
    q: dict[str, str] = {}
    if gid:
        if gid.startswith(SAMPLE_PREFIX):
            q["sample"] = gid[len(SAMPLE_PREFIX):]
        else:
            q["model"] = gid
    if isinstance(stop, int) and not isinstance(stop, bool) and stop >= 0:
        q["stop"] = str(stop)
    if tab and tab != DEFAULT_TAB and tab in TABS:
        q["tab"] = tab
    return "?" + urlencode(q) if q else ""


def decode(search: str | None, models: Iterable[str] = (), tabs: Iterable[str] = TABS) -> dict[str, Any]:
    """The view of query ``search`` (``?`` optional): ``{"gid", "stop", "tab"}``, each None where the
    query has no usable value -- a model not among ``models``, a stop that is not a non-negative
    integer, a tab not among ``tabs``, a repeated or garbled field.  Never raises."""
    out: dict[str, Any] = {"gid": None, "stop": None, "tab": None}
    if not isinstance(search, str) or not search:
        return out
    try:
        q = parse_qs(search.removeprefix("?"), keep_blank_values=False, max_num_fields=20)
    except ValueError:  # more fields than anyone writes: not a link of ours
        return out
    one = {k: v[0] for k, v in q.items() if len(v) == 1}
    known = set(models)
    if "sample" in one and SAMPLE_PREFIX + one["sample"] in known:
        out["gid"] = SAMPLE_PREFIX + one["sample"]
    elif "model" in one and one["model"] in known:
        out["gid"] = one["model"]
    s = one.get("stop", "")
    if s.isascii() and s.isdigit() and len(s) <= 6:
        out["stop"] = int(s)
    if one.get("tab") in set(tabs):
        out["tab"] = one["tab"]
    return out


# in the browser: show the query in the address bar without a reload or a history entry per change
WRITE = """function(q) {
    if (q === null || q === undefined) { return window.dash_clientside.no_update; }
    const url = window.location.pathname + q + window.location.hash;
    if (window.location.search !== q) { window.history.replaceState(window.history.state, "", url); }
    return q;
}"""


def components() -> list:
    """What the layout mounts: the address (read on load) and the stores of ``register``."""
    return [dcc.Location(id="url", refresh=False),
            dcc.Store(id="url-query"),  # the query the address shows (None: not read yet)
            dcc.Store(id="url-stop"),  # {gid, stop}: a restored stop waiting for its model's slider
            dcc.Store(id="url-shown")]  # written by the clientside writer


def register(app: Dash, state) -> None:
    """The callbacks of the page's address (``dcc.Location`` ``url`` and the stores ``url-query``,
    ``url-stop``, ``url-shown`` of the layout)."""

    @app.callback(Output("model", "value", allow_duplicate=True), Output("tabs", "value"),
                  Output("plan-slider", "value", allow_duplicate=True), Output("url-stop", "data"),
                  Output("url-query", "data"),
                  Input("url", "search"), State("model", "value"), State("plan-points", "data"),
                  prevent_initial_call="initial_duplicate")
    def on_url(search, gid, pts):
        """Restore the view of the address once, on load (the writer below replaces the address
        without telling ``dcc.Location``, so this runs again only on back / forward)."""
        if search is None:
            raise PreventUpdate  # dcc.Location has not read the address yet
        want = decode(search, [o["value"] for o in state.model_options()])
        tab = want["tab"] or no_update
        stop, pending = no_update, None
        if want["gid"] and want["gid"] != gid:  # the stop waits for that model's slider (``on_points``)
            pending = {"gid": want["gid"], "stop": want["stop"]} if want["stop"] is not None else None
            return want["gid"], tab, no_update, pending, search
        if want["stop"] is not None and pts and pts.get("gid") == gid and want["stop"] <= pts.get("max", 0):
            stop = want["stop"]
        return no_update, tab, stop, None, search

    @app.callback(Output("plan-slider", "value", allow_duplicate=True), Output("url-stop", "data",
                                                                               allow_duplicate=True),
                  Input("plan-points", "data"), State("url-stop", "data"), prevent_initial_call=True)
    def on_points(pts, pending):
        """The stop of a restored address, once its model's slider is drawn."""
        if not pending or not pts or pts.get("gid") != pending.get("gid"):
            raise PreventUpdate
        stop = pending.get("stop")
        ok = isinstance(stop, int) and 0 <= stop <= pts.get("max", 0)
        return (stop if ok else pts.get("default", 0)), None

    @app.callback(Output("url-query", "data", allow_duplicate=True),
                  Input("model", "value"), Input("plan-slider", "value"), Input("tabs", "value"),
                  State("url-query", "data"), State("url-stop", "data"), prevent_initial_call=True)
    def on_view(gid, stop, tab, shown, pending):
        """The address of the view now; not before the address of the page was read (``shown``
        None), nor while a restored stop waits for its slider."""
        if shown is None or pending:
            raise PreventUpdate
        q = encode(gid, stop if isinstance(stop, int) else None, tab)
        if q == shown:
            raise PreventUpdate
        return q

    app.clientside_callback(WRITE, Output("url-shown", "data"), Input("url-query", "data"),
                            prevent_initial_call=True)


__all__ = ["DEFAULT_TAB", "TABS", "components", "decode", "encode", "register"]
