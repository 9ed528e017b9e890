"""(being built)"""

from __future__ import annotations

from dash import Dash, dcc, html

from .state import AppState


def tab() -> dcc.Tab:
    return dcc.Tab(html.Div("", className="tab-body"), label="export_view", value="export_view")


def register(app: Dash, state: AppState, guarded, show_message) -> None:
    pass
