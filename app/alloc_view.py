"""The memory pool of a SwapAdvisor plan, in the Swaps tab (``core.search.peers.swapadvisor.pool_occupancy``).

SwapAdvisor (Huang et al. 2020, section 4.2) holds the swappable tensors in a pool of fixed-size
objects grouped in size classes.  This view draws what the plan chose and how the planner used it:

* a table of the size classes: the tensor sizes of each class, its object size, its object count
  (CNT) and bytes, how many of its objects the step uses and how many tensors live in it;
* the *object occupancy* chart: one row per object of each class (grouped by class, labelled
  ``c<k> obj <j>``), on the simulated time axis of the swap timeline (ms), a bar for each stay of a
  tensor in the object (made on the device, or brought back by a swap-in), and below each class's
  objects the times its tensors spend on the host, hatched, packed into as few rows as overlap;
* one summary line: the pool's bytes, the tensors that are never evicted and the residents against
  the memory limit.

Figure builders are pure functions of the core result; ``pool_of`` computes that result once per
point view (it runs the planner again: a fraction of a second on the large graphs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from core.cost import AnalyticCost
from core.fmt import format_bytes, plural
from core.ir.graph import Graph
from core.search.peers.swapadvisor import PoolOccupancy, pool_occupancy
from core.search.plan import PlanError

from .plan_store import PointView

COLORS = {"made": "#0d9488", "loaded": "#2563eb", "host": "#f59e0b", "host_fill": "rgba(245, 158, 11, 0.18)"}
BAR_WIDTH = 0.78
ROW_PX = 16  # height of one row of the occupancy chart
MAX_ROWS = 400  # rows drawn at most (a larger pool: the first objects of each class, a note says so)
POOLS_KEPT = 8
CLASS_COLUMNS = [
    {"name": "class", "id": "class"},
    {"name": "tensor sizes", "id": "sizes"},
    {"name": "object size", "id": "object"},
    {"name": "objects (CNT)", "id": "count"},
    {"name": "bytes", "id": "bytes"},
    {"name": "objects used", "id": "used"},
    {"name": "tensors", "id": "tensors"},
    {"name": "swap-ins", "id": "loads"},
]

_pools: OrderedDict[int, tuple[PointView, PoolOccupancy | str]] = OrderedDict()
_pools_lock = threading.Lock()


def has_allocation(v: PointView) -> bool:
    """Whether the point's plan carries a memory-pool allocation (a SwapAdvisor plan)."""
    return isinstance(v.plan.stats.get("allocation"), dict)


def pool_of(v: PointView, imported: Graph, device: str) -> PoolOccupancy | str:
    """The pool of point ``v`` (``pool_occupancy`` on the imported graph with the device's analytic
    cost), or the one line saying why it cannot be drawn; remembered for the last few views."""
    with _pools_lock:
        hit = _pools.get(id(v))
        if hit is not None and hit[0] is v:
            _pools.move_to_end(id(v))
            return hit[1]
    try:
        out: PoolOccupancy | str = pool_occupancy(imported, v.plan, AnalyticCost(device))
    except PlanError as e:
        out = str(e)
    with _pools_lock:
        _pools[id(v)] = (v, out)
        while len(_pools) > POOLS_KEPT:
            _pools.popitem(last=False)
    return out


# ---- the size classes ----------------------------------------------------------------------------------
def used_objects(pool: PoolOccupancy) -> list[int]:
    """Per class the objects the step uses: one more than the highest object a tensor stays in (the
    planner takes a class's objects in order, so the unused ones are its last)."""
    used = [0] * pool.allocation.classes
    for x in pool.stays:
        used[x.cls] = max(used[x.cls], x.obj + 1)
    return used


def class_rows(pool: PoolOccupancy) -> list[dict]:
    """One row per size class (``CLASS_COLUMNS``)."""
    a = pool.allocation
    obj = a.object_sizes()
    used = used_objects(pool)
    sizes: list[list[int]] = [[] for _ in obj]
    for s, c in zip(a.sizes, a.cls, strict=True):
        sizes[c].append(s)
    tensors: list[set[int]] = [set() for _ in obj]
    loads = [0] * len(obj)
    for x in pool.stays:
        tensors[x.cls].add(x.tensor)
        loads[x.cls] += x.loaded
    rows = []
    for k in range(a.classes):
        ss = sizes[k]
        span = format_bytes(ss[0]) if len(ss) == 1 else f"{format_bytes(ss[0])} – {format_bytes(ss[-1])} ({len(ss)} sizes)"
        rows.append({"class": f"c{k}", "sizes": span, "object": format_bytes(obj[k]), "count": a.cnt[k],
                     "bytes": format_bytes(a.cnt[k] * obj[k]), "used": used[k], "tensors": len(tensors[k]),
                     "loads": loads[k]})
    return rows


def pool_summary(pool: PoolOccupancy) -> str:
    """One line: the pool (classes, objects, bytes), what lives next to it, and the total against the
    memory limit."""
    a = pool.allocation
    total = pool.device_bytes
    text = (f"memory pool: {plural(a.classes, 'size class', 'size classes')}, {plural(sum(a.cnt), 'object')}, "
            f"{format_bytes(pool.pool_bytes)} + {format_bytes(pool.pinned_bytes)} never evicted + "
            f"{format_bytes(pool.resident_bytes)} inputs and weights = {format_bytes(total)}")
    if pool.limit:
        text += f" of the {format_bytes(pool.limit)} limit ({total / pool.limit * 100:.0f}%)"
    return text


# ---- the occupancy chart ----------------------------------------------------------------------------------
def host_lanes(pool: PoolOccupancy) -> tuple[list[int], list[int]]:
    """The host stays packed per class into rows: (the lane of each of ``pool.host``, lanes per class);
    a stay goes to the first lane of its class free by its start."""
    ends: list[list[float]] = [[] for _ in range(pool.allocation.classes)]
    lane = [0] * len(pool.host)
    for i in sorted(range(len(pool.host)), key=lambda i: (pool.host[i][2], pool.host[i][3], i)):
        _t, c, s, e = pool.host[i]
        j = next((j for j, end in enumerate(ends[c]) if end <= s), len(ends[c]))
        if j == len(ends[c]):
            ends[c].append(e)
        else:
            ends[c][j] = e
        lane[i] = j
    return lane, [len(x) for x in ends]


def occupancy_rows(pool: PoolOccupancy, max_rows: int = MAX_ROWS
                   ) -> tuple[dict[tuple[int, str, int], int], list[str], int]:
    """Rows of the chart, top to bottom: per class its used objects, then its host lanes.  Returns
    ((class, "obj" | "host", index) -> row, the row labels, rows left out beyond ``max_rows``)."""
    used = used_objects(pool)
    _lane, lanes = host_lanes(pool)
    rows: dict[tuple[int, str, int], int] = {}
    labels: list[str] = []
    left = 0
    for k in range(pool.allocation.classes):
        for kind, n in (("obj", used[k]), ("host", lanes[k])):
            for j in range(n):
                if len(labels) >= max_rows:
                    left += 1
                    continue
                rows[(k, kind, j)] = len(labels)
                labels.append(f"c{k} {kind} {j}")
    return rows, labels, left


def _ms(t: float) -> float:
    return t * 1e3


def _at(pool: PoolOccupancy, pos: int, step_of: Mapping[int, int] | None) -> str:
    """The op at schedule position ``pos``, with its step in the plan's schedule when known."""
    name = pool.op_names[pos]
    step = step_of.get(pool.op_ids[pos]) if step_of is not None else None
    return f"<i>{name}</i>" + (f" (step {step})" if step is not None else "")


def stay_hover(pool: PoolOccupancy, x, step_of: Mapping[int, int] | None = None) -> str:
    """Hover text of one stay: the tensor, its bytes, its object, from which op to which."""
    obj = pool.allocation.object_sizes()[x.cls]
    came = "swapped in for" if x.loaded else "made by"
    went = {"dead": "last read by", "out": "swapped out after", "dropped": "dropped (host copy kept) after"}[x.until]
    return (f"<b>{pool.tensor_names[x.tensor]}</b> · {format_bytes(pool.tensor_bytes[x.tensor])}<br>"
            f"class c{x.cls}, object {x.obj} ({format_bytes(obj)})<br>"
            f"from: {came} {_at(pool, x.first, step_of)}<br>to: {went} {_at(pool, x.last, step_of)}<br>"
            f"{_ms(x.start):.3f}–{_ms(x.end):.3f} ms")


def _bars(meta: str, name: str, rows: list[int], spans: list[tuple[float, float]], hover: list[str],
          custom: list[list[int]], marker: dict) -> dict:
    return {"type": "bar", "orientation": "h", "meta": meta, "name": name, "y": rows,
            "base": [_ms(s) for s, _e in spans], "x": [_ms(e - s) for s, e in spans], "width": BAR_WIDTH,
            "marker": marker, "customdata": custom, "hovertext": hover,
            "hovertemplate": "%{hovertext}<extra></extra>", "textposition": "none"}


def occupancy_figure(pool: PoolOccupancy, step_of: Mapping[int, int] | None = None, device: str = "",
                     end: float | None = None, max_rows: int = MAX_ROWS) -> dict:
    """The object occupancy chart of ``pool`` (a plain-dict plotly figure): a bar per stay of a tensor
    in an object (``customdata``: tensor, class, object), hatched bars for its times on the host
    (``customdata``: tensor, class, lane); x is the simulated time in ms up to ``end`` seconds
    (default: the plan's latency), ``step_of`` maps an op's node id to its step for the hover."""
    rows, labels, left = occupancy_rows(pool, max_rows)
    data: list[dict] = []
    for loaded, meta, name in ((False, "stay-made", "in an object: made on the device"),
                               (True, "stay-loaded", "in an object: swapped in")):
        xs = [x for x in pool.stays if x.loaded == loaded and (x.cls, "obj", x.obj) in rows]
        if not xs:
            continue
        color = COLORS["loaded" if loaded else "made"]
        data.append(_bars(meta, name, [rows[(x.cls, "obj", x.obj)] for x in xs], [(x.start, x.end) for x in xs],
                          [stay_hover(pool, x, step_of) for x in xs], [[x.tensor, x.cls, x.obj] for x in xs],
                          {"color": color, "line": {"color": "white", "width": 1}}))
    lane, _lanes = host_lanes(pool)
    hs = [(h, j) for h, j in zip(pool.host, lane, strict=True) if (h[1], "host", j) in rows]
    if hs:
        hover = [f"<b>{pool.tensor_names[t]}</b> · {format_bytes(pool.tensor_bytes[t])}<br>on the host (class c{c})"
                 f"<br>{_ms(s):.3f}–{_ms(e):.3f} ms" for (t, c, s, e), _j in hs]
        data.append(_bars("host", "on the host (swapped out)", [rows[(h[1], "host", j)] for h, j in hs],
                          [(h[2], h[3]) for h, _j in hs], hover, [[h[0], h[1], j] for h, j in hs],
                          {"color": COLORS["host_fill"], "line": {"color": COLORS["host"], "width": 1},
                           "pattern": {"shape": "/", "fgcolor": COLORS["host"], "size": 6, "solidity": 0.3}}))
    shapes = []
    first: dict[int, int] = {}
    for (k, _kind, _j), r in rows.items():
        first[k] = min(first.get(k, r), r)
    for r in sorted(first.values()):  # a dotted line above each class but the first
        if r > 0:
            shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": r - 0.5,
                           "y1": r - 0.5, "line": {"color": "#9ca3af", "width": 1, "dash": "dot"}})
    notes = []
    if left:
        notes.append({"xref": "paper", "yref": "paper", "x": 1, "y": 1, "xanchor": "right", "yanchor": "bottom",
                      "showarrow": False, "font": {"size": 11, "color": "#6b7280"},
                      "text": f"{plural(left, 'more row')} (objects of the larger classes) not drawn"})
    if not pool.stays:
        notes.append({"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
                      "font": {"size": 11, "color": "#6b7280"}, "text": "no tensor lives in the pool"})
    stop = pool.latency if end is None else end
    n = max(len(labels), 1)
    return {"data": data, "layout": {
        "template": "plotly_white", "barmode": "overlay", "hovermode": "closest", "bargap": 0,
        "height": occupancy_height(n), "margin": {"l": 90, "r": 10, "t": 30, "b": 45},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "font": {"size": 11}},
        "xaxis": {"title": {"text": f"simulated time (ms{', ' + device if device else ''})"},
                  "range": [0, _ms(stop) * 1.01 if stop else 1], "zeroline": False, "showspikes": True,
                  "spikemode": "across", "spikethickness": 1, "spikecolor": "#999", "spikedash": "dot"},
        "yaxis": {"tickvals": list(range(len(labels))), "ticktext": labels, "range": [n - 0.5, -0.5],
                  "fixedrange": True, "showgrid": False, "zeroline": False, "tickfont": {"size": 10}},
        "shapes": shapes, "annotations": notes}}


def occupancy_height(rows: int) -> int:
    """Pixels of the chart for ``rows`` rows (the axis and the legend below them included)."""
    return max(220, ROW_PX * rows + 90)


def step_index(v: PointView) -> dict[int, int]:
    """Node id -> its step in the point's schedule."""
    return {nid: i for i, nid in enumerate(v.sim.order)}


__all__ = ["CLASS_COLUMNS", "class_rows", "has_allocation", "host_lanes", "occupancy_figure", "occupancy_height",
           "occupancy_rows", "pool_of", "pool_summary", "stay_hover", "step_index", "used_objects"]
