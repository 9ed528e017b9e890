"""Web-app timings measured in headless Chromium: first render, model switch, and interactions.

    python bench/app_timing.py [--runs 3] [--big gpt_neo_1_3b] [--extra btlm_3b]
    python bench/app_timing.py --plans [bert_base gpt_neo_1_3b]   # the optimizer's views

Serves the app from a thread (127.0.0.1, free port), drives it with playwright and prints one row per
action with the median (and max) wall time from the action to the page showing its result:

* first render (cold): the page loaded right after the server started (the server warms its cache
  in the background meanwhile) -- until the summary, the memory curve and the laid-out graph show;
* first render (warm): the same page loaded again;
* first render of the big model: a server just started on it (``magis app --sample gpt_neo_1_3b``);
* switch model: picking a model in the dropdown until its summary, curve and graph show;
* click group / click op / hover curve / click curve / switch schedule: interactions on the big model
  (switch schedule: the click on the option of the open dropdown), timed in the page from the input
  event to the first frame that shows the result (``page_time``); loads and model switches are wall
  clock from the driver's action.

Every run is made twice, interleaved: with plotly.js's basic distribution (what the app serves once
``python -m app.bundle`` has fetched it; ``make install`` does) and with Dash's full bundle, the
baseline; the table shows them side by side.

``--plans``: a server started on each model, until its plan cards show (opening with the frontier);
one slider stop there and back with the Memory analysis tab in view (until the plan cards and the
graph's marks show the new point) and with the Pareto tab in view (cards, the selected point on the
frontier, the plan's memory curve and hot-spots); two rule steps back.  Targets: <= 2 s to open,
<= 150 ms a slider step or a rule step.  Writes bench/results/app_plan_timing.json.

Targets (from the issue): first render of bert_tiny < 2 s, switching to gpt_neo_1_3b < 5 s,
interactions < 300 ms.  Writes bench/results/app_timing.json as well.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--window-size=1280,900"]
CY = """(id) => { const root = document.getElementById(id); if (!root) return null;
  const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
  return el ? el._cyreg.cy : null; }"""
TIMEOUT = 120_000


def cyjs(js: str) -> str:
    return f"([id, arg]) => {{ const cy = ({CY})(id); if (!cy) return null; return ({js}); }}"


HOOK = cyjs("(cy.__hooked || (cy.on('layoutstop', () => { window.__layouts = (window.__layouts || 0) + 1; }),"
            " cy.__hooked = true), true)")


LIVE_SHOWN = cyjs("cy.nodes('.live').length > 0")


def layouts(pg) -> int:
    return pg.evaluate("() => window.__layouts || 0")


def graph_token(pg) -> str:
    return pg.evaluate(cyjs("cy.nodes().length ? cy.nodes()[0].id().split('-')[0] : ''"), ["graph", None]) or ""


LAID_OUT = cyjs("cy.nodes().length > 0 && cy.nodes()[0].id().split('-')[0] !== arg && "
                "cy.nodes().some(n => n.position('x') !== 0 || n.position('y') !== 0)")


def ready(pg, model: str, old_token: str = "", timeout: float = TIMEOUT) -> None:
    """Summary shows ``model``, the memory curve is drawn and the new graph is laid out."""
    pg.wait_for_function("(m) => document.querySelector('#summary .card.model .card-value')?.innerText.trim() === m"
                         " && document.querySelector('#memory .scatterlayer .trace')", arg=model, timeout=timeout,
                         polling="raf")
    pg.wait_for_function(LAID_OUT, arg=["graph", old_token], timeout=timeout, polling="raf")
    pg.evaluate(HOOK, ["graph", None])


def locate(pg, elem: str, pred: str) -> dict:
    """The first node of cytoscape view ``elem`` matching ``pred``, centred: {x, y, data}."""
    found = pg.evaluate(cyjs(f"""(() => {{
        const n = cy.nodes().filter(n => ({pred}))[0];
        if (!n) return null;
        cy.center(n);
        const p = n.renderedPosition(), r = cy.container().getBoundingClientRect();
        return {{x: r.left + p.x, y: r.top + p.y, data: n.data()}};
    }})()"""), [elem, None])
    if found is None:
        raise RuntimeError(f"no node matching {pred} in #{elem}")
    return found


def tap(pg, elem: str, pred: str) -> dict:
    found = locate(pg, elem, pred)
    pg.mouse.click(found["x"], found["y"])
    return found["data"]


def plot_xy(pg, step: int, value: float) -> tuple[float, float]:
    return pg.evaluate("""([step, value]) => {
        const gd = document.querySelector('#memory .js-plotly-plot');
        const L = gd._fullLayout, r = gd.getBoundingClientRect();
        return [r.left + L._size.l + L.xaxis.d2p(step), r.top + L._size.t + L.yaxis.d2p(value)];
    }""", [step, value])


# interactions are timed in the page: from the input event that starts them (pointerdown, or
# pointermove for a hover) to the first animation frame showing the result, so the driver's own
# overhead (finding the target, actionability checks: 60-100 ms here) is not counted
INPUT_CLOCK = """() => { window.__t_in = null; window.__t_out = null;
  if (window.__clock) { return; } window.__clock = true;
  for (const ev of ['pointerdown', 'pointermove', 'keydown']) {
    document.addEventListener(ev, e => { if (window.__t_in === null) { window.__t_in = e.timeStamp; } }, true);
  } }"""


def start_server(app):
    """Serve ``app`` (a ``create_app``) from a thread on a free port of 127.0.0.1; ``.shutdown()`` ends it."""
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def page_time(pg, cond: str, arg, act, *act_args) -> float:
    """Seconds from the first input event of ``act(*act_args)`` to the first frame where the JS
    predicate ``cond`` (a function of ``arg``) holds."""
    pg.evaluate(INPUT_CLOCK)
    act(*act_args)
    pg.wait_for_function(f"(arg) => {{ const ok = ({cond})(arg); if (ok && window.__t_out === null) "
                         "{ window.__t_out = performance.now(); } return ok; }", arg=arg, polling="raf")
    t_in, t_out = pg.evaluate("() => [window.__t_in, window.__t_out]")
    if t_in is None:
        raise RuntimeError("no input event reached the page")
    return (t_out - t_in) / 1000


def pick(pg, dd: str, label: str) -> None:
    import re

    pg.locator(f"#{dd}").click()
    pg.get_by_role("option", name=re.compile(rf"^{re.escape(label)}\b")).first.click()


def first_render_of(browser, create_app, model: str, cfg: str) -> float:
    """Seconds from loading the page of a server just started on ``model`` (``magis app --sample
    model``; it loads and analyses the graph in the background meanwhile) until it shows."""

    app = create_app(initial_sample=model, basic_plotly=cfg == "basic")
    srv = start_server(app)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT)
    t0 = time.perf_counter()
    pg.goto(f"http://127.0.0.1:{srv.server_port}/")
    ready(pg, model)
    seconds = time.perf_counter() - t0
    ctx.close()
    srv.shutdown()
    app.magis_state.shutdown()
    return seconds


def readme_screenshot(browser, path: str, sample: str = "bert_tiny") -> None:
    """The README's picture: a sample with a group expanded, an op selected and the tensors alive at
    the peak picked on the memory curve."""
    import logging

    from app.main import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = create_app(initial_sample=sample)
    srv = start_server(app)
    ctx = browser.new_context(viewport={"width": 1440, "height": 1345}, device_scale_factor=1)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT)
    pg.goto(f"http://127.0.0.1:{srv.server_port}/")
    ready(pg, sample)
    pg.wait_for_timeout(800)
    an = app.magis_state.analysis(f"sample:{sample}", "traced", "rtx3090")
    step = an.profile.peak_steps[0]
    x, y = plot_xy(pg, step, an.profile.peak * 0.5)
    pg.mouse.click(x, y)
    pg.wait_for_function(cyjs("cy.nodes('.live').length > 0"), arg=["graph", None], polling="raf")
    pg.wait_for_timeout(500)
    live = set(pg.evaluate(cyjs("cy.nodes('.live.op').map(n => n.data('nid'))"), ["graph", None]) or [])
    pg.locator("#graph").scroll_into_view_if_needed()
    # select an op that is drawn (one picked on the curve if any) to show its details
    d = tap(pg, "graph", f"n.hasClass('op') && {json.dumps(sorted(live))}.includes(n.data('nid'))") if live \
        else tap(pg, "graph", "n.hasClass('op')")
    pg.wait_for_selector(f"#details [data-nid='{d['nid']}']")
    pg.evaluate(cyjs("cy.fit(undefined, 16)"), ["graph", None])
    pg.wait_for_timeout(1200)
    pg.evaluate("() => window.scrollTo(0, 0)")
    mid = int(len(an.profile.order) * 0.55)  # show the hover (largest live tensors) mid-curve
    pg.mouse.move(*plot_xy(pg, mid, float(an.profile.step_bytes[mid]) * 0.5))
    pg.wait_for_timeout(600)
    pg.screenshot(path=path, full_page=False)
    ctx.close()
    srv.shutdown()
    app.magis_state.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", default="bert_tiny", help="the small model (and the screenshot's)")
    ap.add_argument("--big", default="gpt_neo_1_3b")
    ap.add_argument("--extra", nargs="*", default=["btlm_3b"], help="more models to time switching to")
    ap.add_argument("--only", choices=["basic", "full"], help="time one plotly.js bundle only (default: both, "
                    "the basic one if fetched)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "app_timing.json"))
    ap.add_argument("--screenshot", metavar="PNG", help="also save the README screenshot here "
                    "(e.g. assets/screenshot.png) and exit")
    ap.add_argument("--workflow", metavar="DIR", help="save the README's workflow screenshots (bert_base) in DIR "
                    "(e.g. assets/workflow) and exit")
    ap.add_argument("--plans", nargs="*", metavar="MODEL", help="time the optimizer's views instead (plan slider, "
                    "rule steps, opening with a frontier) on these models (default: bert_base gpt_neo_1_3b)")
    a = ap.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} missing: apt-get install -y chromium chromium-driver")
        return 1
    import logging

    from playwright.sync_api import sync_playwright

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if os.environ.get("MAGIS_BENCH_LOG"):  # per-callback server times on stderr
        logging.basicConfig(level=logging.WARNING, format="%(relativeCreated)8.0f ms %(message)s")
        logging.getLogger("magis.app").setLevel(logging.DEBUG)
    if a.workflow:
        for path in workflow_screenshots(a.workflow):
            print(f"wrote {path}")
        return 0
    if a.plans is not None:
        return plans_main(a.plans or ["bert_base", "gpt_neo_1_3b"], a.runs,
                          str(ROOT / "bench" / "results" / "app_plan_timing.json"))
    from app import bundle
    from app.main import create_app
    from core.fmt import format_bytes

    configs = ["basic", "full"] if bundle.usable() else ["full"]
    if a.only:
        configs = [c for c in configs if c == a.only]
        if not configs:
            print(f"no {a.only} plotly.js bundle to time (python -m app.bundle fetches the basic one)")
            return 1
    rows: dict[str, dict[str, list[float]]] = {c: {} for c in configs}
    cfg = configs[0]

    def rec(name: str, seconds: float) -> None:
        rows[cfg].setdefault(name, []).append(seconds)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        if a.screenshot:
            readme_screenshot(browser, a.screenshot, a.small)
            print(f"wrote {a.screenshot}")
            browser.close()
            return 0
        for run, cfg in ((r, c) for r in range(a.runs) for c in configs):  # interleaved: same load for both
            app = create_app(initial_sample=a.small, basic_plotly=cfg == "basic")  # a fresh server per run
            state = app.magis_state
            srv = start_server(app)
            url = f"http://127.0.0.1:{srv.server_port}/"
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            pg = ctx.new_page()
            pg.set_default_timeout(TIMEOUT)
            t0 = time.perf_counter()
            pg.goto(url)
            ready(pg, a.small)
            rec(f"first render {a.small} (cold server)", time.perf_counter() - t0)
            t0 = time.perf_counter()
            pg.reload()
            ready(pg, a.small)
            rec(f"first render {a.small} (warm)", time.perf_counter() - t0)
            rec(f"first render {a.big} (cold server)", first_render_of(browser, create_app, a.big, cfg))

            for model in [a.big, *a.extra, a.small]:
                tok = graph_token(pg)
                t0 = time.perf_counter()
                pick(pg, "model", model)
                ready(pg, model, tok)
                rec(f"switch model -> {model}" + (" (cached)" if model == a.small else ""), time.perf_counter() - t0)
            # interactions on the big model
            tok = graph_token(pg)
            pick(pg, "model", a.big)
            ready(pg, a.big, tok)
            gid = f"sample:{a.big}"
            an = state.analysis(gid, "traced", "rtx3090")
            pg.locator("#graph").scroll_into_view_if_needed()
            pg.wait_for_timeout(300)
            grp = locate(pg, "graph", "n.hasClass('group') && n.data('members') > 20 && n.data('members') < 400")
            rec("click group (expand + layout)", page_time(
                pg, "(n) => (window.__layouts || 0) > n", layouts(pg), pg.mouse.click, grp["x"], grp["y"]))
            logging.getLogger("magis.app").debug("---- click group done")
            pg.wait_for_timeout(300)
            op = locate(pg, "graph", "n.hasClass('op')")
            rec("click op (details)", page_time(
                pg, "(nid) => !!document.querySelector(`#details [data-nid='${nid}']`)", op["data"]["nid"],
                pg.mouse.click, op["x"], op["y"]))
            logging.getLogger("magis.app").debug("---- click op done")
            step = an.profile.peak_steps[0]
            pg.locator("#memory").scroll_into_view_if_needed()
            pg.wait_for_timeout(300)
            x, y = plot_xy(pg, step, an.profile.peak * 0.5)
            pg.mouse.move(x - 40, y)
            pg.wait_for_timeout(200)
            rec("hover curve (top live tensors)", page_time(
                pg, "() => (document.querySelector('#memory .hoverlayer')?.textContent || '')"
                ".includes('largest live tensors')", None, pg.mouse.move, x, y))
            rec("click curve (highlight in graph)", page_time(
                pg, "([id, arg]) => (document.querySelector('#live-title')?.innerText || '')"
                f".includes('live at step') && ({LIVE_SHOWN})([id, arg])", ["graph", None], pg.mouse.click, x, y))
            other = state.analysis(gid, "rpo", "rtx3090")
            pg.locator("#schedule").click()  # open the dropdown first: the timed action is the pick
            option = pg.get_by_role("option", name="rpo").first
            option.wait_for()
            rec("switch schedule (rpo, cached)", page_time(
                pg, "(v) => document.querySelector('#schedule-peak')?.innerText.trim() === v "
                "&& document.querySelector('#summary .card.peak .card-title')?.innerText"
                ".toLowerCase().includes('rpo')", format_bytes(other.sim.peak), option.click))
            ctx.close()
            srv.shutdown()
            state.shutdown()
            print(f"run {run + 1}/{a.runs} ({cfg} plotly.js) done", file=sys.stderr, flush=True)
        browser.close()

    targets = {f"first render {a.small}": 2.0, f"switch model -> {a.big}": 5.0, f"first render {a.big}": 5.0, "click": 0.3, "hover": 0.3,
               "switch schedule": 0.3}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nMAGIS Studio app timings, headless Chromium, {a.runs} run(s) each, runs interleaved; "
          f"{os.cpu_count()} CPUs, load average {load}")
    print(f"columns: median and max seconds with the {' / '.join(configs)} plotly.js bundle; the target is "
          f"judged on the first ({configs[0]}: what the app serves)\n")
    head = f"{'action':<44}" + "".join(f"{c + ' med':>11}{c + ' max':>11}" for c in configs) + "  target"
    print(head)
    print("-" * (len(head) + 6))
    out = []
    for name in rows[configs[0]]:
        target = next((t for k, t in targets.items() if name.startswith(k)), None)
        line = f"{name:<44}"
        for c in configs:
            vals = rows[c].get(name, [])
            med = statistics.median(vals) if vals else float("nan")
            line += f"{med:>11.3f}{max(vals, default=float('nan')):>11.3f}"
            out.append({"action": name, "plotly": c, "median_s": med, "max_s": max(vals, default=None),
                        "runs": vals, "target_s": target})
        med0 = statistics.median(rows[configs[0]][name])
        ok = "" if target is None else (f"< {target:g} s " + ("ok" if med0 < target else "MISSED"))
        print(line + "  " + ok)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    return 0



# ---- the optimizer's views (issue: slider drag and rule step <= 150 ms, a sample with its frontier <= 2 s) ----
PLAN_SHOWN = "(k) => (document.querySelector('#plan-caption')?.innerText || '').startsWith('point ' + k + ':')"
MARKS_SHOWN = cyjs("cy.scratch('magisPlanKey') === arg")
PARETO_SHOWN = """([k, peak]) => {
    const gd = document.querySelector('#pareto .js-plotly-plot'), mem = document.querySelector('#plan-memory .js-plotly-plot');
    if (!gd || !mem || !gd.data || !mem.data) return false;
    const sel = gd.data.find(t => t.name === 'selected');
    return !!sel && sel.x[0] === peak && mem.data.some(t => (t.name || '').startsWith('plan ' + k + ' '))
        && document.querySelectorAll('#plan-hotspots tbody tr').length > 1;
}"""


def plan_timings(browser, create_app, model: str, runs: int) -> dict[str, list[float]]:
    """Open ``model`` on a fresh server until its plan cards show; then slider steps (one stop, with
    the Memory analysis tab and with the Pareto tab in view) and rule steps, timed in the page."""

    out: dict[str, list[float]] = {}

    def rec(name: str, s: float) -> None:
        out.setdefault(name, []).append(s)

    for _ in range(runs):
        app = create_app(initial_sample=model)
        state = app.magis_state
        srv = start_server(app)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = ctx.new_page()
        pg.set_default_timeout(TIMEOUT)
        t0 = time.perf_counter()
        pg.goto(f"http://127.0.0.1:{srv.server_port}/")
        pg.wait_for_selector("#plan-cards .card", timeout=TIMEOUT)
        ready(pg, model)
        rec("open MODEL: page, slider and plan cards (cold server)", time.perf_counter() - t0)
        gid = f"sample:{model}"
        f = state.plans.frontier(gid)
        keys, k0 = f.stops(), f.default()  # a slider stop per point
        pg.wait_for_function(MARKS_SHOWN, arg=["graph", k0], polling="raf")
        rec("open MODEL: ... and the plan's marks on the graph", time.perf_counter() - t0)
        t0 = time.perf_counter()
        pg.reload()
        pg.wait_for_selector("#plan-cards .card", timeout=TIMEOUT)
        ready(pg, model)
        rec("open MODEL again: page, slider and plan cards (warm server)", time.perf_counter() - t0)
        for k in keys:  # every slider point's view is built (the page prefetches them on open)
            state.plans.view(gid, k, wait=None)
        i = keys.index(k0)
        handle = pg.locator("#plan-slider [role=slider]").first
        moves = [("ArrowRight", +1) if i + 1 < len(keys) else ("ArrowLeft", -1)]
        moves.append(("ArrowLeft", -1) if moves[0][1] > 0 else ("ArrowRight", +1))
        for key, d in moves:  # there and back, on the Memory analysis tab: cards + graph marks
            i += d
            handle.focus()
            rec("slider step: cards + graph marks", page_time(
                pg, f"(k) => ({PLAN_SHOWN})(k) && ({MARKS_SHOWN})(['graph', k])", keys[i], pg.keyboard.press, key))
        pg.click("text=Pareto frontier")
        pg.wait_for_function(PARETO_SHOWN, arg=[keys[i], f.points[keys[i]].peak], polling="raf")
        for key, d in moves:
            i += d
            handle.focus()
            rec("slider step: cards, Pareto, memory, hot-spots", page_time(
                pg, f"([k, p]) => ({PLAN_SHOWN})(k) && ({PARETO_SHOWN})([k, p])", [keys[i], f.points[keys[i]].peak],
                pg.keyboard.press, key))
        # rule steps of the default point (at least two applications: pick one that has them)
        target = next((k for k in [k0, *keys] if len(f.points[k].applications) >= 2), None)
        if target is not None:
            handle.focus()
            while keys[i] != target:
                d = 1 if keys.index(target) > i else -1
                pg.keyboard.press("ArrowRight" if d > 0 else "ArrowLeft")
                i += d
            pg.wait_for_function(PLAN_SHOWN, arg=target, polling="raf")
            state.plans.steps(gid, target, wait=None)
            pg.click("text=Rule steps")
            n = len(f.points[target].applications)
            pg.wait_for_function("(t) => (document.querySelector('#step-title')?.innerText || '').trim() === t",
                                 arg=f"step 1 of {n}", polling="raf")  # the steps open on the first
            pg.click("#step-last")
            pg.wait_for_function("(t) => (document.querySelector('#step-title')?.innerText || '').trim() === t",
                                 arg=f"step {n} of {n}", polling="raf")
            btn = pg.locator("#step-back")
            for j in (n - 1, n - 2):  # the details and both memory curves of step j (step 0: the imported graph)
                rec("rule step (back)", page_time(
                    pg, "([t, name]) => { const d = (document.querySelector('#step-memory .js-plotly-plot') || {}).data"
                    " || []; return (document.querySelector('#step-title')?.innerText || '').trim() === t && "
                    "(name === null ? d.length === 0 : (d[0] || {}).name === name); }",
                    [f"step {j} of {n}", f"before step {j}" if j > 0 else None], btn.click))
        ctx.close()
        srv.shutdown()
        state.shutdown()
    return out


def plans_main(models: list[str], runs: int, json_path: str) -> int:
    from playwright.sync_api import sync_playwright

    from app.main import create_app

    rows: dict[str, dict[str, list[float]]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for m in models:
            rows[m] = plan_timings(browser, create_app, m, runs)
            print(f"{m} done", file=sys.stderr, flush=True)
        browser.close()
    targets = {"open MODEL again": 2.0, "slider": 0.15, "rule step": 0.15}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nMAGIS Studio optimizer views, headless Chromium, {runs} run(s) per model; {os.cpu_count()} CPUs, "
          f"load average {load}; page time from the input event to the frame showing every view updated\n")
    head = f"{'action':<48}" + "".join(f"{m + ' med':>20}{'max':>8}" for m in models) + "  target"
    print(head)
    print("-" * (len(head) + 6))
    names = list(dict.fromkeys(n for m in models for n in rows[m]))
    out = []
    for name in names:
        target = next((t for k, t in targets.items() if name.startswith(k)), None)
        line = f"{name:<48}"
        meds = []
        for m in models:
            vals = rows[m].get(name, [])
            med = statistics.median(vals) if vals else float("nan")
            meds.append(med)
            line += f"{med:>20.3f}{max(vals, default=float('nan')):>8.3f}"
            out.append({"action": name.replace("MODEL", m), "model": m, "median_s": med,
                        "max_s": max(vals, default=None), "runs": vals, "target_s": target})
        ok = "" if target is None else (f"< {target:g} s " + ("ok" if all(x < target for x in meds) else "MISSED"))
        print(line + "  " + ok)
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(out, indent=1))
    return 0



def workflow_screenshots(out: str, model: str = "bert_base") -> list[str]:
    """The README's workflow figures on ``model``: open, drag the slider, inspect (Pareto, F-Tree),
    step, swaps, export -- one PNG per view in ``out``."""
    from playwright.sync_api import sync_playwright

    from app.main import create_app

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    app = create_app(initial_sample=model)
    state = app.magis_state
    srv = start_server(app)
    gid = f"sample:{model}"
    f = state.plans.frontier(gid)
    for k in f.slider():
        state.plans.view(gid, k, wait=None)
    swap_key = next((k for k in f.slider() if any(a.rule == "swap" for a in f.points[k].applications)), None)
    written = []

    def shot(pg, name: str, clip_sel: str | None = None) -> None:
        p = d / f"{name}.png"
        if clip_sel:
            pg.locator(clip_sel).screenshot(path=str(p))
        else:
            pg.screenshot(path=str(p), full_page=False)
        written.append(str(p))

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = b.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
        pg.set_default_timeout(TIMEOUT)
        pg.goto(f"http://127.0.0.1:{srv.server_port}/")
        pg.wait_for_selector("#plan-cards .card")
        ready(pg, model)
        pg.wait_for_function(MARKS_SHOWN, arg=["graph", f.default()], polling="raf")
        shot(pg, "1_open_plan_bar")
        if swap_key is not None:  # drag: to the point that swaps, the same stop the slider's keys give
            handle = pg.locator("#plan-slider [role=slider]").first
            handle.focus()
            keys = f.slider()
            i = keys.index(f.default())
            while keys[i] != swap_key:
                step = 1 if keys.index(swap_key) > i else -1
                pg.keyboard.press("ArrowRight" if step > 0 else "ArrowLeft")
                i += step
            pg.wait_for_function(MARKS_SHOWN, arg=["graph", swap_key], polling="raf")
        pg.click("text=Pareto frontier")
        pg.wait_for_selector("#plan-memory .scatterlayer .trace")
        pg.wait_for_timeout(500)
        shot(pg, "2_pareto")
        pg.click("text=Memory analysis")
        pg.click("#side-view label:has-text('F-Tree')")
        pg.wait_for_function(cyjs("cy.nodes().length > 1"), arg=["ftree", None], polling="raf")
        pg.wait_for_timeout(800)
        n = locate(pg, "ftree", "n.data('fid') !== undefined && n.hasClass('ft-enabled')") if pg.evaluate(
            cyjs("cy.nodes('.ft-enabled').length"), ["ftree", None]) else locate(pg, "ftree", "n.data('fid') !== undefined")
        pg.mouse.click(n["x"], n["y"])
        pg.wait_for_function("() => (document.querySelector('#ftree-info')?.innerText || '').includes('split dimension')")
        pg.wait_for_timeout(500)
        shot(pg, "3_ftree", ".row-graph")
        pg.click("text=Rule steps")
        pg.wait_for_selector("#step-title")
        pg.wait_for_selector("#step-memory .scatterlayer .trace")
        pg.click("#step-first")
        pg.click("#step-fwd")
        pg.wait_for_function("() => (document.querySelector('#step-title')?.innerText || '').startsWith('step 1')")
        pg.wait_for_timeout(500)
        shot(pg, "4_rule_steps")
        pg.click("text=Swaps")
        pg.wait_for_selector("#swaps-timeline .js-plotly-plot")
        pg.wait_for_timeout(800)
        shot(pg, "5_swaps")
        pg.click("text=Export")
        pg.wait_for_timeout(800)
        shot(pg, "6_export")
        b.close()
    srv.shutdown()
    state.shutdown()
    return written


if __name__ == "__main__":
    sys.exit(main())
