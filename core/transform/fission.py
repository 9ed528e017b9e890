"""F-Trans (MAGIS section 4.2) as a rule: ``Fission(n, comp, S)`` replaces the ops S by one FISSION
node that runs a single copy of G[S] at part size n times, slicing the inputs that carry the split
dimension and sharing the others (weights), and that concatenates (a split dim) or sums (a reduce
axis) the parts of each output.  Its inverse is the journal run backwards, so ``inverse(apply(G))``
is G exactly.  ``n`` must divide the dimension.  Which sub-graphs and dimensions are worth it is the
F-Tree's part (``analysis.ftree``); whether one is valid is ``analysis.dgraph.plan_split``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from ..analysis.dgraph import DGraph, Key, Split, SplitError, plan_split, topological
from ..ir import ops
from ..ir.graph import (
    EditLog,
    FissionOrigin,
    FissionSpec,
    Graph,
    Node,
    NodeKind,
    TensorMeta,
    TorchConst,
    TRef,
    map_refs,
)
from ..ir.lint import fission_contract, recomputes_same
from .ftree_text import FTreeNamed
from .rule import Application, Rule, RuleNotApplicable, RuleOption, Where


def _part(t: TensorMeta, d: int | None, n: int) -> TensorMeta:
    """``t`` as one of n parts along dim d (None or a reduce axis: whole)."""
    p = copy.copy(t)
    p.alias, p.storage_bytes = None, None
    if d is not None and d >= 0:
        shape = list(t.shape)
        shape[d] //= n
        p.shape = tuple(shape)
    return p


def sub_graph(g: Graph, split: Split, n: int, inputs: list[TRef] | None = None,
              tw_full: dict[int, TRef] | None = None, in_dims: list[int | None] | None = None,
              outputs: list[TRef] | None = None) -> Graph:
    """One part of G[S] as its own graph: placeholders for S's inputs (``input:k``; ``inputs`` /
    ``in_dims`` override ``split.inputs`` / ``split.in_dims``, e.g. after value-free inputs were
    rebuilt, and ``tw_full`` adds the full total weight of each mean nll loss, shared), the ops of S
    at part size with rescaled arguments (mean losses summed, their backward divided by the full
    count; an enabled F-Trans inside S with its own sub-graph rescaled: nested fission), and S's
    outputs (``outputs`` overrides ``split.outputs``) as ``output_k``."""
    sub = Graph(f"{g.name}:fission", {"mode": g.meta.get("mode", "train")})
    ref_map: dict[TRef, TRef] = {}
    inputs = list(split.inputs) if inputs is None else inputs
    in_dims = list(split.in_dims) if in_dims is None else in_dims
    tw_full = tw_full or {}
    dims = dict(zip(inputs, in_dims, strict=True))
    for k, (r, d) in enumerate([*zip(inputs, in_dims, strict=True), *((r, None) for r in tw_full.values())]):
        src = g.nodes[r.node]
        ph = sub.add_node(name=f"{src.name}_part" if d is not None else src.name, op="placeholder",
                          kind=NodeKind.PLACEHOLDER, outputs=[_part(g.tensor(r), d, n)],
                          target=f"input:{k}", module=src.module)
        ref_map[r] = TRef(ph.id, 0)
    for v in split.nodes:
        node = g.nodes[v]
        full_ins = [g.tensor(r) for r in node.inputs()]
        in_split = [split.out_dims[r] if r in split.out_dims else dims.get(r) for r in node.inputs()]
        outs = []
        for j, t in enumerate(node.outputs):
            p = _part(t, split.out_dims[TRef(v, j)], n)
            if t.alias is not None:
                p.alias = ref_map[t.alias]
            outs.append(p)
        if node.kind == NodeKind.FISSION:  # nested: the same loop over smaller parts
            spec = rescale_fission(node.fission, in_split, n)
            args = map_refs(node.args, ref_map.__getitem__)
            m = sub.add_node(name=node.name, op=node.op, kind=NodeKind.FISSION, args=args, outputs=outs,
                             module=node.module, fission=spec)
            for j in range(len(node.outputs)):
                ref_map[TRef(v, j)] = TRef(m.id, j)
            continue
        new = ops.rescale_args(node, full_ins, outs, in_split)
        if new is None:
            raise SplitError(f"{node.name!r} ({node.op}): arguments cannot be rescaled")
        args, kwargs = new
        red = ops.MEAN_LOSSES.get(node.op, ops.MEAN_LOSS_GRADS.get(node.op))
        if v in split.mean_losses:  # the part sums; the sum is divided after the parts
            args, kwargs = _set_arg(args, kwargs, red, "reduction", 2)
        if v in split.tw_from:  # divide by the full total weight, not the part's
            args, kwargs = _set_arg(args, kwargs, 6, "total_weight", tw_full[split.tw_from[v]])
        args, kwargs = map_refs(args, ref_map.__getitem__), map_refs(kwargs, ref_map.__getitem__)
        if v in split.scale_grad:  # mean over a part of 1/n of the elements: grad_output / n
            go = args[0]
            t = copy.copy(sub.tensor(go))
            t.alias, t.storage_bytes = None, None
            scaled = sub.add_node(name=f"{node.name}_grad_per_part", op="aten.div.Scalar", args=[go, n],
                                  outputs=[t], module=node.module)
            args = [TRef(scaled.id, 0), *args[1:]]
        part_ins = [sub.tensor(r) for r in _refs(args, kwargs)]
        for j, b in enumerate(ops.output_storage_bytes(node.op, args, kwargs, part_ins, outs)):
            outs[j].storage_bytes = b
        m = sub.add_node(name=node.name, op=node.op, kind=NodeKind.OP, args=args,
                         kwargs=kwargs, outputs=outs, module=node.module)
        for j in range(len(node.outputs)):
            ref_map[TRef(v, j)] = TRef(m.id, j)
    for k, r in enumerate(split.outputs if outputs is None else outputs):
        sub.outputs[f"output_{k}"] = ref_map[r]
    sub.validate()
    return sub


def rescale_fission(spec: FissionSpec, in_split: list[int | None], n: int) -> FissionSpec:
    """An enabled F-Trans inside a sub-graph being split into n parts: its inputs are sliced along
    ``in_split``, so its own sub-graph is split along the same component (one more level of parts)."""
    inner = spec.graph
    phs = [TRef(ph.id, 0) for ph in inner.placeholders()]
    d_of = dict(zip(phs, in_split, strict=True))
    sliced = [(r, d) for r, d in d_of.items() if d is not None and d >= 0]
    if not sliced:
        raise SplitError("a nested F-Trans reads no input sliced along the split dimension")
    ops_ = [m.id for m in inner.ops()]
    r0, d0 = sliced[0]
    split = plan_split(inner, DGraph(inner, ops_), ops_, (r0.node, 0, d0))
    for r, d in zip(split.inputs, split.in_dims, strict=True):
        if d_of[r] != d:
            raise SplitError("a nested F-Trans would slice one of its inputs along another dimension")
    if split.length % n:
        raise SplitError(f"n={n} does not divide the parts of a nested F-Trans (size {split.length})")
    sub = sub_graph(inner, split, n, inputs=phs, in_dims=[d_of[r] for r in phs],
                    outputs=list(inner.outputs.values()))
    return FissionSpec(sub, spec.n, list(spec.in_dims), list(spec.out_combine), None, spec.members, spec.comp)


def _set_arg(args: list, kwargs: dict, pos: int, name: str, value) -> tuple[list, dict]:
    args, kwargs = list(args), dict(kwargs)
    if pos < len(args):
        args[pos] = value
    else:
        kwargs[name] = value
    return args, kwargs


def _refs(args: list, kwargs: dict) -> list[TRef]:
    found: list[TRef] = []
    map_refs([args, kwargs], lambda r: found.append(r) or r)
    return found


class Fission(FTreeNamed, Rule):
    """Fission(n, comp node, comp output, comp dim, *S): apply F-Trans (S, D, n)."""

    name = "fission"
    family = "fission"
    text = "F-Trans: split a sub-graph into parts along a dimension (Enable)"
    option = RuleOption("--enable", "ID[:N]", "Enable: split F-Tree node ID (from `magis ftree`) into N parts "
                        "(default: the smallest divisor); a leaf, or the parent of an enabled node (nested fission)")

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (n, comp node, output, dim, *S)
        return ("n", "node", "n", "n") + ("node",) * (len(params) - 4)

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return []  # F-Trans applications come from the F-Tree (analysis.ftree), not from hot-spots

    @staticmethod
    def application(n: int, comp: Key, nodes: Iterable[int]) -> Application:
        return Application("fission", (n, *comp, *sorted(nodes)))

    @staticmethod
    def ordered_application(n: int, comp: Key, order: list[int]) -> Application:
        """An F-Trans whose part runs S in ``order`` (a schedule of G[S], e.g. one that recomputes
        activations late); S listed unsorted in the parameters is that order."""
        return Application("fission", (n, *comp, *order))

    def edit(self, g: Graph, app: Application) -> None:
        n, cn, cj, cd, *nodes = app.params
        dg = DGraph(g, nodes) if cn in nodes else DGraph(g)  # a D-node of S: S's links suffice
        # S in sorted order: the part runs it in ``topological`` order; listed otherwise, in that order
        order = None if nodes == sorted(nodes) else list(nodes)
        split = plan_split(g, dg, nodes, (cn, cj, cd), order=order)
        apply_split(g, split, n)


def apply_split(g: Graph, split: Split, n: int) -> int:
    """Replace S by its FISSION node (graph primitives only); returns the node's id."""
    if n < 2 or split.length % n:
        raise SplitError(f"n={n} does not divide the split dimension of size {split.length}")
    s = set(split.nodes)
    promoted = []
    for v in split.nodes:  # an original erased with a copy kept: the copy takes its role
        outside = [c for c in g.copies(v) if c not in s]
        if outside and g.nodes[v].recompute_of is None:
            g.promote_copy(outside[0])
            promoted.append(outside[0])
    kept = s | set(split.decouple)
    origin = FissionOrigin(tuple(split.nodes), split.length, [g.nodes[v].copy() for v in topological(g, kept)],
                           list(split.inputs), list(split.outputs))
    first_new = g.new_id()
    inputs = list(split.inputs)
    rebuilt = []
    for u in split.decouple:  # ones_like(loss) & co.: rebuilt from its shape alone
        new = _input_free(g, u)
        rebuilt.append((new.node, u))
        inputs = [new if r == TRef(u, 0) else r for r in inputs]
    tw_full = {f: _total_weight(g, f, split) for f in split.mean_losses if g.nodes[f].op != "aten.mse_loss.default"}
    sub = sub_graph(g, split, n, inputs, tw_full)
    first = g.nodes[split.nodes[0]]
    outs = []
    for r in split.outputs:
        t = copy.copy(g.tensor(r))
        t.alias, t.storage_bytes = None, None
        outs.append(t)
    name = f"fission_{first.name}_{len(split.nodes)}x{n}"
    members = frozenset().union(*(g.nodes[v].fission.members if g.nodes[v].kind == NodeKind.FISSION else {v}
                                  for v in split.nodes))
    f = g.add_node(name=name, op="fission", kind=NodeKind.FISSION, args=inputs + list(tw_full.values()),
                   outputs=outs, module=first.module,
                   fission=FissionSpec(sub, n, list(split.in_dims) + [None] * len(tw_full),
                                       [tuple(c) for c in split.combine], origin, members, split.comp))
    for k, r in enumerate(split.outputs):
        outside = [u for u in g.readers(r) if u not in s]
        new = TRef(f.id, k)
        if r.node in split.mean_losses and r.index == 0:  # the summed loss / the full count
            node = g.nodes[r.node]
            if r.node in tw_full:
                div = g.add_node(name=f"{node.name}_mean", op="aten.div.Tensor", args=[new, tw_full[r.node]],
                                 outputs=[_fresh(node.outputs[0])], module=node.module)
            else:
                numel = g.tensor(node.inputs()[0]).numel
                div = g.add_node(name=f"{node.name}_mean", op="aten.div.Scalar", args=[new, numel],
                                 outputs=[_fresh(node.outputs[0])], module=node.module)
            new = TRef(div.id, 0)
        g.replace_all_uses_with(r, new, only=outside, outputs=True)
    for v in reversed(split.nodes):
        g.erase_node(v)
    _unlink_diverged_copies(g, [f.id, *promoted, *(c for p in promoted for c in g.copies(p))])
    origin.aux = tuple(v for v in range(first_new, g.new_id()) if v in g.nodes and v != f.id)
    origin.rebuilt = tuple(rebuilt)
    broken = fission_contract(g, g.nodes[f.id])
    if broken:  # a split plan_split let through but whose parts do not make the whole: refused, not applied
        raise SplitError(f"{name}: the parts do not make the whole ({broken[0]})")
    return f.id


def recorded_split(g: Graph, split: Split, n: int) -> EditLog:
    """``apply_split`` journaled, as ``Rule.apply`` does it but without planning the split again: the
    journal undoes it; an application that fails leaves ``g`` as it was."""
    try:
        with g.recording() as log:
            apply_split(g, split, n)
    except BaseException:
        g.undo(log)
        raise
    return log


def _unlink_diverged_copies(g: Graph, changed: list[int]) -> None:
    """After S's readers read the fission node and S's copies outside S took their originals'
    role, a recomputed copy downstream may read another value than its original (the original
    reads the fission node, the copy a promoted copy): such copies become plain ops (the same
    values, so nothing else changes), and so do the copies that then diverge from them."""
    work = list(changed)  # ops whose outputs' values may have changed
    while work:
        u = work.pop()
        for w in [u, *g.users(u)]:
            if w not in g.nodes:
                continue
            pairs = [(w, g.nodes[w].recompute_of)] if g.nodes[w].recompute_of is not None else []
            pairs += [(c, w) for c in g.copies(w)]
            for c, o in pairs:
                if not recomputes_same(g, g.nodes[c], g.nodes[o]):
                    g.make_plain(c)  # its own copies stay its copies; their values change with it
                    work.extend([c, *g.copies(c)])


def defission(g: Graph, fid: int) -> list[int]:
    """Take back the F-Trans of fission node ``fid`` as a forward edit (graph primitives only): S's
    nodes come back as they were (their own ids), the node's readers read them again and what the
    F-Trans added goes.  What the node reads now (later rules may have re-wired its inputs: a
    swap, a recomputed copy, a neighbour's fission) is what S's nodes read.  Returns S's ids;
    ValueError when it cannot be taken back."""
    node = g.nodes[fid]
    spec = node.fission
    if node.kind != NodeKind.FISSION or spec is None:
        raise RuleNotApplicable(f"{node.name!r} is not a fission node")
    o = spec.origin
    if o is None:
        raise RuleNotApplicable(f"{node.name!r} does not record the nodes it replaced")
    aux = set(o.aux)
    restored = {v.id for v in o.nodes}
    now = {r: c for r, c in zip(o.inputs, node.args, strict=False) if r.node not in restored and r != c}
    for v in o.nodes:
        g.add_node(_reading(v, now))
    for k, r in enumerate(o.outputs):
        out = TRef(fid, k)
        for u in g.readers(out):
            if u in aux:  # the mean of a split loss: its readers read the loss again
                for j in range(len(g.nodes[u].outputs)):
                    g.replace_all_uses_with(TRef(u, j), r, outputs=True)
        g.replace_all_uses_with(out, r, outputs=True)
    for full, u in o.rebuilt:
        g.replace_all_uses_with(TRef(full, 0), TRef(u, 0), outputs=True)
    g.erase_node(fid)
    for v in sorted(aux, reverse=True):
        g.erase_node(v)
    return list(o.split)


def _reading(v: Node, now: dict[TRef, TRef]) -> Node:
    """A copy of ``v`` whose tensor inputs (and views of them) follow ``now``."""
    c = v.copy()
    if not now:
        return c
    sub = lambda r: now.get(r, r)  # noqa: E731
    outs = []
    for t in c.outputs:
        if t.alias is not None and t.alias in now:
            t.alias = now[t.alias]
        outs.append(t)
    return Node(c.id, c.name, c.op, c.kind, map_refs(c.args, sub), map_refs(c.kwargs, sub), outs, c.module,
                c.target, c.recompute_of, c.fission)


def _fresh(t: TensorMeta) -> TensorMeta:
    c = copy.copy(t)
    c.alias, c.storage_bytes = None, None
    return c


def _input_free(g: Graph, u: int) -> TRef:
    """Replace value-free op ``u`` (``ones_like(x)`` ...) by ``full(shape, value)`` with no input."""
    node = g.nodes[u]
    t = node.outputs[0]
    fill = {"aten.full_like.default": 1, "aten.new_full.default": 2}.get(node.op)
    value = (node.args[fill] if fill is not None and len(node.args) > fill else node.kwargs.get("fill_value", 0.0)) \
        if fill is not None else 1.0 if node.op in ("aten.ones_like.default", "aten.new_ones.default") else 0.0
    new = g.add_node(name=f"{node.name}_full", op="aten.full.default", args=[list(t.shape), value],
                     kwargs={"dtype": TorchConst("dtype", t.dtype), "layout": TorchConst("layout", "strided"),
                             "device": TorchConst("device", "cpu"), "pin_memory": False},
                     outputs=[_fresh(t)], module=node.module)
    g.replace_all_uses_with(TRef(u, 0), TRef(new.id, 0))
    g.erase_node(u)
    return TRef(new.id, 0)


def _total_weight(g: Graph, f: int, split: Split) -> TRef:
    """The total weight of mean nll loss ``f`` over the whole split dim, computed before the parts:
    the count of targets that are not ``ignore_index``.  Where S computes the target itself (labels
    shifted and padded inside the step, ``split.target_ops``: integer ops only, checked by
    ``plan_split``), those ops run once more at full size, outside S, on S's full inputs."""
    node = g.nodes[f]
    ignore = node.args[4] if len(node.args) > 4 else node.kwargs.get("ignore_index", -100)
    full: dict[TRef, TRef] = {}
    for v in split.target_ops.get(f, ()):
        src = g.nodes[v]
        sub = lambda r: full.get(r, r)  # noqa: E731
        outs = []
        for t in src.outputs:
            o = copy.copy(t)
            if o.alias is not None:
                o.alias = sub(o.alias)
            outs.append(o)
        c = g.add_node(name=f"{src.name}_full", op=src.op, args=map_refs(src.args, sub),
                       kwargs=map_refs(src.kwargs, sub), outputs=outs, module=src.module)
        for j in range(len(src.outputs)):
            full[TRef(v, j)] = TRef(c.id, j)
    r = full.get(node.args[1], node.args[1])
    if r.node in split.nodes:  # plan_split lists every op of S that computes it
        raise SplitError(f"{node.name!r}: its target is computed inside the sub-graph")
    t = g.tensor(r)
    mask = g.add_node(name=f"{node.name}_counted", op="aten.ne.Scalar", args=[r, ignore],
                      outputs=[TensorMeta(t.shape, "bool")], module=node.module)
    tw = g.add_node(name=f"{node.name}_total_weight", op="aten.sum.default", args=[TRef(mask.id, 0)],
                    kwargs={"dtype": TorchConst("dtype", node.outputs[1].dtype)},
                    outputs=[_fresh(node.outputs[1])], module=node.module)
    return TRef(tw.id, 0)


__all__ = ["Fission", "apply_split", "defission", "recorded_split", "rescale_fission", "sub_graph"]
