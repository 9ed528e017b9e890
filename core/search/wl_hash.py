"""A canonical graph hash in the style of Weisfeiler-Lehman, kept up to date from the changed nodes
(MAGIS section 6.2 dedupes M-States by graph hash; hashing was 75% of the paper's search time).

Round 0 labels a node by what it computes -- op, kind, output shapes and dtypes, and its non-tensor
arguments, with each tensor argument replaced by the output index it reads -- never by its id or
name, so two application orders that build the same graph hash equal.  Round k combines a node's
round-(k-1) label with those of its inputs, in argument order.  The graph hash is the sum
(mod 2**64) of the final labels plus the graph outputs' labels.  After an edit only the nodes within
``ROUNDS`` hops downstream of a changed node get new labels, and the sum is adjusted by the
difference: the cost is proportional to the change, not to the graph.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from ..ir.graph import Graph, Node, TRef, map_refs
from ..ir.topo import pull_order

ROUNDS = 2
MASK = (1 << 64) - 1


def _digest(text: str) -> int:
    """A 64-bit digest that is the same in every process (``hash`` of a string is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def node_label(node: Node) -> int:
    """Round-0 label: a stable 64-bit digest of what the node computes (ids and names excluded)."""
    shape = map_refs((node.args, node.kwargs), lambda r: ("$in", r.index))
    outs = tuple((t.shape, t.dtype, t.device, t.alias is not None) for t in node.outputs)
    f = node.fission
    sub = None
    if f is not None:
        sub_hash = getattr(f, "_graph_hash", None)  # a spec's sub-graph does not change once built
        if sub_hash is None:
            sub_hash = f._graph_hash = graph_hash(f.graph)
        sub = (f.n, tuple(f.in_dims), tuple(map(tuple, f.out_combine)), sub_hash)
    return _digest(repr((node.op, node.kind.value, outs, shape, sub)))


def _mix(own: int, ins: tuple[int, ...]) -> int:
    return hash((own, ins)) & MASK  # tuples of ints hash deterministically (no string salt)


class WLHash:
    """Per-node labels of every round and their sum; ``update(changed)`` after edits."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.labels: list[dict[int, int]] = [{} for _ in range(ROUNDS + 1)]
        for nid in g.topo_order():
            self._label(nid)
        self.total = sum(self.labels[ROUNDS].values()) & MASK

    def _label(self, nid: int) -> None:
        node = self.g.nodes[nid]
        lab = self.labels
        lab[0][nid] = node_label(node)
        ins = node.inputs()
        for k in range(1, ROUNDS + 1):
            prev = lab[k - 1]
            lab[k][nid] = _mix(prev[nid], tuple(prev[r.node] + r.index for r in ins))

    def value(self) -> int:
        """The graph hash: node labels plus the outputs (by key and label)."""
        last = self.labels[ROUNDS]
        outs = _digest(repr(sorted((k, last[r.node] + r.index) for k, r in self.g.outputs.items())))
        return (self.total + outs) & MASK

    def affected(self, changed: Iterable[int]) -> set[int]:
        """Nodes whose labels depend on a changed node: within ROUNDS hops downstream."""
        g = self.g
        frontier = {v for v in changed}
        out = set(frontier)
        for _ in range(ROUNDS):
            nxt: set[int] = set()
            for v in frontier:
                if v in g.nodes:
                    nxt.update(g.users(v))
            nxt -= out
            out |= nxt
            frontier = nxt
        return out

    def update(self, changed: Iterable[int]) -> dict[int, tuple[int, ...] | None]:
        """Relabel after edits to the nodes ``changed`` (added, erased or re-wired; erased ones are
        dropped).  Returns the previous labels of the relabelled nodes, for ``restore``."""
        g = self.g
        aff = self.affected(changed)
        # also the former users of erased nodes are among ``changed`` (they were re-wired)
        # producers inside the set first; raises (nothing changed) on a cycle among them
        inside = {v for v in aff if v in g.nodes}
        order = pull_order(g, sorted(inside), lambda v: (p for p in g.preds(v) if p in inside),
                           "the edit made a cycle")
        saved: dict[int, tuple[int, ...] | None] = {}
        last = self.labels[ROUNDS]
        for v in aff:
            saved[v] = tuple(lab[v] for lab in self.labels) if v in last else None
            if v in last:
                self.total = (self.total - last[v]) & MASK
                for lab in self.labels:
                    del lab[v]
        # relabel surviving nodes in a topological order of the affected set
        for v in order:
            self._label(v)
            self.total = (self.total + last[v]) & MASK
        return saved

    def restore(self, saved: dict[int, tuple[int, ...] | None]) -> None:
        """Undo an ``update`` (after the graph edits were undone)."""
        last = self.labels[ROUNDS]
        for v in saved:
            if v in last:
                self.total = (self.total - last[v]) & MASK
                for lab in self.labels:
                    del lab[v]
        for v, labs in saved.items():
            if labs is not None:
                for lab, x in zip(self.labels, labs, strict=True):
                    lab[v] = x
                self.total = (self.total + last[v]) & MASK


def graph_hash(g: Graph) -> int:
    """The canonical hash of ``g`` from scratch."""
    return WLHash(g).value()


__all__ = ["ROUNDS", "WLHash", "graph_hash", "node_label", "TRef"]
