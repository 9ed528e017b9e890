"""Baseline schedules: the traced (PyTorch) order and reverse post-order (RPO)."""

from __future__ import annotations

from ..ir.graph import Graph, NodeKind
from .base import Scheduler, op_ids, register


@register("traced")
class TracedOrder(Scheduler):
    """The order PyTorch ran the traced graph (the MAGIS paper's "PyTorch" baseline)."""

    def order(self, g: Graph) -> list[int]:
        ids = set(op_ids(g))
        return [i for i in g.topo_order() if i in ids]


@register("rpo")
class ReversePostOrder(Scheduler):
    """Reverse post-order of a DFS from the graph outputs' producers back to the inputs, i.e. a DFS
    post-order over predecessors: each op runs right after the last of its inputs is computed."""

    def order(self, g: Graph) -> list[int]:
        done: set[int] = set()
        out: list[int] = []
        sinks = [n.id for n in g if n.kind != NodeKind.PLACEHOLDER and not g.users(n.id)]
        outs = {r.node for r in g.outputs.values() if g[r.node].kind != NodeKind.PLACEHOLDER}
        roots = sorted(outs | set(sinks))
        for root in roots:
            stack: list[tuple[int, int]] = [(root, 0)]
            while stack:
                nid, i = stack.pop()
                if nid in done:
                    continue
                preds = [p for p in g.preds(nid) if g[p].kind != NodeKind.PLACEHOLDER]
                while i < len(preds) and preds[i] in done:
                    i += 1
                if i < len(preds):
                    stack.append((nid, i + 1))
                    stack.append((preds[i], 0))
                else:
                    done.add(nid)
                    out.append(nid)
        return out
