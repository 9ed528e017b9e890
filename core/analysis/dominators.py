"""Dominator tree from the activation input (MAGIS section 4.3; weights and labels are extra entries
and are ignored when picking the entry, as the paper does)."""

from __future__ import annotations

from dataclasses import dataclass

import rustworkx as rx

from ..ir.graph import Graph, NodeKind, TensorKind


@dataclass
class DominatorTree:
    entry: int
    idom: dict[int, int | None]  # node -> immediate dominator (None for the entry / unreachable)
    reachable: set[int]

    def children(self) -> dict[int, list[int]]:
        ch: dict[int, list[int]] = {}
        for v, d in self.idom.items():
            if d is not None:
                ch.setdefault(d, []).append(v)
        return {k: sorted(v) for k, v in ch.items()}

    def descendants(self, v: int) -> set[int]:
        ch = self.children()
        out, stack = set(), [v]
        while stack:
            u = stack.pop()
            for c in ch.get(u, []):
                if c not in out:
                    out.add(c)
                    stack.append(c)
        return out


def activation_entry(g: Graph) -> int:
    """The graph input that carries activations: the largest floating-point INPUT placeholder
    (falling back to the largest input of any dtype)."""
    inputs = [n for n in g.placeholders() if n.out.kind == TensorKind.INPUT]
    if not inputs:
        raise ValueError("graph has no activation input")
    floats = [n for n in inputs if n.out.dtype.startswith(("float", "bfloat"))]
    pool = floats or inputs
    return max(pool, key=lambda n: (n.out.logical_bytes, -n.id)).id


def to_rx(g: Graph, nodes: set[int] | None = None) -> tuple[rx.PyDiGraph, dict[int, int]]:
    """rustworkx copy of ``g`` (optionally induced on ``nodes``); returns (graph, node id -> index)."""
    dg = rx.PyDiGraph(check_cycle=False, multigraph=False)
    ids = [i for i in g.nodes if nodes is None or i in nodes]
    index = {nid: dg.add_node(nid) for nid in ids}
    for nid in ids:
        for p in g.preds(nid):
            if p in index:
                dg.add_edge(index[p], index[nid], None)
    return dg, index


def dominator_tree(g: Graph, entry: int | None = None, post: bool = False) -> DominatorTree:
    """Dominator tree of the nodes reachable from ``entry`` (post=True: post-dominators from the
    sink on the reversed graph; entry then defaults to the loss/first output's producer)."""
    if entry is None:
        if post:
            keys = sorted(g.outputs)
            entry = g.outputs["loss"].node if "loss" in g.outputs else g.outputs[keys[0]].node
        else:
            entry = activation_entry(g)
    dg, index = to_rx(g)
    if post:
        dg.reverse()
    root = index[entry]
    reach = set(rx.descendants(dg, root)) | {root}
    sub = dg.subgraph(sorted(reach))
    # subgraph renumbers nodes; payloads are node ids
    sub_index = {sub[i]: i for i in sub.node_indices()}
    idom_idx = rx.immediate_dominators(sub, sub_index[entry])
    idom: dict[int, int | None] = {nid: None for nid in g.nodes}
    for i, d in idom_idx.items():
        nid = sub[i]
        idom[nid] = None if nid == entry else sub[d]
    reachable = {dg[i] for i in reach}
    return DominatorTree(entry, idom, reachable)


__all__ = ["DominatorTree", "activation_entry", "dominator_tree", "to_rx", "NodeKind"]
