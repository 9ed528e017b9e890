"""What the browser tests share: the app served from a thread, headless Chromium driven by
playwright, and helpers that read and click the page (cytoscape graphs, dropdowns, cards).  The
fixtures built from them (``server``, ``browser``, ``page``) are in ``conftest.py``; screenshots go to
``test-artifacts/``."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--window-size=1280,900"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
TIMEOUT = 60_000  # ms: the CI machine may be busy

# JS: the cytoscape instance inside the element with id ``id`` (dash-cytoscape keeps it in ``_cyreg``)
CY = """(id) => { const root = document.getElementById(id); if (!root) return null;
  const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
  return el ? el._cyreg.cy : null; }"""


def _cy(js: str) -> str:
    """Wrap ``js`` (an expression using ``cy`` and ``arg``) into a page function of [id, arg]."""
    return f"([id, arg]) => {{ const cy = ({CY})(id); if (!cy) return null; return ({js}); }}"


# ---- the building blocks of the browser fixtures (``conftest.py``) ------------------------------------
@contextmanager
def serving(sample: str, setup=None):
    """The app on ``sample`` served from a thread on a free port: yields (url, app).  ``setup(app)``
    runs before the first request."""
    from werkzeug.serving import make_server

    from app.main import create_app

    app = create_app(initial_sample=sample)
    if setup is not None:
        setup(app)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/", app
    finally:
        srv.shutdown()
        app.magis_state.shutdown()


@contextmanager
def chromium():
    """Headless Chromium (``make browser`` installs it; a missing one is an error, not a skip)."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} is not installed (make browser: apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@contextmanager
def opened(browser, url: str, ready=None, **context):
    """A fresh page on ``url`` once ``ready(page)`` (default ``wait_ready``) holds; its JavaScript
    errors collect in ``page.js_errors``."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, **context)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url)
    (ready or wait_ready)(pg)
    pg.js_errors = errors
    try:
        yield pg
    finally:
        ctx.close()


# ---- helpers --------------------------------------------------------------------------------------
def shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def cy_eval(pg, elem: str, js: str, arg=None):
    return pg.evaluate(_cy(js), [elem, arg])


def wait_cy_stable(pg, elem: str, min_nodes: int = 1) -> None:
    """Wait until the cytoscape view has nodes and its layout has settled."""
    pg.wait_for_function(_cy(f"cy.nodes().length >= {min_nodes}"), arg=[elem, None], timeout=TIMEOUT)
    snap = _cy("cy.nodes().map(n => n.id() + ':' + Math.round(n.position('x')) + ',' + "
               "Math.round(n.position('y'))).join('|')")
    last, deadline = None, time.time() + TIMEOUT / 1000
    while time.time() < deadline:
        cur = pg.evaluate(snap, [elem, None])
        if cur == last:
            return
        last = cur
        pg.wait_for_timeout(350)
    raise AssertionError(f"{elem} layout never settled")


def wait_ready(pg) -> None:
    pg.wait_for_selector("#summary .card", timeout=TIMEOUT)
    pg.wait_for_selector("#memory .scatterlayer .trace", timeout=TIMEOUT)
    wait_cy_stable(pg, "graph")


def tap(pg, elem: str, filter_js: str) -> dict:
    """Click (with the real mouse) the first node of cytoscape ``elem`` matching the JS predicate
    ``filter_js`` over ``n`` (a cytoscape node); returns the node's data."""
    pg.locator(f"#{elem}").scroll_into_view_if_needed()
    found = cy_eval(pg, elem, f"""(() => {{
        const n = cy.nodes().filter(n => ({filter_js}))[0];
        if (!n) return null;
        cy.center(n);
        const p = n.renderedPosition();
        const root = cy.container().getBoundingClientRect();
        return {{x: root.left + p.x, y: root.top + p.y, data: n.data()}};
    }})()""")
    assert found is not None, f"no node in #{elem} matches {filter_js}"
    pg.mouse.click(found["x"], found["y"])
    return found["data"]


def card(pg, id_: str) -> str:
    return pg.locator(f"#{id_}").inner_text().strip()


def pick_dropdown(pg, dd_id: str, label_re: str) -> None:
    """Open dropdown ``dd_id`` and click its option matching ``label_re``: within the open menu
    (``.dash-dropdown-options``), since checklists and radio items are listboxes of options too -- a
    search over the page could click the memory panel's "compare" box of the same name before the
    menu has rendered."""
    pg.locator(f"#{dd_id}").click()
    menu = pg.locator(".dash-dropdown-options")
    menu.wait_for(state="visible", timeout=TIMEOUT)
    menu.get_by_role("option", name=re.compile(label_re)).first.click()


def wait_message(pg, kind: str, text: str) -> str:
    """Wait until the message bar shows a ``kind`` ("error", "ok") message containing ``text`` and
    return it -- waiting for the text, not for any message, since the previous one may still be on the
    page while its dismissal makes the round trip."""
    shown = pg.wait_for_function("([k, t]) => { const s = document.querySelector('#messages .msg-' + k)"
                                 "?.innerText || ''; return s.includes(t) ? s : false; }",
                                 arg=[kind, text], timeout=TIMEOUT)
    return shown.json_value()


def dismiss_message(pg) -> None:
    """Close the message bar and wait until it is empty, so the next message the test waits for is the
    next action's own."""
    pg.click("#msg-close")
    pg.wait_for_function("() => !document.querySelector('#messages .msg')", timeout=TIMEOUT)


def graph_token(pg) -> str:
    return cy_eval(pg, "graph", "cy.nodes().length ? cy.nodes()[0].id().split('-')[0] : ''")


def summary_model(pg) -> str:
    return pg.locator("#summary .card.model .card-value").inner_text().strip()


# ---- a scheduler that runs until the test lets it finish ----------------------------------------------
@contextmanager
def held_scheduler(name: str):
    """Registers scheduler ``name`` for the block: its ``order`` waits until the test sets
    ``gate.release`` (at the latest when the block ends), then answers RPO's order; ``gate.started``
    is set when a run begins.  Until the release the schedule is running, so a test checks what the
    page does meanwhile by construction, not by timing it."""
    from types import SimpleNamespace

    from core.schedule import SCHEDULERS, Scheduler, get_scheduler

    gate = SimpleNamespace(started=threading.Event(), release=threading.Event())

    class Held(Scheduler):
        def __init__(self, time_budget: float = 5.0) -> None:
            self.budget = time_budget

        def order(self, g):
            gate.started.set()
            gate.release.wait()
            return get_scheduler("rpo").order(g)

    Held.name = name
    with SCHEDULERS.temporarily(name, Held):
        try:
            yield gate
        finally:
            gate.release.set()
