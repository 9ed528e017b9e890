"""MAGIS Studio web app: ``magis app [FILE] [--sample NAME]`` (binds 127.0.0.1 by default).

``create_app`` builds a Dash app over its own server-side cache (``AppState``); ``serve`` runs it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import dash
import dash_cytoscape

from core.ir import io

from . import bundle, measured_view, url_state
from .callbacks import first_render, register
from .layout import build_layout
from .panels import message
from .state import AppError, AppState, sample_names

log = logging.getLogger("magis.app")
DEFAULT_SAMPLE = "bert_tiny"
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def create_app(initial_sample: str | None = None, graph_file: str | None = None,
               state: AppState | None = None, warm: bool = True, basic_plotly: bool = True) -> dash.Dash:
    """The Dash app opening ``graph_file`` (a ``magis import`` JSON / JSON.gz file) if given, else the
    sample ``initial_sample`` (default bert_tiny).  Raises GraphError / AppError (one line) if the
    file cannot be read or the sample is unknown.  ``basic_plotly=False`` serves Dash's full plotly.js
    even if the smaller basic bundle is installed (``app.bundle``)."""
    dash_cytoscape.load_extra_layouts()  # dagre
    state = state or AppState(time_budget=float(os.environ.get("MAGIS_APP_TIME_BUDGET", "5")))
    if graph_file:
        path = Path(graph_file)
        g = io.load(path)
        initial = state.add_graph(g, f"{path.name} (file)", "file", path.read_bytes(), pin=True)
    else:
        name = initial_sample or DEFAULT_SAMPLE
        if name not in sample_names():
            raise AppError(f"unknown sample {name!r}; samples: {', '.join(sample_names())}")
        initial = f"sample:{name}"
    ignore = ""
    if bundle.BUNDLE.exists() and not (basic_plotly and bundle.usable()):
        if basic_plotly:
            log.warning("ignoring %s: plotly.js %s there, %s wanted (python -m app.bundle fetches it)",
                        bundle.BUNDLE, bundle.bundle_version(), bundle.wanted_version())
        ignore = re.escape(bundle.BUNDLE.name) + "$"
    app = dash.Dash(__name__, title="MAGIS Studio", assets_folder=str(ASSETS), update_title=None,
                    suppress_callback_exceptions=True, assets_ignore=ignore)
    def layout():
        try:
            init = first_render(state, initial)
        except Exception as e:  # the page still comes up; the message says why it is empty
            log.warning("first render of %s failed: %s", initial, e)
            init = {"messages": message(f"Could not open {state.label(initial)}: {e}")}
        return build_layout(state, initial, init)

    app.layout = layout
    register(app, state)
    url_state.register(app, state)  # the view in the address
    measured_view.register(app, state)  # the measured curve of the exported script
    if warm:
        state.warm(initial)
    app.magis_state = state  # for tests and benchmarks
    app.magis_initial = initial
    return app


def serve(graph_file: str | None = None, sample: str | None = None, host: str = "127.0.0.1", port: int = 8050,
          debug: bool = False) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not debug:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    app = create_app(initial_sample=sample, graph_file=graph_file)
    app.run(host=host, port=port, debug=debug)


__all__ = ["create_app", "serve", "DEFAULT_SAMPLE"]
