"""HTML fragments of the panels (summary cards, node details, live tensors): pure functions of core
results returning dash components."""

from __future__ import annotations

from collections.abc import Sequence

from dash import html

from core.analysis.dominators import DominatorTree
from core.analysis.lifetimes import Storage
from core.cost import DEVICES
from core.fmt import format_bytes, plural
from core.ir.graph import Graph, NodeKind, TRef

from .figures import fmt_seconds, short_op, tensor_name
from .state import Analysis


def message(text: str, kind: str = "error") -> html.Div:
    return html.Div([html.Span(text, className="msg-text"),
                     html.Button("×", id="msg-close", className="msg-close", n_clicks=0, title="dismiss")],
                    className=f"msg msg-{kind}", role="alert" if kind == "error" else "status")


def details_hint() -> html.Div:
    return html.Div("Click an op in the graph, the dominator tree or the hot-spot table.", className="muted")


def _card(title: str, value: str, sub: str = "", id_: str | None = None, kind: str = "") -> html.Div:
    kw = {"id": id_} if id_ else {}
    return html.Div([html.Div(title, className="card-title"), html.Div(value, className="card-value", **kw),
                     html.Div(sub, className="card-sub")], className=f"card {kind}".strip())


def summary_cards(label: str, g: Graph, base: Analysis, cur: Analysis, device: str) -> list:
    ops = len(g.ops())
    ph = len(g.placeholders())
    delta = (cur.sim.peak - base.sim.peak) / base.sim.peak * 100 if base.sim.peak else 0.0
    mode = g.meta.get("mode", "")
    n_hot = sum(1 for s in cur.hot if s.alloc >= 0)
    return [
        _card("model", label, f"{mode} graph" if mode else g.name, kind="model"),
        _card("nodes", plural(ops, "op"), f"+ {ph:,} inputs & weights"),
        _card("weights", format_bytes(g.weight_bytes()), "parameters, buffers, optimizer state"),
        _card("baseline peak", format_bytes(base.sim.peak), "traced (PyTorch) order", id_="baseline-peak"),
        _card(f"peak · {cur.name}", format_bytes(cur.sim.peak),
              "same as baseline" if cur.name == base.name else f"{delta:+.2f}% vs traced",
              id_="schedule-peak", kind="peak"),
        _card(f"est. latency · {device}", fmt_seconds(cur.sim.latency), f"{cur.name} schedule, analytic model",
              id_="latency"),
        _card("hot-spots", f"{n_hot}", f"tensors alive at the peak ({format_bytes(sum(s.nbytes for s in cur.hot if s.alloc >= 0))})"),
    ] + fit_card(cur.sim.peak, device)


def fit_card(peak: int, device: str) -> list:
    """A notice when the peak is above the device's memory: "does not fit on DEVICE (x GiB over)"."""
    cap = DEVICES[device].memory_bytes
    if peak <= cap:
        return []
    return [_card("does not fit", f"does not fit on {device} ({format_bytes(peak - cap)} over)",
                  f"peak {format_bytes(peak)} > {format_bytes(cap)} of device memory", id_="no-fit",
                  kind="nofit")]


def _row(k: str, v) -> html.Tr:
    return html.Tr([html.Th(k), html.Td(v)])


def node_details(g: Graph, nid: int, a: Analysis | None, dt: DominatorTree | None) -> html.Div:
    """Everything about one node: op, module, outputs (shape, dtype, bytes), lifetime under the
    current schedule, inputs/users and its immediate dominator."""
    n = g[nid]
    rows = [_row("name", n.name), _row("op", n.op), _row("module", n.module or "(top level)")]
    if n.target:
        rows.append(_row("target", n.target))
    if a is not None and nid in a.step_of:
        i = a.step_of[nid]
        rows.append(_row("step", f"{i} of {len(a.schedule.order)} ({a.name})"))
        rows.append(_row("simulated", f"{fmt_seconds(a.sim.start[i])} → {fmt_seconds(a.sim.end[i])}"))
    out_rows = []
    for j, t in enumerate(n.outputs):
        ref = TRef(nid, j)
        life = "-"
        where = ""
        if a is not None:
            root = g.storage_root(ref)
            s = a.storage_of.get(root)
            if s is not None:
                life = "resident (whole step)" if s.alloc < 0 else f"steps {s.alloc} → {s.free}"
                if root != ref:
                    where = f"view of {tensor_name(g, s)}"
                if s.alloc >= 0 and s.root in a.hot_roots:
                    where = (where + " · " if where else "") + "hot-spot"
        out_rows.append(html.Tr([html.Td(f"#{j}"), html.Td("×".join(map(str, t.shape)) or "scalar"),
                                 html.Td(t.dtype), html.Td(t.kind.value),
                                 html.Td(format_bytes(t.nbytes) if t.alias is None else "0 (view)"),
                                 html.Td(life), html.Td(where)]))
    outputs = html.Table([html.Thead(html.Tr([html.Th(h) for h in
                                              ("out", "shape", "dtype", "kind", "bytes", "alive", "")])),
                          html.Tbody(out_rows)], className="kv outputs")
    preds = [g[p].name for p in g.preds(nid)]
    users = [g[u].name for u in g.users(nid)]
    more = [_row("inputs", _names(preds)), _row("users", _names(users))]
    if dt is not None:
        if nid == dt.entry:
            more.append(_row("dominator", "entry of the dominator tree (activation input)"))
        elif nid in dt.reachable and dt.idom.get(nid) is not None:
            more.append(_row("dominator", g[dt.idom[nid]].name))
        else:
            more.append(_row("dominator", "not reachable from the activation input"))
    kind = "input / weight" if n.kind == NodeKind.PLACEHOLDER else n.kind.value
    return html.Div([html.H4([html.Span(short_op(n.op) if n.kind != NodeKind.PLACEHOLDER else n.name),
                              html.Span(kind, className="badge")], id="details-title"),
                     html.Table(html.Tbody(rows), className="kv"), outputs,
                     html.Table(html.Tbody(more), className="kv")], className="details", **{"data-nid": nid})


def _names(names: list[str], limit: int = 8) -> str:
    if not names:
        return "-"
    s = ", ".join(names[:limit])
    return s + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def live_details(g: Graph, a: Analysis, step: int, live: Sequence[Storage], limit: int = 10) -> html.Div:
    """The tensors alive during ``step`` (``MemoryProfile.live_at``): the largest produced by the
    schedule first, then one line for the inputs and weights held for the whole step."""
    mem = a.profile
    node = g[mem.order[step]]
    made = [s for s in live if s.alloc >= 0]
    held = [s for s in live if s.alloc < 0]
    rows = [html.Tr([html.Td(format_bytes(s.nbytes)), html.Td(tensor_name(g, s)), html.Td(s.kind),
                     html.Td(f"{s.alloc} → {s.free}")]) for s in made[:limit]]
    if len(made) > limit:
        rows.append(html.Tr([html.Td(format_bytes(sum(s.nbytes for s in made[limit:]))),
                             html.Td(f"{len(made) - limit} smaller tensors"), html.Td(""), html.Td("")]))
    if held:
        rows.append(html.Tr([html.Td(format_bytes(sum(s.nbytes for s in held))),
                             html.Td(f"{len(held)} inputs & weights"), html.Td("resident"), html.Td("whole step")]))
    return html.Div([
        html.H4(f"live at step {step} · {a.name}", id="live-title"),
        html.Div(f"running {short_op(node.op)} ({node.name}); {format_bytes(mem.step_bytes[step])} live"
                 + (" — the peak" if step in mem.peak_steps else ""), className="muted"),
        html.Table([html.Thead(html.Tr([html.Th("bytes"), html.Th("tensor"), html.Th("kind"), html.Th("steps")])),
                    html.Tbody(rows)], className="kv live-table"),
        html.Div("the five largest produced tensors are outlined blue in the graph", className="muted"),
    ], className="live")
