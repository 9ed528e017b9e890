"""The "Fusion" tab: layer fusion under an on-chip buffer (GET, ``core.search.fusion``) on the open
forward graph.

The controls pick the buffer beta, the F_beta scheme (LBDF, BRR), the plan search, the explainer that
guides the tree split of invalid groups and the plan budget; *fuse* runs ``fuse`` in the background
(progress per plan, *cancel, keep the best*).  The result is drawn as

* cards: DRAM traffic against the unfused plan, the roofline latency against the unfused one,
  groups, peak on-chip bytes and the invalid groups met and rectified;
* the plan on the op graph (the ops the fusion problem sees, weights left out): each fused group's
  ops in one colour, ops too big for the buffer alone dashed red;
* the table of groups (a click outlines a group's ops);
* the split steps behind the plan's groups (``FusionPlan.split_steps``), step by step: the invalid
  group, the edges the explainer proposed, the edges the chosen cut removed and the parts.

Only inference (forward) graphs are fusion graphs: on a training graph the tab says so in one line.
The builders are pure functions of a ``FusionPlan`` and the op graph (``FusionGraph``); colours and
highlights are applied in the browser (``MARK_FUSION``), as the plan marks of the computation graph.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dash_cytoscape as cyto
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from core.fmt import format_bytes, plural
from core.ir.graph import Graph
from core.search.fusion import HOW, FusionError, FusionPlan, FusionProblem, fuse

from .cyto import OP_FONT, clip, layout_for
from .errors import AppError
from .figures import fmt_seconds, short_op
from .panels import _card
from .plan_store import Job
from .state import AppState
from .tables import table

log = logging.getLogger("magis.app")
KIB = 1024
BUFFERS_KIB = (128, 256, 512)
SCHEME_OPTIONS = {"lbdf": "LBDF (line buffers, depth-first)", "brr": "BRR (branch requirement reduction)"}
SEARCH_OPTIONS = {"local": "local search", "random": "random search", "nsga2": "NSGA-II"}
EXPLAINER_OPTIONS = {"grad": "gradient saliency", "gnn": "GNNExplainer", "oracle": "oracle (F_beta itself)",
                     "random": "random edges", "none": "none (random split)"}
PLAN_BUDGETS = (200, 1000, 4000)
FORWARD_SAMPLES_HINT = "efficientnet_b3, mobilenet_v2, resnet152"
DRAW_MAX = 800  # ops drawn in the fusion graph; a larger graph is listed in the table only
STEP_ROWS = 10  # split steps per page of the step list
GROUP_ROWS = 12
GRAPHS_KEPT = 6  # op graphs kept (one per graph id)
# fused groups cycle through these (Tableau's colours): neighbours differ
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f",
           "#a0cbe8", "#bcbd22", "#8c6d31", "#17becf")  # no red: red marks what is wrong (invalid, cut, too big)
SINGLE_COLOR = "#e5e7eb"  # an op in a group of its own
# the ops in rows, in topological order, each row read the other way than the one above (consecutive ops
# stay neighbours): positions come with the elements (``fusion_positions``), sized to the panel's shape
FUSION_LAYOUT = {"name": "preset", "animate": False, "fit": True, "padding": 12}
FUSION_CELL = (100, 64)  # model units per op: a 12-unit label of up to 12 characters and room for edges
FUSION_ASPECT = 2.6  # the panel's width over its height (about 1100 x 420 px)
FUSION_LABEL_CHARS = 12
HOW_SHORT = {"cut": "one cut, all valid", "largest": "largest valid part", "both": "both sides split",
             "no-cut": "random (no cut)", "rounds": "random (rounds)", "random": "random split"}


# ---- the op graph the fusion problem sees ---------------------------------------------------------------
@dataclass
class FusionGraph:
    """The ops of a graph in the fusion problem's topological order (weights and their views left
    out): position -> name, graph node id, short op and edges between positions."""

    gid: str
    tok: str  # cytoscape id prefix of the graph's entry (unique per loaded graph)
    names: list[str]
    node_ids: list[int]
    labels: list[str]
    edges: list[tuple[int, int]]

    @classmethod
    def of(cls, gid: str, tok: str, g: Graph) -> FusionGraph:
        p = FusionProblem(g, "lbdf")
        return cls(gid, tok, list(p.names), list(p.node_ids), [short_op(g[n].op) for n in p.node_ids], p.edges())

    pos_of: dict[str, int] = field(init=False, repr=False)  # name -> position

    def __post_init__(self) -> None:
        self.pos_of = {x: i for i, x in enumerate(self.names)}

    @property
    def n(self) -> int:
        return len(self.names)

    def positions(self, names: Sequence[str]) -> list[int]:
        """Positions of op names (names of other graphs are skipped)."""
        pos = self.pos_of
        return [pos[x] for x in names if x in pos]


# ---- user input --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FuseOptions:
    beta: int  # bytes
    scheme: str
    search: str
    explainer: str
    plans: int
    strict: bool = False

    def text(self) -> str:
        return (f"{self.scheme.upper()} under {format_bytes(self.beta)}, {SEARCH_OPTIONS[self.search]} of "
                f"{self.plans:,} plans, split by {self.explainer}" + (", strict" if self.strict else ""))


def parse_options(buffer_kib: Any, scheme: Any, search: Any, explainer: Any, plans: Any,
                  strict: Any = None) -> FuseOptions:
    """The controls' values as fuse options; AppError (one line) for a value the controls do not offer."""
    if buffer_kib not in BUFFERS_KIB:
        raise AppError(f"pick a buffer of {', '.join(f'{b} KiB' for b in BUFFERS_KIB)}")
    if scheme not in SCHEME_OPTIONS:
        raise AppError(f"unknown fusion scheme {scheme!r}; known: {', '.join(SCHEME_OPTIONS)}")
    if search not in SEARCH_OPTIONS:
        raise AppError(f"unknown search {search!r}; known: {', '.join(SEARCH_OPTIONS)}")
    if explainer not in EXPLAINER_OPTIONS:
        raise AppError(f"unknown explainer {explainer!r}; known: {', '.join(EXPLAINER_OPTIONS)}")
    if plans not in PLAN_BUDGETS:
        raise AppError(f"pick a plan budget of {', '.join(map(str, PLAN_BUDGETS))}")
    return FuseOptions(int(buffer_kib) * KIB, scheme, search, explainer, int(plans), bool(strict))


def forward_only_text(g: Graph) -> str | None:
    """One line when ``g`` is a training graph (layer fusion plans inference graphs), else None."""
    if g.meta.get("mode") != "train":
        return None
    return (f"{g.name} is a training graph; layer fusion plans inference graphs: open a forward sample "
            f"({FORWARD_SAMPLES_HINT}) or a graph from `magis import MODEL --forward`")


# ---- background runs -------------------------------------------------------------------------------------
@dataclass
class FusionRun:
    """A finished ``fuse`` of one graph: the plan, the options and a number the page keys its views on."""

    run: int
    gid: str
    options: FuseOptions
    plan: FusionPlan


class FusionStore:
    """Per graph id: its op graph (built once), the running or last ``fuse`` job and the last plan."""

    def __init__(self, entry: Callable[[str], Any]) -> None:
        self._entry = entry
        self._lock = threading.Lock()
        self._graphs: OrderedDict[str, FusionGraph] = OrderedDict()
        self._jobs: dict[str, Job] = {}
        self._runs: dict[str, FusionRun] = {}
        self._count = 0

    def graph(self, gid: str) -> FusionGraph:
        e = self._entry(gid)
        with self._lock:
            fg = self._graphs.get(gid)
            if fg is not None and fg.tok == e.tok:
                self._graphs.move_to_end(gid)
                return fg
        fg = FusionGraph.of(gid, e.tok, e.graph)
        with self._lock:
            self._graphs[gid] = fg
            while len(self._graphs) > GRAPHS_KEPT:
                self._graphs.popitem(last=False)
        return fg

    def job(self, gid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(gid)

    def result(self, gid: str) -> FusionRun | None:
        with self._lock:
            return self._runs.get(gid)

    def start(self, gid: str, opts: FuseOptions) -> Job:
        """Run ``fuse`` on ``gid``'s graph in a thread (one run per graph at a time).  AppError for a
        training graph; the core's FusionError (a buffer too small under strict, nothing to fuse)
        becomes the job's one-line error."""
        g = self._entry(gid).graph
        why = forward_only_text(g)
        if why:
            raise AppError(why)
        with self._lock:
            old = self._jobs.get(gid)
            if old is not None and not old.done:
                return old
            job = self._jobs[gid] = Job("fuse", gid)
        job.progress = {"budget": opts.plans, "plans": 0, "stage": "starting"}

        def stage(msg: str) -> None:
            job.progress["stage"] = msg.strip()

        def on_plan(n: int, best: float) -> None:
            job.progress.update(plans=n, best=best, stage="search")

        def run() -> None:
            try:
                plan = fuse(g, opts.beta, opts.scheme, opts.search, opts.explainer, opts.plans, strict=opts.strict,
                            progress=stage, on_plan=on_plan, cancel=job.cancel)
                with self._lock:
                    self._count += 1
                    r = FusionRun(self._count, gid, opts, plan)
                    self._runs[gid] = r
                job.result = r
            except FusionError as e:  # the user's input: one line
                job.error = str(e)
            except Exception as e:  # noqa: BLE001 -- the page shows it; the server keeps running
                log.exception("fusion of %s failed", gid)
                job.error = f"{type(e).__name__}: {e}"
            finally:
                job.done = True

        threading.Thread(target=run, name="magis-fuse", daemon=True).start()
        return job


def store_of(state: AppState) -> FusionStore:
    """The fusion store of ``state`` (attached on first use)."""
    s = getattr(state, "fusion", None)
    if s is None:
        s = state.fusion = FusionStore(state.entry)
    return s


def job_line(st: dict) -> str:
    """The status line of a fuse job (``Job.status``)."""
    if not st:
        return ""
    if st.get("error"):
        return f"fusion failed: {st['error']}"
    n, budget = st.get("plans", 0), st.get("budget", 0)
    secs = st.get("seconds", 0)
    if st.get("done"):
        head = "cancelled: the best plan so far" if st.get("cancelled") else "finished"
        return f"{head} · {n:,} of {budget:,} plans in {secs:.1f} s"
    if st.get("cancelled"):
        return f"cancelling ... {n:,} of {budget:,} plans"
    if st.get("stage") != "search" or not n:
        return f"fusing ... {st.get('stage', '')} ({secs:.0f} s)"
    return (f"fusing ... {n:,} of {budget:,} plans · best DRAM so far {format_bytes(st.get('best', 0))} "
            f"({secs:.0f} s)")


# ---- pure builders ---------------------------------------------------------------------------------------
def group_colors(plan: FusionPlan) -> list[str | None]:
    """A colour per group: the fused ones (two ops or more) cycle through ``PALETTE`` in plan order, a
    one-op group has none."""
    out: list[str | None] = []
    k = 0
    for gr in plan.groups:
        if len(gr) > 1:
            out.append(PALETTE[k % len(PALETTE)])
            k += 1
        else:
            out.append(None)
    return out


def _pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.1f}%" if b else "-"


def fusion_cards(plan: FusionPlan) -> list[html.Div]:
    """The result's cards: DRAM traffic and its reduction against the unfused plan, the roofline
    latency against the unfused one, groups, peak on-chip bytes, invalid groups met and rectified,
    the search."""
    fused = [gr for gr in plan.groups if len(gr) > 1]
    s = plan.splits
    invalid, rectified = int(s.get("invalid", 0)), int(s.get("rectified", 0))
    rate = s.get("rectify_rate", 1.0)
    largest = max((len(gr) for gr in plan.groups), default=0)
    return [
        _card("DRAM traffic", format_bytes(plan.dram), f"unfused {format_bytes(plan.trivial_dram)}",
              id_="fusion-dram", kind="peak"),
        _card("reduction", f"-{plan.reduction:.1%}", "of the unfused plan's DRAM traffic", id_="fusion-reduction"),
        _card("latency (roofline)", fmt_seconds(plan.latency),
              f"unfused {fmt_seconds(plan.trivial_latency)} ({_pct(plan.latency, plan.trivial_latency)}) · rtx3090",
              id_="fusion-latency"),
        _card("groups", plural(len(plan.groups), "group"),
              f"{len(fused)} fused (largest {plural(largest, 'op')}) · {plural(len(plan.unfused), 'op')} too big "
              f"alone", id_="fusion-groups"),
        _card("peak on-chip", format_bytes(plan.max_buffer),
              f"of a {format_bytes(plan.beta)} buffer ({plan.scheme.upper()})", id_="fusion-peak"),
        _card("invalid groups", f"{invalid:,} met",
              f"{rectified:,} rectified by {plan.explainer} explanation cuts ({rate:.0%})", id_="fusion-invalid"),
        _card("search", f"{plan.plans:,} plans",
              f"{SEARCH_OPTIONS.get(plan.search, plan.search)}, {plan.seconds:.1f} s"
              + (" · cancelled: the best so far" if plan.cancelled else ""), id_="fusion-searched"),
    ]


def group_kind(plan: FusionPlan, i: int) -> str:
    gr = plan.groups[i]
    if len(gr) > 1:
        return "fused"
    return "too big alone" if plan.group_buffer[i] >= plan.beta else "single op"


def _buffer_text(b: float | None, beta: float) -> str:
    if b is None or b == float("inf"):
        return "infinite (a squeeze-excite gate inside: BRR)"
    return f"{format_bytes(b)} ({b / beta:.0%} of β)" if beta else format_bytes(b)


def group_rows(plan: FusionPlan) -> list[dict]:
    """One row per group in plan (topological) order: its ops, first and last op, DRAM traffic F_D and
    buffer need F_beta against beta; ``id`` is the group's index (a click outlines it)."""
    rows = []
    for i, (gr, d, b) in enumerate(zip(plan.groups, plan.group_dram, plan.group_buffer, strict=True)):
        rows.append({"id": i, "group": i, "colour": "", "ops": len(gr), "first": gr[0], "last": gr[-1],
                     "kind": group_kind(plan, i), "dram": format_bytes(d), "dram_bytes": d,
                     "buffer": _buffer_text(b, plan.beta)})
    return rows


GROUP_COLUMNS = [("group", "#"), ("colour", ""), ("ops", "ops"), ("first", "first op"), ("last", "last op"),
                 ("kind", "kind"), ("dram", "DRAM (F_D)"), ("buffer", "buffer (F_β)")]


def group_styles(plan: FusionPlan) -> list[dict]:
    """``style_data_conditional`` of the group table: the colour swatch of each fused group, and the
    ops too big alone in red."""
    out: list[dict] = []
    for i, c in enumerate(group_colors(plan)):
        if c is not None:
            out.append({"if": {"filter_query": f"{{group}} = {i}", "column_id": "colour"}, "backgroundColor": c})
    out.append({"if": {"filter_query": '{kind} = "too big alone"', "column_id": "kind"}, "color": "#b91c1c"})
    out.append({"if": {"state": "active"}, "backgroundColor": "#e0f2fe", "border": "1px solid #0284c7"})
    return out


def fusion_positions(n: int) -> list[dict]:
    """Model positions of ``n`` ops in topological order: rows of ``cols`` ops, every other row right
    to left, with ``cols`` chosen so the grid has about the panel's shape."""
    cw, ch = FUSION_CELL
    cols = max(1, min(n, math.ceil(math.sqrt(n * FUSION_ASPECT * ch / cw))))
    out = []
    for i in range(n):
        r, c = divmod(i, cols)
        out.append({"x": (c if r % 2 == 0 else cols - 1 - c) * cw, "y": r * ch})
    return out


def fusion_elements(fg: FusionGraph) -> list[dict]:
    """The op graph as cytoscape elements: ``{tok}-f{pos}`` per op (data: pos, nid, label -- the short
    op clipped to its suffix, name), placed by ``fusion_positions``; ``{tok}-fe{u}-{v}`` per edge (data:
    u, v)."""
    t = fg.tok
    pos = fusion_positions(fg.n)
    nodes = [{"data": {"id": f"{t}-f{i}", "pos": i, "nid": fg.node_ids[i], "label": clip(fg.labels[i], FUSION_LABEL_CHARS),
                       "op": fg.labels[i], "name": fg.names[i]}, "position": pos[i], "classes": "fop"}
             for i in range(fg.n)]
    edges = [{"data": {"id": f"{t}-fe{u}-{v}", "source": f"{t}-f{u}", "target": f"{t}-f{v}", "u": u, "v": v}}
             for u, v in fg.edges]
    return nodes + edges


def fusion_marks(fg: FusionGraph, run: FusionRun) -> dict:
    """What the browser colours (``MARK_FUSION``): position -> colour of each op of a fused group, the
    ops too big for the buffer alone, and position -> group index (for the hover line)."""
    plan = run.plan
    colors: dict[str, str] = {}
    group_of: dict[str, int] = {}
    for i, (gr, c) in enumerate(zip(plan.groups, group_colors(plan), strict=True)):
        for v in fg.positions(gr):
            group_of[str(v)] = i
            if c is not None:
                colors[str(v)] = c
    return {"gid": fg.gid, "tok": fg.tok, "run": run.run, "colors": colors, "group_of": group_of,
            "unfused": fg.positions(plan.unfused)}


def group_highlight(fg: FusionGraph, run: FusionRun, i: int) -> dict:
    """Outline group ``i``'s ops (and zoom to them)."""
    return {"gid": fg.gid, "tok": fg.tok, "run": run.run, "what": f"group {i}",
            "nodes": fg.positions(run.plan.groups[i]), "explained": [], "cut": [], "ok": [], "bad": []}


def step_highlight(fg: FusionGraph, run: FusionRun, k: int) -> dict:
    """Split step ``k`` on the graph: its invalid group, the edges the explainer proposed, the edges the
    chosen cut removed, and its valid and invalid parts."""
    st = run.plan.split_steps[k]
    pos = fg.pos_of

    def edges(es: Sequence[Sequence[str]]) -> list[list[int]]:
        return [[pos[u], pos[v]] for u, v in es if u in pos and v in pos]

    ok, bad = [], []
    for part in st["parts"]:
        (ok if part["valid"] else bad).extend(fg.positions(part["ops"]))
    return {"gid": fg.gid, "tok": fg.tok, "run": run.run, "what": f"step {k}", "nodes": fg.positions(st["ops"]),
            "explained": edges(st["explained"]), "cut": edges(st["cut"]), "ok": ok, "bad": bad}


def _span(ops: Sequence[str]) -> str:
    return ops[0] if len(ops) == 1 else f"{ops[0]} … {ops[-1]}"


def _fb(b: float | None) -> str:
    return "∞" if b is None else format_bytes(b)


def step_rows(plan: FusionPlan) -> list[dict]:
    """One row per split step: its depth, the group's size and F_beta, how it was split, its parts."""
    rows = []
    for k, st in enumerate(plan.split_steps):
        n_ok = sum(p["valid"] for p in st["parts"])
        n_bad = len(st["parts"]) - n_ok
        rows.append({"id": k, "step": k + 1, "depth": st["depth"], "ops": len(st["ops"]),
                     "buffer": _fb(st["buffer_bytes"]), "how": HOW_SHORT.get(st["how"], st["how"]),
                     "parts": f"{n_ok} valid" + (f", {n_bad} invalid" if n_bad else "")})
    return rows


STEP_COLUMNS = [("step", "step"), ("depth", "depth"), ("ops", "ops"), ("buffer", "F_β"), ("how", "how"),
                ("parts", "parts")]


def _edge_list(es: Sequence[Sequence[str]], limit: int = 8) -> str:
    if not es:
        return "none"
    s = ", ".join(f"{u} → {v}" for u, v in es[:limit])
    return s + (f" (+{len(es) - limit} more)" if len(es) > limit else "")


def step_details(plan: FusionPlan, k: int) -> html.Div:
    """Split step ``k``: the invalid group (its ops, F_beta against beta), the explainer's proposed
    edges, how Algorithm 1 chose, the edges the cut removed and the parts with their F_beta."""
    st = plan.split_steps[k]
    n = len(plan.split_steps)
    beta = plan.beta
    parts = [html.Li([html.Span("valid" if p["valid"] else "invalid",
                                className="badge " + ("fu-ok" if p["valid"] else "fu-bad")),
                      f" {plural(len(p['ops']), 'op')} {_span(p['ops'])} · F_β {_fb(p['buffer_bytes'])}"])
             for p in st["parts"]]
    explainer = "the explainer" if plan.explainer in ("none", "") else f"the {plan.explainer} explainer"
    rows = [
        html.Tr([html.Th("group"), html.Td(f"{plural(len(st['ops']), 'op')}: {_span(st['ops'])}")]),
        html.Tr([html.Th("F_β"), html.Td(f"{_fb(st['buffer_bytes'])} ≥ β = {format_bytes(beta)}: invalid")]),
        html.Tr([html.Th("proposed"), html.Td(f"{explainer}: {_edge_list(st['explained'])}"
                                              if st["explained"] else "no explanation (a random split)")]),
        html.Tr([html.Th("chosen"), html.Td(HOW.get(st["how"], st["how"]))]),
        html.Tr([html.Th("cut"), html.Td(_edge_list(st["cut"]))]),
    ]
    more = plan.split_steps_total - n
    return html.Div([
        html.H4(f"split step {k + 1} of {n}" + (f" (+{more} not kept)" if more > 0 else "")
                + (f" · depth {st['depth']}" if st["depth"] else ""), id="fusion-step-title"),
        html.Table(html.Tbody(rows), className="kv"),
        html.Div("parts:", className="small"), html.Ul(parts, className="small fu-parts"),
    ], className="details")


def steps_note(plan: FusionPlan) -> str:
    """The line above the step list: how many steps are behind the plan, of the invalid groups met."""
    met = int(plan.splits.get("invalid", 0))
    if not plan.split_steps:
        return (f"no split steps behind this plan: its groups were valid as the search proposed them "
                f"({plural(met, 'invalid group')} met in the other plans it evaluated)")
    shown = len(plan.split_steps)
    kept = (f"the first {shown:,} of {plan.split_steps_total:,} tree-split steps" if plan.split_steps_total > shown
            else plural(shown, "tree-split step"))
    return (f"{kept} behind this plan's groups ({plural(met, 'invalid group')} met in the "
            f"whole search) · orange: edges the explainer proposed · red dashed: edges the cut removed · "
            f"parts outlined green (valid) / red (invalid)")


def unfused_line(plan: FusionPlan) -> str:
    if not plan.unfused:
        return ""
    more = f" and {len(plan.unfused) - 6} more" if len(plan.unfused) > 6 else ""
    return (f"{plural(len(plan.unfused), 'op')} need more than the {format_bytes(plan.beta)} buffer alone and stay "
            f"unfused (dashed red): {', '.join(plan.unfused[:6])}{more}")


def fusion_stylesheet() -> list[dict]:
    return [
        {"selector": "node", "style": {
            "label": "data(label)", "font-size": OP_FONT, "color": "#1f2937", "text-valign": "bottom", "text-margin-y": 2,
            "shape": "round-rectangle", "width": 24, "height": 14, "background-color": SINGLE_COLOR,
            "border-width": 1, "border-color": "#9ca3af", "min-zoomed-font-size": 5}},
        {"selector": "node.fu-fused", "style": {"background-color": "data(fcolor)", "border-color": "#374151"}},
        {"selector": "node.fu-big", "style": {"border-color": "#dc2626", "border-style": "dashed", "border-width": 2,
                                              "background-color": "#ffffff"}},
        {"selector": "node.fu-hl", "style": {"underlay-color": "#0ea5e9", "underlay-opacity": 0.35,
                                             "underlay-padding": 6, "z-index": 20, "font-weight": "bold"}},
        {"selector": "node.fu-ok", "style": {"outline-color": "#16a34a", "outline-width": 3, "outline-offset": 1}},
        {"selector": "node.fu-bad", "style": {"outline-color": "#dc2626", "outline-width": 3, "outline-offset": 1}},
        {"selector": "edge", "style": {"width": 1.1, "line-color": "#9ca3af", "target-arrow-color": "#6b7280",
                                       "target-arrow-shape": "triangle", "arrow-scale": 0.8, "curve-style": "bezier"}},
        {"selector": "edge.fu-exp", "style": {"width": 5, "line-color": "#f59e0b", "target-arrow-color": "#f59e0b",
                                              "z-index": 30}},
        {"selector": "edge.fu-cut", "style": {"line-style": "dashed", "line-color": "#dc2626",
                                              "target-arrow-color": "#dc2626", "width": 3, "z-index": 31}},
        {"selector": "edge.fu-exp.fu-cut", "style": {"width": 5}},
    ]


# ---- in the browser ------------------------------------------------------------------------------------
# colour each fused group's ops, mark the ops too big alone, then outline what is picked (a group, or a
# split step: its group, the proposed and the cut edges, its parts) and zoom to it
MARK_FUSION = """function(marks, hl, _els) {
    function cyOf() {
        const root = document.getElementById("fusion-graph");
        if (!root) { return null; }
        const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
        return el ? el._cyreg.cy : null;
    }
    function apply(cy) {
        const tok = cy.nodes()[0].id().split("-")[0];
        const on = marks && marks.tok === tok;
        const lit = on && hl && hl.tok === tok && hl.run === marks.run;
        const node = pos => cy.getElementById(tok + "-f" + pos);
        const edge = ([u, v]) => cy.getElementById(tok + "-fe" + u + "-" + v);
        const out = {run: on ? marks.run : null, what: lit ? hl.what : null, colored: 0, nodes: 0, explained: 0,
                     cut: 0};
        cy.batch(() => {
            cy.nodes(".fu-fused, .fu-big, .fu-hl, .fu-ok, .fu-bad").removeClass("fu-fused fu-big fu-hl fu-ok fu-bad");
            cy.edges(".fu-exp, .fu-cut").removeClass("fu-exp fu-cut");
            if (!on) { return; }
            for (const [pos, c] of Object.entries(marks.colors)) {
                const n = node(pos);
                if (n.nonempty()) { n.data("fcolor", c); n.addClass("fu-fused"); out.colored += 1; }
            }
            for (const pos of marks.unfused) { node(pos).addClass("fu-big"); }
            if (!lit) { return; }
            for (const pos of hl.nodes) { const n = node(pos); if (n.nonempty()) { n.addClass("fu-hl"); out.nodes += 1; } }
            for (const pos of hl.ok) { node(pos).addClass("fu-ok"); }
            for (const pos of hl.bad) { node(pos).addClass("fu-bad"); }
            for (const uv of hl.explained) { const e = edge(uv); if (e.nonempty()) { e.addClass("fu-exp"); out.explained += 1; } }
            for (const uv of hl.cut) { const e = edge(uv); if (e.nonempty()) { e.addClass("fu-cut"); out.cut += 1; } }
        });
        if (out.nodes) {
            const sel = cy.nodes(".fu-hl");
            cy.animate({fit: {eles: sel.union(sel.neighborhood()), padding: 40}}, {duration: 200});
        }
        return out;
    }
    // the graph's new elements may reach cytoscape after this runs: try again a few times (unless a
    // later call has come meanwhile)
    const seq = (window.__magisFusionSeq = (window.__magisFusionSeq || 0) + 1);
    function attempt(left) {
        if (seq !== window.__magisFusionSeq) { return null; }
        const cy = cyOf();
        const ready = cy && cy.nodes().length && (!marks || cy.getElementById(marks.tok + "-f0").nonempty());
        if (ready) { return apply(cy); }
        if (left > 0) { setTimeout(() => attempt(left - 1), 150); }
        return null;
    }
    const out = attempt(10);
    return out || window.dash_clientside.no_update;
}"""

HOVER_FUSION = """function(d, marks) {
    if (!d || d.pos === undefined) { return ""; }
    const g = marks && marks.group_of ? marks.group_of[String(d.pos)] : undefined;
    return d.name + " · " + (d.op || d.label) + (g === undefined ? "" : " · group " + g);
}"""


# ---- layout ----------------------------------------------------------------------------------------------
def _dd(id_: str, value: Any, options: dict | Sequence, label: str, cls: str = "fu-dd") -> html.Div:
    opts = ([{"label": v, "value": k} for k, v in options.items()] if isinstance(options, dict)
            else [{"label": str(o), "value": o} for o in options])
    return html.Div([html.Label(label, htmlFor=id_),
                     dcc.Dropdown(id=id_, value=value, options=opts, clearable=False, searchable=False,
                                  className=cls)], className="ctl")


def tab() -> dcc.Tab:
    return dcc.Tab(html.Div([
        html.Section([
            html.Div([html.H3("Layer fusion under an on-chip buffer (GET)"),
                      html.Span("fusion groups keep their intermediates on chip: DRAM traffic is what enters and "
                                "leaves each group, plus its weights", className="muted hint")],
                     className="panel-head"),
            html.Div(id="fusion-note", className="fusion-note"),
            html.Div([
                _dd("fusion-buffer", 256, {b: f"{b} KiB" for b in BUFFERS_KIB}, "buffer"),
                _dd("fusion-scheme", "lbdf", SCHEME_OPTIONS, "scheme", "fu-dd fu-dd-wide"),
                _dd("fusion-search", "local", SEARCH_OPTIONS, "search"),
                _dd("fusion-explainer", "grad", EXPLAINER_OPTIONS, "explainer", "fu-dd fu-dd-wide"),
                _dd("fusion-plans", 1000, {p: f"{p:,} plans" for p in PLAN_BUDGETS}, "budget"),
                html.Div(dcc.Checklist(id="fusion-strict", options=[{"label": " strict", "value": "on"}], value=[],
                                       inputStyle={"margin-right": "4px"}),
                         className="ctl small",
                         title="refuse a buffer too small for a single op (default: leave it unfused)"),
                html.Button("fuse", id="fusion-run", n_clicks=0, className="btn btn-primary",
                            title="search a fusion plan of this graph in the background"),
                html.Button("cancel, keep the best", id="fusion-cancel", n_clicks=0, className="btn"),
            ], className="fusion-controls"),
            html.Div(id="fusion-status", className="small opt-status"),
            html.Div(id="fusion-cards", className="cards"),
            html.Div(id="fusion-unfused", className="muted small"),
        ], className="panel"),
        html.Section([
            html.Div([html.H3("The plan on the op graph"),
                      html.Span("each fused group in one colour · grey: an op alone · dashed red: too big for the "
                                "buffer alone · weights not drawn", className="muted hint")],
                     className="panel-head"),
            html.Div(id="fusion-graph-note", className="muted small"),
            cyto.Cytoscape(id="fusion-graph", elements=[], layout=FUSION_LAYOUT, stylesheet=fusion_stylesheet(),
                           minZoom=0.02, maxZoom=3, wheelSensitivity=0.25, autoRefreshLayout=False,
                           autounselectify=True, boxSelectionEnabled=False,
                           style={"width": "100%", "height": "420px"}),
            html.Div(id="fusion-hover", className="muted small hover-line"),
        ], className="panel"),
        html.Div([
            html.Section([
                html.Div([html.H3("Groups"),
                          html.Span("click a row to outline its ops", className="muted hint")], className="panel-head"),
                table(id="fusion-groups-table", columns=[{"name": n, "id": c} for c, n in GROUP_COLUMNS], data=[],
                      sort_action="native", filter_action="native", page_action="native", page_size=GROUP_ROWS,
                      wrap=("first", "last"), max_width=220, style_data_conditional=[]),
                html.Div(id="fusion-group-line", className="muted small"),
            ], className="panel"),
            html.Section([
                html.Div([html.H3("Split steps"),
                          html.Button("◀ back", id="fusion-step-back", n_clicks=0, className="btn step-btn"),
                          html.Button("next ▶", id="fusion-step-next", n_clicks=0, className="btn step-btn"),
                          html.Span(id="fusion-step-status", className="muted small")], className="panel-head"),
                html.Div(id="fusion-steps-note", className="muted small"),
                table(id="fusion-steps-table", columns=[{"name": n, "id": c} for c, n in STEP_COLUMNS], data=[],
                      page_action="native", page_size=STEP_ROWS,
                      style_data_conditional=[{"if": {"state": "active"}, "backgroundColor": "#fef3c7",
                                               "border": "1px solid #d97706"}]),
                html.Div(id="fusion-step-details", className="details-box"),
            ], className="panel"),
        ], className="row-fusion"),
        dcc.Store(id="fusion-shown"),  # {gid, run}: the result the views show
        dcc.Store(id="fusion-marks"),  # fusion_marks(): colours of the groups
        dcc.Store(id="fusion-hl"),  # group_highlight() / step_highlight()
        dcc.Store(id="fusion-step"),  # {gid, run, index, count}
        dcc.Store(id="fusion-marked"),  # written by MARK_FUSION
        dcc.Interval(id="fusion-poll", interval=500, disabled=True),
    ], className="tab-body"), label="Fusion", value="fusion")


# ---- callbacks -------------------------------------------------------------------------------------------
def register(app: Dash, state: AppState, guarded, show_message) -> None:
    store = store_of(state)

    def current(shown) -> tuple[FusionGraph, FusionRun]:
        """The op graph and run the page shows (PreventUpdate when it is not the graph's last run)."""
        if not shown:
            raise PreventUpdate
        r = store.result(shown["gid"])
        if r is None or r.run != shown.get("run"):
            raise PreventUpdate
        return store.graph(shown["gid"]), r

    @app.callback(Output("fusion-note", "children"), Output("fusion-run", "disabled"),
                  Output("fusion-graph", "elements"), Output("fusion-graph", "layout"),
                  Output("fusion-graph-note", "children"), Output("fusion-shown", "data"),
                  Output("fusion-poll", "disabled"), Output("fusion-status", "children"),
                  Input("tabs", "value"), Input("model", "value"), State("fusion-shown", "data"))
    @guarded(8)
    def on_fusion_tab(tab, gid, shown):
        """The tab shown (again) or another model: the op graph (sent again: a tab shown again mounts
        its graph anew), the note for a training graph, and the model's last result."""
        if tab != "fusion" or not gid:
            raise PreventUpdate
        g = state.entry(gid).graph
        why = forward_only_text(g)
        job = store.job(gid)
        running = job is not None and not job.done
        r = store.result(gid)
        new_shown = {"gid": gid, "run": r.run} if r is not None else None
        shown_out = no_update if new_shown == shown else new_shown
        status = job_line(job.status()) if job is not None else ""
        if why:
            return why, True, [], FUSION_LAYOUT, "", shown_out, True, status
        fg = store.graph(gid)
        if fg.n > DRAW_MAX:
            note = f"{plural(fg.n, 'op')}: too many to draw here (at most {DRAW_MAX}); the tables list the plan"
            return "", False, [], FUSION_LAYOUT, note, shown_out, not running, status
        els = fusion_elements(fg)
        note = f"{plural(fg.n, 'op')} of {state.label(gid)} in topological order, row by row (each row read the other way than the one above) · scroll to zoom"
        return "", False, els, layout_for(els, FUSION_LAYOUT), note, shown_out, not running, status

    @app.callback(Output("fusion-poll", "disabled", allow_duplicate=True),
                  Output("fusion-status", "children", allow_duplicate=True),
                  Input("fusion-run", "n_clicks"), State("model", "value"), State("fusion-buffer", "value"),
                  State("fusion-scheme", "value"), State("fusion-search", "value"),
                  State("fusion-explainer", "value"), State("fusion-plans", "value"), State("fusion-strict", "value"),
                  prevent_initial_call=True)
    @guarded(2)
    def on_fuse(n, gid, buffer_kib, scheme, search, explainer, plans, strict):
        if not n:
            raise PreventUpdate
        opts = parse_options(buffer_kib, scheme, search, explainer, plans, bool(strict))
        job = store.start(gid, opts)
        return False, job_line(job.status())

    @app.callback(Output("fusion-status", "children", allow_duplicate=True), Input("fusion-cancel", "n_clicks"),
                  State("model", "value"), prevent_initial_call=True)
    @guarded(1)
    def on_fuse_cancel(n, gid):
        job = store.job(gid)
        if not n or job is None or job.done:
            raise PreventUpdate
        job.cancel.set()
        return job_line(job.status())

    @app.callback(Output("fusion-status", "children", allow_duplicate=True),
                  Output("fusion-poll", "disabled", allow_duplicate=True),
                  Output("fusion-shown", "data", allow_duplicate=True),
                  Input("fusion-poll", "n_intervals"), State("model", "value"), prevent_initial_call=True)
    @guarded(3)
    def on_fuse_poll(_n, gid):
        job = store.job(gid)
        if job is None:
            return "", True, no_update
        st = job.status()
        if not job.done:
            return job_line(st), False, no_update
        if job.error:
            show_message(f"fusion of {state.label(gid)}: {job.error}")
            return job_line(st), True, no_update
        r = job.result
        return job_line(st), True, {"gid": gid, "run": r.run}

    @app.callback(Output("fusion-cards", "children"), Output("fusion-unfused", "children"),
                  Output("fusion-groups-table", "data"), Output("fusion-groups-table", "style_data_conditional"),
                  Output("fusion-steps-table", "data"), Output("fusion-steps-note", "children"),
                  Output("fusion-marks", "data"), Output("fusion-step", "data"), Output("fusion-group-line", "children"),
                  Input("fusion-shown", "data"))
    @guarded(9)
    def on_fusion_result(shown):
        if not shown:
            return [], "", [], [], [], "", None, None, ""
        fg, r = current(shown)
        plan = r.plan
        step = {"gid": r.gid, "run": r.run, "index": -1, "count": len(plan.split_steps)}  # -1: none picked yet
        line = f"{r.options.text()} · {plural(len(plan.groups), 'group')}"
        return (fusion_cards(plan), unfused_line(plan), group_rows(plan), group_styles(plan), step_rows(plan),
                steps_note(plan), fusion_marks(fg, r), step, line)

    @app.callback(Output("fusion-step", "data", allow_duplicate=True),
                  Input("fusion-step-back", "n_clicks"), Input("fusion-step-next", "n_clicks"),
                  Input("fusion-steps-table", "active_cell"), State("fusion-step", "data"),
                  prevent_initial_call=True)
    @guarded(1)
    def on_step_move(_b, _n, cell, cur):
        if not cur or not cur.get("count"):
            raise PreventUpdate
        i, n = cur["index"], cur["count"]
        trig = ctx.triggered_id
        if trig == "fusion-step-back":
            i = max(0, i - 1)
        elif trig == "fusion-step-next":
            i = min(n - 1, i + 1)
        elif trig == "fusion-steps-table":
            if not cell or cell.get("row_id") is None:
                raise PreventUpdate
            i = int(cell["row_id"])
        if i == cur["index"] and trig != "fusion-steps-table":
            raise PreventUpdate
        return {**cur, "index": i}

    @app.callback(Output("fusion-step-details", "children"), Output("fusion-step-status", "children"),
                  Output("fusion-hl", "data"), Input("fusion-step", "data"))
    @guarded(3)
    def on_step(cur):
        if not cur:
            return "", "", None
        fg, r = current({"gid": cur["gid"], "run": cur["run"]})
        n, k = cur["count"], cur["index"]
        if not n:
            return "", "no split steps", None
        if k < 0:
            hint = html.Div(f"{plural(n, 'split step')}: next ▶ (or a row) shows the first on the graph",
                            className="muted")
            return hint, f"{plural(n, 'step')}", None
        return step_details(r.plan, k), f"step {k + 1} of {n}", step_highlight(fg, r, k)

    @app.callback(Output("fusion-hl", "data", allow_duplicate=True),
                  Output("fusion-group-line", "children", allow_duplicate=True),
                  Input("fusion-groups-table", "active_cell"), State("fusion-shown", "data"),
                  prevent_initial_call=True)
    @guarded(2)
    def on_group(cell, shown):
        if not cell or cell.get("row_id") is None:
            raise PreventUpdate
        fg, r = current(shown)
        i = int(cell["row_id"])
        plan = r.plan
        if not 0 <= i < len(plan.groups):
            raise PreventUpdate
        gr = plan.groups[i]
        line = (f"group {i}: {plural(len(gr), 'op')} {_span(gr)} · DRAM {format_bytes(plan.group_dram[i])} · "
                f"F_β {_buffer_text(plan.group_buffer[i], plan.beta)} · {group_kind(plan, i)}")
        return group_highlight(fg, r, i), line

    app.clientside_callback(MARK_FUSION, Output("fusion-marked", "data"), Input("fusion-marks", "data"),
                            Input("fusion-hl", "data"), Input("fusion-graph", "elements"))
    app.clientside_callback(HOVER_FUSION, Output("fusion-hover", "children"),
                            Input("fusion-graph", "mouseoverNodeData"), State("fusion-marks", "data"))


__all__ = ["FuseOptions", "FusionGraph", "FusionRun", "FusionStore", "MARK_FUSION", "fusion_cards", "fusion_elements",
           "fusion_marks", "forward_only_text", "group_colors", "group_highlight", "group_rows", "group_styles",
           "job_line", "parse_options", "register", "step_details", "step_highlight", "step_rows", "steps_note",
           "store_of", "tab"]
