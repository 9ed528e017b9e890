"""The F-Tree view of the side panel: the tree of candidate F-Trans (MAGIS Algorithm 1,
``core.analysis.ftree``) of the imported graph, each node with its heat (Eq. 3) and score (Eq. 4);
the ones the plan selected in the plan bar enables (n > 1) stand out from the candidates (n = 1).
Clicking a node shows its details and outlines its sub-graph S in the computation graph (on the
ops drawn as themselves, with their split dimension, or on the collapsed module groups holding them).

The F-Tree is built once per graph (``FTreeCache``, on a background thread: Algorithm 1 takes about
0.4 s on bert_base and 6 s on btlm_3b), from the traced order as the M-Optimizer builds it; the view
polls until it is there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from dash import Dash, Input, Output, State, ctx, html, no_update
from dash.exceptions import PreventUpdate

from core.analysis.ftree import FISSION_N, FNode, FTree, build_ftree
from core.fmt import format_bytes
from core.ir.graph import Graph, TRef
from core.schedule import get_scheduler
from core.transform.ftree_rules import FTreeMutations

from .cyto import heat_colors, layout_for, text_color
from .figures import short_op
from .state import AppError, AppState, wait_result

log = logging.getLogger("magis.app")
BUILD_WAIT = 1.0  # seconds a callback waits for a graph's F-Tree before saying it is being built (and polling)
FTREE_LAYOUT = {"name": "dagre", "rankDir": "TB", "nodeSep": 14, "rankSep": 34, "animate": False,
                "fit": True, "padding": 10}
MAX_NAMES = 8  # op names listed in the details
FT_FULL_MAX = 12  # draw the whole F-Tree up to this many nodes (the side panel is narrow) ...
FT_TOP = 6  # ... else the hottest nodes, the enabled ones and their ancestors; "▾N" on a node: N more below
ENABLED_TEXT = "enabled (n > 1) in the selected plan"
CANDIDATE_TEXT = "candidate (n = 1)"


# ---- the F-Tree of each graph, built once --------------------------------------------------------------
@dataclass
class BuiltFTree:
    ftree: FTree
    mutations: FTreeMutations  # tells which F-Tree nodes a plan's graph enables, and with which n
    seconds: float


class FTreeCache:
    """Graph id -> its F-Tree, each built once on a daemon thread (one build at a time; a failed build
    is reported once and tried again on the next request).  Keeps the ``max_graphs`` last used."""

    def __init__(self, entry: Callable[[str], object], max_graphs: int = 6) -> None:
        self._entry = entry
        self.max_graphs = max_graphs
        self._lock = threading.Lock()
        self._one_build = threading.Lock()
        self._futures: OrderedDict[str, Future] = OrderedDict()

    def future(self, gid: str) -> Future:
        with self._lock:
            fut = self._futures.get(gid)
            if fut is None:
                fut = self._futures[gid] = Future()
                threading.Thread(target=self._build, args=(gid, fut), name="magis-ftree", daemon=True).start()
            self._futures.move_to_end(gid)
            while len(self._futures) > self.max_graphs:
                self._futures.popitem(last=False)
            return fut

    def _build(self, gid: str, fut: Future) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            with self._one_build:
                g = self._entry(gid).graph
                t0 = time.perf_counter()
                ft = build_ftree(g, get_scheduler("traced").run(g).order)  # as the M-Optimizer does
                built = BuiltFTree(ft, FTreeMutations(ft), time.perf_counter() - t0)
            log.debug("F-Tree of %s: %d nodes in %.2f s", gid, len(ft.nodes), built.seconds)
            fut.set_result(built)
        except BaseException as e:  # noqa: BLE001 -- reported to whoever asks for it
            fut.set_exception(e)

    def get(self, gid: str, wait: float | None = None) -> BuiltFTree | None:
        """The F-Tree of ``gid``, or None while it is still being built after ``wait`` seconds (None:
        wait for it).  AppError if it could not be built."""
        fut = self.future(gid)
        try:
            return wait_result(fut, wait, "no F-Tree")
        except AppError:
            with self._lock:  # the next request builds it again
                if self._futures.get(gid) is fut:
                    del self._futures[gid]
            raise


def cache_of(state: AppState) -> FTreeCache:
    """The F-Tree cache of ``state`` (attached on first use)."""
    c = getattr(state, "ftrees", None)
    if c is None:
        c = state.ftrees = FTreeCache(state.entry, max_graphs=state.max_graphs)
    return c


# ---- which F-Tree nodes a plan enables ---------------------------------------------------------------------
def enabled_from_marks(ftree: FTree, marks: Mapping) -> set[int]:
    """F-Tree nodes every op of whose S the plan marks "fission" (``plans.plan_marks``: keys are
    imported op ids, as ints or as the strings of the ``plan-marks`` store).  A node inside an enabled
    one counts too: the marks do not say which fission node an op went into."""
    fis = {int(k) for k, m in marks.items() if m == "fission"}
    return {f.id for f in ftree.nodes if f.split.nodes and fis.issuperset(f.split.nodes)}


def enabled_in_graph(built: BuiltFTree, plan_graph: Graph) -> dict[int, int]:
    """F-Tree node -> n, for each node the plan's graph has as a fission node with n > 1 (its S and
    split component identify it; nested ones included)."""
    return {fid: e.n for fid, e in built.mutations.enabled(plan_graph).items() if e.n > 1}


# ---- pure builders -----------------------------------------------------------------------------------
def split_dim(g: Graph, f: FNode) -> tuple[int, int, int] | None:
    """(op, output, dim) of the split component on the first op of S: dim >= 0 a tensor dim, < 0 a
    reduce axis (S's parts are summed)."""
    dims = f.split.out_dims
    first = None
    for v in f.split.nodes:
        for j in range(len(g[v].outputs)):
            d = dims.get(TRef(v, j))
            if d is None:
                continue
            if d >= 0:
                return (v, j, d)
            first = first or (v, j, d)
    return first


def dim_text(d: int | None) -> str:
    if d is None:
        return "dim ?"
    return f"dim {d}" if d >= 0 else f"reduce axis {-d}"


def op_dims(g: Graph, f: FNode) -> dict[int, str]:
    """Each op of S -> its split dimension as the computation graph shows it ("dim 0" or "reduce axis
    1", of its first output that has one)."""
    out: dict[int, str] = {}
    for r, d in f.split.out_dims.items():
        if r.node not in out or (d >= 0 and out[r.node].startswith("reduce")):
            out[r.node] = dim_text(d)
    return {v: out.get(v, "") for v in f.split.nodes}


def node_label(g: Graph, f: FNode, n: int | None = 1, below: int = 0) -> str:
    """"#3 · dim 0 · n = 1" over "heat 1.2 GiB" over "56 ops" (n None: enabled, n not known; ``below``:
    nodes of its subtree not drawn, "▾N")."""
    sd = split_dim(g, f)
    d = sd[2] if sd else None
    dim = dim_text(d) if d is None or d >= 0 else f"Σ axis {-d}"
    return (f"#{f.id} · {dim} · " + ("n > 1" if n is None else f"n = {n}")
            + f"\nheat {format_bytes(f.heat)}\n{_ops(len(f.split.nodes))}" + (f" · ▾{below}" if below else ""))


def _ops(k: int) -> str:
    return f"{k} op" if k == 1 else f"{k} ops"


def shown_nodes(ftree: FTree, keep: Iterable[int] = (), open_: Iterable[int] = (), full_max: int = FT_FULL_MAX,
                top: int = FT_TOP) -> set[int]:
    """The F-Tree nodes drawn: all of a small tree; of a larger one the ``top`` hottest, those in
    ``keep`` (the enabled ones), the children of the nodes in ``open_`` (-1: the roots) and the
    ancestors of all of these."""
    nodes = ftree.nodes
    if len(nodes) <= full_max:
        return {f.id for f in nodes}
    shown = {f.id for f in sorted(nodes, key=lambda f: (-f.heat, -f.score, f.id))[:top]}
    shown |= {k for k in keep if 0 <= k < len(nodes)}
    for p in open_:
        shown |= {f.id for f in ftree.roots()} if p == -1 else set(nodes[p].children) if 0 <= p < len(nodes) else set()
    for k in list(shown):
        while nodes[k].parent is not None and nodes[k].parent not in shown:
            k = nodes[k].parent
            shown.add(k)
    return shown


def _below(ftree: FTree, kids: list[int], shown: set[int]) -> int:
    """Nodes under ``kids`` (their subtrees) that are not drawn."""
    n, stack = 0, list(kids)
    while stack:
        k = stack.pop()
        n += k not in shown
        stack.extend(ftree.nodes[k].children)
    return n


def ftree_elements(g: Graph, ftree: FTree, tok: str, enabled: Iterable[int],
                   n_of: Mapping[int, int] | None = None, open_: Iterable[int] = (),
                   full_max: int = FT_FULL_MAX, top: int = FT_TOP) -> list[dict]:
    """The F-Tree as cytoscape elements: one node per F-Tree node (id ``{tok}-f{id}``, ``data.fid``),
    classed ``ft-enabled`` when ``enabled`` holds it, else ``ft-cand``, coloured by heat; edges parent
    -> child; several roots hang under a synthetic "F-Tree" node (class ``ft-root``).  ``n_of`` gives
    the enabled nodes' n where it is known.  A tree of more than ``full_max`` nodes is drawn in part
    (``shown_nodes``): a node with undrawn nodes below says how many ("▾N", ``data.below``); a click
    on it opens its children (``open_``: F-Tree ids, -1 for the synthetic root's)."""
    enabled = set(enabled)
    n_of = n_of or {}
    shown = shown_nodes(ftree, enabled, open_, full_max, top)
    colors = heat_colors({f.id: f.heat for f in ftree.nodes})
    els: list[dict] = []
    for f in ftree.nodes:
        if f.id not in shown:
            continue
        on = f.id in enabled
        n = n_of.get(f.id) if on else 1
        below = _below(ftree, f.children, shown)
        label = node_label(g, f, n, below)
        width = max(70, 7.2 * max(len(s) for s in label.split("\n")) + 14)  # 12-unit font
        els.append({"data": {"id": f"{tok}-f{f.id}", "fid": f.id, "label": label, "color": colors[f.id],
                             "fg": text_color(colors[f.id]), "width": width, "heat": format_bytes(f.heat),
                             "ops": len(f.split.nodes), "n": n, "below": below, "dominator": g[f.dominator].name},
                    "classes": "ft-enabled" if on else "ft-cand"})
    roots = ftree.roots()
    edges = [(f"{tok}-f{f.parent}", f"{tok}-f{f.id}") for f in ftree.nodes if f.parent is not None and f.id in shown]
    if len(roots) > 1:
        below = _below(ftree, [f.id for f in roots], shown)
        label = "F-Tree" + (f" ▾{below}" if below else "")
        els.insert(0, {"data": {"id": f"{tok}-froot", "label": label, "below": below, "width": 14 + 8 * len(label)},
                       "classes": "ft-root"})
        edges = [(f"{tok}-froot", f"{tok}-f{f.id}") for f in roots if f.id in shown] + edges
    els += [{"data": {"id": f"{a}-{b.rpartition('-')[2]}", "source": a, "target": b}} for a, b in edges]
    return els


def _row(k: str, v) -> html.Tr:
    return html.Tr([html.Th(k), html.Td(v)])


def ftree_details(g: Graph, fnode: FNode, n: int | None = None, describe: Callable | None = None) -> html.Div:
    """Everything about one F-Tree node: S (size, first ops), the split dimension, n, heat, score
    (Eq. 4), level and dominator.  ``n``: the selected plan's (None: a candidate, n = 1; 0: enabled,
    n not known); ``describe``: ``DGraph.describe`` of the split component, if given."""
    f = fnode
    s = f.split
    names = [g[v].name for v in s.nodes]
    shown = ", ".join(names[:MAX_NAMES]) + (f" (+{len(names) - MAX_NAMES} more)" if len(names) > MAX_NAMES else "")
    kinds: dict[str, int] = {}
    for v in s.nodes:
        kinds[short_op(g[v].op)] = kinds.get(short_op(g[v].op), 0) + 1
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    sd = split_dim(g, f)
    where = (f"{dim_text(sd[2])} of {g[sd[0]].name} {list(g[sd[0]].outputs[sd[1]].shape)}" if sd else "-")
    divs = s.divisors()
    on = n is not None
    rows = [
        _row("S", f"{_ops(len(s.nodes))}: {shown}"),
        _row("op kinds", ", ".join(f"{k} ×{c}" for k, c in top) + (" …" if len(kinds) > len(top) else "")),
        _row("split dimension", where),
        _row("D (component)", describe(s.comp) if describe is not None else str(s.comp)),
        _row("length", f"{s.length} (n divides it: " + ", ".join(map(str, divs[:8]))
             + (" …" if len(divs) > 8 else "") + ")"),
        _row("n", (f"{n}" if n else "> 1") + f" · {ENABLED_TEXT}" if on else f"1 · {CANDIDATE_TEXT}"),
        _row("heat (Eq. 3)", f"{format_bytes(f.heat)} of hot-spot tensors made under the dominator"),
        _row("score (Eq. 4)", f"{format_bytes(int(f.score)) if f.score >= 0 else f'{f.score:.0f} B'} "
                              f"= (1 − 1/{FISSION_N}) · heat − inputs read from outside that are not hot-spots"),
        _row("level", f"{f.level} (of the score normalised by the largest)"),
        _row("dominator", f"{g[f.dominator].name} ({short_op(g[f.dominator].op)}): S is what it dominates"),
        _row("parent", f"#{f.parent}" if f.parent is not None else "- (a root)"),
        _row("children", ", ".join(f"#{c}" for c in f.children) or "-"),
        _row("inputs · outputs", f"{len(s.inputs)} read from outside ({sum(d is not None for d in s.in_dims)} "
                                 f"sliced, the rest shared) · {len(s.outputs)} leave S (" + ", ".join(
                                     sorted({c for c, _ in s.combine})) + ")"),
    ]
    return html.Div([
        html.H4([html.Span(f"F-Tree node #{f.id}"),
                 html.Span("enabled" if on else "candidate", className="badge ft-badge-on" if on else "badge")],
                id="ftree-title"),
        html.Table(html.Tbody(rows), className="kv"),
        html.Div("S is outlined in purple in the computation graph (the collapsed groups holding its ops, "
                 "or the ops with their split dimension)", className="muted small"),
    ], className="details ftree-details", **{"data-fid": f.id})


def ftree_hint() -> html.Div:
    return html.Div("Click a node of the F-Tree for its sub-graph S and split dimension.", className="muted")


def status_line(built: BuiltFTree, enabled: int, drawn: int | None = None) -> str:
    """What the view shows: how many candidates, enabled, drawn (``drawn``: F-Tree nodes drawn)."""
    ft = built.ftree
    if not ft.nodes:
        return (f"no candidate F-Trans ({ft.rejected} picked sub-graphs were not valid) · Algorithm 1 "
                f"took {built.seconds:.2f} s")
    bad = f" · {ft.rejected} picked sub-graphs were not valid" if ft.rejected else ""
    part = (f" · showing {drawn}: the hottest, the enabled ones and their ancestors (▾N: N more below, "
            f"click the node to show its children)" if drawn is not None and drawn < len(ft.nodes) else "")
    return (f"{len(ft.nodes)} candidate F-Trans, {enabled} enabled in the selected plan{part}{bad} · "
            f"Algorithm 1 took {built.seconds:.2f} s")


# ---- in the browser --------------------------------------------------------------------------------------
SIDE_VIEW = """function(view) {
    const ft = view === "ftree";
    setTimeout(() => {  // a cytoscape shown again has the size it had when hidden: fix and fit it
        const root = document.getElementById(ft ? "ftree" : "domtree");
        if (!root) { return; }
        const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
        if (el) { el._cyreg.cy.resize(); el._cyreg.cy.fit(undefined, 10); }
    }, 30);
    return [ft ? {display: "none"} : {}, ft ? {} : {display: "none"}];
}"""

# S of the F-Tree node picked: outline its ops in the graph (or the collapsed groups holding them, as
# MARK_PLAN does), give the ops drawn as themselves their split dim, and mark the node in the F-Tree
MARK_FTREE = """function(sel, _els, _fels, view, table) {
    function cyOf(id) {
        const root = document.getElementById(id);
        if (!root) { return null; }
        const el = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy);
        return el ? el._cyreg.cy : null;
    }
    const on = sel && view === "ftree" && table && sel.gid === table.gid;
    const fcy = cyOf("ftree");
    if (fcy) {
        fcy.nodes(".ft-cur").removeClass("ft-cur");
        if (on) { fcy.nodes().filter(x => x.data("fid") === sel.fid).addClass("ft-cur"); }
    }
    const cy = cyOf("graph");
    if (!cy) { return window.dash_clientside.no_update; }
    const pathOf = new Map();
    if (on) { table.ids.forEach((id, i) => pathOf.set(id, table.paths[table.idx[i]])); }
    let n = 0;
    cy.batch(() => {
        cy.nodes(".ft-sel").removeClass("ft-sel");
        if (!on) { return; }
        const byNid = new Map(), groups = [];
        cy.nodes().forEach(x => {
            const d = x.data();
            if (d.nid !== undefined && d.nid !== null && !x.hasClass("more")) { byNid.set(String(d.nid), x); }
            else if (d.group !== undefined) { groups.push([d.group, x]); }
        });
        for (const [nid, dim] of Object.entries(sel.dims)) {
            let x = byNid.get(nid);
            if (x) {
                x.data("ftlabel", dim ? x.data("label") + "\\n÷ " + dim : x.data("label"));
            } else {
                const p = pathOf.get(Number(nid));
                const hit = p === undefined ? null : groups.find(([g]) => p === g || p.startsWith(g + "/"));
                x = hit ? hit[1] : null;
            }
            if (x && !x.hasClass("ft-sel")) { x.addClass("ft-sel"); n += 1; }
        }
    });
    return {gid: sel ? sel.gid : null, fid: on ? sel.fid : null, marked: n};
}"""


# ---- callbacks ---------------------------------------------------------------------------------------------
def register(app: Dash, state: AppState, guarded, show_message) -> None:
    cache = cache_of(state)

    def for_gid(store, gid):
        return store if isinstance(store, dict) and store.get("gid") == gid else None

    def plan_enabled(gid: str, built: BuiltFTree, marks) -> dict[int, int | None]:
        """F-Tree node -> n (None: not known) of the nodes the selected plan enables: from its
        graph when its view is at hand, else from the marks (``enabled_from_marks``)."""
        mk = for_gid(marks, gid)
        if not mk:
            return {}
        try:
            if state.plans.frontier(gid).version == mk.get("version"):
                v = state.plans.view(gid, mk["key"], wait=0)
                if v is not None:
                    return dict(enabled_in_graph(built, v.graph))
        except Exception as e:  # noqa: BLE001 -- the marks still tell
            log.debug("plan view of %s: %s", gid, e)
        return dict.fromkeys(enabled_from_marks(built.ftree, mk.get("marks") or {}))

    app.clientside_callback(SIDE_VIEW, Output("domtree-box", "style"), Output("ftree-box", "style"),
                            Input("side-view", "value"))

    @app.callback(Output("ftree", "elements"), Output("ftree", "layout"), Output("ftree-status", "children"),
                  Output("ftree-poll", "disabled"), Output("ftree-drawn", "data"),
                  Input("model", "value"), Input("plan-marks-ftree", "data"), Input("side-view", "value"),
                  Input("ftree-open", "data"), Input("ftree-poll", "n_intervals"), State("ftree-drawn", "data"),
                  prevent_initial_call=True)
    @guarded(5)
    def on_ftree(gid, marks, view, opened, _n, drawn):
        # built and drawn only while the F-Tree view is shown (Algorithm 1 takes seconds on big graphs)
        if view != "ftree":
            if drawn and drawn.get("gid") != gid:
                return [], no_update, "", True, None
            raise PreventUpdate
        if drawn and drawn.get("gid") == gid and drawn.get("error") and ctx.triggered_id in ("plan-marks-ftree",
                                                                                              "ftree-poll"):
            raise PreventUpdate  # not again for every plan picked
        entry = state.entry(gid)
        try:
            built = cache.get(gid, wait=BUILD_WAIT)
        except AppError as e:  # said once; the next model change or view switch tries again
            show_message(f"{state.label(gid)}: {e}")
            return [], FTREE_LAYOUT, str(e), True, {"gid": gid, "error": str(e)}
        if built is None:
            stale = bool(drawn) and drawn.get("gid") != gid
            return ([] if stale else no_update), no_update, f"building the F-Tree of {state.label(gid)} ...", \
                False, (None if stale else no_update)
        on = plan_enabled(gid, built, marks)
        op = sorted(for_gid(opened, gid)["open"]) if for_gid(opened, gid) else []
        key = {"gid": gid, "tok": entry.tok, "enabled": sorted([k, v] for k, v in on.items()), "open": op}
        if key == drawn:
            return no_update, no_update, no_update, True, no_update
        els = ftree_elements(entry.graph, built.ftree, entry.tok, on, {k: v for k, v in on.items() if v}, op)
        n = sum(1 for e in els if "fid" in e["data"])
        return els, layout_for(els, FTREE_LAYOUT), status_line(built, len(on), n), True, key

    # a click on a node with undrawn nodes below it also draws its children
    @app.callback(Output("ftree-open", "data"), Input("ftree", "tapNodeData"), State("model", "value"),
                  State("ftree-open", "data"), prevent_initial_call=True)
    def on_ftree_open(tap, gid, opened):
        if not tap or not tap.get("below") or not str(tap.get("id", "")).startswith(state.entry(gid).tok + "-"):
            raise PreventUpdate
        cur = for_gid(opened, gid)["open"] if for_gid(opened, gid) else []
        return {"gid": gid, "open": sorted(set(cur) | {int(tap.get("fid", -1))})}

    @app.callback(Output("ftree-info", "children"), Output("ftree-s", "data"),
                  Input("ftree", "tapNodeData"), Input("model", "value"), Input("plan-marks-ftree", "data"),
                  State("ftree-s", "data"), prevent_initial_call=True)
    @guarded(2)
    def on_ftree_pick(tap, gid, marks, cur):
        trig = ctx.triggered_id
        if trig == "model":
            return ftree_hint(), None
        entry = state.entry(gid)
        if trig == "ftree":
            if not tap or not str(tap.get("id", "")).startswith(entry.tok + "-"):
                raise PreventUpdate
            if "fid" not in tap:  # the synthetic root
                return ftree_hint(), None
            fid = int(tap["fid"])
        else:  # the plan changed: the picked node's n may have
            if not for_gid(cur, gid):
                raise PreventUpdate
            fid = cur["fid"]
        built = cache.get(gid, wait=BUILD_WAIT)
        if built is None or not 0 <= fid < len(built.ftree.nodes):
            raise PreventUpdate
        f = built.ftree.nodes[fid]
        on = plan_enabled(gid, built, marks)
        info = ftree_details(entry.graph, f, (on[fid] or 0) if fid in on else None, built.ftree.dgraph.describe)
        if trig != "ftree":
            return info, no_update
        return info, {"gid": gid, "fid": fid, "dims": {str(v): d for v, d in op_dims(entry.graph, f).items()}}

    app.clientside_callback(MARK_FTREE, Output("ftree-marked", "data"), Input("ftree-s", "data"),
                            Input("graph", "elements"), Input("ftree", "elements"), Input("side-view", "value"),
                            State("paths", "data"))
    register_search(app, state, guarded)


# ---- the computation graph's search box (layout.graph_panel; it sits with the graph views' callbacks) ----
def register_search(app: Dash, state: AppState, guarded) -> None:
    """Typing in the search box finds a node, tensor or module by name (``ModuleTree.find``), expands
    the view so it is drawn, selects a node (the details and the dominator tree follow), and the browser
    centres and highlights it (``magisFind`` in assets/cyfix.js)."""

    @app.callback(Output("view", "data", allow_duplicate=True), Output("selected", "data", allow_duplicate=True),
                  Output("search-hit", "data"), Output("graph-search-note", "children"),
                  Input("graph-search", "value"), State("model", "value"), State("view", "data"),
                  prevent_initial_call=True)
    @guarded(4)
    def on_search(query, gid, view):
        if not query or not str(query).strip():
            return no_update, no_update, None, ""
        entry = state.entry(gid)
        tree = entry.tree
        key, n = tree.find(str(query))
        if key is None:
            return no_update, no_update, None, f"no node, tensor or module matches “{query}”"
        expanded = {tuple(p for p in s.split("/") if p) for s in (view or {}).get("expanded", [])} \
            if isinstance(view, dict) and view.get("gid") == gid else tree.initial_expanded()
        more = f" (first of {n} matches)" if n > 1 else ""
        if key[0] == "n":
            nid = key[1]
            new = tree.reveal(expanded, nid)
            hit = {"gid": gid, "tok": entry.tok, "nid": nid}
            sel = {"gid": gid, "nid": nid}
            note = f"found {entry.graph[nid].name} ({short_op(entry.graph[nid].op)}){more}"
        else:
            new = tree.show_group(expanded, key[1])
            hit = {"gid": gid, "tok": entry.tok, "group": "/".join(key[1])}
            sel = no_update
            note = f"found module {tree.full_name(key[1])}{more}"
        out_view = {"gid": gid, "expanded": sorted("/".join(p) for p in new)} if new != expanded else no_update
        return out_view, sel, hit, note

    app.clientside_callback("function(hit) { if (window.magisFind) { window.magisFind(hit); } return null; }",
                            Output("graph-search-note", "title"), Input("search-hit", "data"),
                            prevent_initial_call=True)


__all__ = ["BuiltFTree", "FTreeCache", "cache_of", "enabled_from_marks", "enabled_in_graph", "ftree_details",
           "ftree_elements", "op_dims", "register", "shown_nodes", "split_dim"]
