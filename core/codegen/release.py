"""What the code generator decides before writing a line: variable names, the script's inputs, and
when each Python name is released.

Release rule (docs/design.md, "a storage is freed when its last alias dies"; ``core.analysis.lifetimes``):
the simulator frees the storage of root tensor ``u`` after step ``F(u)`` = the last step that
creates or reads ``u`` or any view of ``u`` (graph outputs: never).  In Python a view object keeps
its base storage alive, so the storage dies when the last *name* bound to any of its aliases is
deleted.  Deleting every name right after its own last use therefore frees each storage exactly
after ``max`` over its aliases of their last uses, which is ``F(u)``.  Names of graph inputs are
never deleted: the caller holds those tensors for the whole step (resident in the simulator).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..analysis.lifetimes import storage_table
from ..ir.graph import Graph, Node, NodeKind, TRef

# names the generated code uses itself
RESERVED = frozenset({"aten", "torch", "tensors", "device", "swap", "run", "main", "math", "sys", "json",
                      "argparse", "time", "statistics", "META", "INPUTS", "OUTPUTS", "_step", "_"})


def sanitize(name: str) -> str:
    """A Python identifier close to ``name`` (``encoder.layer.0.weight`` -> ``encoder_layer_0_weight``)."""
    s = re.sub(r"\W", "_", name)
    s = re.sub(r"_+", "_", s).strip("_") or "v"
    if s[0].isdigit():
        s = "v" + s if s.startswith("_") else "v_" + s
    if keyword.iskeyword(s) or s in RESERVED or s.startswith("__"):
        s += "_"
    return s


class Namer:
    """Unique readable identifiers (sanitised node names, ``_2``-suffixed on collision)."""

    def __init__(self) -> None:
        self.used: set[str] = set(RESERVED)

    def fresh(self, name: str) -> str:
        base = sanitize(name)
        s, k = base, 2
        while s in self.used or keyword.iskeyword(s):
            s, k = f"{base}_{k}", k + 1
        self.used.add(s)
        return s


ADAM_STATE = ("adam_m", "adam_v")  # Adam's moments of a parameter (``torch_import.append_adam``)


def input_key(node: Node) -> str:
    """The key of a placeholder in the script's ``tensors`` dict: parameter and buffer names exactly
    as ``named_parameters()`` / ``named_buffers()`` give them, ``input_<i>`` for example inputs."""
    kind, _, rest = node.target.partition(":")
    if kind in ("param", "buffer") and rest:
        return rest
    if kind == "input" and rest.isdigit():
        return f"input_{rest}"
    if kind in ADAM_STATE and rest:
        return node.target  # "adam_m:<parameter>", as the graph's outputs name the new moments
    return node.name


def input_kind(node: Node) -> str:
    kind = node.target.partition(":")[0]
    return kind if kind in ("param", "buffer") else "input"


def variable_names(g: Graph, order: Sequence[int]) -> dict[TRef, str]:
    """A name per tensor: placeholders by their input key, op outputs by node name (``<name>_out<j>``
    for the outputs of a multi-output op); assigned in schedule order so names are stable."""
    namer = Namer()
    names: dict[TRef, str] = {}
    for n in g.placeholders():
        for r in n.refs():
            names[r] = namer.fresh(input_key(n))
    for nid in order:
        n = g[nid]
        if len(n.outputs) == 1:
            names[TRef(nid, 0)] = namer.fresh(n.name)
        else:
            for j in range(len(n.outputs)):
                names[TRef(nid, j)] = namer.fresh(f"{n.name}_out{j}")
    return names


@dataclass
class ReleasePlan:
    """``after[i]``: op outputs whose name is deleted right after step ``i``; ``used``: the tensors
    some op or graph output reads (unused outputs of a multi-output op are bound to ``_``)."""

    after: list[list[TRef]]
    used: set[TRef]


def release_plan(g: Graph, order: Sequence[int], copy_done: Mapping[int, int] | None = None) -> ReleasePlan:
    """Delete every op-output name after its last use (see the module docstring): the uses are
    ``lifetimes.storage_table``'s, so the storage of root u dies after ``max`` over its aliases of
    their last uses -- the free step of ``lifetimes.storage_events``.

    ``copy_done`` (the simulator's ``SimResult.copy_done``: copy step -> last step issued before the
    copy completes) holds a STORE's input and a LOAD's output until then, as the simulator does; on a
    GPU ``record_stream`` would keep the storage anyway, and on the CPU (where copies are synchronous)
    the measured live bytes then follow the simulated ones step by step."""
    pos = {nid: i for i, nid in enumerate(order)}
    keep = set(g.outputs.values())
    uses = storage_table(g).uses
    done = copy_done or {}
    used: set[TRef] = set(keep)
    after: list[list[TRef]] = [[] for _ in order]
    for i, nid in enumerate(order):
        for r in g[nid].refs():
            readers = uses.get(r, ())
            if readers:
                used.add(r)
            last = done.get(i, i)
            for u in readers:
                p = pos.get(u)
                if p is None:
                    raise ValueError(f"{g[u].name!r} reads {g[nid].name!r} but is not scheduled")
                last = max(last, done.get(p, p))
            if r not in keep:
                after[last].append(r)
    for r in uses:
        if g[r.node].kind == NodeKind.PLACEHOLDER:
            used.add(r)
        elif r.node not in pos:
            raise ValueError(f"{g[uses[r][0]].name!r} reads {g[r.node].name!r}, which is not scheduled")
    for lst in after:
        lst.sort()
    return ReleasePlan(after, used)


# ---- valid ranges of integer inputs ------------------------------------------------------------
# (op, position of the index argument) -> how to get the exclusive upper bound from the node
def _nll_classes(g: Graph, n: Node, self_pos: int) -> int | None:
    a = n.args[self_pos] if self_pos < len(n.args) else None
    if not isinstance(a, TRef):
        return None
    shape = g.tensor(a).shape
    return shape[1] if len(shape) >= 2 else (shape[0] if shape else None)


def _dim_size(g: Graph, n: Node, self_pos: int, dim_pos: int) -> int | None:
    a = n.args[self_pos] if self_pos < len(n.args) else None
    d = n.args[dim_pos] if dim_pos < len(n.args) else n.kwargs.get("dim")
    if not isinstance(a, TRef) or not isinstance(d, int):
        return None
    shape = g.tensor(a).shape
    return shape[d] if -len(shape) <= d < len(shape) else None


def _index_bounds(g: Graph, n: Node) -> list[tuple[object, int | None]]:
    """(argument holding indices, exclusive upper bound) pairs of an index-consuming op."""
    op, a = n.op, n.args

    def arg(i: int) -> object:
        return a[i] if i < len(a) else None

    if op == "aten.embedding.default":
        w = arg(0)
        return [(arg(1), g.tensor(w).shape[0] if isinstance(w, TRef) else None)]
    if op == "aten.embedding_dense_backward.default":
        return [(arg(1), arg(2) if isinstance(arg(2), int) else None)]
    if op in ("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default"):
        return [(arg(1), _nll_classes(g, n, 0))]
    if op in ("aten.nll_loss_backward.default", "aten.nll_loss2d_backward.default"):
        return [(arg(2), _nll_classes(g, n, 1))]
    if op in ("aten.index_select.default", "aten.gather.default"):
        return [(arg(2), _dim_size(g, n, 0, 1))]
    if op.startswith("aten.scatter") and op.split(".")[1] in ("scatter", "scatter_add", "scatter_reduce"):
        return [(arg(2), _dim_size(g, n, 0, 1))]
    if op == "aten.index.Tensor" and isinstance(arg(0), TRef) and isinstance(arg(1), (list, tuple)):
        shape = g.tensor(arg(0)).shape
        return [(ix, shape[k]) for k, ix in enumerate(arg(1)) if k < len(shape)]
    return []


_VALUE_PRESERVING = {"aten.clone.default", "aten._to_copy.default", "aten.lift_fresh_copy.default",
                     "aten.expand.default", "aten.repeat.default"}


def _source_placeholder(g: Graph, ref: TRef) -> TRef | None:
    """The placeholder whose values ``ref`` carries unchanged (through views and copies), if any."""
    seen = 0
    while seen < 64:
        node = g[ref.node]
        if node.kind == NodeKind.PLACEHOLDER:
            return ref
        t = g.tensor(ref)
        if t.alias is not None:
            ref = t.alias
        elif node.op in _VALUE_PRESERVING and node.args and isinstance(node.args[0], TRef):
            ref = node.args[0]
        else:
            return None
        seen += 1
    return None


def integer_ranges(g: Graph) -> dict[int, tuple[int, int]]:
    """Valid ``[low, high)`` per integer placeholder node id, from the ops that index with it
    (embedding rows, classes of a loss, size of a gathered dim); the tightest bound wins.  Ops
    inside a fission node's sub-graph count too: a sub-graph placeholder's range is that of the
    fission node's input in the same position (slicing a part keeps the values), so a plan's
    script draws the same inputs as the imported graph's."""
    hi: dict[int, int] = {}

    def bound_by(ix: object, bound: int | None) -> None:
        if not isinstance(ix, TRef) or not bound or bound <= 0:
            return
        src = _source_placeholder(g, ix)
        if src is None or g.tensor(src).dtype not in ("int64", "int32", "int16", "int8", "uint8"):
            return
        hi[src.node] = min(hi.get(src.node, bound), int(bound))

    for n in g.ops():
        if n.kind == NodeKind.FISSION and n.fission is not None:
            inner = integer_ranges(n.fission.graph)
            for ph, r in zip(n.fission.graph.placeholders(), n.inputs(), strict=False):
                if ph.id in inner:
                    bound_by(r, inner[ph.id][1])
            continue
        for ix, bound in _index_bounds(g, n):
            bound_by(ix, bound)
    return {nid: (0, b) for nid, b in hi.items()}
