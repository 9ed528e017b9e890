"""Cytoscape elements and styles for the graph and dominator-tree views (pure, no dash).

Element ids carry a per-graph token (``a3-n42``) so switching graphs always replaces the elements
(and re-runs the layout); ``data.nid`` is the core node id, ``data.group`` a module group path joined
by "/".  Classes: ``op``, ``placeholder``, ``group``, ``bwd`` (backward pass), ``more`` (elision in
the dominator tree) and the overlays ``hot`` (a memory hot-spot at the peak of the current
schedule), ``live`` (a tensor the user picked on the memory curve), ``sel`` (the selected node) and
``found`` (the search box's match, set in the browser).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

from plotly.colors import sample_colorscale, sequential

from core.analysis.dominators import DominatorTree
from core.fmt import format_bytes, plural
from core.ir.graph import Graph, NodeKind

from .figures import short_op
from .modtree import ModuleTree, Path

HEAT_SCALE = sequential.YlOrRd
ZERO_COLOR = "#e5e7eb"
LAYOUT = {"name": "dagre", "rankDir": "TB", "nodeSep": 14, "rankSep": 26, "edgeSep": 6,
          "nodeDimensionsIncludeLabels": True, "animate": False, "fit": True, "padding": 16}
DOM_LAYOUT = {"name": "dagre", "rankDir": "TB", "nodeSep": 12, "rankSep": 22, "animate": False,
              "nodeDimensionsIncludeLabels": True, "fit": True, "padding": 10}
OP_FONT = 12  # label sizes in model units: the views open at a zoom >= 0.75 (modtree.VIEW_W / VIEW_H), so
GROUP_FONT = 13  # labels show >= 9 px on screen
GROUP_CHARS = 24  # longest group label line (longer names are clipped in the middle, their suffix kept)
OP_CHARS = 14  # longest op label
DOM_FULL_MAX = 24  # draw the whole dominator tree up to this many nodes, else a neighbourhood
DOM_UP = 2  # ancestors shown above the selection (the side panel is small: few nodes keep labels legible)
DOM_CHILDREN = 8  # nodes shown below it
DOM_DEPTH = 2  # levels shown below it
DOM_PER_PARENT = 2  # children shown per node further down (the largest subtrees)
DOM_FIRST = 4  # children shown right below the selection


def path_str(path: Path) -> str:
    return "/".join(path)


def str_path(s: str) -> Path:
    return tuple(p for p in s.split("/") if p) if s else ()


def layout_for(elements: list[dict], base: dict) -> dict:
    """The layout to send along with ``elements``.  The browser does not re-run the layout on its own
    (``autoRefreshLayout`` is off: it would wait out a debounce and also fire on class changes); it runs
    it when this dict changes, and the ``key`` changes exactly when the set of nodes does."""
    ids = sorted(e["data"]["id"] for e in elements if "source" not in e["data"])
    return {**base, "key": hashlib.blake2b("\n".join(ids).encode(), digest_size=6).hexdigest()}


def path_table(tree: ModuleTree) -> dict:
    """Node id -> module group path, compact (unique paths plus one index per node), so the browser can
    outline a node hidden inside a collapsed group: its element is the drawn group whose path is a
    prefix of the node's path."""
    paths: list[str] = []
    index: dict[Path, int] = {}
    ids, idx = [], []
    for nid, path in tree.path_of.items():
        i = index.get(path)
        if i is None:
            i = index[path] = len(paths)
            paths.append(path_str(path))
        ids.append(nid)
        idx.append(i)
    return {"paths": paths, "ids": ids, "idx": idx}


def heat_colors(values: dict, scale: list[str] = HEAT_SCALE) -> dict:
    """Key -> hex colour on a log scale of bytes between the smallest and largest positive value."""
    pos = [v for v in values.values() if v > 0]
    if not pos:
        return {k: ZERO_COLOR for k in values}
    lo, hi = math.log10(min(pos)), math.log10(max(pos))
    keys = [k for k, v in values.items() if v > 0]
    fracs = [0.15 + 0.85 * ((math.log10(values[k]) - lo) / (hi - lo) if hi > lo else 1.0) for k in keys]
    cols = sample_colorscale(scale, fracs, colortype="rgb")
    out = {k: ZERO_COLOR for k in values}
    out.update({k: _hex(c) for k, c in zip(keys, cols, strict=True)})
    return out


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` ("#rrggbb")."""
    r, g, b = (int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "#111827" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "#ffffff"


def _hex(rgb: str) -> str:
    if rgb.startswith("#"):
        return rgb
    nums = [int(float(x)) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3]]
    return "#" + "".join(f"{v:02x}" for v in nums)


def clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut in the middle so its suffix survives: the last dotted
    part if it fits ("bert…word_embeddings"), else the last "_" part ("conv…_3"), else its tail."""
    if len(text) <= n:
        return text
    for sep in (".", "_"):
        k = text.rfind(sep)
        suffix = text[k + (sep == "."):] if k > 0 else ""
        if suffix and len(suffix) <= n - 4:
            return text[:n - 1 - len(suffix)] + "…" + suffix
    keep = (n - 1) // 2
    return text[:n - 1 - keep] + "…" + text[-keep:]


def _node_label(g: Graph, nid: int) -> str:
    n = g[nid]
    if n.kind == NodeKind.PLACEHOLDER:
        name = n.name.rpartition(".")[2] if n.target.startswith(("param:", "buffer:")) else n.name
    else:
        name = short_op(n.op)
    return clip(name, OP_CHARS)


def _cls(*names: str | None) -> str:
    return " ".join(n for n in names if n)


def graph_elements(g: Graph, tree: ModuleTree, expanded: set[Path], tok: str, heat: dict[int, int],
                   hot: Iterable[int] = (), selected: int | None = None,
                   live: Iterable[int] = ()) -> list[dict]:
    """The collapsed-by-module view ``expanded`` of ``g`` as cytoscape elements.

    ``heat`` gives bytes per node id (its output storage, or its bytes alive at the peak); a group's
    heat is the sum over its members.  Edges between backward-pass elements are given reversed to the
    layout (class ``rev``, drawn with the arrow at the source end), so the backward pass climbs back
    up beside the forward pass instead of continuing below it.
    """
    vis = tree.visible(expanded)
    hot, live = set(hot), set(live)
    leaf_bytes: dict = {}
    leaf_hot: dict = {}
    leaf_live: set = set()
    for nid, key in vis.items():
        leaf_bytes[key] = leaf_bytes.get(key, 0) + heat.get(nid, 0)
        if nid in hot:
            leaf_hot[key] = leaf_hot.get(key, 0) + 1
        if nid in live:
            leaf_live.add(key)
    colors = heat_colors(leaf_bytes)
    sel_key = vis.get(selected) if selected is not None else None
    phase: dict = {}

    def eid(key) -> str:
        return f"{tok}-n{key[1]}" if key[0] == "n" else f"{tok}-g-{path_str(key[1])}"

    elements: list[dict] = []
    for key in sorted(leaf_bytes, key=_key_order(tree, g)):
        if key[0] == "n":
            nid = key[1]
            node = g[nid]
            phase[key] = tree.phase(tree.path_of[nid])
            data = {"id": eid(key), "nid": nid, "label": _node_label(g, nid), "color": colors[key],
                    "bytes": format_bytes(leaf_bytes[key]), "name": node.name,
                    "module": node.module or "(top level)"}
            base = "placeholder" if node.kind == NodeKind.PLACEHOLDER else "op"
        else:
            path = key[1]
            grp = tree.groups[path]
            phase[key] = tree.phase(path)
            lbl = clip(tree.label(path), GROUP_CHARS)
            count = plural(grp.ops, "op") if grp.ops else plural(grp.size, "input")
            data = {"id": eid(key), "group": path_str(path), "label": f"{lbl}\n{count} · {format_bytes(leaf_bytes[key])}",
                    "color": colors[key], "fg": text_color(colors[key]), "bytes": format_bytes(leaf_bytes[key]),
                    "name": tree.full_name(path),
                    "width": group_width(lbl, count), "members": grp.size,
                    "count": count}
            base = "group"
        elements.append({"data": data, "classes": _cls(
            base, "bwd" if phase[key] == "bwd" else None, "hot" if key in leaf_hot else None,
            "live" if key in leaf_live else None, "sel" if key == sel_key else None)})
    counts: dict[tuple, int] = {}
    for nid in g.nodes:
        b = vis[nid]
        for p in g.preds(nid):
            a = vis[p]
            if a != b:
                counts[(a, b)] = counts.get((a, b), 0) + 1
    order = _key_order(tree, g)
    edges = []
    for i, ((a, b), c) in enumerate(sorted(counts.items(), key=lambda kv: (order(kv[0][0]), order(kv[0][1])))):
        rev = phase.get(a) == "bwd" and phase.get(b) == "bwd"
        src, dst = (b, a) if rev else (a, b)
        edges.append({"data": {"id": f"{tok}-e{i}", "source": eid(src), "target": eid(dst), "count": c},
                      "classes": _cls("multi" if c > 1 else None, "rev" if rev else None)})
    return elements + edges


def group_width(label: str, count: str) -> float:
    """A group box's width in model units: its two label lines at ``GROUP_FONT``."""
    return max(64, 0.6 * GROUP_FONT * max(len(label), len(count) + 11) + 12)


def _key_order(tree: ModuleTree, g: Graph):
    pos = {nid: i for i, nid in enumerate(g.nodes)}

    def order(key):
        if key[0] == "n":
            return pos[key[1]]
        return tree.groups[key[1]].first

    return order


# ---- dominator tree -----------------------------------------------------------------------------
def dom_elements(g: Graph, dt: DominatorTree, children: dict[int, list[int]], sizes: dict[int, int],
                 tok: str, out_bytes: dict[int, int], hot: Iterable[int] = (), selected: int | None = None,
                 live: Iterable[int] = (), full_max: int = DOM_FULL_MAX) -> list[dict]:
    """The dominator tree from the activation input: whole if small, else the neighbourhood of the
    selection (its nearest dominators, itself, its largest children) with elision nodes."""
    hot, live = set(hot), set(live)
    if len(dt.reachable) <= full_max:
        shown = [v for v in g.nodes if v in dt.reachable]
        extra: list[dict] = []
        tree_edges = [(dt.idom[v], v) for v in shown if dt.idom.get(v) is not None]
    else:
        center = selected if selected in dt.reachable else dt.entry
        chain = [center]
        while dt.idom.get(chain[-1]) is not None:
            chain.append(dt.idom[chain[-1]])
        chain.reverse()  # entry ... center
        up = chain[-(DOM_UP + 1):]
        shown = list(up)
        tree_edges = [(a, b) for a, b in zip(up, up[1:], strict=False)]
        extra = []
        if len(chain) > len(up):
            hidden = len(chain) - len(up)
            extra.append({"data": {"id": f"{tok}-d-up", "nid": chain[-(DOM_UP + 2)],
                                   "label": f"⋮ {hidden} more dominators\nup to {g[dt.entry].name}"},
                          "classes": "more"})
            extra.append({"data": {"id": f"{tok}-de-up", "source": f"{tok}-d-up", "target": f"{tok}-d{up[0]}"}})
        # below the centre: the largest subtrees first, a few levels deep
        frontier = [center]
        room = DOM_CHILDREN
        for depth in range(DOM_DEPTH):
            nxt = []
            for v in frontier:
                kids = sorted(children.get(v, []), key=lambda c: (-sizes.get(c, 1), c))
                take = kids[:max(0, min(room, DOM_PER_PARENT if depth else DOM_FIRST))]
                room -= len(take)
                shown += take
                nxt += take
                tree_edges += [(v, c) for c in take]
                if len(kids) > len(take) and depth == 0:
                    mid = f"{tok}-d-more{v}"
                    extra.append({"data": {"id": mid, "label": f"+ {len(kids) - len(take)} more"},
                                  "classes": "more"})
                    extra.append({"data": {"id": f"{tok}-de-more{v}", "source": f"{tok}-d{v}", "target": mid}})
            frontier = nxt
    colors = heat_colors({v: out_bytes.get(v, 0) for v in shown})
    nodes = []
    for v in shown:
        below = sizes.get(v, 1) - 1
        label = _node_label(g, v) + (f"\n▾{below}" if below and len(dt.reachable) > full_max else "")
        nodes.append({"data": {"id": f"{tok}-d{v}", "nid": v, "label": label, "color": colors[v],
                               "name": g[v].name, "bytes": format_bytes(out_bytes.get(v, 0))},
                      "classes": _cls("placeholder" if g[v].kind == NodeKind.PLACEHOLDER else "op",
                                      "hot" if v in hot else None, "live" if v in live else None,
                                      "sel" if v == selected else None,
                                      "entry" if v == dt.entry else None)})
    edges = [{"data": {"id": f"{tok}-de{a}-{b}", "source": f"{tok}-d{a}", "target": f"{tok}-d{b}"}}
             for a, b in tree_edges]
    return nodes + extra + edges


# ---- styles -------------------------------------------------------------------------------------
def stylesheet(dom: bool = False) -> list[dict]:
    return [
        {"selector": "node", "style": {
            "label": "data(label)", "font-size": OP_FONT, "color": "#1f2937", "text-valign": "bottom",
            "text-margin-y": 2, "text-wrap": "wrap", "background-color": "data(color)",
            "border-width": 1, "border-color": "#6b7280", "width": 16, "height": 16,
            "min-zoomed-font-size": 6}},  # below 6 px on screen a label is noise: hidden until zoomed in
        {"selector": "node.op", "style": {"shape": "round-rectangle", "width": 26, "height": 16,
                                          "text-max-width": 80, "text-overflow-wrap": "anywhere"}},
        {"selector": "node.placeholder", "style": {"shape": "ellipse", "width": 11, "height": 11,
                                                   "border-color": "#9ca3af"}},
        {"selector": "node.group", "style": {
            "shape": "round-rectangle", "width": "data(width)", "height": 40, "text-valign": "center",
            "text-halign": "center", "font-size": GROUP_FONT, "border-width": 1.5, "border-color": "#374151",
            "color": "data(fg)",
            "text-max-width": 260}},
        {"selector": "node.bwd", "style": {"border-style": "dashed"}},
        {"selector": "node.more", "style": {
            "shape": "round-rectangle", "background-color": "#f9fafb", "border-style": "dashed",
            "width": 120, "height": 30, "text-valign": "center", "font-size": OP_FONT, "color": "#6b7280",
            "text-max-width": 200}},
        {"selector": "node.entry", "style": {"shape": "diamond", "width": 18, "height": 18}},
        {"selector": "node.hot", "style": {"border-color": "#dc2626", "border-width": 3}},
        # what the selected plan did to an op (or to an op inside a collapsed group)
        {"selector": "node.mk-fission", "style": {"shape": "hexagon", "outline-color": "#7c3aed",
                                                  "outline-width": 3, "outline-offset": 1}},
        {"selector": "node.mk-remat", "style": {"outline-color": "#059669", "outline-width": 3,
                                                "outline-offset": 1}},
        {"selector": "node.mk-swap", "style": {"outline-color": "#d97706", "outline-width": 3,
                                               "outline-offset": 1, "outline-style": "dashed"}},
        {"selector": "node.mk-substitution", "style": {"outline-color": "#0891b2", "outline-width": 3,
                                                       "outline-offset": 1, "outline-style": "double"}},
        {"selector": "node.ft-sel", "style": {"underlay-color": "#7c3aed", "underlay-opacity": 0.35,
                                              "underlay-padding": 6}},
        # an op of the picked F-Tree node's S drawn as itself: its label gets the split dimension
        {"selector": "node.ft-sel[ftlabel]", "style": {"label": "data(ftlabel)", "color": "#5b21b6"}},
        {"selector": "node.live", "style": {
            "border-color": "#2563eb", "border-width": 4, "border-style": "double",
            "underlay-color": "#60a5fa", "underlay-opacity": 0.45, "underlay-padding": 5}},
        {"selector": "node.found", "style": {"underlay-color": "#facc15", "underlay-opacity": 0.7,
                                             "underlay-padding": 8}},
        {"selector": "node.sel", "style": {
            "border-color": "#111827", "border-width": 4, "overlay-color": "#111827",
            "overlay-opacity": 0.12, "overlay-padding": 6, "z-index": 99, "font-weight": "bold"}},
        {"selector": "edge", "style": {
            "width": 1.2, "line-color": "#9ca3af", "target-arrow-color": "#6b7280",
            "target-arrow-shape": "triangle", "arrow-scale": 1.0,
            "curve-style": "bezier"}},
        {"selector": "edge.multi", "style": {"width": "mapData(count, 2, 60, 1.5, 6)"}},
        {"selector": "edge.rev", "style": {"target-arrow-shape": "none", "source-arrow-shape": "triangle",
                                           "source-arrow-color": "#6b7280"}},
    ]


def ftree_stylesheet() -> list[dict]:
    """The F-Tree view: nodes coloured by heat; the selected plan's enabled F-Trans (n > 1) with a thick
    purple border (the colour of the plan's fission marks), the candidates (n = 1) dashed grey."""
    return [
        {"selector": "node", "style": {
            "label": "data(label)", "shape": "round-rectangle", "width": "data(width)", "height": 50,
            "background-color": "data(color)", "color": "data(fg)", "font-size": OP_FONT, "text-wrap": "wrap",
            "text-valign": "center", "text-halign": "center", "text-max-width": 300,
            "border-width": 1.5, "border-color": "#6b7280", "min-zoomed-font-size": 4}},
        {"selector": "node.ft-cand", "style": {"border-style": "dashed"}},
        {"selector": "node.ft-enabled", "style": {"border-color": "#7c3aed", "border-width": 4,
                                                  "font-weight": "bold", "outline-color": "#ddd6fe",
                                                  "outline-width": 3}},
        {"selector": "node.ft-root", "style": {"shape": "ellipse", "background-color": "#f3f4f6",
                                               "color": "#374151", "height": 24, "border-color": "#9ca3af"}},
        {"selector": "node.ft-cur", "style": {"overlay-color": "#111827", "overlay-opacity": 0.14,
                                              "overlay-padding": 5, "underlay-color": "#7c3aed",
                                              "underlay-opacity": 0.35, "underlay-padding": 6, "z-index": 99}},
        {"selector": "edge", "style": {"width": 1.2, "line-color": "#9ca3af", "target-arrow-color": "#6b7280",
                                       "target-arrow-shape": "triangle", "curve-style": "bezier"}},
    ]
