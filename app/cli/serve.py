"""``magis app``: serve the web app (Dash is imported only when it runs)."""

from __future__ import annotations

import argparse

import sample_graphs


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis app`` to the sub-commands ``sub``."""
    s = sub.add_parser("app", help="launch the web app")
    s.add_argument("file", nargs="?", default=None, metavar="FILE", help="a graph file to open")
    s.add_argument("--sample", default=None, metavar="NAME",
                   help=f"a sample to open: {', '.join(sample_graphs.NAMES)}; forward samples (layer fusion): "
                        f"{', '.join(n for n in sample_graphs.FORWARD_NAMES if n not in sample_graphs.NAMES)}")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8050, help="port to listen on (default: %(default)s)")
    s.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, error overlay)")
    s.set_defaults(fn=cmd_app)


def cmd_app(a: argparse.Namespace) -> None:
    """``magis app``: serve the web app (imported here: the other commands never load Dash)."""
    from ..main import serve

    serve(graph_file=a.file, sample=a.sample, host=a.host, port=a.port, debug=a.debug)
