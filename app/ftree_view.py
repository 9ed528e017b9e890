"""(being built)"""

from __future__ import annotations

from dash import Dash

from .state import AppState


def register(app: Dash, state: AppState, guarded, show_message) -> None:
    pass
