"""The graph IR of MAGIS Studio.

A :class:`Graph` is a DAG of :class:`Node` objects.  Every node is one operator with zero or more
output tensors (:class:`TensorMeta`); an edge is a reference ``TRef(node, index)`` to one output
tensor, found in the consumer's ``args``/``kwargs``.  The MAGIS paper's model (one output per
operator, section 3) is the special case of one output; aten ops such as ``native_layer_norm``
return several, so the IR keeps them on one node instead of inventing ``getitem`` nodes.

Memory is counted in bytes of *storages*: a view (``TensorMeta.alias``) shares the storage of the
tensor it aliases and adds no bytes; a storage is freed when the last user of any of its aliases has
run (see ``core.analysis.lifetimes``).

The schema also carries what later transformations produce:

* ``NodeKind.FISSION`` -- the F-Tree's hierarchical node (MAGIS section 4.3): ONE copy of a
  sub-graph plus the split dimension per input and the number of parts ``n``;
* ``NodeKind.STORE`` / ``NodeKind.LOAD`` -- swap a tensor to host memory and back (section 5.2);
* ``Node.recompute_of`` -- a re-materialised copy of another op (section 5.2).  The original is
  always in the graph: erasing it (an F-Trans replacing it, the end of a chain merged back) makes
  its copies copies of what it copied, or plain ops (``Graph.erase_node``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .lint import lint_graph
from .topo import kahn_order, pull_order
from .types import (
    COMBINES,
    DTYPE_BYTES,
    GraphError,
    NodeKind,
    TensorKind,
    TensorMeta,
    TorchConst,
    TRef,
    map_refs,
)

__all__ = ["COMBINES", "DTYPE_BYTES", "Edit", "EditLog", "FissionOrigin", "FissionSpec", "Graph", "GraphError", "Node",
           "NodeKind", "TensorKind", "TensorMeta", "TorchConst", "TRef", "copy_struct", "kahn_order",
           "map_refs"]


@dataclass
class FissionSpec:
    """An F-Trans f = (S, D, n) kept as one hierarchical node (MAGIS section 4.2-4.3).

    ``graph`` holds one copy of the split sub-graph S at the size of one part; its placeholders
    correspond, in order, to the tensor inputs of the fission node.  ``in_dims[i]`` is the
    dimension along which input i is sliced (``None``: shared, e.g. a weight).  ``out_combine[j]``
    says how the n partial results of output j (the sub-graph's outputs, in order) are merged:
    ``("cat", d)`` writes part k into slice k of dimension d of the full-size output, ``("sum",
    None)`` accumulates them (a reduce axis, e.g. weight gradients along the batch).
    """

    graph: Graph
    n: int
    in_dims: list[int | None]
    out_combine: list[tuple[str, int | None]]
    origin: FissionOrigin | None = None  # what it replaced (None inside an enclosing fission's sub-graph)
    # its F-Tree identity: the ops S stood for (nested fission expanded) and a D-node of the split
    # component on one of them
    members: frozenset[int] = frozenset()
    comp: tuple[int, int, int] | None = None

    def copy(self) -> FissionSpec:
        return FissionSpec(self.graph.copy(), self.n, list(self.in_dims), [tuple(c) for c in self.out_combine],
                           self.origin.copy() if self.origin is not None else None, self.members, self.comp)


@dataclass
class FissionOrigin:
    """What an F-Trans replaced, so that it can be taken back as a rule of its own after other rules
    ran (Disable, Lift and Mutate of MAGIS section 5.1): S's node ids, the split dimension's
    length, copies of the nodes it erased (S, and the value-free readers it rebuilt) as they were, in
    graph order, S's inputs and outputs in the order of the fission node's, the nodes it added besides itself
    and which of them (``aten.full``) stands for which erased value-free reader."""

    split: tuple[int, ...]
    length: int  # of the split dimension (n divides it)
    nodes: list[Node]
    inputs: list[TRef]  # what S read from outside, in the order of the fission node's first arguments
    outputs: list[TRef]
    aux: tuple[int, ...] = ()
    rebuilt: tuple[tuple[int, int], ...] = ()  # (full node, the reader it replaced)

    def copy(self) -> FissionOrigin:
        return FissionOrigin(self.split, self.length, [v.copy() for v in self.nodes], list(self.inputs),
                             list(self.outputs), self.aux, self.rebuilt)



class Node:
    """One operator: aten overload ``op`` (or placeholder / fission / store / load) with its
    arguments and output tensors.

    ``args`` / ``kwargs`` are assigned, never mutated in place: assigning them through the property
    (or the graph's primitives) keeps the graph's use lists and this node's cached inputs correct
    (``Graph.lint`` finds an in-place mutation).  ``inputs()`` is cached per assignment.
    """

    __slots__ = ("id", "name", "op", "kind", "_args", "_kwargs", "outputs", "module", "target",
                 "recompute_of", "fission", "_inputs", "_preds", "_graph")

    def __init__(self, id: int, name: str, op: str, kind: NodeKind = NodeKind.OP,
                 args: list[Any] | None = None, kwargs: dict[str, Any] | None = None,
                 outputs: list[TensorMeta] | None = None, module: str = "", target: str = "",
                 recompute_of: int | None = None, fission: FissionSpec | None = None) -> None:
        self.id = id
        self.name = name
        self.op = op  # aten overload ("aten.mm.default"), or "placeholder" / "fission" / "store" / "load"
        self.kind = kind
        self.outputs: list[TensorMeta] = list(outputs or [])
        self.module = module  # module path, e.g. "encoder.layer.3.attention"
        self.target = target  # placeholders: "param:<name>", "buffer:<name>", "input:<i>", ...
        self.recompute_of = recompute_of  # the op this one re-materialises (MAGIS section 5.2)
        self.fission = fission
        self._graph: Graph | None = None
        self._args: list[Any] = list(args or [])
        self._kwargs: dict[str, Any] = dict(kwargs or {})
        self._refresh()

    # ---- arguments and cached inputs ------------------------------------------------------------
    def _refresh(self) -> None:
        self._inputs = self.scan_inputs()
        self._preds = tuple(sorted({r.node for r in self._inputs}))

    def scan_inputs(self) -> tuple[TRef, ...]:
        """The tensor inputs found by walking the arguments now (``inputs()`` is the cached copy)."""
        found: list[TRef] = []
        _collect_refs(self._args, found)
        _collect_refs(list(self._kwargs.values()), found)
        return tuple(found)

    @property
    def args(self) -> list[Any]:
        return self._args

    @args.setter
    def args(self, value: list[Any]) -> None:
        self._set(list(value), self._kwargs)

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: dict[str, Any]) -> None:
        self._set(self._args, dict(value))

    def _set(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        if self._graph is not None:
            self._graph.set_args(self, args, kwargs)
        else:
            self._args, self._kwargs = args, kwargs
            self._refresh()

    def inputs(self) -> tuple[TRef, ...]:
        """Tensor inputs in argument order (duplicates kept)."""
        return self._inputs

    def refs(self) -> list[TRef]:
        return [TRef(self.id, i) for i in range(len(self.outputs))]

    @property
    def out(self) -> TensorMeta:
        return self.outputs[0]

    @property
    def out_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    def copy(self) -> Node:
        """A detached copy that shares nothing mutable (arguments, tensors, fission sub-graph)."""
        return Node(self.id, self.name, self.op, self.kind, copy_struct(self._args),
                    copy_struct(self._kwargs), [copy.copy(t) for t in self.outputs], self.module,
                    self.target, self.recompute_of, self.fission.copy() if self.fission else None)

    def same_as(self, other: Node) -> bool:
        """Equal in every field (ids included); fission sub-graphs compared structurally."""
        if (self.id, self.name, self.op, self.kind, self._args, self._kwargs, self.outputs, self.module,
                self.target, self.recompute_of) != (other.id, other.name, other.op, other.kind, other._args,
                                                    other._kwargs, other.outputs, other.module, other.target,
                                                    other.recompute_of):
            return False
        a, b = self.fission, other.fission
        if a is None or b is None:
            return a is b
        return (a.n, a.in_dims, [tuple(c) for c in a.out_combine]) == (
            b.n, b.in_dims, [tuple(c) for c in b.out_combine]) and a.graph.same_as(b.graph)

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.name}, {self.op})"


def _collect_refs(obj: Any, found: list[TRef]) -> None:
    if isinstance(obj, TRef):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect_refs(x, found)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect_refs(x, found)


def copy_struct(obj: Any) -> Any:
    """Copy an argument structure: new lists and dicts; TRefs, constants and scalars are immutable."""
    if isinstance(obj, list):
        return [copy_struct(x) for x in obj]
    if isinstance(obj, dict):
        return {k: copy_struct(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(copy_struct(x) for x in obj)
    return obj


# ---- the edit journal --------------------------------------------------------------------------
@dataclass
class Edit:
    """One primitive edit, with what it needs to be run backwards."""

    kind: str  # "add" | "erase" | "args" | "alias" | "output" | "origin"
    nid: int = -1
    node: Node | None = None  # "erase": the erased node
    position: int = -1  # "erase": its place in the graph's node order
    old: Any = None  # "args": (args, kwargs); "alias": (output index, alias); "output": (key, ref);
    # "origin": the node's former ``recompute_of``


@dataclass
class EditLog:
    """The primitive edits of one recording (``Graph.recording``), oldest first.  ``Graph.undo``
    runs them backwards, so every rule's inverse is its primitives in reverse."""

    edits: list[Edit] = field(default_factory=list)
    next_id: int = 0  # the graph's id counter when the recording started (restored by undo)
    places: _Places | None = field(default=None, repr=False, compare=False)  # from the first erase

    def added(self) -> list[int]:
        """Ids of nodes added (and still present at the end of the recording)."""
        gone = {e.nid for e in self.edits if e.kind == "erase"}
        return [e.nid for e in self.edits if e.kind == "add" and e.nid not in gone]

    def touched(self) -> set[int]:
        """Ids of every node added, erased or re-wired."""
        return {e.nid for e in self.edits if e.kind != "output"}


class _Places:
    """Node positions in a graph's node order while a recording erases nodes: the order at the
    first erase (``base``), a Fenwick tree counting the erased nodes of it, and the nodes added
    since (appended at the end), so that an erase's position costs O(log n), not a walk of the
    node table (a fission over a whole training step erases tens of thousands of nodes)."""

    def __init__(self, order: Iterable[int]) -> None:
        base = list(order)
        self.rank = {v: i for i, v in enumerate(base)}
        self.tree = [0] * (len(base) + 1)
        self.tail: list[int] = []  # added after the snapshot, in order

    def erase(self, nid: int) -> int:
        """The position ``nid`` has now; it is then gone from the order."""
        r = self.rank.pop(nid, None)
        if r is None:
            k = self.tail.index(nid)
            del self.tail[k]
            return len(self.rank) + k
        before, i = 0, r
        while i > 0:
            before += self.tree[i]
            i -= i & -i
        i = r + 1
        while i < len(self.tree):
            self.tree[i] += 1
            i += i & -i
        return r - before


class Graph:
    """A computation graph: nodes keyed by stable integer ids, plus named outputs.

    Node ids are assigned in traced order and never reused; ``nodes`` iterates in insertion order,
    which for an imported graph is the order PyTorch ran it.  Edit the graph only through its
    primitives -- ``add_node``, ``erase_node``, ``set_args`` (or assigning ``node.args``),
    ``replace_input``, ``replace_all_uses_with``, ``set_output`` -- which keep the use lists correct
    and, inside ``recording()``, journal every edit so that ``undo`` restores the graph exactly.
    ``nodes`` and ``outputs`` are for reading.  ``lint`` checks every invariant.
    """

    def __init__(self, name: str = "graph", meta: dict[str, Any] | None = None) -> None:
        self.name = name
        self.meta: dict[str, Any] = dict(meta or {})
        self.nodes: dict[int, Node] = {}
        self.outputs: dict[str, TRef] = {}
        self._next_id = 0
        self._uses: dict[int, dict[int, int]] = {}  # producer id -> {consumer id: number of refs}
        self._roots: dict[TRef, TRef] = {}
        self._copies: dict[int, set[int]] = {}  # op id -> ids of its recomputed copies
        self._by_op: dict[str, set[int]] = {}  # aten overload -> ids of the nodes that run it
        self._log: EditLog | None = None

    # ---- primitives ----------------------------------------------------------------------------
    def add_node(self, node: Node | None = None, *, check: bool = True, **fields: Any) -> Node:
        """Insert a node (a Node, or the fields of one; ``id`` defaults to a fresh id).  With
        ``check`` (default) every tensor it reads must already exist -- so the insertion order
        stays topological; loaders pass ``check=False`` and call ``validate`` afterwards."""
        if node is None:
            fields.setdefault("id", self._next_id)
            node = Node(**fields)
        if node.id in self.nodes:
            raise GraphError(f"duplicate node id {node.id}")
        if node._graph is not None:
            raise GraphError(f"node {node.name!r} already belongs to a graph")
        if check:
            for r in node.inputs():
                self._check_ref(r, node)
        self.nodes[node.id] = node
        node._graph = self
        self._by_op.setdefault(node.op, set()).add(node.id)
        self._next_id = max(self._next_id, node.id + 1)
        self._link(node, +1)
        if node.recompute_of is not None:
            self._copies.setdefault(node.recompute_of, set()).add(node.id)
        self._roots.clear()
        if self._log is not None:
            self._log.edits.append(Edit("add", node.id))
            if self._log.places is not None:
                self._log.places.tail.append(node.id)
        return node

    def erase_node(self, nid: int) -> Node:
        """Remove node ``nid``; refused while it has users or is a graph output.  Its recomputed
        copies become copies of the op it recomputes, or plain ops if it is an original (each
        change journaled, so ``undo`` restores them)."""
        node = self.nodes.get(nid)
        if node is None:
            raise GraphError(f"no node with id {nid}")
        users = self.users(nid)
        if users:
            names = ", ".join(repr(self.nodes[u].name) for u in users[:3])
            raise GraphError(f"cannot erase {node.name!r}: it still has users ({names})")
        if any(r.node == nid for r in self.outputs.values()):
            raise GraphError(f"cannot erase {node.name!r}: it is a graph output")
        for c in sorted(self._copies.get(nid, ())):
            self._set_origin(self.nodes[c], node.recompute_of)
        position = -1
        if self._log is not None:
            if self._log.places is None:
                self._log.places = _Places(self.nodes)
            position = self._log.places.erase(nid)
        self._link(node, -1)
        if node.recompute_of is not None:
            self._drop_copy(node.recompute_of, nid)
        del self.nodes[nid]
        self._by_op[node.op].discard(nid)
        self._uses.pop(nid, None)
        node._graph = None
        self._roots.clear()
        if self._log is not None:
            self._log.edits.append(Edit("erase", nid, node=node, position=position))
        return node

    def make_plain(self, c: int) -> None:
        """Make recomputed copy ``c`` a plain op (journaled); its own copies stay its copies."""
        self._set_origin(self.nodes[c], None)

    def promote_copy(self, c: int) -> int:
        """Make recomputed copy ``c`` the original of what it recomputes: the former original and its
        other copies become copies of ``c`` (the same values; journaled, so ``undo`` restores them).
        For an edit that erases an original but keeps a copy (an F-Trans of the instance in the
        backward).  Returns the former original's id."""
        node = self.nodes[c]
        v = node.recompute_of
        if v is None:
            raise GraphError(f"{node.name!r} is not a recomputed copy")
        if self.nodes[v].recompute_of is not None:
            raise GraphError(f"{node.name!r} copies {self.nodes[v].name!r}, itself a copy")
        self._set_origin(node, None)
        for o in self.copies(v):
            self._set_origin(self.nodes[o], c)
        self._set_origin(self.nodes[v], c)
        return v

    def set_args(self, node: Node | int, args: list[Any], kwargs: dict[str, Any] | None = None) -> None:
        """Replace a node's arguments (use lists follow)."""
        node = self.nodes[node] if isinstance(node, int) else node
        if node._graph is not self:
            raise GraphError(f"node {node.name!r} is not in this graph")
        kwargs = node._kwargs if kwargs is None else kwargs
        new = Node(node.id, node.name, node.op, args=args, kwargs=kwargs)  # for its refs only
        for r in new.inputs():
            self._check_ref(r, node)
        if self._log is not None:
            self._log.edits.append(Edit("args", node.id, old=(node._args, node._kwargs)))
        self._link(node, -1)
        node._args, node._kwargs = args, kwargs
        node._refresh()
        self._link(node, +1)

    def replace_input(self, node: Node | int, old: TRef, new: TRef) -> bool:
        """Make ``node`` read ``new`` wherever it read ``old``; True if anything changed."""
        node = self.nodes[node] if isinstance(node, int) else node
        if old not in node.inputs():
            return False
        fn = (lambda r: new if r == old else r)  # noqa: E731
        self.set_args(node, map_refs(node._args, fn), map_refs(node._kwargs, fn))
        for j, t in enumerate(node.outputs):  # a view of ``old`` becomes a view of ``new``
            if t.alias == old:
                self._set_alias(node, j, new)
        return True

    def _set_alias(self, node: Node, j: int, alias: TRef | None) -> None:
        if self._log is not None:
            self._log.edits.append(Edit("alias", node.id, old=(j, node.outputs[j].alias)))
        t = copy.copy(node.outputs[j])
        t.alias = alias
        node.outputs[j] = t
        self._roots.clear()

    def _set_origin(self, node: Node, origin: int | None) -> None:
        if self._log is not None:
            self._log.edits.append(Edit("origin", node.id, old=node.recompute_of))
        if node.recompute_of is not None:
            self._drop_copy(node.recompute_of, node.id)
        node.recompute_of = origin
        if origin is not None:
            self._copies.setdefault(origin, set()).add(node.id)

    def _drop_copy(self, origin: int, c: int) -> None:
        copies = self._copies[origin]
        copies.discard(c)
        if not copies:
            del self._copies[origin]

    def replace_all_uses_with(self, old: TRef, new: TRef, only: Iterable[int] | None = None,
                              outputs: bool = True) -> list[int]:
        """Every reader of ``old`` (or those in ``only``) reads ``new`` instead; graph outputs
        follow when ``outputs``.  Returns the ids of the re-wired nodes (sorted)."""
        self._check_ref(new, None)
        allowed = None if only is None else set(only)
        changed = []
        for u in self.users(old.node):
            if u == new.node or (allowed is not None and u not in allowed):
                continue
            if self.replace_input(u, old, new):
                changed.append(u)
        if outputs:
            for k, r in list(self.outputs.items()):
                if r == old:
                    self.set_output(k, new)
        return changed

    def set_output(self, key: str, ref: TRef | None) -> None:
        """Set (or with ``None`` remove) graph output ``key``."""
        if ref is not None:
            self._check_ref(ref, None)
        if self._log is not None:
            self._log.edits.append(Edit("output", old=(key, self.outputs.get(key))))
        if ref is None:
            self.outputs.pop(key, None)
        else:
            self.outputs[key] = ref

    def _check_ref(self, r: TRef, node: Node | None) -> None:
        where = f"node {node.name!r}" if node is not None else "edit"
        p = self.nodes.get(r.node)
        if p is None:
            raise GraphError(f"{where} uses missing node id {r.node}")
        if not 0 <= r.index < len(p.outputs):
            raise GraphError(f"{where} uses output {r.index} of {p.name!r}, which has {len(p.outputs)} outputs")

    def _link(self, node: Node, sign: int) -> None:
        for r in node.inputs():
            users = self._uses.setdefault(r.node, {})
            c = users.get(node.id, 0) + sign
            if c:
                users[node.id] = c
            else:
                del users[node.id]

    # ---- journal -------------------------------------------------------------------------------
    @contextmanager
    def recording(self) -> Iterator[EditLog]:
        """Journal the primitive edits made inside the block (recordings do not nest)."""
        if self._log is not None:
            raise GraphError("graph edits are already being recorded")
        log = EditLog(next_id=self._next_id)
        self._log = log
        try:
            yield log
        finally:
            self._log = None

    def undo(self, log: EditLog) -> None:
        """Run the edits of ``log`` backwards: the graph is exactly as before the recording (node
        order, id counter and use lists included)."""
        if self._log is not None:
            raise GraphError("cannot undo while recording")
        order: list[int] | None = None  # the node order, kept apart once a node must move
        for e in reversed(log.edits):
            if e.kind == "add":
                self.erase_node(e.nid)
                if order is not None:
                    order.remove(e.nid)
            elif e.kind == "erase":
                node = e.node
                assert node is not None
                self.add_node(node)
                if order is None and e.position != len(self.nodes) - 1:
                    order = list(self.nodes)[:-1]
                if order is not None:
                    order.insert(e.position, node.id)
            elif e.kind == "args":
                self.set_args(e.nid, *e.old)
            elif e.kind == "alias":
                self._set_alias(self.nodes[e.nid], *e.old)
            elif e.kind == "origin":
                self._set_origin(self.nodes[e.nid], e.old)
            else:
                key, ref = e.old
                self.set_output(key, ref)
        if order is not None:  # one re-ordering of the node table, not one per restored node
            self.nodes = {i: self.nodes[i] for i in order}
        self._next_id = log.next_id

    def new_id(self) -> int:
        return self._next_id

    def invalidate(self) -> None:
        """Forget cached alias roots (after changing an output's ``TensorMeta.alias`` in place)."""
        self._roots.clear()

    # ---- queries -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, nid: int) -> Node:
        return self.nodes[nid]

    def tensor(self, ref: TRef) -> TensorMeta:
        return self.nodes[ref.node].outputs[ref.index]

    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == NodeKind.PLACEHOLDER]

    def ops(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind != NodeKind.PLACEHOLDER]

    def preds(self, nid: int) -> tuple[int, ...]:
        """Distinct producer node ids of ``nid``'s inputs (sorted)."""
        return self.nodes[nid]._preds

    def users(self, nid: int) -> list[int]:
        """Distinct consumer node ids of any output of ``nid`` (sorted)."""
        u = self._uses.get(nid)
        return sorted(u) if u else []

    def nodes_of(self, op: str) -> list[int]:
        """Ids of the nodes that run ``op`` (an aten overload, or "placeholder", ...), sorted."""
        ids = self._by_op.get(op)
        return sorted(ids) if ids else []

    def copies(self, nid: int) -> list[int]:
        """Ids of the recomputed copies of op ``nid`` (sorted)."""
        c = self._copies.get(nid)
        return sorted(c) if c else []

    def recomputed(self) -> list[int]:
        """Ids of the ops that have recomputed copies (sorted)."""
        return sorted(self._copies)

    def readers(self, ref: TRef) -> list[int]:
        """Ids of the nodes that read tensor ``ref`` (sorted)."""
        return [u for u in self.users(ref.node) if ref in self.nodes[u].inputs()]

    def storage_root(self, ref: TRef) -> TRef:
        """The tensor that owns the storage ``ref`` lives in (itself unless it is a view)."""
        root = self._roots.get(ref)
        if root is None:
            cur = ref
            seen = set()
            while (alias := self.tensor(cur).alias) is not None:
                if cur in seen:
                    raise GraphError(f"alias cycle at {cur}")
                seen.add(cur)
                cur = alias
            root = cur
            self._roots[ref] = root
        return root

    def output_refs(self) -> set[TRef]:
        return set(self.outputs.values())

    def topo_order(self) -> list[int]:
        """The insertion (traced) order if it is topological, else ``topo.pull_order``: nodes a
        transformation appended run right before their first reader."""
        order = list(self.nodes)
        pos = {nid: i for i, nid in enumerate(order)}
        nodes = self.nodes
        if all(pos[p] < i for i, nid in enumerate(order) for p in nodes[nid]._preds):
            return order
        return pull_order(self)

    def by_name(self, name: str) -> Node:
        for n in self.nodes.values():
            if n.name == name:
                return n
        raise KeyError(name)

    def weight_bytes(self) -> int:
        return sum(
            t.nbytes for n in self.placeholders() for t in n.outputs
            if t.kind in (TensorKind.WEIGHT, TensorKind.OPTIMIZER_STATE)
        )

    # ---- validation ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Check edges, aliases, node contracts and acyclicity; raise GraphError with a clear
        message (the first problem ``lint`` finds)."""
        problems = self.lint_problems(limit=1)
        if problems:
            raise GraphError(problems[0])

    def lint(self) -> None:
        """Raise GraphError listing every broken invariant (at most 10)."""
        problems = self.lint_problems(limit=10)
        if problems:
            raise GraphError("; ".join(problems))

    def lint_problems(self, limit: int | None = None) -> list[str]:
        """Every broken invariant: dangling edges and aliases, stale use lists or cached inputs, a
        placeholder with inputs, contracts of recompute / store / load / fission nodes, graph
        outputs, cycles."""
        return lint_graph(self, limit)

    def same_as(self, other: Graph) -> bool:
        """Structurally identical: same nodes (ids, order and every field) and outputs."""
        if list(self.nodes) != list(other.nodes) or self.outputs != other.outputs:
            return False
        return all(a.same_as(other.nodes[i]) for i, a in self.nodes.items())

    def copy(self) -> Graph:
        """A deep copy that shares nothing mutable with this graph (fission sub-graphs included)."""
        g = Graph(self.name, copy.deepcopy(self.meta))
        for n in self.nodes.values():
            g.add_node(n.copy(), check=False)
        g.outputs = dict(self.outputs)
        g._next_id = self._next_id
        return g
