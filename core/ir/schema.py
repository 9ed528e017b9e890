"""What a graph file may contain: the checks ``io.loads`` runs before it builds a graph.

A file is untrusted input.  Everything analysis, the simulator, the schedulers and codegen take for
granted is checked here, on the parsed JSON, before any object is built:

* the size of the document (decompressed), its nesting depth, the number of nodes and edges;
* the type of every field (ids and indices are ints, names strings, shapes lists of ints...);
* ids and indices in range, shapes finite with every tensor's bytes -- and their sum -- well inside
  int64, dtypes, kinds and devices from the known sets;
* encoded argument values (``$t``, ``$c``, ``$f``, ``$tuple``, ``$dict``) well formed, torch
  constants plain identifiers (they are written into exported scripts as ``torch.<value>``);
* a view aliases one of the tensors its node reads (so a storage is allocated before any view of
  it is used); dangling edges and aliases, alias cycles and graph cycles are ``Graph.lint``'s.

A problem raises :class:`GraphError` with one line that says where it is.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass
from typing import Any

from .types import DTYPE_BYTES, GraphError, NodeKind, TensorKind

NODE_KINDS = frozenset(k.value for k in NodeKind)
TENSOR_KINDS = frozenset(k.value for k in TensorKind)
DEVICES = frozenset({"device", "host"})
CONST_KINDS = frozenset({"dtype", "layout", "memory_format", "device"})
DEVICE_NAME = re.compile(r"[A-Za-z0-9_]+(:[0-9]+)?")
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """Bounds on what a graph file may hold, and so on the memory and time parsing it takes (the
    largest sample graph, a 9k-node BTLM-3B training step, is 2 MB of JSON, depth 12, ~30k edges)."""

    max_bytes: int = 32 * 2**20  # the JSON text, after decompression
    max_depth: int = 64  # nesting of JSON arrays / objects
    max_containers: int = 2_000_000  # JSON arrays + objects (each one a Python list / dict)
    max_values: int = 8_000_000  # JSON values (commas + 1, roughly)
    max_nodes: int = 250_000  # fission sub-graphs included
    max_edges: int = 2_000_000  # tensor references in arguments
    max_outputs: int = 4096  # output tensors of one node
    max_rank: int = 64  # dims of one tensor
    max_string: int = 4096  # characters of a name, op, module or target
    max_tensor_bytes: int = 2**53  # one tensor's storage (8 PiB): exact in a float64
    max_total_bytes: int = 2**56  # every storage of the graph together (64 PiB), far from int64's limit
    max_id: int = 2**31 - 1  # node ids
    max_fission_parts: int = 2**20


DEFAULT_LIMITS = Limits()


def shown(s: Any, limit: int = 60) -> str:
    """``s`` for an error message: repr (control characters and lone surrogates escaped), cut."""
    r = repr(s)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _member(v: Any, names: Any) -> bool:
    return isinstance(v, str) and v in names


def _is_int(v: Any) -> bool:
    return type(v) is int  # not bool


class _Checker:
    def __init__(self, limits: Limits) -> None:
        self.lim = limits
        self.nodes = 0
        self.edges = 0
        self.total_bytes = 0

    # ---- scalars ---------------------------------------------------------------------------------
    def int_in(self, v: Any, lo: int, hi: int, where: str) -> int:
        if not _is_int(v):
            raise GraphError(f"{where} must be an integer, not {_kind(v)}")
        if not lo <= v <= hi:
            raise GraphError(f"{where} is {shown(v)}, outside [{lo}, {hi}]")
        return v

    def string(self, v: Any, where: str, empty: bool = True) -> str:
        if not isinstance(v, str):
            raise GraphError(f"{where} must be a string, not {_kind(v)}")
        if len(v) > self.lim.max_string:
            raise GraphError(f"{where} is longer than {self.lim.max_string} characters")
        if not empty and not v:
            raise GraphError(f"{where} is empty")
        return v

    def ref(self, v: Any, where: str) -> None:
        if not isinstance(v, list) or len(v) != 2:
            raise GraphError(f"{where} must be a [node id, output index] pair")
        self.int_in(v[0], 0, self.lim.max_id, f"{where} node id")
        self.int_in(v[1], 0, self.lim.max_outputs - 1, f"{where} output index")

    # ---- argument values -------------------------------------------------------------------------
    def value(self, v: Any, where: str) -> None:
        if v is None or isinstance(v, bool):
            return
        if _is_int(v):
            if not -INT64_MAX - 1 <= v <= INT64_MAX:
                raise GraphError(f"{where}: integer {shown(v)} does not fit in int64")
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                raise GraphError(f"{where}: non-finite number {v!r}")
            return
        if isinstance(v, str):
            self.string(v, where)
            return
        if isinstance(v, list):
            for i, x in enumerate(v):
                self.value(x, f"{where}[{i}]")
            return
        if not isinstance(v, dict):
            raise GraphError(f"{where}: unexpected {_kind(v)}")
        if len(v) != 1:
            raise GraphError(f"{where}: an encoded value has exactly one key, not {shown(sorted(v), 80)}")
        (tag, x), = v.items()
        if tag == "$t":
            self.edges += 1
            if self.edges > self.lim.max_edges:
                raise GraphError(f"more than {self.lim.max_edges:,} tensor references")
            self.ref(x, f"{where} tensor reference")
        elif tag == "$c":
            if not (isinstance(x, list) and len(x) == 2 and all(isinstance(s, str) for s in x)):
                raise GraphError(f"{where}: a torch constant is a [kind, value] pair of strings")
            kind, val = x
            if kind not in CONST_KINDS:
                raise GraphError(f"{where}: unknown torch constant kind {shown(kind)}")
            ok = DEVICE_NAME.fullmatch(val) if kind == "device" else (val.isidentifier() and val.isascii())
            if not ok or len(val) > 64:
                raise GraphError(f"{where}: bad torch {kind} {shown(val)}")
        elif tag == "$f":
            if x not in ("inf", "-inf", "nan"):
                raise GraphError(f"{where}: bad encoded float {shown(x)}")
        elif tag == "$tuple":
            if not isinstance(x, list):
                raise GraphError(f"{where}: $tuple holds an array, not {_kind(x)}")
            for i, y in enumerate(x):
                self.value(y, f"{where}[{i}]")
        elif tag == "$dict":
            if not isinstance(x, dict):
                raise GraphError(f"{where}: $dict holds an object, not {_kind(x)}")
            for k, y in x.items():
                self.string(k, f"{where} key")
                self.value(y, f"{where}[{shown(k, 30)}]")
        else:
            raise GraphError(f"{where}: unknown encoded value {shown(tag, 30)}")

    # ---- tensors ---------------------------------------------------------------------------------
    def tensor(self, t: Any, where: str) -> None:
        lim = self.lim
        if not isinstance(t, dict):
            raise GraphError(f"{where} must be an object, not {_kind(t)}")
        shape = t.get("shape")
        if not isinstance(shape, list):
            raise GraphError(f"{where} has no shape" if shape is None else f"{where}: shape must be an array")
        if len(shape) > lim.max_rank:
            raise GraphError(f"{where}: shape has {len(shape)} dims (at most {lim.max_rank})")
        for s in shape:
            if not _is_int(s) or s < 0:
                raise GraphError(f"{where}: bad shape {shown(shape, 80)} (sizes are integers >= 0)")
        dtype = t.get("dtype")
        if not _member(dtype, DTYPE_BYTES):
            raise GraphError(f"{where} has no dtype" if dtype is None else f"{where}: unknown dtype {shown(dtype)}")
        if not _member(t.get("kind", "activation"), TENSOR_KINDS):
            raise GraphError(f"{where}: unknown tensor kind {shown(t.get('kind'))}")
        if not _member(t.get("device", "device"), DEVICES):
            raise GraphError(f"{where}: device must be 'device' or 'host', not {shown(t.get('device'))}")
        # bytes: every dim bounded first, so the product never grows past a few hundred bits
        nbytes = DTYPE_BYTES[dtype]
        for s in shape:
            nbytes *= s
            if nbytes > lim.max_tensor_bytes:
                raise GraphError(f"{where}: shape {shown(shape, 80)} of {dtype} is larger than "
                                 f"{lim.max_tensor_bytes:,} bytes")
        alias = t.get("alias")
        if alias is not None:
            self.ref(alias, f"{where} alias")
        sb = t.get("storage_bytes")
        if sb is not None:
            self.int_in(sb, 0, lim.max_tensor_bytes, f"{where} storage_bytes")
            nbytes = sb
        if alias is None:
            self.total_bytes += int(nbytes)
            if self.total_bytes > lim.max_total_bytes:
                raise GraphError(f"the tensors of the graph add up to more than {lim.max_total_bytes:,} bytes")

    # ---- graphs ----------------------------------------------------------------------------------
    def graph(self, d: Any, where: str = "") -> None:
        pre = f"{where}: " if where else ""
        if not isinstance(d, dict):
            raise GraphError(f"{pre}a graph is a JSON object, not {_kind(d)}")
        if "name" in d:
            self.string(d["name"], f"{pre}graph name")
        meta = d.get("meta")
        if meta is not None:
            if not isinstance(meta, dict):
                raise GraphError(f"{pre}meta must be an object, not {_kind(meta)}")
            if "mode" in meta:
                self.string(meta["mode"], f"{pre}meta.mode")
        nodes = d.get("nodes")
        if not isinstance(nodes, list):
            raise GraphError(f"{pre}graph file has no node list")
        self.nodes += len(nodes)
        if self.nodes > self.lim.max_nodes:
            raise GraphError(f"{pre}more than {self.lim.max_nodes:,} nodes")
        ids: dict[int, tuple[int, Any]] = {}
        for i, nd in enumerate(nodes):
            self.node(nd, i, pre, ids)
        outs = d.get("outputs")
        if outs is not None:
            if not isinstance(outs, dict):
                raise GraphError(f"{pre}outputs must be an object, not {_kind(outs)}")
            for k, r in outs.items():
                self.string(k, f"{pre}output name")
                self.ref(r, f"{pre}output {shown(k, 30)}")
        # a view aliases a tensor its node reads (or an earlier output of the same node)
        for nd in nodes:
            reads = None
            for j, t in enumerate(nd["outputs"]):
                a = t.get("alias")
                if a is None:
                    continue
                if reads is None:
                    reads = set()
                    _refs(nd.get("args"), reads)
                    _refs(nd.get("kwargs"), reads)
                if (a[0], a[1]) not in reads and not (a[0] == nd["id"] and a[1] < j):
                    raise GraphError(f"{pre}node {shown(nd.get('name', nd['id']))}: output {j} is a view "
                                     f"of %{a[0]}.{a[1]}, which the node does not read")

    def node(self, nd: Any, i: int, pre: str, ids: dict) -> None:
        if not isinstance(nd, dict):
            raise GraphError(f"{pre}node #{i} must be an object, not {_kind(nd)}")
        if "id" not in nd or "op" not in nd:
            raise GraphError(f"{pre}node #{i}: missing 'id' or 'op'")
        nid = self.int_in(nd["id"], 0, self.lim.max_id, f"{pre}node #{i} id")
        if nid in ids:
            raise GraphError(f"{pre}duplicate node id {nid}")
        ids[nid] = nd
        name = nd.get("name", f"n{nid}")
        self.string(name, f"{pre}node #{i} name")
        w = f"{pre}node {shown(name)}"
        self.string(nd["op"], f"{w} op", empty=False)
        if not _member(nd.get("kind", "op"), NODE_KINDS):
            raise GraphError(f"{w}: unknown node kind {shown(nd.get('kind'))}")
        for key in ("module", "target"):
            if key in nd:
                self.string(nd[key], f"{w} {key}")
        args = nd.get("args", [])
        if not isinstance(args, list):
            raise GraphError(f"{w}: args must be an array, not {_kind(args)}")
        self.value(args, f"{w} args")
        kwargs = nd.get("kwargs", {})
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise GraphError(f"{w}: kwargs must be an object, not {_kind(kwargs)}")
        for k, v in kwargs.items():
            self.string(k, f"{w} kwarg name")
            if not k.isidentifier() or keyword.iskeyword(k):  # an exported script passes it by name
                raise GraphError(f"{w}: kwarg name {shown(k, 30)} is not a Python name")
            self.value(v, f"{w} kwarg {shown(k, 30)}")
        outs = nd.get("outputs")
        if not isinstance(outs, list):
            raise GraphError(f"{w}: missing outputs (shapes)" if outs is None else f"{w}: outputs must be an array")
        if len(outs) > self.lim.max_outputs:
            raise GraphError(f"{w}: {len(outs)} outputs (at most {self.lim.max_outputs})")
        for j, t in enumerate(outs):
            self.tensor(t, f"{w} output {j}")
        rc = nd.get("recompute_of")
        if rc is not None:
            self.int_in(rc, 0, self.lim.max_id, f"{w} recompute_of")
        if "fission" in nd:
            self.fission(nd["fission"], w)

    def fission(self, f: Any, w: str) -> None:
        if not isinstance(f, dict):
            raise GraphError(f"{w}: fission must be an object, not {_kind(f)}")
        self.int_in(f.get("n"), 1, self.lim.max_fission_parts, f"{w} fission n")
        dims = f.get("in_dims")
        if not isinstance(dims, list):
            raise GraphError(f"{w}: fission in_dims must be an array")
        for d in dims:
            if d is not None:
                self.int_in(d, -self.lim.max_rank, self.lim.max_rank - 1, f"{w} fission in_dims")
        comb = f.get("out_combine")
        if not isinstance(comb, list):
            raise GraphError(f"{w}: fission out_combine must be an array")
        for c in comb:
            if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], str)):
                raise GraphError(f"{w}: fission out_combine entries are [how, dim] pairs")
            if c[1] is not None:
                self.int_in(c[1], -self.lim.max_rank, self.lim.max_rank - 1, f"{w} fission out_combine dim")
        self.graph(f.get("graph"), f"{w} fission sub-graph")
        self.id_list(f.get("members", []), f"{w} fission members")
        comp = f.get("comp", [0, 0, 0])
        if not (isinstance(comp, list) and len(comp) == 3 and all(_is_int(x) for x in comp)):
            raise GraphError(f"{w}: fission comp must be [node, output, dim]")
        o = f.get("origin")
        if o is None:
            return
        if not isinstance(o, dict):
            raise GraphError(f"{w}: fission origin must be an object, not {_kind(o)}")
        self.int_in(o.get("length"), 1, 2**62, f"{w} fission origin length")
        for key in ("split", "aux"):
            self.id_list(o.get(key), f"{w} fission origin {key}")
        for key in ("inputs", "outputs", "rebuilt"):
            pairs = o.get(key)
            if not isinstance(pairs, list) or len(pairs) > self.lim.max_nodes:
                raise GraphError(f"{w}: fission origin {key} must be an array of pairs")
            for p in pairs:
                if not (isinstance(p, list) and len(p) == 2):
                    raise GraphError(f"{w}: fission origin {key} must be an array of pairs")
                self.id_list(p, f"{w} fission origin {key}")
        nodes = o.get("nodes")
        if not isinstance(nodes, list):
            raise GraphError(f"{w}: fission origin nodes must be an array")
        self.nodes += len(nodes)
        if self.nodes > self.lim.max_nodes:
            raise GraphError(f"{w}: more than {self.lim.max_nodes:,} nodes")
        ids: dict = {}
        for i, nd in enumerate(nodes):
            self.node(nd, i, f"{w} fission origin ", ids)

    def id_list(self, v: Any, where: str) -> None:
        if not isinstance(v, list) or len(v) > self.lim.max_nodes:
            raise GraphError(f"{where} must be an array of node ids")
        for x in v:
            self.int_in(x, 0, self.lim.max_id, where)


def _refs(v: Any, out: set[tuple[int, int]]) -> None:
    """The (node, index) of every ``$t`` in an encoded value (already checked: bounded depth)."""
    if isinstance(v, list):
        for x in v:
            _refs(x, out)
    elif isinstance(v, dict):
        for k, x in v.items():
            if k == "$t":
                out.add((x[0], x[1]))
            elif k in ("$tuple", "$dict"):
                _refs(x if k == "$tuple" else list(x.values()), out)
            elif not k.startswith("$"):
                _refs(x, out)


def check_graph_dict(d: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise GraphError (one line) unless ``d`` -- a parsed graph file -- is well formed."""
    _Checker(limits).graph(d)


def json_extent(data: bytes) -> tuple[int, int, int]:
    """(nesting depth, arrays + objects, commas) of JSON text ``data`` outside its strings, without
    parsing it -- so what parsing would build (one Python object per value) and how deep it would
    recurse are bounded before anything is built.  Vectorised: the quotes that open or close a
    string are those not preceded by an odd run of backslashes; a bracket or comma is structural
    when an even number of them precede it."""
    import numpy as np

    global _SPECIAL
    if _SPECIAL is None:
        _SPECIAL = _special_table()
    a = np.frombuffer(data, dtype=np.uint8)
    special = np.flatnonzero(_SPECIAL[a])  # one boolean per byte, then positions of a few bytes
    if special.size and special[-1] < 2**31:
        special = special.astype(np.int32)
    if not special.size:
        return 0, 0, 0
    ch = a[special]
    del a
    quotes = special[ch == 0x22]
    slashes = special[ch == 0x5C]
    if slashes.size and quotes.size:
        # length of the backslash run right before each quote (runs: equal position - rank)
        key = slashes - np.arange(slashes.size)
        k = np.searchsorted(slashes, quotes)  # backslashes before each quote
        prev = np.where(k > 0, slashes[np.maximum(k - 1, 0)], -2)
        adjacent = prev == quotes - 1
        first = np.searchsorted(key, key[np.maximum(k - 1, 0)], side="left")
        run = np.where(adjacent, k - first, 0)
        quotes = quotes[run % 2 == 0]
    is_struct = (ch != 0x22) & (ch != 0x5C)
    outside = np.searchsorted(quotes, special[is_struct]) % 2 == 0
    sc = ch[is_struct][outside]
    opens = (sc == 0x5B) | (sc == 0x7B)
    closes = (sc == 0x5D) | (sc == 0x7D)
    step = opens.astype(np.int8) - closes.astype(np.int8)
    depth = int(np.cumsum(step, dtype=np.int32).max()) if step.size else 0
    return max(depth, 0), int(opens.sum()), int((sc == 0x2C).sum())


def _special_table():
    import numpy as np

    t = np.zeros(256, dtype=bool)
    t[list(b'"\\[]{},')] = True
    return t


_SPECIAL = None

__all__ = ["DEFAULT_LIMITS", "Limits", "check_graph_dict", "json_extent", "shown"]
