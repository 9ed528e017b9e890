"""The one DataTable constructor the app's views share (hot-spots, plan hot-spots, rule steps).

A module of its own so that the views and the page layout import it without importing each other.
"""

from __future__ import annotations

import warnings

from dash import dash_table

CELL = {"fontFamily": "inherit", "fontSize": 12, "padding": "3px 8px", "textAlign": "left",
        "whiteSpace": "nowrap"}
HEADER = {"fontWeight": 600, "backgroundColor": "#f3f4f6", "whiteSpace": "normal"}


def table(wrap: tuple[str, ...] = (), max_width: int = 360, min_width: int = 120, **kw) -> dash_table.DataTable:
    """``dash_table.DataTable(**kw)`` in the app's style and without its deprecation warning
    (DataTable is deprecated in favour of dash-ag-grid, not a dependency here; it works in dash 4).
    Cells keep their text on one line -- a word is never cut ("float3 2") -- but those of the columns
    in ``wrap`` (long names), which wrap within ``min_width`` to ``max_width`` pixels; the table
    scrolls sideways."""
    kw.setdefault("style_table", {"overflowX": "auto"})
    kw.setdefault("style_cell", CELL)
    kw.setdefault("style_header", HEADER)
    kw["style_cell_conditional"] = [*kw.get("style_cell_conditional", []), *(
        {"if": {"column_id": c}, "whiteSpace": "normal", "wordBreak": "break-word", "minWidth": min_width,
         "maxWidth": max_width} for c in wrap)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*The dash_table.DataTable will be removed",
                                category=DeprecationWarning)
        return dash_table.DataTable(**kw)


__all__ = ["CELL", "HEADER", "table"]
