"""The measured curve of a real run beside the simulated one (the Memory analysis tab).

"run the exported script on the CPU" runs the selected plan's exported script (the Export tab's
script, ``export_view.script_of``) once on random inputs of the graph's shapes in a background job
(``plan_store.Job``; the page polls it).  The script's ``LiveBytesTracker`` records the live bytes
of tensor storages after each op -- the simulator's counting -- so its curve is drawn over the
simulated curve of the plan, step by step, with the ratio of the two peaks.  On the CPU the two
curves are equal; a difference is a bug of the simulator or of the exporter.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.fmt import format_bytes

from .figures import downsample_indices
from .plan_store import Frontier, Job, PointView

log = logging.getLogger("magis.app")
BUILD_WAIT = 60.0  # s: a job waits this long for the plan's view (built in the background anyway)
SIM_COLOUR, RUN_COLOUR = "#2563eb", "#dc2626"


def measure_point(f: Frontier, v: PointView, seed: int = 0) -> dict[str, Any]:
    """Run point ``v`` of frontier ``f``'s exported script once on the CPU (random inputs, ``seed``)
    and return its measured live bytes per step next to the simulated ones: ``measured``,
    ``simulated`` (lists of ints, one per op of the plan's order), their peaks and ``peak_ratio``
    (measured / simulated)."""
    from core.codegen.verify import load_script

    from .export_view import script_of

    name, src, _secs = script_of(f, v)
    with tempfile.TemporaryDirectory(prefix="magis-measure-") as d:
        path = Path(d) / name
        path.write_text(src)
        mod = load_script(path)
    tensors = mod.make_inputs(mod.INPUTS, seed)
    _out, mem = mod.measure(tensors, "cpu")
    tracker = mem.pop("_tracker", None)
    if tracker is None:
        raise RuntimeError("the script's run recorded no live bytes per step")
    measured = [int(b) for b in tracker.step_bytes]
    simulated = [int(b) for b in v.sim.memory.step_bytes.tolist()]
    m_peak, s_peak = int(mem["measured_peak_bytes"]), int(v.sim.peak)
    return {"gid": f.gid, "version": f.version, "key": v.key, "measured": measured, "simulated": simulated,
            "measured_peak": m_peak, "simulated_peak": s_peak,
            "peak_ratio": m_peak / s_peak if s_peak else float("nan"), "device": f.device}


def start_measure(jobs: dict, lock: threading.Lock, f: Frontier, view_of) -> Job:
    """``measure_point`` of the frontier's point in a thread (one job per point; a running or
    finished one is returned as it is).  ``view_of()`` builds (waits for) the point's view."""
    key = (f.gid, f.version, view_of.key)
    with lock:
        job = jobs.get(key)
        if job is not None and (not job.done or job.error is None):
            return job
        job = jobs[key] = Job("measure", f.gid)
    job.progress = {"point": view_of.key}

    def run() -> None:
        try:
            v = view_of()
            if v is None:
                raise RuntimeError(f"the plan's view was not built within {BUILD_WAIT:g} s")
            job.result = measure_point(f, v)
        except Exception as e:  # noqa: BLE001 -- the page shows it; the server keeps running
            log.exception("measuring point %s of %s failed", view_of.key, f.gid)
            job.error = f"{type(e).__name__}: {e}"
        finally:
            job.done = True

    job.worker = threading.Thread(target=run, name="magis-measure", daemon=True)  # joined by tests
    job.worker.start()
    return job


def figure(res: dict[str, Any] | None) -> dict:
    """The simulated curve of the plan with the measured one over it (a step axis)."""
    layout = {"margin": {"l": 60, "r": 10, "t": 36, "b": 40}, "xaxis": {"title": {"text": "step (op)"}},
              "yaxis": {"title": {"text": "live bytes"}, "rangemode": "tozero"}, "hovermode": "x unified",
              "legend": {"orientation": "h", "y": 1.12}, "template": "plotly_white"}
    if not res:
        return {"data": [], "layout": layout | {"title": {"text": "no run yet", "font": {"size": 13}}}}
    data = []
    n_ops = len(res["simulated"])
    for name, ys, colour, dash in (("simulated (plan)", res["simulated"], SIM_COLOUR, "solid"),
                                   ("measured (CPU run of the script)", res["measured"], RUN_COLOUR, "dot")):
        y = np.asarray(ys, dtype=np.int64)
        j = downsample_indices(y) if len(y) else np.arange(0)
        x = j.astype(float)
        if len(y) != n_ops and len(y) > 1:  # more aten calls than ops (a swap's copies): spread over the steps
            x = j * (max(n_ops - 1, 0) / (len(y) - 1))
        data.append({"type": "scatter", "mode": "lines", "name": name, "x": x.tolist(), "y": y[j].tolist(),
                     "line": {"color": colour, "dash": dash, "width": 2},
                     "text": [format_bytes(int(b)) for b in y[j].tolist()], "hovertemplate": "%{text}"})
    title = (f"peak measured {format_bytes(res['measured_peak'])} / simulated "
             f"{format_bytes(res['simulated_peak'])} = {res['peak_ratio']:.3f}")
    return {"data": data, "layout": layout | {"title": {"text": title, "font": {"size": 13}}}}


def status_line(res: dict[str, Any]) -> str:
    m, s = res["measured"], res["simulated"]
    head = f"point {res['key']}: peak ratio {res['peak_ratio']:.3f} (measured / simulated) · "
    if len(m) != len(s):
        return head + f"{len(m):,} aten calls measured for {len(s):,} ops (the measured curve is spread over the steps)"
    return head + f"{sum(a == b for a, b in zip(m, s, strict=True)):,} of {len(s):,} steps equal"


def panel() -> html.Section:
    return html.Section([
        html.Div([html.H3("Measured vs simulated (selected plan)"),
                  html.Button("run the exported script on the CPU", id="measure-run", n_clicks=0, className="btn",
                              title="run the plan's exported PyTorch script once on random inputs on this "
                                    "machine's CPU and draw its live bytes per step over the simulated curve"),
                  html.Span(id="measure-status", className="muted small")], className="panel-head"),
        dcc.Graph(id="measured-memory", figure=figure(None), config={"displaylogo": False, "responsive": True},
                  style={"height": "300px"}),
        dcc.Interval(id="measure-poll", interval=700, disabled=True),
        dcc.Store(id="measure-of"),  # {gid, version, key}: the point whose run the panel shows
    ], className="panel measured-panel")


def register(app: Dash, state) -> None:
    from .callbacks import guarded, show_message

    plans = state.plans
    jobs: dict[tuple, Job] = {}
    lock = threading.Lock()

    def job_of(of) -> Job | None:
        if not of:
            return None
        with lock:
            return jobs.get((of["gid"], of["version"], of["key"]))

    @app.callback(Output("measure-poll", "disabled"), Output("measure-status", "children"),
                  Output("measure-of", "data"), Input("measure-run", "n_clicks"), State("plan", "data"),
                  prevent_initial_call=True)
    @guarded(3)
    def on_run(n, sel):
        if not n or not sel:
            raise PreventUpdate
        f = plans.frontier(sel["gid"])
        if sel.get("version") != f.version:
            raise PreventUpdate  # a newer frontier is on its way
        key = sel["key"]

        def view_of():
            return plans.view(f.gid, key, wait=BUILD_WAIT)

        view_of.key = key
        start_measure(jobs, lock, f, view_of)
        return False, f"running point {key}'s script on the CPU ...", {"gid": f.gid, "version": f.version, "key": key}

    @app.callback(Output("measured-memory", "figure"), Output("measure-status", "children", allow_duplicate=True),
                  Output("measure-poll", "disabled", allow_duplicate=True),
                  Input("measure-poll", "n_intervals"), State("measure-of", "data"), prevent_initial_call=True)
    @guarded(3)
    def on_poll(_n, of):
        job = job_of(of)
        if job is None:
            return no_update, no_update, True
        if not job.done:
            return no_update, f"running point {of['key']}'s script on the CPU ({job.status()['seconds']:g} s) ...", False
        if job.error:
            show_message(f"The CPU run of the plan's script failed: {job.error}")
            return figure(None), "the run failed", True
        return figure(job.result), status_line(job.result), True

    @app.callback(Output("measured-memory", "figure", allow_duplicate=True),
                  Output("measure-status", "children", allow_duplicate=True),
                  Input("plan", "data"), State("measure-of", "data"), prevent_initial_call=True)
    def on_plan(sel, of):
        """Another plan selected: the curves shown are not its own any more."""
        if not of or not sel or (sel.get("gid"), sel.get("version"), sel.get("key")) == (
                of["gid"], of["version"], of["key"]):
            raise PreventUpdate
        return figure(None), "another plan is selected: run its script to measure it"


__all__ = ["figure", "measure_point", "panel", "register", "start_measure", "status_line"]
