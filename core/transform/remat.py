"""Rematerialization (MAGIS section 5.2): give one user B of tensor A a recomputed copy A' (same op,
same inputs, ``recompute_of`` = A); De-remat merges a copy back into its original.  Chains of
recomputation arise from applying Remat to a copy.  Remat applies only to hot-spot tensors
(heuristic H2); ops that draw random numbers are never recomputed.  A view op is matched never (it
owns no storage, so recomputing it alone frees nothing) but may be applied: as a link of a chain --
its base recomputed for the recomputed view -- it is how a reader that reads an activation through
a view (``mm(t(grad), view(x))``) gets a recomputed activation."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from ..ir import ops
from ..ir.graph import Graph, NodeKind, TRef, copy_struct
from .rule import Application, Rule


def recomputable(g: Graph, nid: int, views: bool = True) -> bool:
    """An op whose outputs can be produced again from its inputs: not a placeholder, copy or
    fission node and not random.  A view op (an output aliases an input) is one unless ``views``
    is False: its copy is a view of whatever the copy reads (``Graph.replace_input`` re-points the
    alias when a chain gives it a recomputed base)."""
    n = g.nodes[nid]
    if n.kind != NodeKind.OP or not n.outputs:
        return False
    if not views and any(t.alias is not None for t in n.outputs):
        return False
    return not ops.draws_random(n.op)


class Remat(Rule):
    """Remat(A, B): B reads a recomputed copy of A's outputs instead of A's."""

    name = "remat"

    def match(self, g: Graph, hot: Iterable[TRef]) -> list[Application]:
        apps: list[Application] = []
        for a in sorted({r.node for r in hot}):
            if a not in g.nodes or not recomputable(g, a, views=False):
                continue
            users = g.users(a)
            if len(users) < 2:  # a single user gains nothing from its own copy
                continue
            apps.extend(Application(self.name, (a, b)) for b in users  # a copy gains nothing from it
                        if g.nodes[b].kind in (NodeKind.OP, NodeKind.FISSION))
        return apps

    def edit(self, g: Graph, app: Application) -> None:
        a, b = app.params
        src = g.nodes[a]
        if b not in g.users(a):
            raise ValueError(f"{g.nodes[b].name!r} does not read {src.name!r}")
        dup = g.add_node(name=f"{src.name}_recompute_{g.new_id()}", op=src.op, kind=src.kind,
                          args=copy_struct(src.args), kwargs=copy_struct(src.kwargs),
                          outputs=[copy.copy(t) for t in src.outputs], module=src.module,
                          recompute_of=a)
        for j in range(len(src.outputs)):
            g.replace_input(b, TRef(a, j), TRef(dup.id, j))


class DeRemat(Rule):
    """DeRemat(A'): the readers of a recomputed copy A' read its original again; A' is erased.
    A chain of copies is merged from its end."""

    name = "deremat"

    def match(self, g: Graph, hot: Iterable[TRef] = ()) -> list[Application]:
        origins = {n.recompute_of for n in g.nodes.values() if n.recompute_of is not None}
        return [Application(self.name, (n.id,)) for n in g.nodes.values()
                if n.recompute_of is not None and n.recompute_of in g.nodes and n.id not in origins]

    def edit(self, g: Graph, app: Application) -> None:
        (c,) = app.params
        node = g.nodes[c]
        if node.recompute_of is None:
            raise ValueError(f"{node.name!r} is not a recomputed copy")
        if any(n.recompute_of == c for n in g.nodes.values()):
            raise ValueError(f"{node.name!r} is recomputed itself: merge the end of the chain first")
        for j in range(len(node.outputs)):
            g.replace_all_uses_with(TRef(c, j), TRef(node.recompute_of, j))
        g.erase_node(c)

