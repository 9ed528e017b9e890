"""Baseline schedules: the traced (PyTorch) order and reverse post-order (RPO)."""

from __future__ import annotations

from ..analysis.order import reverse_post_order
from ..ir.graph import Graph
from .base import Scheduler, op_ids


class TracedOrder(Scheduler):
    """The order PyTorch ran the traced graph (the MAGIS paper's "PyTorch" baseline)."""

    name = "traced"

    def order(self, g: Graph) -> list[int]:
        ids = set(op_ids(g))
        return [i for i in g.topo_order() if i in ids]


class ReversePostOrder(Scheduler):
    """Reverse post-order of a DFS from the graph outputs' producers back to the inputs, i.e. a DFS
    post-order over predecessors: each op runs right after the last of its inputs is computed."""

    name = "rpo"

    def order(self, g: Graph) -> list[int]:
        ops = set(op_ids(g))
        sinks = {nid for nid in ops if not g.users(nid)}
        outs = {r.node for r in g.outputs.values() if r.node in ops}
        preds = {nid: [p for p in g.preds(nid) if p in ops] for nid in ops}
        return reverse_post_order(preds, sorted(outs | sinks))
