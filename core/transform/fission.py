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

from ..analysis.dgraph import DGraph, Key, Split, SplitError, plan_split
from ..ir import ops
from ..ir.graph import FissionSpec, Graph, NodeKind, TensorMeta, TRef, map_refs
from .rule import Application, Rule


def _part(t: TensorMeta, d: int | None, n: int) -> TensorMeta:
    """``t`` as one of n parts along dim d (None or a reduce axis: whole)."""
    p = copy.copy(t)
    p.alias, p.storage_bytes = None, None
    if d is not None and d >= 0:
        shape = list(t.shape)
        shape[d] //= n
        p.shape = tuple(shape)
    return p


def sub_graph(g: Graph, split: Split, n: int) -> Graph:
    """One part of G[S] as its own graph: placeholders for S's inputs (``input:k``), the ops of S
    at part size with rescaled arguments, and S's outputs as ``output_k``."""
    sub = Graph(f"{g.name}:fission", {"mode": g.meta.get("mode", "train")})
    ref_map: dict[TRef, TRef] = {}
    for k, (r, d) in enumerate(zip(split.inputs, split.in_dims, strict=True)):
        src = g.nodes[r.node]
        ph = sub.add_node(name=f"{src.name}_part" if d is not None else src.name, op="placeholder",
                          kind=NodeKind.PLACEHOLDER, outputs=[_part(g.tensor(r), d, n)],
                          target=f"input:{k}", module=src.module)
        ref_map[r] = TRef(ph.id, 0)
    for v in split.nodes:
        node = g.nodes[v]
        full_ins = [g.tensor(r) for r in node.inputs()]
        in_split = [split.out_dims[r] if r in split.out_dims else split.in_dims[split.inputs.index(r)]
                    for r in node.inputs()]
        outs = []
        for j, t in enumerate(node.outputs):
            p = _part(t, split.out_dims[TRef(v, j)], n)
            if t.alias is not None:
                p.alias = ref_map[t.alias]
            outs.append(p)
        new = ops.rescale_args(node, full_ins, outs, in_split)
        if new is None:
            raise SplitError(f"{node.name!r} ({node.op}): arguments cannot be rescaled")
        args, kwargs = new
        m = sub.add_node(name=node.name, op=node.op, kind=NodeKind.OP, args=map_refs(args, ref_map.__getitem__),
                         kwargs=map_refs(kwargs, ref_map.__getitem__), outputs=outs, module=node.module)
        for j in range(len(node.outputs)):
            ref_map[TRef(v, j)] = TRef(m.id, j)
    for k, r in enumerate(split.outputs):
        sub.outputs[f"output_{k}"] = ref_map[r]
    sub.validate()
    return sub


class Fission(Rule):
    """Fission(n, comp node, comp output, comp dim, *S): apply F-Trans (S, D, n)."""

    name = "fission"

    def match(self, g: Graph, hot: Iterable[TRef] = ()) -> list[Application]:
        return []  # F-Trans applications come from the F-Tree (analysis.ftree), not from hot-spots

    @staticmethod
    def application(n: int, comp: Key, nodes: Iterable[int]) -> Application:
        return Application("fission", (n, *comp, *sorted(nodes)))

    def edit(self, g: Graph, app: Application) -> None:
        n, cn, cj, cd, *nodes = app.params
        split = plan_split(g, DGraph(g), nodes, (cn, cj, cd))
        apply_split(g, split, n)


def apply_split(g: Graph, split: Split, n: int) -> int:
    """Replace S by its FISSION node (graph primitives only); returns the node's id."""
    if n < 2 or split.length % n:
        raise SplitError(f"n={n} does not divide the split dimension of size {split.length}")
    sub = sub_graph(g, split, n)
    s = set(split.nodes)
    first = g.nodes[split.nodes[0]]
    outs = []
    for r in split.outputs:
        t = copy.copy(g.tensor(r))
        t.alias, t.storage_bytes = None, None
        outs.append(t)
    name = f"fission_{first.name}_{len(split.nodes)}x{n}"
    f = g.add_node(name=name, op="fission", kind=NodeKind.FISSION, args=list(split.inputs), outputs=outs,
                   module=first.module,
                   fission=FissionSpec(sub, n, list(split.in_dims), [tuple(c) for c in split.combine]))
    for k, r in enumerate(split.outputs):
        outside = [u for u in g.readers(r) if u not in s]
        g.replace_all_uses_with(r, TRef(f.id, k), only=outside, outputs=True)
    for v in reversed(split.nodes):
        g.erase_node(v)
    return f.id


__all__ = ["Fission", "apply_split", "sub_graph"]
