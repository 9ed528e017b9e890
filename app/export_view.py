"""The "Export" tab: the selected plan as a runnable PyTorch script (``core.codegen``), as a plan file
for the command line (``magis export`` / ``magis verify``), and its verification against eager
PyTorch (``magis verify`` in a background process, polled).

Generating the script of a 2k-9k op plan takes a fraction of a second (more the first time: it
imports torch), so it is done when the download button is clicked, never when a plan is selected.
"""

from __future__ import annotations

import re
import time
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.cost import AnalyticCost
from core.fmt import format_bytes, plural
from core.search.methods import label_of
from core.search.plan import PlanFile, plans_to_bytes

from . import figures
from .plan_store import Frontier, PointView
from .state import FULL_SIZE, AppError, AppState

SCRIPT_VIEW_WAIT = 60.0  # seconds the download waits for the point's view (built on a worker thread)
POLL_MS = 1000
PLAN_LINE_WAIT = 2.0  # seconds the plan line waits for the point's view (what it swaps)


# ---- pure builders ---------------------------------------------------------------------------------
def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("._") or "graph"


def file_stem(f: Frontier, key: int) -> str:
    """``<graph name>_<method>_point<k>``."""
    return f"{_safe(f.plans.graph_name)}_{_safe(f.points[key].method)}_point{key}"


def script_name(f: Frontier, key: int) -> str:
    return file_stem(f, key) + ".py"


def plan_file_name(f: Frontier, key: int) -> str:
    return file_stem(f, key) + ".plan.json"


def plan_file_of(f: Frontier, key: int) -> PlanFile:
    """A plan file with point ``key`` as point 0 and the eager point after it (once, when ``key`` is
    the eager point), for the graph and device profile of ``f``."""
    base = f.baseline()
    points = [f.points[key]] + ([f.points[base]] if base != key else [])
    return PlanFile(f.plans.graph_name, f.plans.graph_hash, f.device, points,
                    meta={"exported_from": "MAGIS Studio", "frontier_point": key, "frontier_source": f.source})


def plan_file_bytes(f: Frontier, key: int) -> bytes:
    return plans_to_bytes(plan_file_of(f, key))


def script_of(f: Frontier, v: PointView) -> tuple[str, str, float]:
    """(file name, source, seconds to generate) of the plan's PyTorch script."""
    from core.codegen.emit import generate_source

    p = v.plan
    t0 = time.perf_counter()
    src = generate_source(v.graph, p.order, schedule_name=f"plan {p.method} {p.label}".strip(),
                          cost=AnalyticCost(f.device), sim=v.sim)
    return script_name(f, v.key), src, time.perf_counter() - t0


def sample_of(gid: str) -> str | None:
    kind, _, name = gid.partition(":")
    return name if kind == "sample" else None


def graph_file_of(label: str) -> str:
    """The graph file an uploaded graph came from, as its label names it ("g.json.gz (uploaded)")."""
    name = label.removesuffix(" (uploaded)").strip()
    return name if name and " " not in name else "GRAPH_FILE"


def verify_block(gid: str, label: str = "") -> str | None:
    """Why the plan of ``gid`` cannot be verified from the page (None: it can)."""
    import sample_graphs

    name = sample_of(gid)
    if name is None:
        return ("verify runs the model that made the graph, and the page only has the graph of an uploaded "
                f"file: from the command line, magis verify path/to/model.py:factory --graph "
                f"{graph_file_of(label)} --plan PLAN_FILE")
    if name in FULL_SIZE:
        stem = name.split("_")[0]
        tiny = [n for n in sample_graphs.NAMES if n.endswith("_tiny") and n.split("_")[0] == stem]
        return (f"{name} is a paper-size workload and verify runs the model for real on the CPU, so the page "
                f"verifies the small samples only" + (f" (try {tiny[0]})" if tiny else ""))
    return None


def script_devices() -> list[str]:
    """The ``--device`` values the page offers for the exported script: the torch devices this
    machine's torch has -- ``cuda`` when ``torch.cuda.is_available()``, and ``cpu`` always."""
    import torch

    return ["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"]


def commands(gid: str, f: Frontier, key: int, label: str = "") -> str:
    """The command lines that use the downloaded plan file (``label``: the graph's, which names an
    uploaded graph's file); the script's run lines offer :func:`script_devices`."""
    spec = sample_of(gid) or graph_file_of(label)
    plan, script = plan_file_name(f, key), script_name(f, key)
    lines = [f"magis export {spec} --plan {plan} -o {script}"]
    if sample_of(gid) is not None:
        lines.append(f"magis verify {spec} --plan {plan}")
    else:
        lines.append(f"magis verify path/to/model.py:factory --graph {spec} --plan {plan}")
    devices = script_devices()
    lines.append(f"python {script} --device {devices[0]}    # prints measured vs simulated peak")
    lines += [f"python {script} --device {d}" for d in devices[1:]]
    if "cuda" not in devices:
        lines.append("# this machine's torch has no CUDA: on a GPU machine the script also takes --device cuda")
    return "\n".join(lines)


def plan_line(gid: str, f: Frontier, key: int, v: PointView | None = None) -> str:
    """The selected point in one line; what it swaps (``PointView.swaps``) once its view ``v`` is built."""
    p = f.points[key]
    sw = v.swaps() if v is not None else None
    name = label_of(p.method)
    return (f"point {key}: {name} {p.label} · {plural(len(p.order), 'op')} · {plural(len(p.applications), 'rule application')}"
            f"{f' · {sw.text()}' if sw else ''} · simulated peak {format_bytes(p.peak)}, latency "
            f"{figures.fmt_seconds(p.latency)} ({f.device})")


def verify_outcome(res: dict) -> tuple[bool, list[str]]:
    """(passed, lines) of a ``magis verify`` JSON report (``core.codegen.verify.verify_graph``)."""
    ok = bool(res.get("ok"))
    lines = []
    n = res.get("compared", 0)
    what = res.get("what") or ("the loss and every gradient" if "loss" in res else "every output")
    if n:
        line = (f"compared {plural(n, 'tensor')} ({what}) with eager PyTorch: max abs error "
                f"{res.get('max_abs_error', 0):.3g} ({res.get('worst_abs_tensor', '?')}), max rel error "
                f"{res.get('max_rel_error', 0):.3g} ({res.get('worst_rel_tensor', '?')}); tolerance rtol "
                f"{res.get('rtol')}, atol {res.get('atol')}")
        lines.append(line + ("" if res.get("allclose") else " -- outside it"))
    else:
        lines.append("no output was compared")
    if "loss" in res:
        lines.append(f"loss {res['loss']:.6g} (abs error {res.get('loss_abs_error', 0):.3g})")
    if "measured_peak_bytes" in res and "simulated_peak_bytes" in res:
        m, s = res["measured_peak_bytes"], res["simulated_peak_bytes"]
        ratio = res.get("peak_ratio")
        dev = res.get("simulated_device")
        lines.append(f"peak memory: measured {format_bytes(m)} vs simulated {format_bytes(s)}"
                     + (f" on {dev}" if dev else "")
                     + (f" (ratio {ratio:.4f})" if isinstance(ratio, (int, float)) else ""))
    if res.get("missing_reference"):
        lines.append(f"no eager reference for {', '.join(map(str, res['missing_reference'][:5]))}")
    if not ok and res.get("allclose") and n:
        lines.append("the outputs match but the measured peak is not within 2% of the simulated one")
    return ok, lines


# ---- layout ----------------------------------------------------------------------------------------
def tab() -> dcc.Tab:
    return dcc.Tab(html.Div([
        html.Section([
            html.Div([html.H3("Export the selected plan"),
                      html.Span("a standalone PyTorch script (swaps on CUDA streams on a GPU, plain copies on the "
                                "CPU), or a plan file for the command line", className="muted hint")],
                     className="panel-head"),
            html.Div(id="export-plan-line", className="export-line"),
            html.Div([
                html.Button("download script", id="export-script-btn", n_clicks=0, className="btn btn-export",
                            title="generate the plan's PyTorch script (.py) and download it"),
                html.Button("download plan file", id="export-planfile-btn", n_clicks=0, className="btn btn-export",
                            title="this point as point 0 and PyTorch eager as point 1 (JSON)"),
                html.Span(id="export-files", className="muted small"),
            ], className="export-row"),
            html.Div(id="export-info", className="small export-info"),
            dcc.Download(id="export-script-dl"),
            dcc.Download(id="export-planfile-dl"),
            html.Div("with the plan file:", className="muted small"),
            html.Pre(id="export-commands", className="export-commands"),
        ], className="panel export-panel"),
        html.Section([
            html.Div([html.H3("Verify"),
                      html.Span("runs the model in eager PyTorch and the plan's script on the same weights and "
                                "inputs, on this machine's CPU: the loss and every gradient, and the measured "
                                "peak against the simulated one", className="muted hint")],
                     className="panel-head"),
            html.Div([html.Button("verify", id="export-verify-btn", n_clicks=0, className="btn btn-export"),
                      html.Span(id="export-verify-note", className="muted small")], className="export-row"),
            html.Div(id="export-verify-status", className="small export-info"),
            html.Div(id="export-verify-result", className="verify-result"),
            dcc.Interval(id="export-verify-poll", interval=POLL_MS, disabled=True),
            dcc.Store(id="export-verify-of"),  # {gid, version, key, label}: what the running job verifies
        ], className="panel export-panel"),
    ], className="tab-body"), label="Export", value="export")


def _result_div(of: dict, res: dict) -> html.Div:
    ok, lines = verify_outcome(res)
    head = html.Div([html.Span("passed" if ok else "failed", className="verdict " + ("pass" if ok else "fail")),
                     html.Span(f" {of.get('label', '')}: the plan's script "
                               + ("matches eager PyTorch" if ok else "does not match eager PyTorch"))],
                    className="verdict-line")
    return html.Div([head, html.Ul([html.Li(t) for t in lines])], id="export-verify-outcome")


def verify_progress(of: dict, job) -> tuple[Any, Any, bool, str | None]:
    """What the page shows of the verification job ``job`` (of the plan ``of`` names): (status line,
    outcome, finished, an error for the message line or None)."""
    if job is None:
        return "", None, True, None
    st = job.status()
    label = of.get("label", "the plan")
    if not job.done:
        return f"verifying {label} ... {st['seconds']:.0f} s", no_update, False, None
    if job.error:
        err = str(job.error).removeprefix("magis: error: ")
        return html.Span(f"could not verify {label}: {err}", className="verify-error"), None, True, \
            f"verification of {label} failed: {err}"
    res = job.result if isinstance(job.result, dict) else {}
    return f"verified in {st['seconds']:.0f} s", _result_div(of, res), True, None


# ---- callbacks -------------------------------------------------------------------------------------
def register(app: Dash, state: AppState, guarded, show_message) -> None:
    plans = state.plans

    def selected(sel) -> tuple[str, Frontier, int]:
        if not sel:
            raise PreventUpdate
        gid = sel["gid"]
        f = plans.frontier(gid)
        if sel.get("version") != f.version:
            raise AppError("the frontier of this graph changed: pick the plan again")
        key = sel["key"]
        if not 0 <= key < len(f.points):
            raise PreventUpdate
        return gid, f, key

    @app.callback(Output("export-plan-line", "children"), Output("export-files", "children"),
                  Output("export-commands", "children"), Output("export-verify-btn", "disabled"),
                  Output("export-verify-note", "children"),
                  Output("export-verify-result", "children", allow_duplicate=True),
                  Output("export-verify-status", "children", allow_duplicate=True),
                  Input("plan-export", "data"), State("export-verify-of", "data"),
                  prevent_initial_call="initial_duplicate")
    @guarded(7)
    def on_export_plan(sel, of):
        if not sel:
            raise PreventUpdate
        gid = sel["gid"]
        f = plans.frontier(gid)
        if sel.get("version") != f.version:
            raise PreventUpdate
        key = sel["key"]
        label = state.label(gid)
        block = verify_block(gid, label)
        note = block or "compares eager PyTorch with this plan's script (a few seconds for a small sample)"
        same = of and {k: of.get(k) for k in ("gid", "version", "key")} == {k: sel.get(k) for k in
                                                                         ("gid", "version", "key")}
        result = no_update if same else None
        status = no_update if same else ""
        try:  # what it swaps: the view is built (or being built) since the point was selected
            v = plans.view(gid, key, wait=PLAN_LINE_WAIT)
        except Exception:  # noqa: BLE001 -- a point that does not replay: the plan bar says why
            v = None
        return (plan_line(gid, f, key, v), f"{script_name(f, key)} · {plan_file_name(f, key)}",
                commands(gid, f, key, label), block is not None, note, result, status)

    @app.callback(Output("export-script-dl", "data"), Output("export-info", "children"),
                  Input("export-script-btn", "n_clicks"), State("plan", "data"), prevent_initial_call=True)
    @guarded(2)
    def on_script(n, sel):
        if not n:
            raise PreventUpdate
        gid, f, key = selected(sel)
        v = plans.view(gid, key, wait=SCRIPT_VIEW_WAIT)
        if v is None:
            raise AppError(f"point {key} of {state.label(gid)} is still being built; try again in a moment")
        name, src, secs = script_of(f, v)
        info = (f"{name}: {len(src.encode()) / 1024:,.0f} KiB, {plural(src.count(chr(10)), 'line')}, "
                f"{plural(len(v.plan.order), 'op')}, {v.swaps().text()}; generated in {secs:.2f} s")
        return {"content": src, "filename": name, "type": "text/x-python"}, info

    @app.callback(Output("export-planfile-dl", "data"), Output("export-info", "children", allow_duplicate=True),
                  Input("export-planfile-btn", "n_clicks"), State("plan", "data"), prevent_initial_call=True)
    @guarded(2)
    def on_planfile(n, sel):
        if not n:
            raise PreventUpdate
        gid, f, key = selected(sel)
        data = plan_file_bytes(f, key)
        name = plan_file_name(f, key)
        info = (f"{name}: {len(data) / 1024:,.1f} KiB, point 0 = point {key} of the frontier"
                + (", point 1 = PyTorch eager" if key != f.baseline() else ""))
        return {"content": data.decode(), "filename": name, "type": "application/json"}, info

    @app.callback(Output("export-verify-poll", "disabled"), Output("export-verify-status", "children"),
                  Output("export-verify-of", "data"), Output("export-verify-result", "children"),
                  Input("export-verify-btn", "n_clicks"), State("plan", "data"), prevent_initial_call=True)
    @guarded(4)
    def on_verify(n, sel):
        if not n:
            raise PreventUpdate
        gid, f, key = selected(sel)
        block = verify_block(gid)
        if block:
            raise AppError(block)
        old = plans.job(gid, "verify")
        if old is not None and not old.done:
            raise AppError("a verification of this graph is still running; wait for it to finish")
        p = f.points[key]
        label = f"point {key} ({label_of(p.method)} {p.label})".replace(" )", ")")
        plans.start_verify(gid, sample_of(gid), plan_file_bytes(f, key), 0)
        of = {"gid": gid, "version": f.version, "key": key, "label": label}
        return False, f"verifying {label} ...", of, None

    @app.callback(Output("export-verify-status", "children", allow_duplicate=True),
                  Output("export-verify-result", "children", allow_duplicate=True),
                  Output("export-verify-poll", "disabled", allow_duplicate=True),
                  Input("export-verify-poll", "n_intervals"), State("export-verify-of", "data"),
                  prevent_initial_call=True)
    @guarded(3)
    def on_verify_poll(_n, of):
        if not of:
            return no_update, no_update, True
        status, result, done, error = verify_progress(of, plans.job(of["gid"], "verify"))
        if error:
            show_message(error)
        return status, result, done


__all__ = ["commands", "plan_file_bytes", "plan_file_name", "plan_file_of", "register", "script_devices", "script_name",
           "script_of", "tab", "verify_block", "verify_outcome", "verify_progress"]
