"""``Graph.lint``: every invariant of the IR, checked from scratch.

The graph keeps use lists and per-node input caches up to date on every primitive edit; lint
recomputes them and compares, so an in-place mutation of ``node.args`` (which bypasses the
primitives) is found.  It also checks the contracts of the node kinds that transformations create:

* a recomputed copy (``recompute_of``) has the op, arguments and output tensors of its original
  (arguments compared by value: through recomputed copies and swaps);
* STORE reads one device tensor and writes one host tensor of the same shape and dtype; LOAD reads
  one host tensor and writes one device tensor of the same shape and dtype;
* FISSION (MAGIS section 4.2): the sub-graph's placeholders match the node's tensor inputs one for
  one -- dtype equal, shape equal with dim ``in_dims[i]`` divided by ``n`` (``None``: shared, whole
  shape) -- and its outputs match the node's outputs through ``out_combine``: ``("cat", d)`` is the
  part shape with dim d multiplied by ``n``, ``("sum", None)`` the same shape.
"""

from __future__ import annotations

from typing import Any

from .topo import kahn_order
from .types import COMBINES, GraphError, NodeKind, TensorMeta, TRef, map_refs


def lint_graph(g: Any, limit: int | None = None) -> list[str]:
    out: list[str] = []

    def bad(msg: str) -> bool:
        out.append(msg)
        return limit is not None and len(out) >= limit

    nodes = g.nodes
    dangling = False
    uses: dict[int, dict[int, int]] = {}
    for key, n in nodes.items():
        name = repr(n.name)
        if key != n.id and bad(f"node {name} is stored under id {key} but has id {n.id}"):
            return out
        if n._graph is not g and bad(f"node {name} does not know its graph"):
            return out
        ins = n.scan_inputs()
        if ins != n.inputs() and bad(f"node {name}: arguments were changed in place (stale inputs)"):
            return out
        if n.kind == NodeKind.PLACEHOLDER and ins and bad(f"placeholder {name} has inputs"):
            return out
        for r in ins:
            uses.setdefault(r.node, {})
            uses[r.node][n.id] = uses[r.node].get(n.id, 0) + 1
            p = nodes.get(r.node)
            if p is None:
                dangling = True
                if bad(f"node {name} uses missing node id {r.node}"):
                    return out
            elif not 0 <= r.index < len(p.outputs):
                dangling = True
                if bad(f"node {name} uses output {r.index} of {p.name!r}, which has {len(p.outputs)} outputs"):
                    return out
        for t in n.outputs:
            if t.alias is not None and (t.alias.node not in nodes
                                        or not 0 <= t.alias.index < len(nodes[t.alias.node].outputs)):
                dangling = True
                if bad(f"node {name} aliases missing tensor {t.alias}"):
                    return out
        for msg in _contract(g, n):
            if bad(f"node {name}: {msg}"):
                return out
    stale = {k: v for k, v in g._uses.items() if v}
    if stale != uses and not dangling and bad("use lists are stale (an edit bypassed the graph's primitives)"):
        return out
    copies: dict[int, set[int]] = {}
    for n in nodes.values():
        if n.recompute_of is not None:
            copies.setdefault(n.recompute_of, set()).add(n.id)
    if copies != g._copies and bad("the index of recomputed copies is stale (``recompute_of`` was assigned)"):
        return out
    for key, r in g.outputs.items():
        if r.node not in nodes or not 0 <= r.index < len(nodes[r.node].outputs):
            dangling = True
            if bad(f"graph output {key!r} refers to a missing tensor {r}"):
                return out
    if dangling:
        return out
    for n in nodes.values():
        for j in range(len(n.outputs)):
            try:
                g.storage_root(TRef(n.id, j))
            except GraphError as e:
                if bad(str(e)):
                    return out
    try:
        kahn_order(g)
    except GraphError as e:
        bad(str(e))
    return out


def _value(g: Any, r: TRef) -> TRef:
    """The tensor whose value ``r`` holds: a recomputed copy's output holds its original's, a
    swapped tensor loaded back (LOAD of a STORE) holds the stored one's."""
    seen = 0
    while (node := g.nodes.get(r.node)) is not None and seen < len(g.nodes):
        seen += 1
        if node.recompute_of is not None:
            r = TRef(node.recompute_of, r.index)
        elif node.kind in (NodeKind.STORE, NodeKind.LOAD) and len(ins := node.inputs()) == 1:
            r = ins[0]
        else:
            break
    return r


def _values(g: Any, args: Any) -> Any:
    """Arguments with each tensor replaced by the value it holds (:func:`_value`)."""
    return map_refs(args, lambda r: _value(g, r))


def recomputes_same(g: Any, n: Any, src: Any) -> bool:
    """Whether ``n`` runs ``src``'s op on the same values (arguments compared through recomputed
    copies and swaps): the contract of a recomputed copy with its original."""
    return (src.op, _values(g, src.args), _values(g, src.kwargs)) == (n.op, _values(g, n.args),
                                                                      _values(g, n.kwargs))


def _same_meta(a: TensorMeta, b: TensorMeta) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _contract(g: Any, n: Any) -> list[str]:
    """Problems with the contract of ``n``'s kind (empty if none)."""
    msgs: list[str] = []
    if n.recompute_of is not None:
        src = g.nodes.get(n.recompute_of)
        if src is None:
            msgs.append(f"recomputes missing node id {n.recompute_of}")
        elif not recomputes_same(g, n, src):
            msgs.append(f"recomputes {src.name!r} but differs in op or arguments")
        elif len(src.outputs) != len(n.outputs) or not all(map(_same_meta, src.outputs, n.outputs)):
            msgs.append(f"recomputes {src.name!r} but differs in output shapes")
    if n.kind in (NodeKind.STORE, NodeKind.LOAD):
        ins = n.inputs()
        if len(ins) != 1 or len(n.outputs) != 1:
            return msgs + [f"{n.kind.value} must read one tensor and write one"]
        src = g.nodes.get(ins[0].node)
        if src is None or ins[0].index >= len(src.outputs):
            return msgs
        t_in, t_out = src.outputs[ins[0].index], n.outputs[0]
        want_in, want_out = ("device", "host") if n.kind == NodeKind.STORE else ("host", "device")
        if t_in.device != want_in or t_out.device != want_out:
            msgs.append(f"{n.kind.value} must copy {want_in} -> {want_out}, not {t_in.device} -> {t_out.device}")
        if not _same_meta(t_in, t_out):
            msgs.append(f"{n.kind.value} changes the shape or dtype")
    if n.kind == NodeKind.FISSION:
        msgs.extend(_fission_contract(g, n))
    elif n.fission is not None:
        msgs.append("has a fission sub-graph but is not a fission node")
    return msgs


def fission_contract(g: Any, n: Any) -> list[str]:
    """What breaks the contract of fission node ``n`` of ``g`` (its sub-graph, the parts of its
    inputs and outputs against the full tensors); empty when it holds."""
    return _fission_contract(g, n)


def _fission_contract(g: Any, n: Any) -> list[str]:
    f = n.fission
    if f is None:
        return ["fission node has no sub-graph"]
    if not isinstance(f.n, int) or f.n < 1:
        return [f"fission node has n={f.n}"]
    msgs = [f"sub-graph: {m}" for m in lint_graph(f.graph, limit=3)]
    if msgs:
        return msgs
    phs = f.graph.placeholders()
    ins = n.inputs()
    if not (len(phs) == len(ins) == len(f.in_dims)):
        return [f"{len(ins)} inputs, {len(phs)} sub-graph placeholders and {len(f.in_dims)} in_dims"]
    for k, (ph, r, d) in enumerate(zip(phs, ins, f.in_dims, strict=True)):
        full = g.nodes[r.node].outputs[r.index] if r.node in g.nodes else None
        if full is None or r.index >= len(g.nodes[r.node].outputs):
            continue
        part = ph.outputs[0]
        want = list(full.shape)
        if d is not None:
            if not -len(want) <= d < len(want):
                msgs.append(f"input {k}: split dim {d} out of range for shape {tuple(want)}")
                continue
            if want[d] % f.n:
                msgs.append(f"input {k}: dim {d} of size {want[d]} does not split into {f.n} parts")
                continue
            want[d] //= f.n
        if tuple(want) != part.shape or full.dtype != part.dtype:
            msgs.append(f"input {k}: part {part.shape} {part.dtype} does not match {tuple(want)} {full.dtype}")
    outs = list(f.graph.outputs.values())
    if not (len(outs) == len(n.outputs) == len(f.out_combine)):
        return msgs + [f"{len(n.outputs)} outputs, {len(outs)} sub-graph outputs and "
                       f"{len(f.out_combine)} out_combine entries"]
    for k, (r, full, comb) in enumerate(zip(outs, n.outputs, f.out_combine, strict=True)):
        how, d = comb
        part = f.graph.tensor(r)
        if how not in COMBINES:
            msgs.append(f"output {k}: unknown combine {how!r}")
            continue
        want = list(part.shape)
        if how == "cat":
            if d is None or not -len(want) <= d < len(want):
                msgs.append(f"output {k}: bad concatenation dim {d}")
                continue
            want[d] *= f.n
        if tuple(want) != full.shape or part.dtype != full.dtype:
            msgs.append(f"output {k}: {how} of parts {part.shape} gives {tuple(want)}, node has {full.shape}")
    return msgs
