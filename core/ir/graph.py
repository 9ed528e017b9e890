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
* ``Node.recompute_of`` -- a re-materialised copy of another op (section 5.2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class TensorKind(StrEnum):
    INPUT = "input"
    WEIGHT = "weight"
    ACTIVATION = "activation"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer_state"
    OUTPUT = "output"


class NodeKind(StrEnum):
    PLACEHOLDER = "placeholder"
    OP = "op"
    FISSION = "fission"
    STORE = "store"
    LOAD = "load"


DTYPE_BYTES: dict[str, float] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}


class GraphError(ValueError):
    """A graph is malformed (bad file, cycle, missing shape, dangling edge...)."""


@dataclass(frozen=True, order=True)
class TRef:
    """Reference to output ``index`` of node ``node`` -- an edge of the graph."""

    node: int
    index: int = 0

    def __repr__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}.{self.index}"


@dataclass
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str
    kind: TensorKind = TensorKind.ACTIVATION
    alias: TRef | None = None  # the tensor whose storage this one shares (a view)
    device: str = "device"  # "device" (accelerator memory) or "host" (swapped out)
    storage_bytes: int | None = None  # when the op's storage is larger than the tensor (see ops)

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        if self.dtype not in DTYPE_BYTES:
            raise GraphError(f"unknown dtype {self.dtype!r}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of this tensor's own storage (0 for a view: it shares its base's)."""
        if self.alias is not None:
            return 0
        if self.storage_bytes is not None:
            return self.storage_bytes
        return int(self.numel * self.itemsize)

    @property
    def logical_bytes(self) -> int:
        return int(self.numel * self.itemsize)


@dataclass
class FissionSpec:
    """An F-Trans f = (S, D, n) kept as one hierarchical node (MAGIS section 4.2-4.3).

    ``graph`` holds one copy of the split sub-graph S; its placeholders correspond, in order, to the
    tensor inputs of the fission node.  ``in_dims[i]`` is the dimension along which input i is
    sliced (``None``: shared, e.g. a weight).  ``out_combine[j]`` says how the n partial results of
    output j are merged: ``("cat", d)`` concatenates along d, ``("sum", None)`` adds them (a reduce
    axis, e.g. weight gradients along the batch).
    """

    graph: Graph
    n: int
    in_dims: list[int | None]
    out_combine: list[tuple[str, int | None]]


@dataclass(eq=False)
class Node:
    id: int
    name: str
    op: str  # aten overload ("aten.mm.default"), or "placeholder" / "fission" / "store" / "load"
    kind: NodeKind = NodeKind.OP
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: list[TensorMeta] = field(default_factory=list)
    module: str = ""  # module path, e.g. "encoder.layer.3.attention"
    target: str = ""  # placeholders: "param:<name>", "buffer:<name>", "input:<i>", ...
    recompute_of: int | None = None
    fission: FissionSpec | None = None

    @property
    def out(self) -> TensorMeta:
        return self.outputs[0]

    def inputs(self) -> list[TRef]:
        """Tensor inputs in argument order (duplicates kept)."""
        found: list[TRef] = []
        _collect_refs(self.args, found)
        _collect_refs(list(self.kwargs.values()), found)
        return found

    def refs(self) -> list[TRef]:
        return [TRef(self.id, i) for i in range(len(self.outputs))]

    @property
    def out_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)

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


def map_refs(obj: Any, fn) -> Any:
    """Rebuild an args structure with every TRef replaced by ``fn(ref)``."""
    if isinstance(obj, TRef):
        return fn(obj)
    if isinstance(obj, list):
        return [map_refs(x, fn) for x in obj]
    if isinstance(obj, tuple):
        return tuple(map_refs(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_refs(v, fn) for k, v in obj.items()}
    return obj


class Graph:
    """A computation graph: nodes keyed by stable integer ids, plus named outputs.

    Node ids are assigned in traced order and never reused; ``nodes`` iterates in insertion order,
    which for an imported graph is the order PyTorch ran it.
    """

    def __init__(self, name: str = "graph", meta: dict[str, Any] | None = None) -> None:
        self.name = name
        self.meta: dict[str, Any] = dict(meta or {})
        self.nodes: dict[int, Node] = {}
        self.outputs: dict[str, TRef] = {}
        self._next_id = 0
        self._users: dict[int, list[int]] | None = None
        self._roots: dict[TRef, TRef] | None = None

    # ---- construction -------------------------------------------------------------------------
    def add_node(self, node: Node | None = None, **fields: Any) -> Node:
        if node is None:
            fields.setdefault("id", self._next_id)
            node = Node(**fields)
        if node.id in self.nodes:
            raise GraphError(f"duplicate node id {node.id}")
        self.nodes[node.id] = node
        self._next_id = max(self._next_id, node.id + 1)
        self.invalidate()
        return node

    def remove_node(self, nid: int) -> None:
        del self.nodes[nid]
        self.invalidate()

    def new_id(self) -> int:
        return self._next_id

    def invalidate(self) -> None:
        self._users = None
        self._roots = None

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

    def preds(self, nid: int) -> list[int]:
        """Distinct producer node ids of ``nid``'s inputs (sorted)."""
        return sorted({r.node for r in self.nodes[nid].inputs()})

    def users(self, nid: int) -> list[int]:
        """Distinct consumer node ids of any output of ``nid`` (sorted)."""
        if self._users is None:
            users: dict[int, set[int]] = {i: set() for i in self.nodes}
            for n in self.nodes.values():
                for r in n.inputs():
                    users[r.node].add(n.id)
            self._users = {i: sorted(s) for i, s in users.items()}
        return self._users[nid]

    def storage_root(self, ref: TRef) -> TRef:
        """The tensor that owns the storage ``ref`` lives in (itself unless it is a view)."""
        if self._roots is None:
            self._roots = {}
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
        """The insertion (traced) order if it is topological, else a stable Kahn order."""
        order = list(self.nodes)
        pos = {nid: i for i, nid in enumerate(order)}
        if all(pos[p] < pos[n] for n in order for p in self.preds(n)):
            return order
        return kahn_order(self)

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
        """Check edges, shapes, aliases and acyclicity; raise GraphError with a clear message."""
        for n in self.nodes.values():
            if n.kind == NodeKind.PLACEHOLDER and n.inputs():
                raise GraphError(f"placeholder {n.name!r} has inputs")
            for r in n.inputs():
                if r.node not in self.nodes:
                    raise GraphError(f"node {n.name!r} uses missing node id {r.node}")
                if not 0 <= r.index < len(self.nodes[r.node].outputs):
                    raise GraphError(f"node {n.name!r} uses output {r.index} of "
                                     f"{self.nodes[r.node].name!r}, which has "
                                     f"{len(self.nodes[r.node].outputs)} outputs")
            for t in n.outputs:
                if t.alias is not None and t.alias.node not in self.nodes:
                    raise GraphError(f"node {n.name!r} aliases missing node id {t.alias.node}")
            if n.kind == NodeKind.FISSION:
                if n.fission is None:
                    raise GraphError(f"fission node {n.name!r} has no sub-graph")
                if n.fission.n < 1:
                    raise GraphError(f"fission node {n.name!r} has n={n.fission.n}")
                n.fission.graph.validate()
        for key, r in self.outputs.items():
            if r.node not in self.nodes or r.index >= len(self.nodes[r.node].outputs):
                raise GraphError(f"graph output {key!r} refers to a missing tensor {r}")
        kahn_order(self)  # raises on a cycle

    def copy(self) -> Graph:
        import copy as _copy

        g = Graph(self.name, _copy.deepcopy(self.meta))
        for n in self.nodes.values():
            g.add_node(_copy.copy(n))
            g.nodes[n.id].args = _copy.deepcopy(n.args)
            g.nodes[n.id].kwargs = _copy.deepcopy(n.kwargs)
            g.nodes[n.id].outputs = [_copy.copy(t) for t in n.outputs]
        g.outputs = dict(self.outputs)
        g._next_id = self._next_id
        return g


def kahn_order(g: Graph, nodes: Iterable[int] | None = None) -> list[int]:
    """Topological order by Kahn's algorithm, ties broken by node id; raises GraphError on a cycle."""
    import heapq

    ids = list(g.nodes) if nodes is None else list(nodes)
    idset = set(ids)
    indeg = {i: 0 for i in ids}
    for i in ids:
        indeg[i] = sum(1 for p in g.preds(i) if p in idset)
    heap = [i for i in ids if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        out.append(i)
        for u in g.users(i):
            if u in idset:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(heap, u)
    if len(out) != len(ids):
        stuck = sorted(i for i in ids if indeg[i] > 0)[:5]
        names = ", ".join(repr(g.nodes[i].name) for i in stuck)
        raise GraphError(f"graph has a cycle (through {names})")
    return out


@dataclass(frozen=True)
class TorchConst:
    """A torch constant in op arguments: ("dtype", "float32"), ("layout", "strided"),
    ("memory_format", "contiguous_format") or ("device", "cpu")."""

    kind: str
    value: str

    def __repr__(self) -> str:
        return f"torch.{self.value}" if self.kind != "device" else f"device({self.value!r})"
