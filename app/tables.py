"""The one DataTable constructor the app's views share (hot-spots, plan hot-spots, rule steps).

A module of its own so that the views and the page layout import it without importing each other.
"""

from __future__ import annotations

import warnings

from dash import dash_table


def table(**kw) -> dash_table.DataTable:
    """``dash_table.DataTable(**kw)`` without its deprecation warning: DataTable is deprecated in
    favour of dash-ag-grid (not a dependency here); it works in dash 4."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*The dash_table.DataTable will be removed",
                                category=DeprecationWarning)
        return dash_table.DataTable(**kw)


__all__ = ["table"]
